"""``airgap import``: verify, push into the disconnected registry, write configuration."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping as AnyMapping
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from airgap.bundle.format import BundleManifest
from airgap.configmaps.variables import VariableValues
from airgap.content.kinds import ContentKind
from airgap.core import phases
from airgap.core.errors import AirgapError, InputError
from airgap.core.failures import Failure, ManyFailures
from airgap.core.fsutil import write_atomic
from airgap.core.inputfile import read_small
from airgap.core.limits import MAX_TLS_FILE_BYTES
from airgap.core.parallel import Ahead, run_parallel
from airgap.core.progress import QUIET, Progress
from airgap.core.textfmt import human_size, plural
from airgap.importing import outputcache
from airgap.importing.outputcache import AskedValues, PublishedImage, Recorded
from airgap.importing.outputfiles import import_files, json_bytes, write_outputs, write_tree
from airgap.importing.outputlisting import OPERATOR, PARTS
from airgap.importing.status import (
    ABSENT,
    MAX_REPORT_BYTES,
    Condition,
    Expected,
    ImageState,
    Status,
    conditions_from,
    from_tree,
    import_conditions,
    keep_transitions,
    previous_transitions,
    probe,
    unknown,
    versions,
)
from airgap.importing.status import now as status_now
from airgap.mirror.attached import AttachedPlan, attached_trees, publish_referrers
from airgap.mirror.blobindex import BlobIndex
from airgap.mirror.closure import Closure, Dangling, ReferenceScan, describe_failure
from airgap.mirror.closure import check as closure_check
from airgap.mirror.closure import merged as closure_merged
from airgap.mirror.closure import references as closure_references
from airgap.mirror.push import ImageTree, Pusher, PushStats, load_tree
from airgap.oci.manifest import Manifest
from airgap.registry.client import Registry
from airgap.registry.credentials import Credentials
from airgap.registry.pool import EndpointOptions, RegistryPool
from airgap.rewrite.contents import RewrittenContent, rewrite_contents
from airgap.rewrite.mapping import Mapping, Target, map_images, tag_owners
from airgap.rewrite.providers import RewrittenProvider, rewrite_providers
from airgap.verify.bundle import VerifiedBundle, verify_bundle

if TYPE_CHECKING:
    from airgap.configmaps.generate import ProviderOutputOptions, ProviderOutputs
    from airgap.mirror.charts import PushedChart
    from airgap.mirror.manifestimage import Published, Staged, TagAnswers
    from airgap.mirror.supply import Supply
    from airgap.oci.havelist import HaveList


CONFIRM_CONCURRENCY = 4  # manifests images asked for at once on a re-import


@dataclass(frozen=True)
class ImportOptions:
    """Everything an import depends on besides the bundle; the outputs' record keys on
    it (``outputs_key``)."""

    target: Target
    output_dir: Path | None = None
    keep_registry: bool = False
    pin: bool = True
    dry_run: bool = False
    concurrency: int = 8
    ca_file: str | None = None
    skip_tls_verify: bool = False
    plain_http: bool = False
    credentials: Credentials | None = None
    namespace: str | None = None
    provider_source: str = "selector"
    # values for the components' variables: environment over --variables FILE
    variables: VariableValues = field(default_factory=VariableValues)
    reverify: bool = False  # hash every blob up front, as verify does, not only those pushed
    # where the output tree will be read from, if not output_dir (--output-location)
    output_location: Path | None = None
    authfile: Path | None = None  # the only credentials file to read (--authfile)
    cert_dir: Path | None = None  # the target's CAs and client pair (--cert-dir)
    keep_going: bool = False  # push every image it can, then report all that failed

    def pool(self) -> RegistryPool:
        """A registry pool configured for the target registry."""
        settings = {
            self.target.host: EndpointOptions(
                ca_file=self.ca_file,
                plain_http=self.plain_http,
                skip_tls_verify=self.skip_tls_verify,
                cert_dir=self.cert_dir,
            )
        }
        credentials = {self.target.host: self.credentials} if self.credentials else {}
        return RegistryPool(
            settings,
            credentials=credentials,
            max_connections=max(4, self.concurrency),
            authfile=self.authfile,
        )

    def provider_output_options(self) -> ProviderOutputOptions:
        # the output builders are imported when outputs are built: a re-import whose
        # outputs are there whole never loads them (importing.outputcache)
        from airgap.configmaps.generate import ProviderOutputOptions

        assert self.output_dir is not None
        return ProviderOutputOptions(
            self.output_dir,
            self.namespace,
            self.provider_source,
            self.variables,
            location=self.output_location,
        )


@dataclass(frozen=True)
class ImportResult:
    """What an import did: the summary, ``import-report.json`` and ``--format json`` are
    made from it."""

    bundle: VerifiedBundle
    mappings: list[Mapping]
    stats: PushStats | None
    seconds: float
    # "<Kind> <name>" -> required variables nobody gave a value for (names, never values)
    missing_variables: dict[str, list[str]] = field(default_factory=dict)
    # ClusterOperator-style conditions (as ``airgap status`` reports them) and versions
    conditions: list[Condition] = field(default_factory=list)
    versions: list[dict[str, str]] = field(default_factory=list)
    attached: AttachedPlan | None = None  # what upstream attached, pushed next to subjects
    failed: list[Failure] = field(default_factory=list)  # --keep-going: images not pushed

    def summary(self) -> str:
        """One line for the terminal."""
        stats = self.stats or PushStats()
        images, target = (
            len(self.mappings),
            self.mappings[0].target.registry if self.mappings else "",
        )
        if not stats.changed:
            return f"nothing changed: all {plural(images, 'image')} already in {target}"
        return (
            f"imported {plural(images, 'image')} into {target}: "
            f"{plural(stats.blobs_uploaded, 'blob')} uploaded "
            f"({human_size(stats.bytes_uploaded)}), {stats.blobs_mounted} mounted, "
            f"{stats.blobs_skipped} already there, {plural(stats.manifests_pushed, 'manifest')} "
            f"pushed in {self.seconds:.1f}s"
        )

    def report(self) -> dict[str, object]:
        stats = self.stats or PushStats()
        return {
            "images": len(self.mappings),
            "blobs_uploaded": stats.blobs_uploaded,
            "blobs_skipped": stats.blobs_skipped,
            "blobs_mounted": stats.blobs_mounted,
            "manifests_pushed": stats.manifests_pushed,
            "manifests_skipped": stats.manifests_skipped,
            "bytes_uploaded": stats.bytes_uploaded,
            "duration_seconds": round(self.seconds, 3),
            "changed": stats.changed,
            # "full": every member hashed before pushing (--reverify); "on-use": every
            # member but the blobs up front, each blob by the registry's digest check
            "verification": "full" if self.bundle.all_hashed else "on-use",
            "variables_missing": self.missing_variables,
            "conditions": [condition.to_json() for condition in self.conditions],
            "versions": self.versions,
            "attached": (self.attached or AttachedPlan()).report(),
            # --keep-going: the images pushed and, one each, those that failed
            "images_pushed": len(self.mappings) - len(self.failed),
            "failed": [failure.to_json() for failure in self.failed],
        }


def verified_mappings(
    bundle_path: Path,
    keys: list[Ed25519PublicKey] | None,
    options: ImportOptions,
    progress: Progress = QUIET,
) -> tuple[VerifiedBundle, list[Mapping]]:
    """Verify first (the same code path as ``airgap verify``), then map every image.

    Blobs are hashed as they are pushed, not here (unless ``reverify``): the blobs the
    target already holds are never read, which keeps a re-import fast without trusting
    anything but hashes."""
    bundle = verify_bundle(bundle_path, keys, hash_blobs=options.reverify, progress=progress)
    manifest = bundle.require_verified()
    references = [image.reference for image in manifest.images]
    return bundle, map_images(references, options.target, keep_registry=options.keep_registry)


def run_import(
    bundle_path: Path,
    keys: list[Ed25519PublicKey] | None,
    options: ImportOptions,
    progress: Progress = QUIET,
) -> ImportResult:
    started = time.monotonic()
    # the record of earlier outputs and every file it lists are read and hashed while
    # the bundle verifies (hashing leaves the GIL); whether they are this import's
    # outputs is decided once the verified manifest gives the key
    reading, output_dir = None, options.output_dir
    if output_dir is not None and options.provider_source == "selector" and not options.dry_run:
        reading = Ahead("outputs-read", partial(outputcache.read, output_dir))
    bundle, mappings = verified_mappings(bundle_path, keys, options, progress)
    manifest = bundle.require_verified()
    if options.dry_run:
        return ImportResult(bundle, mappings, None, time.monotonic() - started)
    ca_pem = read_ca(options.ca_file)
    # the outputs an earlier import of this bundle with these options left whole in
    # --output-dir: then no provider is parsed, rewritten or built again
    cache_key = outputs_key(bundle, options, ca_pem)
    asked = AskedValues(options.variables.file, options.variables.environ)
    recorded = None
    if cache_key is not None and reading is not None:
        with phases.timed("import/outputs-check"):
            recorded = outputcache.matching(reading.result(), cache_key, options.variables)
    providers = [] if recorded else rewrite_providers(bundle, manifest, mappings, pin=options.pin)
    contents = rewrite_contents(bundle, manifest, mappings, pin=options.pin)
    # a delta's trees are whole only once what it relies on is read from the target
    trees = image_trees(bundle, manifest, mappings) if manifest.delta is None else []

    missing: dict[str, list[str]] = {}
    operator_files: set[str] = set()  # the operator's part of the outputs (outputlisting)

    def operator_outputs(registry: Registry | None = None) -> dict[str, bytes]:
        from airgap.configmaps.generate import provider_outputs  # only when building

        outputs = provider_outputs(
            providers,
            replace(options.provider_output_options(), variables=asked),
            target=options.target,
            created=manifest.created,
            registry=registry,
            contents=contents,
        )
        missing.update(outputs.missing)
        operator_files.update(outputs.files)
        return outputs.files

    files: dict[str, bytes] = {}
    wants_outputs = options.output_dir is not None
    scan = None
    with options.pool() as pool:
        registry = pool.registry(options.target.host)
        index = BlobIndex.load(options.target.host)  # where earlier imports left blobs
        supply = None
        if manifest.delta is not None:  # before anything is pushed: is the base there?
            supply = delta_supply(registry, manifest, mappings, index, options.concurrency)
            if not supply.complete:
                from airgap.mirror.supply import describe_missing

                raise AirgapError(
                    describe_missing(supply, manifest, str(bundle_path), str(options.target))
                )
            trees = image_trees(bundle, manifest, mappings, supply.manifests)
        # the recorded manifests images are asked while the images are: neither answer
        # depends on the other, and a re-import is mostly these HEADs
        confirming = None
        if recorded is not None:
            confirming = Ahead("confirm-ahead", partial(_confirm_ahead, registry, recorded))
        pusher = Pusher(
            registry,
            bundle,
            concurrency=options.concurrency,
            progress=progress,
            blob_index=index,
            relied=supply.holders if supply is not None else None,
            keep_going=options.keep_going,
        )
        try:
            # signatures, attestations and SBOMs next to their subjects (issue 17)
            attached = attached_trees(bundle, manifest, mappings)
            everything = trees + attached.trees
            # which images the target holds whole is asked (HEADs only) while the
            # outputs build on this thread
            finding = Ahead("find-complete", partial(pusher.find_complete, everything))
            # and what the manifests images' version tags name, for a first import's
            # staging (below), which then starts with the answer
            tags = _tags_ahead(registry, options.target, providers) if recorded is None else None
            if wants_outputs and options.provider_source == "selector" and recorded is None:
                # built before pushing: a provider too large for a ConfigMap fails the
                # import before anything is pushed
                files = operator_outputs()
            # the closure check's scan of the outputs built so far (a YAML parse of every
            # provider's components, a CPU-bound few tenths of a second) runs while the
            # images push, when this thread would only wait
            scan = _ClosureScan(files) if files else None
            # a first import's manifests images are built and their blobs pushed while
            # the images' tags are written (both wait for every image blob, neither for
            # the other); each is tagged once every image it names is whole, tag and all
            early: list[Published] | None = None
            staged: list[Staged] | None = None
            beside_tags = None
            if recorded is None:
                staged = []
                beside_tags = partial(
                    _stage_into, staged, registry, options.target, providers, tags
                )
            stats = pusher.push(everything, finding.result(), beside_tags=beside_tags)
            if staged is not None:
                early = _name_staged(registry, staged)
            publish_referrers(registry, attached, stats)
        finally:
            if index is not None:
                index.save()
        charts = push_charts(registry, contents, options.target)  # TARGET/charts/NAME:VERSION
        # every provider as OpenShift's image-based installer reads it, whatever its source
        plain_http = registry.plain_http  # what the target spoke, for the node configs
        confirmed = confirming.result() if confirming is not None else None
        if early is not None:
            published = early
        elif confirmed is None:  # not there as recorded: rebuild all after all
            recorded = None
            providers = rewrite_providers(bundle, manifest, mappings, pin=options.pin)
            if wants_outputs and options.provider_source == "selector":
                files = operator_outputs()
            staged = []
            _stage_into(staged, registry, options.target, providers)
            published = _name_staged(registry, staged)
        if confirmed is None:
            confirmed = [
                PublishedImage(p.repository, p.tag, p.reference.rsplit("@", 1)[1])
                for p in published
            ]
        if wants_outputs and options.provider_source == "oci":
            files = operator_outputs(registry)  # publishes the provider artifacts
        if recorded is not None:
            found = dict(recorded.references)
            missing.update(recorded.missing)
        elif options.output_dir is not None:
            files |= import_files(
                providers,
                mappings,
                options.target,
                keep_registry=options.keep_registry,
                ca_pem=ca_pem,
                plain_http=plain_http,
                contents=contents,
            )
            from airgap.mirror.manifestimage import COMPONENTS_FILE, component_list

            files[COMPONENTS_FILE] = component_list(published)
        if recorded is None:
            with phases.timed("import/closure"):
                found = _scanned(files, scan)
        # nothing pushed: every tree was found complete by this run's tag HEADs, so the
        # closure need not ask for them again; after a push it asks for itself, a check
        # of the outputs against the target independent of the push's own confirmation
        answered = None if stats.changed else pusher.confirmed
        nodes = _node_references(manifest, contents)
        closure = check_closure(
            registry, options, manifest, mappings, dict(found), answered, nodes=nodes
        )
    dangling = [str(item) for item in closure.dangling]
    # what status asks for besides the images (each push above confirmed its digest)
    published_oci = len(providers) if wants_outputs and options.provider_source == "oci" else 0
    artifacts = len(attached.trees) + len({c.reference for c in charts}) + len(confirmed)
    artifacts += published_oci
    result = ImportResult(
        bundle,
        mappings,
        stats,
        time.monotonic() - started,
        missing,
        conditions=keep_transitions(
            import_conditions(len(mappings), artifacts, dangling, status_now()),
            earlier_report(options.output_dir),
        ),
        versions=versions(manifest),
        attached=attached,
        failed=sorted(pusher.failures.values(), key=lambda f: f.what),
    )
    if options.output_dir is not None:
        report = {"import-report.json": json_bytes(result.report())}
        if recorded is not None:  # the outputs are there, whole: only the report is new
            write_tree(options.output_dir, report)
        elif cache_key is None:  # outputs not recorded: no earlier record may stay
            outputcache.forget(options.output_dir)
            write_outputs(
                options.output_dir, files | report, operator=operator_files, replaced=PARTS
            )
        else:  # the record last: it lists what is there only once it is there
            record = outputcache.record_bytes(
                cache_key,
                files,
                asked=asked.asked,
                values=options.variables,
                published=confirmed,
                missing=missing,
                references=found,
                plain_http=plain_http,
            )
            outputs = files | report | {outputcache.RECORD: record}
            write_outputs(options.output_dir, outputs, operator=operator_files, replaced=PARTS)
    if result.failed:  # --keep-going: every image that failed, the others pushed
        pushed = len(mappings) - len(result.failed)
        raise ManyFailures(
            result.failed,
            f"{plural(len(result.failed), 'image')} failed, {pushed} pushed into "
            f"{options.target}" + (" (see import-report.json)" if options.output_dir else ""),
        )
    if not closure.closed:  # the outputs and the report are there to look at
        raise AirgapError(describe_failure(closure, str(options.target)))
    return result


class _ClosureScan:
    """The closure check's scan of some outputs, on a thread of its own; ``finish``
    joins it, re-raising its error, and scans what was written or changed since."""

    def __init__(self, files: AnyMapping[str, bytes]) -> None:
        self.files = dict(files)
        self._scan = ReferenceScan()
        self._found = Ahead("closure-scan", partial(self._scan.add, self.files))

    def finish(self, files: AnyMapping[str, bytes]) -> dict[str, str]:
        found = self._found.result()
        assert found is not None
        if any(files.get(path) != data for path, data in self.files.items()):
            return closure_references(files)  # an output changed after all: read them all
        later = {path: data for path, data in files.items() if path not in self.files}
        return closure_merged(found, self._scan.add(later))


def _tags_ahead(
    registry: Registry, target: Target, providers: list[RewrittenProvider]
) -> Ahead[TagAnswers]:
    """What the manifests images' version tags name now (``tags_now``), on a thread."""
    from airgap.mirror.manifestimage import tags_now

    return Ahead("manifests-tags", partial(tags_now, registry, target, providers))


def _stage_into(
    staged: list[Staged],
    registry: Registry,
    target: Target,
    providers: list[RewrittenProvider],
    tags: Ahead[TagAnswers] | None = None,
) -> None:
    """Every provider's manifests image, as OpenShift's image-based installer reads
    it, built and its blobs pushed (a first import runs this as ``Pusher.push``'s
    ``beside_tags``); ``_name_staged`` tags them. The builder's imports are loaded only
    here: a no-op re-import never needs them. ``tags``: the tags asked ahead."""
    from airgap.mirror.manifestimage import stage_all

    with phases.timed("providers/manifest-images", beside=True):
        named = tags.result() if tags is not None else None
        staged += stage_all(registry, target, providers, named)


def _name_staged(registry: Registry, staged: list[Staged]) -> list[Published]:
    from airgap.mirror.manifestimage import name_all

    with phases.timed("providers/manifest-images"):
        return name_all(registry, staged)


def _confirm_ahead(registry: Registry, recorded: Recorded) -> list[PublishedImage] | None:
    """``confirm_published``, on its own thread beside the push (``Ahead``)."""
    registry.ping()  # settles the scheme (plain_http), as the first request does
    return confirm_published(registry, recorded, registry.plain_http)


def _scanned(files: dict[str, bytes], scan: _ClosureScan | None) -> dict[str, str]:
    """The references of every output: those scanned while pushing, plus the files
    written since."""
    return closure_references(files) if scan is None else scan.finish(files)


def outputs_key(
    bundle: VerifiedBundle, options: ImportOptions, ca_pem: bytes | None
) -> dict[str, object] | None:
    """What the outputs depend on (``importing.outputcache``), or None when they are not
    recorded: no output directory, or the OCI provider source (its CRs carry the
    credentials the registry asked for, and its artifacts are pushed as they are built)."""
    if options.output_dir is None or options.provider_source != "selector":
        return None
    return outputcache.options_key(
        bundle_manifest=bundle.manifest_bytes,
        target=str(options.target),
        keep_registry=options.keep_registry,
        pin=options.pin,
        namespace=options.namespace,
        provider_source=options.provider_source,
        location=options.output_location or options.output_dir,
        ca_pem=ca_pem,
        max_path_depth=options.target.max_depth,
    )


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


def earlier_report(output_dir: Path | None) -> dict[str, tuple[str, str]]:
    """The conditions of the import-report.json an earlier import left in the output
    directory, if it is there and readable: a condition that did not change keeps its
    lastTransitionTime. Anything else there is only a hint, and is overwritten."""
    path = None if output_dir is None else output_dir / "import-report.json"
    if path is None or not path.is_file():
        return {}
    try:
        return previous_transitions(read_small(path, MAX_REPORT_BYTES, "report"), str(path))
    except AirgapError:
        return {}


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


def _node_references(manifest: BundleManifest, contents: list[RewrittenContent]) -> dict[str, str]:
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


def run_status(
    bundle_path: Path, keys: list[Ed25519PublicKey] | None, options: ImportOptions
) -> Status:
    """``airgap status``: every image of the bundle asked of the target (HEAD only),
    as ClusterOperator-style conditions."""
    return status_and_have(bundle_path, keys, options)[0]


def status_and_have(
    bundle_path: Path,
    keys: list[Ed25519PublicKey] | None,
    options: ImportOptions,
    export_have: Path | None = None,
    previous: Path | None = None,
) -> tuple[Status, HaveList | None]:
    """``airgap status``, and with ``export_have`` the have-list of what the target
    holds of the bundle's images, written there (``mirror.have``). Besides the images,
    every artifact import pushes is asked for (``expected_artifacts``). A registry
    that cannot be asked makes the conditions Unknown, and fails an export. With
    ``previous`` (an earlier report), a condition whose status did not change keeps
    its lastTransitionTime."""
    from airgap.mirror.have import have_list  # status only

    earlier: dict[str, tuple[str, str]] = {}
    if previous is not None:
        data = read_small(previous, MAX_REPORT_BYTES, "--previous")
        earlier = previous_transitions(data, f"--previous {previous}")
    read_ca(options.ca_file)  # unusable: the user's to fix, as import says, before any work
    bundle, mappings = verified_mappings(bundle_path, keys, options)
    manifest = bundle.require_verified()
    trees = image_trees(bundle, manifest, mappings) if manifest.delta is None else []
    artifacts = expected_artifacts(bundle, manifest, mappings, options)
    when = status_now()
    lacking: list[ImageState] = []
    try:
        with options.pool() as pool:
            registry = pool.registry(options.target.host)
            if manifest.delta is not None:
                trees, lacking = _delta_status(registry, bundle, manifest, mappings, options)
            items = [from_tree(tree) for tree in trees] + artifacts
            states = probe(registry, items, concurrency=options.concurrency) + lacking
            listed = None
            if export_have is not None:
                listed = have_list(
                    registry,
                    trees,
                    created=when,
                    bundle="sha256:" + hashlib.sha256(bundle.manifest_bytes).hexdigest(),
                    concurrency=options.concurrency,
                )
    except InputError:
        raise  # what the user gave is unusable (a CA file, an authfile): not the registry
    except AirgapError as exc:
        if export_have is not None:
            raise AirgapError(f"cannot export the have-list to {export_have}: {exc}") from None
        return Status(keep_transitions(unknown(exc, when), earlier), versions(manifest)), None
    if export_have is not None and listed is not None:
        write_atomic(export_have, listed.to_bytes())
    conditions = keep_transitions(conditions_from(states, when), earlier)
    return Status(conditions, versions(manifest), states), listed


def expected_artifacts(
    bundle: VerifiedBundle,
    manifest: BundleManifest,
    mappings: list[Mapping],
    options: ImportOptions,
) -> list[Expected]:
    """What import pushes besides the images, from the bundle and the options import
    was run with (``--no-pin``, ``--provider-source``): attached artifacts, charts,
    manifests images, provider artifacts (``importing.expected``)."""
    from airgap.importing.expected import attached_artifacts, built_artifacts  # status only

    providers = rewrite_providers(bundle, manifest, mappings, pin=options.pin)
    contents = rewrite_contents(bundle, manifest, mappings, pin=options.pin)
    built = built_artifacts(
        providers,
        contents,
        options.target,
        created=manifest.created,
        provider_source=options.provider_source,
    )
    return attached_artifacts(attached_trees(bundle, manifest, mappings)) + built


def _delta_status(
    registry: Registry,
    bundle: VerifiedBundle,
    manifest: BundleManifest,
    mappings: list[Mapping],
    options: ImportOptions,
) -> tuple[list[ImageTree], list[ImageState]]:
    """A delta's images against the target: those whose needs the target holds are
    probed as whole trees; the others are absent (their base is not there)."""
    from airgap.mirror.supply import locate, read_manifests  # deltas only

    supply = locate(registry, manifest, mappings, None, concurrency=options.concurrency)
    supply = read_manifests(registry, manifest, supply, concurrency=options.concurrency)
    targets = {str(m.source): str(m.target) for m in mappings}
    whole = {image.reference for image in manifest.images} - supply.missing.keys()
    trees = image_trees(bundle, manifest, mappings, supply.manifests, only=whole)
    lacking = [
        ImageState(
            reference,
            targets[reference],
            ABSENT,
            f"relies on {len(digests)} manifests and blobs the registry lacks "
            "(a delta: import its base first)",
        )
        for reference, digests in supply.missing.items()
    ]
    return trees, lacking


def push_charts(
    registry: Registry, contents: list[RewrittenContent], target: Target
) -> list[PushedChart]:
    """Every chart package of the bundle as an OCI Helm chart (``mirror.charts``),
    whose builders are loaded only for a bundle that carries content."""
    if not contents:
        return []
    from airgap.mirror.charts import push_charts as push  # Helm packaging: content only

    return push(registry, contents, target)


def read_ca(ca_file: str | None) -> bytes | None:
    """The ``--ca-file`` bytes, copied next to the node configs that need them."""
    return None if ca_file is None else read_small(Path(ca_file), MAX_TLS_FILE_BYTES, "--ca-file")


def run_configmaps(
    bundle_path: Path, keys: list[Ed25519PublicKey] | None, options: ImportOptions
) -> ProviderOutputs:
    """Operator objects and the clusterctl repository, without pushing any image.

    The references are the ones an import into the same target produces."""
    bundle, mappings = verified_mappings(bundle_path, keys, options)
    manifest = bundle.require_verified()
    providers = rewrite_providers(bundle, manifest, mappings, pin=options.pin)
    contents = rewrite_contents(bundle, manifest, mappings, pin=options.pin)
    from airgap.configmaps.generate import provider_outputs  # as import's, when building

    output = options.provider_output_options()
    if options.provider_source == "oci":
        with options.pool() as pool:
            files = provider_outputs(
                providers,
                output,
                target=options.target,
                created=manifest.created,
                registry=pool.registry(options.target.host),
                contents=contents,
            )
    else:
        files = provider_outputs(
            providers, output, target=options.target, created=manifest.created, contents=contents
        )
    # the operator's part of the directory: an import's node configs there stay
    write_outputs(output.output_dir, files.files, operator=files.files, replaced=(OPERATOR,))
    return files
