"""Checks over the bundle's content records: cert-manager, the operator, templates.

``verify.names`` has already refused any record whose kind, name, version or file
names are not in collect's form; here the records are checked against each other and
against the verified members: every file present and owned by one record only, every
image in the bundle, templates next to a provider of their label and version, at most
one cert-manager and one operator, each chart package a chart of the name and
version its file name promises, and each chart's ``.prov`` promising that package's
sha256 (its OpenPGP signature is not checked: there is no keyring of chart signers).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping

from airgap.bundle.format import ContentRecord, FileIndex, FileRecord
from airgap.bundle.manifest import BundleManifest
from airgap.content.kinds import (
    CHART_SUFFIX,
    PROVENANCE_SUFFIX,
    ContentKind,
    chart_file,
    is_chart,
    parse_kind,
)
from airgap.core.errors import AirgapError, InputError
from airgap.core.limits import MAX_PROVENANCE_BYTES, MAX_RELEASE_FILE_BYTES
from airgap.providers.types import ProviderType
from airgap.verify.findings import Failure

ReadMember = Callable[[str], bytes]


def check_contents(
    manifest: BundleManifest, read: ReadMember, present: Mapping[str, int]
) -> list[Failure]:
    failures: list[Failure] = []
    listed = {image.reference for image in manifest.images}
    files = digests = FileIndex(manifest.files)  # by path, no path text per blob
    owners = {
        path: "its provider" for p in manifest.providers for path in (p.metadata, p.components)
    }
    infrastructure = ProviderType.INFRASTRUCTURE.kind
    providers = {(p.label, p.version) for p in manifest.providers if p.type == infrastructure}
    seen: dict[tuple[str, str, str], int] = {}
    kinds: dict[str, int] = {}
    for number, content in enumerate(manifest.contents):
        kind = parse_kind(content.kind)
        if kind is None:
            continue  # check_names reported it
        subject = describe(content)
        identity = (content.kind, content.name, content.version)
        if identity in seen:
            failures.append(
                Failure("content", subject, f"listed twice (contents[{seen[identity]}])")
            )
            continue
        seen[identity] = number
        if kind.unique and kinds.setdefault(content.kind, number) != number:
            failures.append(
                Failure("content", subject, f"a bundle carries one {kind.title}, not several")
            )
        if kind is ContentKind.TEMPLATES and (content.name, content.version) not in providers:
            failures.append(
                Failure(
                    "content",
                    subject,
                    "templates of an infrastructure provider version the bundle lacks",
                )
            )
        found = [
            failure
            for path in content.files
            for failure in _check_file(content, kind, path, read, present, files, owners, digests)
        ]
        failures += found
        if kind is ContentKind.CHARTS and not found:
            failures += _check_chart_images(content, read)
        if kind is ContentKind.KUBERNETES and not found:
            failures += _check_kubeadm_images(content, read)
        for image in content.images:
            if image not in listed:
                failures.append(
                    Failure("content", subject, f"needs image {image}, which the bundle lacks")
                )
    return failures


def describe(content: ContentRecord) -> str:
    return f"{content.kind}/{content.name} {content.version}"


def _check_file(
    content: ContentRecord,
    kind: ContentKind,
    path: str,
    read: ReadMember,
    present: Mapping[str, int],
    files: Container[str],
    owners: dict[str, str],
    digests: Mapping[str, FileRecord],
) -> list[Failure]:
    subject = describe(content)
    owner = owners.setdefault(path, subject)
    if owner != subject:
        return [Failure("content", subject, f"{path} also belongs to {owner}")]
    if path not in present:
        why = "is missing or damaged" if path in files else "is not in the bundle"
        return [Failure("content", subject, f"{path} {why}")]
    if path.endswith(CHART_SUFFIX + PROVENANCE_SUFFIX):
        return _check_provenance(content, path, read, present, digests)
    if not is_chart(path):
        return []
    if present[path] > MAX_RELEASE_FILE_BYTES:
        return [Failure("content", subject, f"{path} is implausibly large")]
    from airgap.content.chart import read_chart  # start-up: yaml, only for a chart

    try:
        chart = read_chart(read(path), path)
    except InputError as exc:
        return [Failure("content", subject, f"is not a chart package: {exc}")]
    expected = path.rsplit("/", 1)[1]
    if expected not in (f"{chart.name}-{chart.version}.tgz", chart_file(chart.name, chart.version)):
        return [
            Failure(
                "content",
                subject,
                f"{path} holds chart {chart.name} {chart.version}, not what its name says",
            )
        ]
    return []


def _check_chart_images(content: ContentRecord, read: ReadMember) -> list[Failure]:
    """The record's chart rendered again, from the bundle alone, as collect rendered it
    (the values and capabilities the signed record holds): every image it runs is one
    the record lists."""
    from airgap.content.chartrender import RenderSettings, chart_images

    subject = describe(content)
    paths = [path for path in content.files if is_chart(path)]
    if not paths:
        return []
    try:
        settings = RenderSettings.from_json(content.render, subject)
        packages = [(read(path), path) for path in paths]
        images = chart_images(packages, settings, content.name)
    except AirgapError as exc:
        return [Failure("content", subject, f"does not render: {exc}")]
    missing = [image for image in images if image not in content.images]
    if missing:
        why = f"{paths[0]} renders image {missing[0]}, which the record lacks"
        return [Failure("content", subject, why)]
    return []


def _check_kubeadm_images(content: ContentRecord, read: ReadMember) -> list[Failure]:
    """A Kubernetes record lists exactly the images its ``kubeadm-images.txt`` lists,
    and those are what kubeadm's rules give for the ``constants.go`` it carries (or,
    without one, for the built-in table of an offline collect)."""
    from airgap.content.kubeadm import (
        BUILTIN_SOURCE,
        CONSTANTS_FILE,
        IMAGES_FILE,
        builtin_constants,
        kubeadm_images,
        parse_constants,
        read_images_file,
    )

    subject = describe(content)
    by_name = {path.rsplit("/", 1)[1]: path for path in content.files}
    if IMAGES_FILE not in by_name:
        return [Failure("content", subject, f"has no {IMAGES_FILE}")]
    try:
        listed = read_images_file(read(by_name[IMAGES_FILE]), by_name[IMAGES_FILE])
        if CONSTANTS_FILE in by_name:
            path = by_name[CONSTANTS_FILE]
            text = read(path).decode("utf-8", errors="replace")
            constants = parse_constants(text, path)
        elif content.source == BUILTIN_SOURCE:
            constants = builtin_constants(content.version)
        else:
            return [Failure("content", subject, f"has no {CONSTANTS_FILE} its list follows from")]
        expected = kubeadm_images(content.version, constants)
    except InputError as exc:
        return [Failure("content", subject, str(exc))]
    if listed != content.images:
        return [Failure("content", subject, f"{IMAGES_FILE} is not the record's image list")]
    if listed != expected:
        why = f"lists {', '.join(listed)}; kubeadm pulls {', '.join(expected)}"
        return [Failure("content", subject, why)]
    return []


def _check_provenance(
    content: ContentRecord,
    path: str,
    read: ReadMember,
    present: Mapping[str, int],
    digests: Mapping[str, FileRecord],
) -> list[Failure]:
    """A ``.prov`` must promise its package's sha256 (as collect checked); the package
    is the record's file of the same name without ``.prov``, already verified."""
    subject = describe(content)
    package = path.removesuffix(PROVENANCE_SUFFIX)
    if package not in content.files or package not in digests:
        return [Failure("content", subject, f"{path} has no package {package} beside it")]
    if present[path] > MAX_PROVENANCE_BYTES:
        return [Failure("content", subject, f"{path} is implausibly large")]
    name = package.rsplit("/", 1)[1]
    # Helm signed NAME-VERSION.tgz with the version's '+' (a bundle file name has '_',
    # which neither a chart name nor a semver version may hold)
    names = tuple(dict.fromkeys((name.replace("_", "+"), name)))
    from airgap.content.provenance import check_provenance  # start-up: OpenPGP, rare

    try:
        check_provenance(read(path), names, digests[package].sha256, path)
    except AirgapError as exc:
        return [Failure("content", subject, str(exc))]
    return []
