"""Every name a bundle manifest gives, checked before anything uses it as a path.

A signed manifest is only as careful as whoever signed it (a compromised or careless
collect, a trusted key used for a forged bundle). Its provider names, labels, versions
and file names become directories and files under ``--output-dir`` and Kubernetes
object names; its image references and digests become registry paths and bundle
members. verify refuses any that is not in the one strict form collect writes, so
``import`` and ``configmaps`` never see ``x/../../TRAVERSAL``.
"""

from __future__ import annotations

from collections.abc import Iterator

from airgap.bundle.format import PROVIDERS_DIR, ContentRecord, ImageRecord, ProviderRecord
from airgap.bundle.manifest import BundleManifest
from airgap.content.kinds import ContentKind, name_problem, parse_kind
from airgap.core.errors import InputError
from airgap.core.names import (
    contract_problem,
    digest_problem,
    file_name_problem,
    provider_name_problem,
    shown,
    version_problem,
)
from airgap.oci.reference import parse_reference
from airgap.providers.metadata import METADATA_FILE
from airgap.providers.types import ProviderType
from airgap.verify.findings import Failure

MAX_TEXT = 1024  # a source URL, a reference, a platform: printed, never a path
MAX_WARNINGS = 200  # per content record (collect keeps at most as many)


def check_names(manifest: BundleManifest) -> list[Failure]:
    """One failure per provider or image whose names are not in collect's form."""
    failures: list[Failure] = []
    for number, provider in enumerate(manifest.providers):
        problem = next(_provider_problems(provider), None)
        if problem:
            failures.append(Failure("provider", f"providers[{number}]", problem))
    for number, image in enumerate(manifest.images):
        problem = next(_image_problems(image), None)
        if problem:
            failures.append(Failure("image", f"images[{number}]", problem))
    for number, content in enumerate(manifest.contents):
        problem = next(_content_problems(content), None)
        if problem:
            failures.append(Failure("content", f"contents[{number}]", problem))
    return failures


# a chart's render settings: the spec's values and at most 20 values files of 1 MiB
MAX_RENDER_CHARS = 24 << 20


def _content_problems(content: ContentRecord) -> Iterator[str]:
    """Why a content record's names are refused: its kind must be known, its name and
    version of the one strict form, every file in the kind's directory and one the
    kind may hold (``airgap.content.kinds``)."""
    kind = parse_kind(content.kind)
    if kind is None:
        yield f"unknown content kind {shown(content.kind)}"
        return
    for problem in (name_problem(kind, content.name), version_problem(content.version)):
        if problem:
            yield problem
            return
    directory = kind.directory(content.name, content.version)
    if not content.files:
        yield f"{kind.title} {content.version} holds no files"
    for path in content.files:
        folder, _, name = path.rpartition("/")
        if folder != directory:
            yield f"file {shown(path)} is not in {directory}/"
            return
        problem = kind.file_problem(name, content.version)
        if problem:
            yield problem
    if not _printable(content.source):
        yield f"source {shown(content.source)} is not one printable line"
    if len(content.warnings) > MAX_WARNINGS:
        yield f"more than {MAX_WARNINGS} warnings"
    for warning in content.warnings:
        if not _printable(warning):
            yield f"warning {shown(warning)} is not one printable line"
    if len(content.provenance) > MAX_WARNINGS:
        yield f"more than {MAX_WARNINGS} provenance lines"
    for line in content.provenance:
        if not _printable(line):
            yield f"provenance {shown(line)} is not one printable line"
    for image in content.images:
        problem = _reference_problem(image)
        if problem:
            yield f"image {problem}"
    if content.render is not None and kind is not ContentKind.CHARTS:
        yield "render settings on a record that holds no chart"
    elif content.render is not None and len(content.render) > MAX_RENDER_CHARS:
        yield f"render settings longer than {MAX_RENDER_CHARS} characters"


def _provider_problems(provider: ProviderRecord) -> Iterator[str]:
    """Why a provider's names are refused, first reason first (lazily: later checks may
    rely on earlier ones, the label on a valid type and name)."""
    for problem in (
        provider_name_problem(provider.name),
        version_problem(provider.version),
        contract_problem(provider.contract),
    ):
        if problem:
            yield problem
    try:
        ptype = ProviderType(provider.type)
    except ValueError:
        yield f"unknown provider type {shown(provider.type)}"
        return
    label = ptype.label(provider.name)
    if provider.label != label:
        yield f"label {shown(provider.label)} is not {label!r} ({ptype.kind} {provider.name})"
        return
    directory = f"{PROVIDERS_DIR}/{label}/{provider.version}"
    if provider.metadata != f"{directory}/{METADATA_FILE}":
        yield f"metadata file {shown(provider.metadata)} is not {directory}/{METADATA_FILE}"
    folder, _, name = provider.components.rpartition("/")
    if folder != directory:
        yield f"components file {shown(provider.components)} is not in {directory}/"
    problem = file_name_problem(name)
    if problem:
        yield f"components file: {problem}"
    if not _printable(provider.source):
        yield f"source {shown(provider.source)} is not one printable line"
    for image in provider.images:
        problem = _reference_problem(image)
        if problem:
            yield f"image {problem}"


def _image_problems(image: ImageRecord) -> Iterator[str]:
    problem = _reference_problem(image.reference)
    if problem:
        yield problem
    for field, digest in (("digest", image.digest), ("sourceDigest", image.source_digest)):
        problem = digest_problem(digest) if digest is not None else None
        if problem:
            yield f"{field}: {problem}"
    if not image.digest.startswith("sha256:"):
        yield f"digest {shown(image.digest)}: bundles hold sha256 blobs only"
    for text in (image.media_type, *image.platforms, image.kept_whole or ""):
        if not _printable(text):
            yield f"{shown(text)} is not one printable line"


def _reference_problem(reference: str) -> str | None:
    """A reference must be in the normalised form collect writes (it names a target
    repository path and an ``index.json`` entry)."""
    if len(reference) > MAX_TEXT:
        return f"reference {shown(reference)} is longer than {MAX_TEXT} characters"
    try:
        normalised = str(parse_reference(reference))
    except InputError:
        return f"reference {shown(reference)} is not a valid image reference"
    if normalised != reference:
        return f"reference {shown(reference)} is not in normalised form ({normalised})"
    return None


def _printable(text: str) -> bool:
    return len(text) <= MAX_TEXT and text.isprintable()
