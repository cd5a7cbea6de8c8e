"""Import's stages: plan -> push -> publish -> outputs -> closure -> write.

Each stage takes what the stages before it produced (frozen records) and returns its
own; none changes another's. ``importer.run_import`` runs them in order. Work that does
not depend on its neighbour runs beside it on a thread (``core.parallel.Ahead``): the
outputs' record is read while the bundle verifies, a re-import's manifests images are
confirmed while the images are, the closure scan of the outputs runs while they push,
a first import's manifests images are built while the images' tags are written.
"""

from __future__ import annotations

import time
from collections.abc import Mapping as AnyMapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from airgap.bundle.manifest import BundleManifest
from airgap.core import phases
from airgap.core.errors import AirgapError
from airgap.core.failures import ManyFailures
from airgap.core.inputfile import read_small
from airgap.core.parallel import Ahead
from airgap.core.progress import Progress
from airgap.core.textfmt import plural
from airgap.importing import outputcache
from airgap.importing.model import ImportOptions, ImportResult, read_ca
from airgap.importing.outputcache import AskedValues, Found, PublishedImage, Recorded
from airgap.importing.outputfiles import import_files, json_bytes, write_outputs, write_tree
from airgap.importing.outputlisting import PARTS
from airgap.importing.status import (
    MAX_REPORT_BYTES,
    import_conditions,
    keep_transitions,
    previous_transitions,
    versions,
)
from airgap.importing.status import now as status_now
from airgap.importing.targetwork import (
    check_closure,
    confirm_ahead,
    delta_supply,
    image_trees,
    name_staged,
    nodes_pull,
    push_charts,
    stage_into,
    tags_ahead,
)
from airgap.mirror.attached import AttachedPlan, attached_trees, publish_referrers
from airgap.mirror.blobindex import BlobIndex
from airgap.mirror.closure import Closure, ReferenceScan, describe_failure
from airgap.mirror.closure import merged as closure_merged
from airgap.mirror.closure import references as closure_references
from airgap.mirror.push import ImageTree, Pusher, PushStats
from airgap.registry.client import Registry
from airgap.rewrite.contents import RewrittenContent, rewrite_contents
from airgap.rewrite.mapping import Mapping
from airgap.rewrite.providers import RewrittenProvider, rewrite_providers
from airgap.verify.bundle import VerifiedBundle

if TYPE_CHECKING:
    from airgap.mirror.charts import PushedChart
    from airgap.mirror.manifestimage import Published, Staged
    from airgap.mirror.supply import Supply


@dataclass(frozen=True)
class Plan:
    """What the verified bundle and the options decide before the target is asked:
    the rewritten providers and contents, the image trees, and whether the outputs an
    earlier import left whole (``recorded``) can stand."""

    bundle_path: Path
    bundle: VerifiedBundle
    manifest: BundleManifest
    mappings: list[Mapping]
    ca_pem: bytes | None
    cache_key: dict[str, object] | None
    asked: AskedValues
    recorded: Recorded | None
    providers: list[RewrittenProvider]
    contents: list[RewrittenContent]
    trees: list[ImageTree]


@dataclass(frozen=True)
class OperatorOutputs:
    """The operator's files (``configmaps.generate``) and the required variables nobody
    gave (names, never values)."""

    files: dict[str, bytes]
    missing: dict[str, list[str]]


@dataclass(frozen=True)
class Pushed:
    """The push stage's work: what moved, what upstream attached, the pusher's answers,
    and what ran beside it."""

    stats: PushStats
    attached: AttachedPlan
    pusher: Pusher
    confirming: Ahead[list[PublishedImage] | None] | None
    early: list[Published] | None  # a first import's manifests images, named
    operator: OperatorOutputs | None  # built before pushing (selector source)
    scan: ClosureScan | None


@dataclass(frozen=True)
class Publication:
    """The manifests images and charts as the target holds them after publishing, and
    the providers and recorded outputs that still stand."""

    charts: list[PushedChart]
    plain_http: bool
    confirmed: list[PublishedImage]
    published: list[Published] | None
    recorded: Recorded | None
    providers: list[RewrittenProvider]
    operator: OperatorOutputs | None


@dataclass(frozen=True)
class Outputs:
    """Every output file and the image references they make (``closure.references``)."""

    files: dict[str, bytes]
    operator_files: set[str]
    missing: dict[str, list[str]]
    found: dict[str, str]


def read_outputs_ahead(options: ImportOptions) -> Ahead[Found | None] | None:
    """The record of earlier outputs and every file it lists, read and hashed while the
    bundle verifies (hashing leaves the GIL); whether they are this import's outputs is
    decided once the verified manifest gives the key (``plan``)."""
    output_dir = options.output_dir
    if output_dir is None or options.provider_source != "selector" or options.dry_run:
        return None
    return Ahead("outputs-read", partial(outputcache.read, output_dir))


def plan(
    bundle_path: Path,
    bundle: VerifiedBundle,
    mappings: list[Mapping],
    options: ImportOptions,
    reading: Ahead[Found | None] | None,
) -> Plan:
    """Decide what this import builds: when an earlier import of this bundle with these
    options left its outputs whole in --output-dir, no provider is parsed, rewritten or
    built again."""
    manifest = bundle.require_verified()
    ca_pem = read_ca(options.ca_file)
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
    return Plan(
        bundle_path,
        bundle,
        manifest,
        mappings,
        ca_pem,
        cache_key,
        asked,
        recorded,
        providers,
        contents,
        trees,
    )


def operator_outputs(
    planned: Plan,
    providers: list[RewrittenProvider],
    options: ImportOptions,
    registry: Registry | None = None,
) -> OperatorOutputs:
    """The operator's objects for ``providers``; with ``registry`` (the OCI provider
    source) their artifacts are published as they are built."""
    from airgap.configmaps.generate import provider_outputs  # only when building

    outputs = provider_outputs(
        providers,
        replace(options.provider_output_options(), variables=planned.asked),
        target=options.target,
        created=planned.manifest.created,
        registry=registry,
        contents=planned.contents,
    )
    return OperatorOutputs(dict(outputs.files), dict(outputs.missing))


def _builds_selector_outputs(options: ImportOptions) -> bool:
    return options.output_dir is not None and options.provider_source == "selector"


def _trees_and_supply(
    planned: Plan, registry: Registry, index: BlobIndex | None, options: ImportOptions
) -> tuple[list[ImageTree], Supply | None]:
    """The trees to push; a delta's once the target is found to hold what it relies on
    (asked before anything is pushed), with where it holds it."""
    manifest = planned.manifest
    if manifest.delta is None:
        return planned.trees, None
    supply = delta_supply(registry, manifest, planned.mappings, index, options.concurrency)
    if not supply.complete:
        from airgap.mirror.supply import describe_missing

        raise AirgapError(
            describe_missing(supply, manifest, str(planned.bundle_path), str(options.target))
        )
    return image_trees(planned.bundle, manifest, planned.mappings, supply.manifests), supply


def push(planned: Plan, registry: Registry, options: ImportOptions, progress: Progress) -> Pushed:
    """Push every image and what upstream attached to it, byte for byte; the blob index
    (where earlier imports left blobs) is saved whatever happens."""
    index = BlobIndex.load(options.target.host)
    trees, supply = _trees_and_supply(planned, registry, index, options)
    # the recorded manifests images are asked while the images are: neither answer
    # depends on the other, and a re-import is mostly these HEADs
    confirming = None
    if planned.recorded is not None:
        confirming = Ahead("confirm-ahead", partial(confirm_ahead, registry, planned.recorded))
    pusher = Pusher(
        registry,
        planned.bundle,
        concurrency=options.concurrency,
        progress=progress,
        blob_index=index,
        relied=supply.holders if supply is not None else None,
        keep_going=options.keep_going,
    )
    try:
        return _push_all(planned, registry, options, pusher, trees, confirming)
    finally:
        if index is not None:
            index.save()


def _push_all(
    planned: Plan,
    registry: Registry,
    options: ImportOptions,
    pusher: Pusher,
    trees: list[ImageTree],
    confirming: Ahead[list[PublishedImage] | None] | None,
) -> Pushed:
    # signatures, attestations and SBOMs next to their subjects
    attached = attached_trees(planned.bundle, planned.manifest, planned.mappings)
    everything = trees + attached.trees
    # which images the target holds whole is asked (HEADs only) while the outputs build
    # on this thread
    finding = Ahead("find-complete", partial(pusher.find_complete, everything))
    # and what the manifests images' version tags name, for a first import's staging
    # (below), which then starts with the answer
    first = planned.recorded is None
    tags = tags_ahead(registry, options.target, planned.providers) if first else None
    operator = None
    if _builds_selector_outputs(options) and first:
        # built before pushing: a provider too large for a ConfigMap fails the import
        # before anything is pushed
        operator = operator_outputs(planned, planned.providers, options)
    # the closure check's scan of the outputs built so far (a CPU-bound YAML parse of
    # every provider's components) runs while the images push, when this thread would
    # only wait
    scan = ClosureScan(operator.files) if operator is not None and operator.files else None
    # a first import's manifests images are built and their blobs pushed while the
    # images' tags are written (both wait for every image blob, neither for the other);
    # each is tagged once every image it names is whole, tag and all
    staged: list[Staged] | None = [] if first else None
    beside_tags = None
    if staged is not None:
        beside_tags = partial(stage_into, staged, registry, options.target, planned.providers, tags)
    stats = pusher.push(everything, finding.result(), beside_tags=beside_tags)
    early = name_staged(registry, staged) if staged is not None else None
    publish_referrers(registry, attached, stats)
    return Pushed(stats, attached, pusher, confirming, early, operator, scan)


def publish(
    planned: Plan, pushed: Pushed, registry: Registry, options: ImportOptions
) -> Publication:
    """Charts as OCI Helm charts (TARGET/charts/NAME:VERSION), and every provider's
    manifests image as OpenShift's image-based installer reads it, whatever its source:
    a re-import's recorded ones when the target still holds them, else built again."""
    charts = push_charts(registry, planned.contents, options.target)
    plain_http = registry.plain_http  # what the target spoke, for the node configs
    confirmed = pushed.confirming.result() if pushed.confirming is not None else None
    recorded, providers, operator = planned.recorded, planned.providers, pushed.operator
    published = pushed.early
    if published is None and confirmed is None:  # not there as recorded: rebuild all
        recorded = None
        providers = rewrite_providers(
            planned.bundle, planned.manifest, planned.mappings, pin=options.pin
        )
        if _builds_selector_outputs(options):
            operator = operator_outputs(planned, providers, options)
        staged: list[Staged] = []
        stage_into(staged, registry, options.target, providers)
        published = name_staged(registry, staged)
    if confirmed is None:
        assert published is not None
        confirmed = [
            PublishedImage(p.repository, p.tag, p.reference.rsplit("@", 1)[1]) for p in published
        ]
    if options.output_dir is not None and options.provider_source == "oci":
        operator = operator_outputs(planned, providers, options, registry)  # publishes them
    return Publication(charts, plain_http, confirmed, published, recorded, providers, operator)


def outputs(
    planned: Plan, pushed: Pushed, publication: Publication, options: ImportOptions
) -> Outputs:
    """Every file import writes, and the image references they make: the recorded ones
    when the outputs an earlier import left stand."""
    operator = publication.operator
    files = dict(operator.files) if operator is not None else {}
    missing = dict(operator.missing) if operator is not None else {}
    if publication.recorded is not None:
        missing.update(publication.recorded.missing)
        found = dict(publication.recorded.references)
    else:
        if options.output_dir is not None:
            files |= _import_files(planned, publication, options)
        with phases.timed("import/closure"):
            found = _scanned(files, pushed.scan)
    return Outputs(files, set(operator.files) if operator else set(), missing, found)


def _import_files(
    planned: Plan, publication: Publication, options: ImportOptions
) -> dict[str, bytes]:
    """The mirror configs, the clusterctl repository and the manifests images' list."""
    from airgap.mirror.manifestimage import COMPONENTS_FILE, component_list

    files = import_files(
        publication.providers,
        planned.mappings,
        options.target,
        keep_registry=options.keep_registry,
        ca_pem=planned.ca_pem,
        plain_http=publication.plain_http,
        contents=planned.contents,
    )
    assert publication.published is not None
    files[COMPONENTS_FILE] = component_list(publication.published)
    return files


def closure(
    planned: Plan, pushed: Pushed, written: Outputs, registry: Registry, options: ImportOptions
) -> Closure:
    """Every image the outputs and the bundle reference, asked of the target. Nothing
    pushed: every tree was found complete by this run's tag HEADs, so the closure need
    not ask for them again; after a push it asks for itself, a check of the outputs
    against the target independent of the push's own confirmation."""
    answered = None if pushed.stats.changed else pushed.pusher.confirmed
    nodes = nodes_pull(planned.manifest, planned.contents)
    return check_closure(
        registry,
        options,
        planned.manifest,
        planned.mappings,
        dict(written.found),
        answered,
        nodes=nodes,
    )


def result(
    planned: Plan,
    pushed: Pushed,
    publication: Publication,
    written: Outputs,
    checked: Closure,
    options: ImportOptions,
    started: float,
) -> ImportResult:
    """The import's summary and report: conditions as ``airgap status`` gives them."""
    dangling = [str(item) for item in checked.dangling]
    # what status asks for besides the images (each push above confirmed its digest)
    oci = options.output_dir is not None and options.provider_source == "oci"
    artifacts = len(pushed.attached.trees) + len({c.reference for c in publication.charts})
    artifacts += len(publication.confirmed) + (len(publication.providers) if oci else 0)
    return ImportResult(
        planned.bundle,
        planned.mappings,
        pushed.stats,
        time.monotonic() - started,
        written.missing,
        conditions=keep_transitions(
            import_conditions(len(planned.mappings), artifacts, dangling, status_now()),
            earlier_report(options.output_dir),
        ),
        versions=versions(planned.manifest),
        attached=pushed.attached,
        failed=sorted(pushed.pusher.failures.values(), key=lambda f: f.what),
    )


def write(
    planned: Plan,
    publication: Publication,
    written: Outputs,
    report: ImportResult,
    options: ImportOptions,
    output_dir: Path,
) -> None:
    """The outputs and ``import-report.json``, each whole or not at all; the record of
    the outputs last: it lists what is there only once it is there."""
    files = {"import-report.json": json_bytes(report.report())}
    if publication.recorded is not None:  # the outputs are there, whole: only the report
        write_tree(output_dir, files)
        return
    if planned.cache_key is None:  # outputs not recorded: no earlier record may stay
        outputcache.forget(output_dir)
    else:
        files[outputcache.RECORD] = outputcache.record_bytes(
            planned.cache_key,
            written.files,
            asked=planned.asked.asked,
            values=options.variables,
            published=publication.confirmed,
            missing=written.missing,
            references=written.found,
            plain_http=publication.plain_http,
        )
    write_outputs(
        output_dir, written.files | files, operator=written.operator_files, replaced=PARTS
    )


def raise_failures(report: ImportResult, checked: Closure, options: ImportOptions) -> None:
    """--keep-going: every image that failed (the others pushed); then the closure:
    the outputs and the report are there to look at."""
    if report.failed:
        pushed = len(report.mappings) - len(report.failed)
        raise ManyFailures(
            report.failed,
            f"{plural(len(report.failed), 'image')} failed, {pushed} pushed into "
            f"{options.target}" + (" (see import-report.json)" if options.output_dir else ""),
        )
    if not checked.closed:
        raise AirgapError(describe_failure(checked, str(options.target)))


class ClosureScan:
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


def _scanned(files: dict[str, bytes], scan: ClosureScan | None) -> dict[str, str]:
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
