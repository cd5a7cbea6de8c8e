"""What import and status do with the target registry: the images' trees, a delta's
supply, the manifests images, charts, and the closure check of the outputs.
"""

from __future__ import annotations

from collections.abc import Mapping as AnyMapping
from functools import partial
from typing import TYPE_CHECKING

from airgap.bundle.manifest import BundleManifest
from airgap.content.kinds import ContentKind
from airgap.core import phases
from airgap.core.parallel import Ahead, run_parallel
from airgap.importing.outputcache import PublishedImage, Recorded
from airgap.mirror.blobindex import BlobIndex
from airgap.mirror.closure import Closure, Dangling
from airgap.mirror.closure import check as closure_check
from airgap.mirror.push import ImageTree, load_tree
from airgap.oci.manifest import Manifest
from airgap.registry.client import Registry
from airgap.rewrite.contents import RewrittenContent
from airgap.rewrite.mapping import Mapping, Target, tag_owners
from airgap.rewrite.providers import RewrittenProvider
from airgap.verify.bundle import VerifiedBundle

if TYPE_CHECKING:
    from airgap.mirror.charts import PushedChart
    from airgap.mirror.manifestimage import Published, Staged, TagAnswers
    from airgap.mirror.supply import Supply
from airgap.importing.model import ImportOptions

CONFIRM_CONCURRENCY = 4  # manifests images asked for at once on a re-import


def image_trees(
    bundle: VerifiedBundle,
    manifest: BundleManifest,
    mappings: list[Mapping],
    relied: AnyMapping[str, Manifest] | None = None,
    *,
    only: set[str] | None = None,
) -> list[ImageTree]:
    """Every image of the bundle (or those ``only`` names) as it is pushed: its
    manifests, blobs and target, and whether its tag is pushed (``mapping.tag_owners``);
    a delta's manifests it does not carry come from ``relied`` (``mirror.supply``)."""
    by_reference = {str(m.source): m for m in mappings}
    owners = tag_owners(mappings)
    return [
        load_tree(
            bundle,
            mapping,
            image.digest,
            image.media_type,
            push_tag=mapping.source in owners,
            relied=relied,
        )
        for image in manifest.images
        if only is None or image.reference in only
        for mapping in (by_reference[image.reference],)
    ]


def delta_supply(
    registry: Registry,
    manifest: BundleManifest,
    mappings: list[Mapping],
    index: BlobIndex | None,
    concurrency: int,
) -> Supply:
    """Where the target holds what a delta relies on (HEAD only), and, when it holds
    all of it, the manifests the delta does not carry, read from there."""
    from airgap.mirror.supply import locate, read_manifests  # deltas only

    with phases.timed("import/delta"):
        supply = locate(registry, manifest, mappings, index, concurrency=concurrency)
        if not supply.complete:
            return supply
        return read_manifests(registry, manifest, supply, concurrency=concurrency)


def check_closure(
    registry: Registry,
    options: ImportOptions,
    manifest: BundleManifest,
    mappings: list[Mapping],
    found: dict[str, str],
    answered: AnyMapping[tuple[str, str], str] | None = None,
    *,
    nodes: AnyMapping[str, str] | None = None,
) -> Closure:
    """Every image the written files reference (``found``: ``closure.references`` of
    them), and every image of the bundle by its digest, asked of the target: what does
    not resolve there is dangling. ``registry``: the client the import pushed with (a
    second client would only load the TLS trust store again); ``answered``: what the
    target already said in this run (``Pusher.confirmed``), not asked again."""
    digests = {image.reference: image.digest for image in manifest.images}
    expected: dict[str, str] = {}
    for mapping in mappings:
        digest = digests[str(mapping.source)]
        found.setdefault(mapping.pinned(digest), "the bundle")
        if mapping.target.tag and not mapping.target.digest:
            expected[str(mapping.target)] = digest
    # what workload clusters' nodes pull by original reference (mirror.nodeclosure)
    from airgap.mirror.nodeclosure import node_targets

    reached, unreachable = node_targets(dict(nodes or {}), mappings, digests, options.target.host)
    for reference, where in reached.items():
        found.setdefault(reference, where)
    with phases.timed("import/closure"):
        closure = closure_check(
            registry,
            options.target.host,
            found,
            expected,
            concurrency=options.concurrency,
            answered=answered,
        )
    closure.dangling += [
        Dangling(reference, where, "not in the bundle: a node would pull it from its source")
        for reference, where in unreachable
    ]
    return closure


def nodes_pull(manifest: BundleManifest, contents: list[RewrittenContent]) -> dict[str, str]:
    """Every image workload clusters' nodes pull for each carried Kubernetes version
    (none without one)."""
    if not any(c.kind == ContentKind.KUBERNETES.value for c in manifest.contents):
        return {}
    from airgap.mirror.nodeclosure import node_references

    templates = [
        (name, data.decode("utf-8", errors="replace"))
        for content in contents
        if content.kind is ContentKind.TEMPLATES
        for name, data in content.files.items()
    ]
    return node_references(manifest, templates)


def push_charts(
    registry: Registry, contents: list[RewrittenContent], target: Target
) -> list[PushedChart]:
    """Every chart package of the bundle as an OCI Helm chart (``mirror.charts``),
    whose builders are loaded only for a bundle that carries content."""
    if not contents:
        return []
    from airgap.mirror.charts import push_charts as push  # Helm packaging: content only

    return push(registry, contents, target)


def confirm_published(
    registry: Registry, recorded: Recorded, plain_http: bool
) -> list[PublishedImage] | None:
    """The manifests images an earlier import recorded, each tag asked of the target
    (one HEAD): all of them there by the recorded digest, or None (rebuild and push).
    A target that now speaks another scheme changes the node configs: None too."""
    if recorded.plain_http != plain_http:
        return None

    def one(image: PublishedImage) -> bool:
        what = f"manifests image {image.repository}:{image.tag}"
        return registry.manifest_digest(image.repository, image.tag, what=what) == image.digest

    jobs = [partial(one, image) for image in recorded.published]
    return recorded.published if all(run_parallel(jobs, CONFIRM_CONCURRENCY)) else None


def confirm_ahead(registry: Registry, recorded: Recorded) -> list[PublishedImage] | None:
    """``confirm_published``, on its own thread beside the push (``Ahead``)."""
    registry.ping()  # settles the scheme (plain_http), as the first request does
    return confirm_published(registry, recorded, registry.plain_http)


def tags_ahead(
    registry: Registry, target: Target, providers: list[RewrittenProvider]
) -> Ahead[TagAnswers]:
    """What the manifests images' version tags name now (``tags_now``), on a thread."""
    from airgap.mirror.manifestimage import tags_now

    return Ahead("manifests-tags", partial(tags_now, registry, target, providers))


def stage_into(
    staged: list[Staged],
    registry: Registry,
    target: Target,
    providers: list[RewrittenProvider],
    tags: Ahead[TagAnswers] | None = None,
) -> None:
    """Every provider's manifests image, as OpenShift's image-based installer reads
    it, built and its blobs pushed (a first import runs this as ``Pusher.push``'s
    ``beside_tags``); ``name_staged`` tags them. The builder's imports are loaded only
    here: a no-op re-import never needs them. ``tags``: the tags asked ahead."""
    from airgap.mirror.manifestimage import stage_all

    with phases.timed("providers/manifest-images", beside=True):
        named = tags.result() if tags is not None else None
        staged += stage_all(registry, target, providers, named)


def name_staged(registry: Registry, staged: list[Staged]) -> list[Published]:
    from airgap.mirror.manifestimage import name_all

    with phases.timed("providers/manifest-images"):
        return name_all(registry, staged)
