"""Checks over what a delta bundle says it relies on (``DeltaRecord``, images' needs).

A delta carries only what its base (or a have-list) did not; every manifest and blob
it leaves out is listed once in ``delta.needs`` with its size and media type, and under
each image whose tree holds it. The layout check accepts a missing member only when it
is one of its image's needs, with the size the descriptor gives; here the lists are
checked against each other: well-formed digests, nothing listed twice, nothing both
carried and relied on, every image's need listed and every listed need used. A bundle
that is not a delta relies on nothing.
"""

from __future__ import annotations

import re

from airgap.bundle.format import IMAGES_DIR, NeedRecord
from airgap.bundle.manifest import BundleManifest
from airgap.core.names import digest_problem, shown
from airgap.verify.findings import Failure

MAX_MEDIA_TYPE = 255
# RFC 6838 type/subtype, as media types in descriptors are written (no parameters)
_MEDIA_TYPE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*")


def check_delta(manifest: BundleManifest) -> list[Failure]:
    delta = manifest.delta
    if delta is None:
        return [
            Failure("image", image.reference, "relies on digests but the bundle is not a delta")
            for image in manifest.images
            if image.needs
        ]
    failures = [
        Failure("delta", name, problem)
        for name, value in (("base", delta.base), ("haveList", delta.have_list))
        if value is not None
        for problem in (digest_problem(value),)
        if problem
    ]
    if delta.base is None and delta.have_list is None:
        failures.append(Failure("delta", "delta", "names neither a base bundle nor a have-list"))
    carried = {f.path for f in manifest.files if f.path.startswith(f"{IMAGES_DIR}/blobs/")}
    needs: dict[str, NeedRecord] = {}
    for number, need in enumerate(delta.needs):
        problem = _need_problem(need, carried)
        if problem is None and need.digest in needs:
            problem = "is listed twice"
        if problem:
            failures.append(Failure("delta", f"needs[{number}]", problem))
            continue
        needs[need.digest] = need
    used: set[str] = set()
    for image in manifest.images:
        if len(set(image.needs)) != len(image.needs):
            failures.append(Failure("image", image.reference, "lists a need twice"))
        for digest in image.needs:
            if digest not in needs:
                failures.append(
                    Failure(
                        "image",
                        image.reference,
                        f"relies on {shown(digest)}, which delta.needs does not list",
                    )
                )
            used.add(digest)
    failures += [
        Failure("delta", digest, "is relied on by no image")
        for digest in sorted(needs.keys() - used)
    ]
    return failures


def _need_problem(need: NeedRecord, carried: set[str]) -> str | None:
    problem = digest_problem(need.digest)
    if problem:
        return problem
    if not need.digest.startswith("sha256:"):
        return f"digest {shown(need.digest)}: bundles hold sha256 blobs only"
    if f"{IMAGES_DIR}/blobs/sha256/{need.digest[7:]}" in carried:
        return f"{need.digest} is both carried and relied on"
    if len(need.media_type) > MAX_MEDIA_TYPE or not _MEDIA_TYPE_RE.fullmatch(need.media_type):
        return f"media type {shown(need.media_type)} of {need.digest} is not type/subtype"
    return None
