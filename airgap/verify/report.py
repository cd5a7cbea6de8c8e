"""The verification report: a verdict line, inventory tables, then failures."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airgap.bundle.format import ImageRecord, ProviderImageRecord
from airgap.bundle.manifest import BundleManifest
from airgap.core.textfmt import TABLE_WIDTH, human_size, plural, short_digest, table
from airgap.verify.bundle import VerifiedBundle
from airgap.verify.findings import Failure

if TYPE_CHECKING:  # start-up: policy imports cosign, x509 and yaml; a plain verify has no rules
    from airgap.bundle.diff import BundleDiff
    from airgap.verify.policy import RuleResult


@dataclass(frozen=True)
class Report:
    """Verification and policy together: what ``airgap verify`` prints and exits by."""

    bundle: VerifiedBundle
    policy: list[RuleResult]
    signature_checked: bool
    policy_given: bool = False  # --policy was given (a policy of no rules is still one)
    change: BundleDiff | None = None  # against --base, when given

    @property
    def failures(self) -> list[Failure]:
        policy_failures = [
            Failure("policy", r.rule, f"{r.message}: {', '.join(r.offending)}")
            for r in self.policy
            if not r.passed
        ]
        return self.bundle.failures + policy_failures

    @property
    def policy_passed(self) -> bool:
        return all(r.passed for r in self.policy)

    @property
    def ok(self) -> bool:
        return self.bundle.manifest is not None and not self.failures

    def _signed(self) -> str:
        if self.signature_checked:
            return f"signed by {self.bundle.signer}"
        return "SIGNATURE NOT CHECKED (--no-signature): authenticity unknown"

    def verdict(self) -> str:
        manifest = self.bundle.manifest
        if manifest is not None and self.bundle.verified and not self.policy_passed:
            rules = [r.rule for r in self.policy if not r.passed]
            return (
                f"Bundle NOT verified: policy failed ({', '.join(rules)}); "
                f"contents intact and {self._signed()}"
            )
        if not self.ok or manifest is None:
            return f"Bundle NOT verified: {len(self.failures)} failure(s)"
        contents = f"{plural(len(manifest.contents), 'content set')}, " if manifest.contents else ""
        delta = ""
        if manifest.delta is not None:
            delta = f", a delta relying on {len(manifest.needs)} manifests and blobs"
        return (
            f"Bundle verified: {self._signed()}, {plural(len(manifest.providers), 'provider')}, "
            f"{contents}{plural(len(manifest.images), 'image')}, "
            f"{human_size(manifest.total_size)}{delta}"
        )

    def text(self, *, wide: bool = False) -> str:
        parts = [self.verdict()]
        manifest = self.bundle.manifest
        if manifest is not None:
            parts.append(inventory_tables(manifest, wide=wide))
        if self.policy:
            parts.append(
                table(
                    ["POLICY RULE", "RESULT"],
                    [[r.rule, "pass" if r.passed else "FAIL"] for r in self.policy],
                )
            )
        if self.failures:
            parts.append("Failures:\n" + "\n".join(f"  {f}" for f in self.failures))
        return "\n\n".join(parts)

    def to_json(self) -> dict[str, Any]:
        manifest = self.bundle.manifest
        inventory = (
            inventory_json(manifest)
            if manifest
            else {"providers": [], "contents": [], "images": []}
        )
        return {
            "bundle": str(self.bundle.path),
            "verified": self.ok,
            "signature": self.bundle.signer,
            "signatureChecked": self.signature_checked,
            "policyPassed": self.policy_passed,
            **inventory,
            "failures": [f.to_json() for f in self.failures],
            "policy": [r.to_json() for r in self.policy],
            "verdict": self.verdict(),
            "manifestDigest": self.manifest_digest,
            "bundleSize": self.bundle.source.size,
            "policyGiven": self.policy_given or bool(self.policy),
            "notChecked": self.not_checked(),
            "warnings": self.warnings(),
            **({"change": self.change.to_json()} if self.change is not None else {}),
        }

    @property
    def manifest_digest(self) -> str | None:
        """``sha256:…`` of the signed manifest: what names this bundle as a base."""
        sha256 = self.bundle.manifest_sha256
        return f"sha256:{sha256}" if sha256 else None

    def not_checked(self) -> list[str]:
        """What this verification did not establish, said plainly for a reviewer."""
        manifest = self.bundle.manifest
        missing: list[str] = []
        if not self.signature_checked:
            missing.append(
                "The bundle's signature (--no-signature): who made it, and whether it was "
                "changed since, is unknown."
            )
        if not (self.policy_given or self.policy):
            missing.append(
                "No policy (--policy): registries, tags, platforms, age, required content "
                "and image signatures were not checked against any rule."
            )
        if manifest is None:
            return missing
        rules = {r.rule for r in self.policy}
        kinds = {a.kind for a in manifest.artifacts}
        if "signature" in kinds and "requireSignatures" not in rules:
            missing.append(
                "Image signatures are carried but their cryptography was not checked (the "
                "policy has no requireSignatures rule); verify checked their bytes and that "
                "each belongs to its image."
            )
        if kinds - {"signature"}:
            missing.append(
                "Attestations and SBOMs attached to images are carried byte for byte and "
                "checked to belong to their image; their statements are not evaluated."
            )
        if any(c.provenance for c in manifest.contents):
            missing.append(
                "Helm chart provenance (.prov) signatures (OpenPGP) were not checked: no "
                "keyring; the package digests they name were."
            )
        if manifest.delta is not None:
            missing.append(
                f"This is a delta: {plural(len(manifest.needs), 'manifest or blob')} it "
                "relies on are not in it; import checks them in the target registry."
            )
        missing.append(
            "Image contents (vulnerabilities, licences) are not scanned by airgap verify."
        )
        return missing

    def warnings(self) -> list[dict[str, str]]:
        """What a reviewer should look at though it did not fail: unresolved images,
        unverified provenance, images with no signature, policy near-misses."""
        manifest = self.bundle.manifest
        found: list[dict[str, str]] = [
            {"kind": "policy near-miss", "subject": r.rule, "message": r.near_miss}
            for r in self.policy
            if r.passed and r.near_miss
        ]
        if manifest is None:
            return found
        for c in manifest.contents:
            subject = f"{c.kind}/{c.name} {c.version}"
            found += [
                {"kind": "unresolved image", "subject": subject, "message": w} for w in c.warnings
            ]
            found += [
                {"kind": "unverified provenance", "subject": subject, "message": p}
                for p in c.provenance
            ]
        signed = {a.image for a in manifest.artifacts if a.kind == "signature"}
        unsigned = [i.reference for i in manifest.images if i.reference not in signed]
        if unsigned and manifest.images:
            found.append(
                {
                    "kind": "unsigned images",
                    "subject": f"{len(unsigned)} of {len(manifest.images)} images",
                    "message": "carry no signature from upstream: their provenance is "
                    "not vouched for beyond this bundle's own signature",
                }
            )
        found += [
            {"kind": "index signature", "subject": i.reference, "message": INDEX_SIGNATURE_NOTE}
            for i in filtered_signed_indexes(manifest)
        ]
        return found


def inventory_json(manifest: BundleManifest) -> dict[str, Any]:
    """Providers and images as ``inspect --format json`` and the verify report show them."""
    attached = _attached_by_image(manifest)
    signed_sources = {image.reference for image in filtered_signed_indexes(manifest)}
    content_files = {path for c in manifest.contents for path in c.files}
    digests = {f.path: f"sha256:{f.sha256}" for f in manifest.files if f.path in content_files}
    return {
        "formatVersion": manifest.format_version,
        "created": manifest.created,
        "toolVersion": manifest.tool_version,
        "size": manifest.total_size,
        "providers": [
            {
                "name": p.name,
                "type": p.type,
                "version": p.version,
                "contract": p.contract,
                "source": p.source,
                "images": p.images,
                **({"image": provider_image_json(p.image)} if p.image else {}),
            }
            for p in manifest.providers
        ],
        "contents": [
            {
                "kind": c.kind,
                "name": c.name,
                "version": c.version,
                "source": c.source,
                "files": c.files,
                # what a reviewer pins a chart, its values and a manifest by
                "fileDigests": {path: digests[path] for path in c.files if path in digests},
                "images": c.images,
                "warnings": c.warnings,
                **({"provenance": c.provenance} if c.provenance else {}),
                **({"render": _render_json(c.render)} if c.render is not None else {}),
                # the chart's values and render settings as signed: one digest to pin
                **(
                    {"valuesDigest": f"sha256:{hashlib.sha256(c.render.encode()).hexdigest()}"}
                    if c.render is not None
                    else {}
                ),
            }
            for c in manifest.contents
        ],
        "images": [
            {
                "reference": i.reference,
                "digest": i.digest,
                "mediaType": i.media_type,
                "platforms": i.platforms,
                "size": i.size,
                **({"keptWhole": i.kept_whole} if i.kept_whole else {}),
                **({"attached": attached[i.reference]} if i.reference in attached else {}),
                **_index_signature(i, signed_sources),
            }
            for i in manifest.images
        ],
        **({"delta": delta_json(manifest)} if manifest.delta is not None else {}),
    }


INDEX_SIGNATURE_NOTE = (
    "index signature cannot be verified in the mirror after the platform filter; "
    "verify children by digest or collect without --platform"
)


def filtered_signed_indexes(manifest: BundleManifest) -> list[ImageRecord]:
    """Images whose upstream index is signed but was rewritten by the platform filter.
    The signature covers the source index's bytes, which the bundle carries (verify
    checks it there) but the mirror cannot hold (a registry refuses an index whose
    children are missing), so ``cosign verify MIRROR/IMAGE:TAG`` cannot succeed for
    them; the kept children, signed by digest, still verify."""
    signed = {(a.image, a.subject) for a in manifest.artifacts if a.kind == "signature"}
    return [
        image
        for image in manifest.images
        if image.source_digest and (image.reference, image.source_digest) in signed
    ]


def _index_signature(image: ImageRecord, signed: set[str]) -> dict[str, Any]:
    if image.reference not in signed:
        return {}
    return {"indexSignature": {"subject": image.source_digest, "mirror": INDEX_SIGNATURE_NOTE}}


def delta_json(manifest: BundleManifest) -> dict[str, Any]:
    """A delta's base, have-list and every digest it relies on, with the images that
    need each one (what the target must hold before import pushes anything)."""
    delta = manifest.delta
    assert delta is not None
    users: dict[str, list[str]] = {}
    for image in manifest.images:
        for digest in image.needs:
            users.setdefault(digest, []).append(image.reference)
    return {
        "base": delta.base,
        "haveList": delta.have_list,
        "needsSize": sum(need.size for need in delta.needs),
        "needs": [
            {
                "digest": need.digest,
                "mediaType": need.media_type,
                "size": need.size,
                "images": users.get(need.digest, []),
            }
            for need in delta.needs
        ],
    }


def needs_text(manifest: BundleManifest, *, wide: bool = False) -> str:
    """What a delta relies on, per image, for the terminal ("" for a whole bundle)."""
    delta = manifest.delta
    if delta is None:
        return ""
    sizes = {need.digest: need.size for need in delta.needs}
    made = [f"base {delta.base}" if delta.base else "", "a have-list" if delta.have_list else ""]
    against = " and ".join(part for part in made if part)
    if not wide and delta.base:
        against = against.replace(delta.base, short_digest(delta.base))
    head = (
        f"Delta of {against}: relies on {len(delta.needs)} manifests and blobs "
        f"({human_size(sum(sizes.values()))}) it does not carry; the target must hold them"
    )
    rows = [
        [
            i.reference if wide else _short_reference(i.reference),
            str(len(i.needs)),
            human_size(sum(sizes.get(d, 0) for d in i.needs)),
        ]
        for i in manifest.images
        if i.needs
    ]
    if not rows:
        return head
    width = None if wide else TABLE_WIDTH
    listing = table(["IMAGE", "RELIES ON", "SIZE"], rows, max_width=width, shrink=((0, 40),))
    return f"{head}\n\n{listing}"


def _attached_by_image(manifest: BundleManifest) -> dict[str, list[dict[str, Any]]]:
    """Each image's signatures, attestations and SBOMs (``ArtifactRecord``)."""
    found: dict[str, list[dict[str, Any]]] = {}
    for artifact in manifest.artifacts:
        entry: dict[str, Any] = {
            "kind": artifact.kind,
            "via": artifact.via,
            "subject": artifact.subject,
            "digest": artifact.digest,
            "mediaType": artifact.media_type,
            "size": artifact.size,
        }
        if artifact.tag:
            entry["tag"] = artifact.tag
        if artifact.artifact_type:
            entry["artifactType"] = artifact.artifact_type
        found.setdefault(artifact.image, []).append(entry)
    return found


def provider_image_json(image: ProviderImageRecord) -> dict[str, Any]:
    """Where an image-based provider's manifests were read, as the manifest records it."""
    document: dict[str, Any] = {
        "reference": image.reference,
        "profiles": image.profiles,
        "name": image.name,
        "installOrder": image.install_order,
    }
    for key, value in (
        ("clusterctlProfile", image.clusterctl_profile),
        ("type", image.attribute_type),
        ("version", image.attribute_version),
        ("ocpPlatform", image.ocp_platform),
        ("selfImageRef", image.self_image_ref),
    ):
        if value is not None:
            document[key] = value
    if image.profile_files:
        document["profileFiles"] = image.profile_files
    return document


def inventory_tables(manifest: BundleManifest, *, wide: bool = False) -> str:
    """Providers, contents and images as aligned tables, at most ``TABLE_WIDTH`` columns
    wide (short digests, long references cut in the middle) unless ``wide``."""
    width = None if wide else TABLE_WIDTH
    providers = table(
        ["PROVIDER", "TYPE", "VERSION", "CONTRACT"],
        [[p.name, p.type, p.version, p.contract] for p in manifest.providers],
        max_width=width,
        shrink=((0, 12),),
    )
    images = table(
        ["IMAGE", "DIGEST", "PLATFORMS", "SIZE"],
        _ImageRows(manifest.images, wide),
        max_width=width,
        shrink=((0, 40), (2, 24), (0, 16)),
    )
    needs = needs_text(manifest, wide=wide)
    if needs:
        images = f"{images}\n\n{needs}"
    images += _attached_table(manifest, wide=wide)
    if not manifest.contents:
        return f"{providers}\n\n{images}"
    contents = table(
        ["CONTENT", "NAME", "VERSION", "FILES", "IMAGES"],
        [
            [c.kind, c.name, c.version, _file_names(c.files, wide), str(len(c.images))]
            for c in manifest.contents
        ],
        max_width=width,
        shrink=((3, 16),),
    )
    warnings = [
        f"  {c.kind}/{c.name} {c.version}: {w}" for c in manifest.contents for w in c.warnings
    ]
    if warnings:  # what image discovery could not resolve: never silently dropped
        contents += "\n\nUnresolved images (not carried unless listed explicitly):\n"
        contents += "\n".join(warnings)
    provenance = [
        f"  {c.kind}/{c.name} {c.version}: {p}" for c in manifest.contents for p in c.provenance
    ]
    if provenance:  # what a .prov proved, and that its signature was not checked
        contents += "\n\nChart provenance (.prov):\n" + "\n".join(provenance)
    return f"{providers}\n\n{contents}\n\n{images}"


class _ImageRows:
    """The image table's rows, made on each of ``table``'s two passes rather than held:
    a 2,000-image bundle's would be ~0.6 MiB beside the text they become."""

    def __init__(self, images: list[ImageRecord], wide: bool) -> None:
        self._images = images
        self._wide = wide

    def __iter__(self) -> Iterator[list[str]]:
        wide = self._wide
        for i in self._images:
            yield [
                i.reference if wide else _short_reference(i.reference),
                i.digest if wide else short_digest(i.digest),
                _platforms_cell(i, wide=wide),
                human_size(i.size),
            ]


def _attached_table(manifest: BundleManifest, *, wide: bool) -> str:
    """What upstream attached to the images, one row each (nothing without any)."""
    if not manifest.artifacts:
        return ""
    digests = {i.reference: i.digest for i in manifest.images}
    rows = []
    for a in manifest.artifacts:
        on = "image" if digests.get(a.image) == a.subject else a.subject
        rows.append(
            [
                a.image if wide else _short_reference(a.image),
                a.kind,
                a.via,
                on if wide or on == "image" else short_digest(on),
                a.digest if wide else short_digest(a.digest),
            ]
        )
    return "\n\n" + table(
        ["ATTACHED TO", "ATTACHED", "VIA", "SUBJECT", "DIGEST"],
        rows,
        max_width=None if wide else TABLE_WIDTH,
        shrink=((0, 40), (0, 16)),
    )


def _short_reference(reference: str) -> str:
    """A reference pinned by digest with the digest cut short (``…@sha256:0123456789ab``):
    the DIGEST column has the image's own digest."""
    name, separator, digest = reference.partition("@")
    return f"{name}@{short_digest(digest)}" if separator else reference


def _file_names(paths: list[str], wide: bool) -> str:
    """Every file's name when wide; else the first and how many more, since a list cut
    in the middle reads as one name made of two."""
    names = [path.rsplit("/", 1)[1] for path in paths]
    if wide or len(names) < 2:
        return ", ".join(names)
    return f"{names[0]} (+{len(names) - 1} more)"


def _platforms_cell(image: ImageRecord, *, wide: bool = True) -> str:
    """The platforms an image holds; an index kept whole lists them only when wide
    (``inspect --format json`` always has them)."""
    platforms = ",".join(image.platforms) or "-"
    if not image.kept_whole:
        return platforms
    return f"{platforms} (all: {image.kept_whole})" if wide else f"(all: {image.kept_whole})"


def _render_json(text: str) -> object:
    """A chart's render settings (values, release, capabilities) as the object they are,
    or as the text the record holds when that is no JSON (verify says why)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text
