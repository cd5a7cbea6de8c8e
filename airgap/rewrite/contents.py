"""Content (cert-manager, the operator, templates) pointed at the target registry.

One path for every kind, as for providers: every manifest is rewritten line by line
(``rewrite.references``: documents, comments and variables stay as they were) so each bundle
image names the target, pinned by digest unless ``--no-pin``, and is then checked: an
image the rewritten text still runs from elsewhere fails the import, naming the file.
Chart packages travel byte for byte; their images are pointed at the mirror by a values
file instead (``content.chartvalues.values_overrides``), proven by rendering the chart
with it (``chart_values``): every image the render runs must be one the target serves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from airgap.bundle.format import ContentRecord
from airgap.bundle.manifest import BundleManifest
from airgap.content.kinds import PROVENANCE_SUFFIX, ContentKind, is_chart, is_manifest
from airgap.core import phases
from airgap.core.errors import AirgapError, InputError, utf8_text
from airgap.oci.reference import Reference, parse_reference
from airgap.rewrite.mapping import Mapping
from airgap.verify.bundle import VerifiedBundle


@dataclass(frozen=True)
class RewrittenContent:
    """One content record as import writes it."""

    record: ContentRecord
    kind: ContentKind
    files: dict[str, bytes]  # file name -> bytes: manifests rewritten, charts as carried
    values: dict[str, dict[str, Any]] = field(default_factory=dict)  # chart file -> values


class TargetImages:
    """Where each bundle image lands, and the references rewritten text may hold."""

    def __init__(self, manifest: BundleManifest, mappings: list[Mapping], *, pin: bool) -> None:
        self._digests = {image.reference: image.digest for image in manifest.images}
        self._by_source = {str(m.source): m for m in mappings}
        self._pin = pin

    def target(self, source: str) -> tuple[Reference, str | None] | None:
        """The target reference of a bundle image and the digest to pin it by (None:
        ``--no-pin``); None for an image the bundle does not hold."""
        mapping = self._by_source.get(source)
        if mapping is None:
            return None
        return mapping.target, self._digests[source] if self._pin else None

    def lookup(self, source: str) -> str | None:
        """The rewritten reference for a normalised source reference (None: not ours)."""
        found = self.target(source)
        if found is None:
            return None
        reference, digest = found
        return str(reference.with_digest(digest)) if digest else str(reference)

    def allowed(self) -> set[str]:
        """Every reference a rewritten file may run: each target, tagged or pinned."""
        return {str(m.target) for m in self._by_source.values()} | {
            m.pinned(self._digests[source]) for source, m in self._by_source.items()
        }


def rewrite_contents(
    bundle: VerifiedBundle, manifest: BundleManifest, mappings: list[Mapping], *, pin: bool
) -> list[RewrittenContent]:
    """Every content record with its images pointing at the target."""
    with phases.timed("contents/rewrite"):
        targets = TargetImages(manifest, mappings, pin=pin)
        return [_rewrite(record, bundle.read, targets) for record in manifest.contents]


def _rewrite(
    record: ContentRecord, read: Callable[[str], bytes], targets: TargetImages
) -> RewrittenContent:
    # the YAML readers load with the first content record, not with the module: most
    # bundles carry none, and a re-import of one never needs them
    from airgap.providers.components import lenient_images, parse_components
    from airgap.rewrite.references import rewrite_images

    kind = ContentKind(record.kind)
    allowed = targets.allowed()
    files: dict[str, bytes] = {}
    values: dict[str, dict[str, Any]] = {}
    packages = {path: read(path) for path in record.files if is_chart(path.rsplit("/", 1)[1])}
    if packages:  # the entry's chart first, its dependencies beside it
        top = next(iter(packages)).rsplit("/", 1)[1]
        values[top] = chart_values(record, list(packages.items()), targets, allowed)
    for path in record.files:
        name = path.rsplit("/", 1)[1]
        if path in packages:
            files[name] = packages[path]
            continue
        data = read(path)
        if name.endswith(PROVENANCE_SUFFIX):  # a chart's signature travels as it came
            files[name] = data
            continue
        if not is_manifest(name):
            continue  # verify refuses other files; nothing to write for them
        text = utf8_text(data, path)
        new_text, _ = rewrite_images(text, targets.lookup)
        if kind is ContentKind.TEMPLATES:
            images, _unresolved = lenient_images(new_text, path)
        else:
            images = parse_components(new_text, path).images
        leftover = [image for image in images if image not in allowed]
        if leftover:
            raise AirgapError(
                f"{path}: could not rewrite image {leftover[0]} "
                "(not in the bundle, or written in a YAML style airgap cannot edit in place)"
            )
        files[name] = new_text.encode()
    return RewrittenContent(record, kind, files, values)


def chart_values(
    record: ContentRecord,
    packages: list[tuple[str, bytes]],
    targets: TargetImages,
    allowed: set[str],
) -> dict[str, Any]:
    """The entry's values with every image pointed at the target (``values-airgap``),
    proven by Helm: the chart rendered with them runs only images the target serves,
    else AirgapError naming each one that does not. A value whose whole name did not
    render (the chart puts a registry in front of it) is split into registry and
    repository, and rendered again."""
    from airgap.content.chart import read_chart
    from airgap.content.chartrender import RenderSettings, chart_images, merge_values
    from airgap.content.chartvalues import values_overrides
    from airgap.content.helmengine import install_values

    where = f"chart {record.name} {record.version}"
    settings = RenderSettings.from_json(record.render, where)
    family = [(data, path) for path, data in packages]
    computed = install_values(family, settings.values)
    app_version = read_chart(family[0][0], family[0][1]).app_version
    rendered = chart_images(family, settings, record.name)
    split: frozenset[tuple[str, ...]] = frozenset()
    for _attempt in range(2):
        overrides, expected = values_overrides(
            computed, app_version, rendered, targets.target, split
        )
        values = merge_values([settings.values, overrides])
        found = chart_images(family, replace(settings, values=values), record.name, strict=False)
        dangling = [image for image in found if not _served(image, allowed)]
        if not dangling:
            return values
        split |= {path for path, image in expected.items() if image not in found}
    raise AirgapError(
        f"{where}: rendered with values-airgap.yaml it still runs "
        f"{', '.join(dangling[:5])}{' and more' if len(dangling) > 5 else ''}, "
        "which the target does not serve (set the chart's value for it in the entry's "
        "values, or list it in the entry's images)"
    )


def _served(image: str, allowed: set[str]) -> bool:
    """An image the target serves: a target reference, by tag, by tag and digest, or
    by digest alone (``NAME@DIGEST``, as a chart that pins renders it)."""
    if image in allowed:
        return True
    try:
        reference = parse_reference(image)
    except InputError:  # rendered as no reference at all
        return False
    digest = reference.digest
    return digest is not None and any(
        other.startswith(reference.name + ":") and other.endswith("@" + digest) for other in allowed
    )
