"""``airgap collect``: provider releases and their images into one signed bundle.

Provider files are fetched into a small staging directory beside the output. Images are
resolved first (manifests and configs: small documents); at that point every member of
the bundle is known by digest and size, so the manifest is signed and the tar laid out
before any layer moves. Layers are then downloaded straight into their places in the
output file, each byte written once. The bundle appears at its path only when complete.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from airgap import __version__
from airgap.bundle.created import created_timestamp, source_date_epoch
from airgap.bundle.format import IMAGES_DIR
from airgap.bundle.manifest import BundleManifest
from airgap.bundle.signing import load_private_key, sign
from airgap.bundle.writer import (
    PlannedMember,
    Region,
    Sink,
    TarPlan,
    check_parts_output,
    write_bundle,
    write_parts,
)
from airgap.collect.base import Holdings
from airgap.collect.images import BlobJob, ImageCopier, ResolvedImage
from airgap.collect.members import Members, bundle_bound, digest_of, plan_members
from airgap.collect.records import (
    content_record,
    delta_record,
    image_records,
    provider_record,
    relied_digests,
)
from airgap.collect.spec import BundleSpec, load_spec
from airgap.collect.supplychain import check_before_signing, trust_material
from airgap.content.fetch import ContentRequest, FetchedContent, fetch_content, request_for
from airgap.content.helm import PoolFactory
from airgap.content.kinds import ContentKind
from airgap.core import interrupt, phases
from airgap.core.errors import AirgapError, InputError
from airgap.core.failures import Failure, raise_failures
from airgap.core.fsutil import check_replaceable, require_directory_of
from airgap.core.limits import MAX_BUNDLE_MANIFEST_BYTES, MAX_MANIFEST_BYTES, describe_size
from airgap.core.parallel import Started
from airgap.core.progress import QUIET, Progress
from airgap.core.space import Need, check_space
from airgap.core.textfmt import plural
from airgap.installer.member import installer_member
from airgap.net import httpclient
from airgap.oci.layout import INDEX_FILE
from airgap.oci.reference import Reference, parse_reference
from airgap.providers.contract import ContractMember, contract_problems
from airgap.providers.fetch import (
    DownloadedRelease,
    FetchedProvider,
    download_release,
    read_release,
)
from airgap.providers.imagesource import fetch_image_provider
from airgap.providers.specs import ProviderSpec
from airgap.providers.types import ProviderType
from airgap.providers.wellknown import lookup
from airgap.registry.pool import RegistryPool

if TYPE_CHECKING:
    from airgap.verify.policy import Policy


@dataclass(frozen=True)
class CollectResult:
    """What a collect wrote, for the summary and ``--format json``."""

    output: Path
    manifest: BundleManifest
    seconds: float
    skipped_bytes: int = 0  # a delta: the bytes of what it relies on instead of carrying


@dataclass(frozen=True)
class _Run:
    """What one collect works with, settled before any download: the spec, the policy,
    the signing key and where things go."""

    spec: BundleSpec
    spec_path: Path
    output: Path
    staging: Path
    key: Ed25519PrivateKey
    rules: Policy | None
    carried: PlannedMember | None  # the offline installer, carried as a member
    epoch: datetime | None
    holdings: Holdings | None
    progress: Progress


def collect(
    spec_path: Path,
    output: Path,
    sign_key: Path,
    *,
    concurrency: int = 8,
    progress: Progress = QUIET,
    overwrite: bool = False,
    part_size: int | None = None,
    holdings: Holdings | None = None,
    authfile: Path | None = None,
    signatures: bool = True,
    policy: Path | None = None,
    installer: Path | None = None,
) -> CollectResult:
    """Fetch the spec's releases and images and write them as one signed bundle at
    ``output`` (or its parts); every input is checked before the first download."""
    started = time.monotonic()
    epoch = source_date_epoch()
    spec = load_spec(spec_path)
    rules = _load_policy(policy)  # its errors before any fetch
    key = load_private_key(sign_key)  # fail before any download if the key is unusable
    carried = _installer_member(installer)
    output = output.absolute()
    check_output(output, overwrite=overwrite)
    if part_size is not None:  # a split bundle: NAME.tar.000, ...
        check_parts_output(output, overwrite=overwrite)
    staging = Path(tempfile.mkdtemp(prefix=".airgap-collect-", dir=staging_parent(output)))
    interrupt.track(staging, directory=True)  # removed on Ctrl-C or SIGTERM too
    run = _Run(spec, spec_path, output, staging, key, rules, carried, epoch, holdings, progress)
    try:
        failures: list[Failure] = []  # every release and image that failed
        providers, contents = _fetch_releases(run, authfile, failures)
        with RegistryPool(
            spec.registries, max_connections=max(concurrency, 4), authfile=authfile
        ) as pool:
            if spec.image_providers:  # read from their images: one more provider source
                providers += _fetch_image_providers(spec, providers, staging, progress, pool)
                if not failures:
                    _check_contracts(providers, spec_path)
            copier = ImageCopier(
                pool,
                platforms=spec.platforms,
                concurrency=concurrency,
                progress=progress,
                signatures=signatures,
            )
            plan, jobs, manifest = _plan_bundle(run, providers, contents, copier, failures)

            def fill(sink: Sink, regions: list[Region]) -> None:
                copier.download(jobs, {digest_of(r.name): r for r in regions}, sink)

            with phases.timed("images/download"):  # and the bundle written around them
                if part_size is None:
                    write_bundle(plan, output, fill)
                else:
                    write_parts(plan, output, part_size, fill, sign=lambda b: sign(key, b))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        interrupt.untrack(staging)
    skipped = sum(need.size for need in manifest.needs)
    return CollectResult(output, manifest, time.monotonic() - started, skipped)


def _load_policy(policy: Path | None) -> Policy | None:
    if policy is None:
        return None
    # the policy code (cosign's X.509 chains among it) loads only for --policy, not in
    # every other collect's start-up
    from airgap.verify.policy import load_policy

    return load_policy(policy)


def _installer_member(installer: Path | None) -> PlannedMember | None:
    """The offline installer (``--with-installer``) as a bundle member, read from its
    file when the bundle is written."""
    if installer is None:
        return None
    return PlannedMember(
        installer_member(installer), installer.stat().st_size, path=installer.absolute()
    )


def _fetch_releases(
    run: _Run, authfile: Path | None, failures: list[Failure]
) -> tuple[list[FetchedProvider], list[FetchedContent]]:
    """Every provider release and content of the spec; release files and chart
    repositories over airgap's own transport, as registry traffic is: bounded heads
    (1xx included), framing and trailers."""
    spec = run.spec
    with httpclient.build_client(fast=True) as client:
        providers = _fetch_providers(spec, run.staging, run.progress, client, failures)
        if not failures:  # a set missing a release is reported for that
            _check_contracts(providers, run.spec_path)  # before any image is downloaded
        contents = _fetch_contents(
            spec,
            providers,
            run.staging,
            run.progress,
            client,
            lambda: RegistryPool(spec.registries, authfile=authfile),  # OCI charts
            failures,
        )
    return providers, contents


def _plan_bundle(
    run: _Run,
    providers: list[FetchedProvider],
    contents: list[FetchedContent],
    copier: ImageCopier,
    failures: list[Failure],
) -> tuple[TarPlan, list[BlobJob], BundleManifest]:
    """Resolve every image, check the space the bundle needs, and make its signed
    manifest and tar plan; the blobs are downloaded as the plan is written."""
    with phases.timed("images/resolve"):  # manifests, configs, attached artifacts
        images = copier.resolve(_image_references(run.spec, providers, contents), failures)
    # all of them, before any blob moves or anything is written
    raise_failures(failures, _failed_summary(failures))
    relied = relied_digests(images, run.holdings)
    trust = trust_material(run.rules)
    _check_space(run, providers, contents, images, relied, sum(len(d) for _, d in trust))
    with phases.timed("images/resolve"):
        copier.read_configs(images)
    created = created_timestamp(run.epoch)
    members = plan_members(providers, contents, images, run.staging, relied)
    if run.carried is not None:  # first: tar -xf reaches it before the blobs
        members.head.insert(0, run.carried)
    members.tail += [PlannedMember(r.path, len(data), data=data) for r, data in trust]
    manifest = BundleManifest(
        created=created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        tool_version=__version__,
        providers=[provider_record(p, run.staging) for p in providers],
        images=image_records(images, relied),
        files=members.records(),
        contents=[content_record(c, run.staging) for c in contents],
        artifacts=[record for i in images for record in i.artifact_records()],
        trust=[record for record, _ in trust],
        delta=delta_record(images, relied, run.holdings),
    )
    check_before_signing(run.rules, manifest, images, trust)
    jobs = copier.blob_jobs(images, members.deferred())
    # From here the jobs hold what is downloaded and the plan what is written inline:
    # the images are let go before the manifest's text is made, the members and their
    # bytes once written (peak RSS would otherwise grow with the image count)
    del images
    return _signed_plan(run.key, manifest, members, created), jobs, manifest


def _check_space(
    run: _Run,
    providers: list[FetchedProvider],
    contents: list[FetchedContent],
    images: list[ResolvedImage],
    relied: set[str],
    trust_bytes: int,
) -> None:
    """The bundle's size is known from the manifests: refused now if it cannot be
    written, before any blob (configs included) is asked for."""
    bundle_size, spilled = bundle_bound(
        providers, contents, images, run.staging, relied, trust_bytes
    )
    bundle_size += run.carried.size if run.carried is not None else 0
    check_space(
        [
            Need(run.output.parent, bundle_size, "the bundle"),
            Need(run.staging, spilled, "staged manifests and configs"),
        ]
    )


def _failed_summary(failures: list[Failure]) -> str:
    images = sum(1 for f in failures if parse_or_none(f.what) is not None)
    releases = len(failures) - images
    parts = [plural(n, word) for n, word in ((releases, "release"), (images, "image")) if n]
    return f"{' and '.join(parts)} failed; nothing written"


def parse_or_none(text: str) -> Reference | None:
    """``text`` as an image reference, or None (a release, a chart)."""
    try:
        return parse_reference(text)
    except InputError:
        return None


def _signed_plan(
    key: Ed25519PrivateKey,
    manifest: BundleManifest,
    members: Members,
    created: datetime,
) -> TarPlan:
    """The tar plan with the manifest's bytes and their signature first (the bytes are
    held by the plan alone, until they are written)."""
    data = manifest.to_bytes()
    _refuse_what_verify_would(data, members)
    return TarPlan.build(data, sign(key, data), members, int(created.timestamp()))


def staging_parent(output: Path) -> Path:
    """Where collect stages release files and small blobs: ``$TMPDIR`` when it is set
    (as every temporary file), else beside the bundle, on the disk that will hold it
    anyway (not a small ``/tmp``)."""
    return Path(tempfile.gettempdir()) if os.environ.get("TMPDIR") else output.parent


def check_output(output: Path, *, overwrite: bool) -> None:
    """Refuse a bundle path whose directory is missing rather than create it (an
    unmounted USB disk would fill the root filesystem instead), and an existing bundle
    unless ``overwrite`` (``--force``), as keygen refuses to overwrite a key."""
    require_directory_of(output)
    if output.is_dir():
        raise InputError(f"{output} is a directory; -o names the bundle file to write")
    check_replaceable(output, overwrite=overwrite, what="bundle")


def _fetch_providers(
    spec: BundleSpec,
    staging: Path,
    progress: Progress,
    client: httpx.Client,
    failures: list[Failure],
) -> list[FetchedProvider]:
    """Every release the spec names, downloaded side by side and read in spec order; a
    release that fails is added to ``failures`` and the others still come (every
    failure of a collect in one run)."""
    # releases download side by side (each is a few requests that mostly wait) and are
    # read one after the other, in spec order; the entries of one provider download in
    # turn, since `latest` may resolve to a version also listed explicitly: one directory
    groups: dict[tuple[str, str], list[int]] = {}
    for index, provider in enumerate(spec.providers):
        groups.setdefault((provider.type.kind, provider.name), []).append(index)

    def download(indexes: list[int]) -> list[tuple[int, DownloadedRelease | Failure]]:
        done: list[tuple[int, DownloadedRelease | Failure]] = []
        for index in indexes:
            provider = spec.providers[index]
            progress.note(f"fetching {provider.type.kind} {provider.name} {provider.version}")
            try:
                done.append((index, download_release(provider, staging, client)))
            except InputError:
                raise  # the spec itself: the user's to fix first, alone
            except AirgapError as exc:
                done.append(
                    (index, Failure.of(_release_what(provider), _release_where(provider), exc))
                )
        return done

    group_of = {index: number for number, group in enumerate(groups.values()) for index in group}
    fetched: dict[tuple[str, str, str], FetchedProvider] = {}
    # each release is read (its components parsed) as soon as it is in, in spec order,
    # while the later ones still download: "providers/fetch" is the wait for them
    with Started([partial(download, group) for group in groups.values()], 8) as downloads:
        for index in range(len(spec.providers)):
            with phases.timed("providers/fetch"):
                release = dict(downloads.result(group_of[index]))[index]
            if isinstance(release, Failure):
                failures.append(release)
                continue
            key = (release.spec.type.kind, release.spec.name, release.version)
            if key not in fetched:
                fetched[key] = read_release(release)
    return list(fetched.values())


def _release_what(provider: ProviderSpec) -> str:
    return f"provider {provider.name} ({provider.type.kind}) {provider.version}"


def _release_where(provider: ProviderSpec) -> str:
    """The release's host, as failures name it."""
    known = lookup(provider.name, provider.type)
    url = provider.url or (known.url if known else "")
    return urlsplit(url).netloc or url or "?"


def _fetch_contents(
    spec: BundleSpec,
    providers: list[FetchedProvider],
    staging: Path,
    progress: Progress,
    client: httpx.Client,
    pools: PoolFactory | None = None,
    failures: list[Failure] | None = None,
) -> list[FetchedContent]:
    """cert-manager and the operator as the spec asks, then each infrastructure
    provider version's cluster templates (unless ``templates: false``), all through
    one fetch path. Templates are read from infrastructure providers only: that is
    where ``clusterctl generate cluster`` looks for flavors and ClusterClasses, and
    the other providers of a monorepo release would carry the same files again."""
    requests = [request_for(entry, client, pools) for entry in spec.contents]
    if spec.templates:
        versions = tuple(entry.version for entry in spec.kubernetes)
        requests += [
            ContentRequest(ContentKind.TEMPLATES, p.label, p.version, p.release, versions)
            for p in providers
            if p.release is not None and p.type is ProviderType.INFRASTRUCTURE
        ]
    fetched: list[FetchedContent] = []
    for request in requests:
        progress.note(f"fetching {request.kind.title} {request.name} {request.version}")
        try:
            result = fetch_content(request, staging)
        except InputError:
            raise
        except AirgapError as exc:  # with ``failures``: the others are still fetched
            if failures is None:
                raise
            what = f"{request.kind.title} {request.name} {request.version}"
            where = urlsplit(request.source.url).netloc or request.source.url
            failures.append(Failure.of(what, where, exc))
            continue
        if result is not None:
            fetched.append(result)
    return fetched


def _fetch_image_providers(
    spec: BundleSpec,
    known: list[FetchedProvider],
    staging: Path,
    progress: Progress,
    pool: RegistryPool,
) -> list[FetchedProvider]:
    """Providers whose manifests are read from their images (``providers.imagesource``),
    laid out like a release; one provider version comes from one place only."""
    seen = {(p.type.kind, p.name, p.version) for p in known}
    fetched: list[FetchedProvider] = []
    for entry in spec.image_providers:
        progress.note(f"reading provider manifests from image {entry.image}")
        result = fetch_image_provider(entry, staging, pool, spec.platforms)
        identity = (result.type.kind, result.name, result.version)
        if identity in seen:
            raise InputError(
                f"{entry.where}: provider {result.name} of type {result.type.kind} "
                f"{result.version} is already in the spec"
            )
        seen.add(identity)
        fetched.append(result)
    return fetched


def _check_contracts(providers: list[FetchedProvider], spec_path: Path) -> None:
    """clusterctl's compatibility rule, on the connected side: a set it would refuse is
    refused here, not after it has crossed the gap (verify applies the same table)."""
    members = [
        ContractMember(
            f"{p.type.kind}/{p.name} {p.version}", p.contract, p.type is ProviderType.CORE
        )
        for p in providers
    ]
    problems = contract_problems(members)
    if problems:
        cores = ", ".join(
            f"{p.name} {p.version} ({p.contract})" for p in providers if p.type is ProviderType.CORE
        )
        raise InputError(
            f"{spec_path}: providers that cannot be installed together (core provider "
            f"{cores}): {'; '.join(str(problem) for problem in problems)}"
        )


def _image_references(
    spec: BundleSpec, providers: list[FetchedProvider], contents: list[FetchedContent]
) -> list[Reference]:
    """Provider images, content images, then extra images, each once, in first-seen
    order."""
    seen: dict[str, Reference] = {}
    texts = [image for p in providers for image in p.images]
    texts += [image for c in contents for image in c.images]
    for text in texts + list(spec.images):
        ref = parse_reference(text)
        seen.setdefault(str(ref), ref)
    return list(seen.values())


def _refuse_what_verify_would(manifest: bytes, members: Members) -> None:
    """Collect never signs a bundle verify would refuse: the caps verify applies to what
    collect writes itself, checked with the same constants before signing. (Image
    manifests and metadata.yaml already met them when they were fetched.)"""
    if len(manifest) > MAX_BUNDLE_MANIFEST_BYTES:
        raise AirgapError(
            f"the bundle manifest would be {len(manifest)} bytes, over the "
            f"{describe_size(MAX_BUNDLE_MANIFEST_BYTES)} verify accepts: collect fewer images"
        )
    for member in members.head:
        if member.name == f"{IMAGES_DIR}/{INDEX_FILE}" and member.size > MAX_MANIFEST_BYTES:
            raise AirgapError(
                f"{member.name} would be {member.size} bytes, over the "
                f"{describe_size(MAX_MANIFEST_BYTES)} verify accepts: collect fewer images"
            )
