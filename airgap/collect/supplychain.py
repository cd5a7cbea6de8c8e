"""Collect's part of the supply-chain policy: carry the trust material, and refuse to
sign a bundle that ``airgap verify`` would refuse under the same policy.

``collect --policy FILE`` evaluates the whole policy over the bundle it is about to
write (the manifest, the signatures and payloads already in memory) before anything
is signed or written; a failure names each image and the reason. The Fulcio roots and
Rekor keys a ``requireSignatures`` rule names travel in the bundle (``trust/``), so
verify can run the same keyless check offline without being given them again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airgap.bundle.format import TrustRecord, blob_member
from airgap.bundle.manifest import BundleManifest
from airgap.collect.images import ResolvedImage
from airgap.core.errors import AirgapError
from airgap.verify.artifacts import TRUST_FILES

if TYPE_CHECKING:
    from airgap.verify.policy import Policy


def trust_material(policy: Policy | None) -> list[tuple[TrustRecord, bytes]]:
    """The trust files to carry, with their records (none without such a policy)."""
    rule = policy.require_signatures if policy is not None else None
    if rule is None:
        return []
    found = []
    for kind, data in (("fulcioRoots", rule.fulcio_roots), ("rekorKeys", rule.rekor_keys)):
        if data:
            found.append((TrustRecord(kind, TRUST_FILES[kind]), data))
    return found


def check_before_signing(
    policy: Policy | None,
    manifest: BundleManifest,
    images: list[ResolvedImage],
    trust: list[tuple[TrustRecord, bytes]],
) -> None:
    """Every rule of ``policy`` over the bundle about to be signed; AirgapError naming
    what failed, so nothing is signed or written."""
    if policy is None:
        return
    from airgap.verify.policy import evaluate  # loaded with the policy (collector.collect)

    members = {record.path: data for record, data in trust}
    for image in images:
        for digest, data in image.inline_blobs().items():
            members[blob_member(digest)] = data

    def read(name: str) -> bytes:
        return members[name]  # KeyError: not in memory (a layer), never a signature

    failed = [result for result in evaluate(policy, manifest, read=read) if not result.passed]
    if failed:
        reasons = "; ".join(f"{result.rule}: {', '.join(result.offending)}" for result in failed)
        raise AirgapError(f"the bundle fails the policy, nothing was written: {reasons}")
