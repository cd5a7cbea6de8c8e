"""The review report (``verify --report``) of a 500-image bundle: its size, and how long
Chromium takes to open it.

    .venv/bin/python benchmarks/review_report.py [--images 500] [--repeats 5] [--out DIR]

Issue 47 asks that a 500-image bundle's report stay under 2 MiB and open in under a
second. Building and verifying a real 500-image bundle takes minutes and says nothing
more about the page, so the report's document is built here from a synthetic manifest
(500 images of three platforms each, every other one signed with an attestation beside,
10 providers, 4 content sets, and a base of the same bundle with a tenth of its images
replaced) through the code ``verify`` uses: ``inventory_json`` for the contents,
``airgap.bundle.diff`` for the change, ``review.render`` for the page. Only the
top-level verdict fields are filled in by hand.

Opening is measured in Debian's headless ``chromium`` (offline, ``file://``, a fresh
profile, a 1280x1800 screenshot so that layout and paint are included): the median of
``--repeats`` runs of the whole browser (start, parse, style, script, layout, paint,
screenshot, exit), and the same for an empty page; the difference is the report's own
cost. Prints a table and writes ``OUT/review-report.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from airgap import __version__  # noqa: E402
from airgap.bundle.diff import Side, diff  # noqa: E402
from airgap.bundle.format import (  # noqa: E402
    ArtifactRecord,
    ContentRecord,
    FileRecord,
    ImageRecord,
    ProviderRecord,
)
from airgap.bundle.manifest import BundleManifest  # noqa: E402
from airgap.verify.report import inventory_json  # noqa: E402
from airgap.verify.review import render  # noqa: E402
from tests.harness import browser  # noqa: E402

MIB = 1 << 20
PLATFORMS = ["linux/amd64", "linux/arm64/v8", "linux/s390x"]


def _digest(*parts: object) -> str:
    return "sha256:" + hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()


def _blob(seed: object, size: int) -> FileRecord:
    hexits = hashlib.sha256(str(seed).encode()).hexdigest()
    return FileRecord(f"images/blobs/sha256/{hexits}", hexits, size)


def manifest(images: int, generation: int = 0) -> BundleManifest:
    """A bundle of ``images`` images; ``generation`` 1 replaces every tenth one."""
    records, files, artifacts = [], [], []
    for n in range(images):
        version = f"v1.{n % 7}.{generation if n % 10 == 0 else 0}"
        reference = f"registry.example.com/team-{n % 25}/component-{n}:{version}"
        blobs = [_blob((reference, layer), 4 * MIB + n * 1000 + layer) for layer in range(3)]
        files += blobs
        records.append(
            ImageRecord(
                reference=reference,
                digest=_digest(reference),
                media_type="application/vnd.oci.image.index.v1+json",
                platforms=PLATFORMS,
                size=sum(b.size for b in blobs),
            )
        )
        if n % 2 == 0:
            for kind in ("signature", "attestation"):
                artifacts.append(
                    ArtifactRecord(
                        image=reference,
                        subject=_digest(reference),
                        kind=kind,
                        via="tag" if kind == "signature" else "referrers",
                        digest=_digest(reference, kind),
                        media_type="application/vnd.oci.image.manifest.v1+json",
                        size=1200,
                    )
                )
    references = [r.reference for r in records]
    providers = [
        ProviderRecord(
            name=f"provider-{n}",
            type="InfrastructureProvider" if n else "CoreProvider",
            version=f"v1.{n}.{generation}",
            contract="v1beta2",
            label=f"infrastructure-provider-{n}",
            source=f"https://github.com/example/provider-{n}/releases",
            metadata=f"providers/provider-{n}/metadata.yaml",
            components=f"providers/provider-{n}/components.yaml",
            images=references[n * 20 : n * 20 + 20],
        )
        for n in range(10)
    ]
    files += [
        FileRecord(p.components, hashlib.sha256(p.name.encode()).hexdigest(), MIB)
        for p in providers
    ]
    contents = [
        ContentRecord(
            kind=kind,
            name=name,
            version="v1.0.0",
            source=f"https://example.com/{name}",
            files=[f"content/{name}/{name}.yaml"],
            images=references[200 + n * 30 : 230 + n * 30],
            warnings=["image in {{ .Values.image }} could not be resolved"]
            if kind == "charts"
            else [],
        )
        for n, (kind, name) in enumerate(
            [
                ("certManager", "cert-manager"),
                ("operator", "cluster-api-operator"),
                ("charts", "ingress"),
                ("manifests", "cni"),
            ]
        )
    ]
    files += [
        FileRecord(c.files[0], hashlib.sha256(c.name.encode()).hexdigest(), 300_000)
        for c in contents
    ]
    return BundleManifest(
        created="2026-11-20T10:00:00Z",
        tool_version=__version__,
        providers=providers,
        images=records,
        files=files,
        contents=contents,
        artifacts=artifacts,
    )


def document(images: int) -> dict[str, Any]:
    """What ``verify --base --format json`` prints for such a bundle."""
    new, old = manifest(images, 1), manifest(images, 0)
    change = diff(Side("base.tar", _digest("old"), old), Side("bundle.tar", _digest("new"), new))
    return {
        "bundle": "bundle.tar",
        "verified": True,
        "signature": "SHA256:" + "A" * 43,
        "signatureChecked": True,
        "policyPassed": True,
        **inventory_json(new),
        "failures": [],
        "policy": [],
        "verdict": f"Bundle verified: {images} images",
        "manifestDigest": _digest("new"),
        "bundleSize": new.total_size,
        "policyGiven": False,
        "notChecked": ["No policy (--policy)."],
        "warnings": [],
        "change": change.to_json(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out")
    args = parser.parse_args()
    if not browser.available():
        print("review_report: needs Debian's chromium", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="airgap-review-bench-") as work:
        page = Path(work) / "review.html"
        page.write_text(render(document(args.images), generated="now", tool=__version__))
        empty = Path(work) / "empty.html"
        empty.write_text("<!DOCTYPE html><title>empty</title>")
        size = page.stat().st_size
        report_runs, empty_runs = [], []
        for _ in range(args.repeats):  # alternating, so that load on the machine hits both
            loaded = browser.load(page, Path(work) / "report.png", width=1280, height=1800)
            assert 'data-script="ready"' in loaded.dom
            report_runs.append(loaded.seconds)
            empty_runs.append(browser.load(empty, Path(work) / "empty.png").seconds)
    result = {
        "images": args.images,
        "bytes": size,
        "mib": round(size / MIB, 3),
        "repeats": args.repeats,
        "chromium_report_s": round(statistics.median(report_runs), 3),
        "chromium_empty_s": round(statistics.median(empty_runs), 3),
        "report_cost_s": round(statistics.median(report_runs) - statistics.median(empty_runs), 3),
    }
    (args.out / "review-report.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"review report of {args.images} images: {size} bytes ({result['mib']} MiB)")
    print(
        f"chromium, whole run (median of {args.repeats}): report {result['chromium_report_s']} s, "
        f"empty page {result['chromium_empty_s']} s: the report's own cost "
        f"{result['report_cost_s']} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
