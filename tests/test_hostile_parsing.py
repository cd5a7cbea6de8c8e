"""Hostile input, parsing and bounds (issue 11, families 4 to 6).

Every case feeds the real CLI something an attacker controls (a crafted bundle, spec,
policy, release server or registry) and checks the same contract: exit 1 or 2, exactly
one line on stderr, no traceback, bounded time (a subprocess timeout) and memory (peak
RSS from ``wait4``), and nothing written outside the output directory (every command
runs in an empty working directory with an empty TMPDIR, both checked afterwards).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from airgap.bundle.format import MANIFEST_NAME, SIGNATURE_NAME, BundleManifest, blob_member
from airgap.limits import MAX_EXTENDED_HEADER_BYTES
from airgap.signing import load_private_key, sign
from tests.harness import tamper
from tests.harness.bundle_fixtures import CollectedBundle
from tests.harness.hostile import (
    END,
    Outcome,
    assert_one_line,
    padded,
    pax_member,
    pax_record,
    raw_header,
    run_measured,
    sparse_file,
    struct_negative_base256,
)

INDEX_JSON = "images/index.json"
GiB = 1 << 30
# A verify of the small test bundle peaks near 40 MiB; 1 GiB headers must not show.
RSS_BOUND_MIB = 150


@dataclass(frozen=True)
class Sandbox:
    """An empty working directory and TMPDIR for one command; both must stay empty."""

    cwd: Path
    tmp: Path

    @property
    def env(self) -> dict[str, str]:
        return {"TMPDIR": str(self.tmp)}

    def run(
        self, *args: str | Path, env: dict[str, str] | None = None, timeout: float = 60
    ) -> Outcome:
        outcome = run_measured(
            *args, env={**self.env, **(env or {})}, cwd=self.cwd, timeout=timeout
        )
        assert list(self.cwd.iterdir()) == [], list(self.cwd.iterdir())
        assert list(self.tmp.iterdir()) == [], list(self.tmp.iterdir())
        return outcome


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    (tmp_path / "cwd").mkdir()
    (tmp_path / "tmp").mkdir()
    return Sandbox(tmp_path / "cwd", tmp_path / "tmp")


@pytest.fixture
def work(tmp_path: Path) -> Path:
    directory = tmp_path / "work"
    directory.mkdir()
    return directory


def verify(sandbox: Sandbox, bundle: Path, key: Path, *more: str) -> Outcome:
    return sandbox.run("verify", bundle, "--key", key, *more)


def _members(bundle: Path) -> list[tamper.TarMember]:
    return tamper.read_members(bundle)


def _member(bundle: Path, name: str) -> bytes:
    return next(m.data for m in _members(bundle) if m.name == name)


def _head_bytes(bundle: Path) -> bytes:
    """The bytes of the first two members (headers and padded payloads)."""
    spans = tamper.spans(bundle)
    return bundle.read_bytes()[: spans[SIGNATURE_NAME].end]


# == family 4: tar headers ====================================================================


def test_negative_pax_size_in_the_first_member_is_refused(
    sandbox: Sandbox, work: Path, capi_bundle: CollectedBundle
) -> None:
    """CPython 3.11's tarfile loops forever on this (CVE-2025-8194)."""
    bundle = work / "neg.tar"
    bundle.write_bytes(pax_member(pax_record("size", "-1024"), MANIFEST_NAME.encode(), b"{}") + END)
    outcome = verify(sandbox, bundle, capi_bundle.key.public)
    assert_one_line(outcome, (1,), "NOT verified", "not a readable tar archive", "invalid size")


def test_negative_pax_size_after_the_signed_head_is_refused(
    sandbox: Sandbox, work: Path, capi_bundle: CollectedBundle
) -> None:
    head = _head_bytes(capi_bundle.path)
    hostile = pax_member(pax_record("size", "-1"), b"images/blobs/sha256/x", b"payload")
    bundle = work / "neg-later.tar"
    bundle.write_bytes(head + hostile + capi_bundle.path.read_bytes()[len(head) :])
    outcome = verify(sandbox, bundle, capi_bundle.key.public, "--format", "json")
    assert_one_line(outcome, (1,), "cannot be read past member 2", "invalid size")
    report = json.loads(outcome.stdout)
    assert report["verified"] is False
    # the same bundle through import: refused before any registry is contacted
    imported = sandbox.run(
        "import",
        bundle,
        "--key",
        capi_bundle.key.public,
        "--registry",
        "127.0.0.1:9/x",
        "--output-dir",
        work / "out",
    )
    assert_one_line(imported, (1,), "failed verification", "invalid size")
    assert not (work / "out").exists()


@pytest.mark.parametrize("kind", [b"x", b"L"], ids=["pax", "gnu-long-name"])
def test_a_gigabyte_extended_header_in_a_sparse_file_is_refused_in_bounded_memory(
    kind: bytes, sandbox: Sandbox, work: Path, capi_bundle: CollectedBundle
) -> None:
    """24 KB on disk, a 1 GiB extended header on paper: refused before a byte of it is
    read (the cap is 1 MiB), in the memory of any other verify."""
    header = raw_header(b"././@LongLink", size=GiB, kind=kind)
    bundle = sparse_file(work / "huge.tar", header + b"x" * 24_000, GiB + 64 * 1024)
    assert bundle.stat().st_blocks * 512 < 1 << 20  # really sparse
    outcome = verify(sandbox, bundle, capi_bundle.key.public)
    line = assert_one_line(outcome, (1,), "not a readable tar archive", "extended header")
    assert f"{MAX_EXTENDED_HEADER_BYTES >> 20} MiB limit" in line
    assert outcome.max_rss_mib < RSS_BOUND_MIB, outcome.max_rss_mib


def test_negative_base256_size_and_sizes_beyond_the_file_are_refused(
    sandbox: Sandbox, work: Path, capi_bundle: CollectedBundle
) -> None:
    negative = work / "base256.tar"
    negative.write_bytes(
        raw_header(MANIFEST_NAME.encode(), size_field=struct_negative_base256(-512)) + END
    )
    assert_one_line(verify(sandbox, negative, capi_bundle.key.public), (1,), "negative size")

    beyond = work / "beyond.tar"
    beyond.write_bytes(raw_header(MANIFEST_NAME.encode(), size=10 * GiB) + b"{}" + END)
    line = assert_one_line(verify(sandbox, beyond, capi_bundle.key.public), (1,), "truncated")
    assert f"of {10 * GiB} bytes" in line


def test_malformed_pax_records_and_global_headers_are_refused(
    sandbox: Sandbox, work: Path, capi_bundle: CollectedBundle
) -> None:
    cases = {
        "length-lies": b"999 path=x\n",
        "no-equals": pax_record("path", "x").replace(b"=", b" "),
        "garbage": b"\xff" * 100,
    }
    for name, records in cases.items():
        bundle = work / f"{name}.tar"
        bundle.write_bytes(pax_member(records, MANIFEST_NAME.encode(), b"{}") + END)
        outcome = verify(sandbox, bundle, capi_bundle.key.public)
        assert_one_line(outcome, (1,), "PAX header at byte 0")
    global_header = work / "global.tar"
    global_header.write_bytes(
        raw_header(b"pax_global_header", size=20, kind=b"g")
        + padded(pax_record("comment", "x"))
        + END
    )
    outcome = verify(sandbox, global_header, capi_bundle.key.public)
    assert_one_line(outcome, (1,), "global PAX header")


# == family 4: what a bundle path may be ===========================================================


def test_a_bundle_must_be_a_regular_file(
    sandbox: Sandbox, work: Path, capi_bundle: CollectedBundle
) -> None:
    fifo = work / "pipe.tar"
    os.mkfifo(fifo)
    cases = {
        "/dev/zero": "a device",
        "/dev/null": "a device",
        str(fifo): "a FIFO",  # opening a FIFO for reading blocks until a writer comes
        str(work): "a directory",
    }
    for path, kind in cases.items():
        for command in (
            ["verify", path, "--key", capi_bundle.key.public],
            ["inspect", path],
            ["import", path, "--key", capi_bundle.key.public, "--registry", "127.0.0.1:9/x"],
        ):
            outcome = sandbox.run(*command, timeout=30)
            assert_one_line(outcome, (2,), path, f"is {kind}")


# == family 4: JSON in the signed manifest, index.json and image manifests ==================


def _resigned_manifest(capi_bundle: CollectedBundle, out: Path, manifest: bytes) -> Path:
    """The good bundle with its manifest replaced by ``manifest``, signed by the
    trusted key: only parsing can object."""
    members = _members(capi_bundle.path)
    members[0].data = manifest
    members[1].data = sign(load_private_key(capi_bundle.key.private), manifest)
    return tamper.write_members(out, members)


def test_deep_or_mistyped_signed_manifests_are_one_line_errors(
    sandbox: Sandbox, work: Path, capi_bundle: CollectedBundle
) -> None:
    good = json.loads(_member(capi_bundle.path, MANIFEST_NAME))

    def edited(**changes: object) -> bytes:
        return json.dumps({**good, **changes}).encode()

    files = [dict(f) for f in good["files"]]
    files[3]["size"] = "abc"
    providers = [dict(p) for p in good["providers"]]
    providers[0]["images"] = 5
    cases = {
        "nested": (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 64 levels"),
        "nested-object": (b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "nested deeper"),
        "size-abc": (edited(files=files), "files[3].size: expected a non-negative integer"),
        "providers-object": (edited(providers={}), "providers: expected a list"),
        "images-not-a-list": (edited(providers=providers), "providers[0].images: expected a list"),
        "format-string": (edited(formatVersion="1"), "unsupported bundle format version '1'"),
        "duplicate-key": (
            _member(capi_bundle.path, MANIFEST_NAME).replace(b"{", b'{"created": "x", ', 1),
            "appears twice",
        ),
        "not-json": (b"\xff\xfe not json", "not valid JSON"),
    }
    for name, (manifest, needle) in cases.items():
        bundle = _resigned_manifest(capi_bundle, work / f"{name}.tar", manifest)
        outcome = verify(sandbox, bundle, capi_bundle.key.public)
        assert_one_line(outcome, (1,), MANIFEST_NAME, needle)
        assert outcome.max_rss_mib < RSS_BOUND_MIB
        # inspect reads the same bytes through the same parser
        inspected = sandbox.run("inspect", bundle)
        assert_one_line(inspected, (1,), needle)


def _resigned_member(capi_bundle: CollectedBundle, out: Path, replace: dict[str, bytes]) -> Path:
    return tamper.resign(capi_bundle.path, out, capi_bundle.key.private, replace=replace)


def test_deep_or_mistyped_index_json_is_a_finding_not_a_traceback(
    sandbox: Sandbox, work: Path, capi_bundle: CollectedBundle
) -> None:
    index = json.loads(_member(capi_bundle.path, INDEX_JSON))
    mistyped = json.loads(json.dumps(index))
    mistyped["manifests"][0]["size"] = "abc"
    cases = {
        "nested": (b'{"manifests": ' + b"[" * 10_000 + b"]" * 10_000 + b"}", "nested deeper"),
        "size-abc": (json.dumps(mistyped).encode(), "manifests[0].size: expected a non-negative"),
        "annotations-list": (
            json.dumps(
                {**index, "manifests": [{**index["manifests"][0], "annotations": [1]}]}
            ).encode(),
            "annotations: expected an object",
        ),
    }
    for name, (data, needle) in cases.items():
        bundle = _resigned_member(capi_bundle, work / f"{name}.tar", {INDEX_JSON: data})
        outcome = verify(sandbox, bundle, capi_bundle.key.public, "--format", "json")
        assert_one_line(outcome, (1,), "NOT verified", INDEX_JSON)
        report = json.loads(outcome.stdout)
        assert any(
            f["subject"] == INDEX_JSON and needle in f["message"] for f in report["failures"]
        ), report["failures"]


def test_mistyped_image_manifest_descriptors_are_findings(
    sandbox: Sandbox, work: Path, capi_bundle: CollectedBundle
) -> None:
    """The app's manifest with ``size: "abc"`` in a layer, re-signed consistently."""
    app = next(i for i in capi_bundle.manifest.images if i.reference.endswith("/app:v1"))
    original = json.loads(_member(capi_bundle.path, blob_member(app.digest)))
    original["layers"][0]["size"] = "abc"
    data = json.dumps(original).encode()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    index = json.loads(_member(capi_bundle.path, INDEX_JSON))
    for entry in index["manifests"]:
        if entry["digest"] == app.digest:
            entry["digest"], entry["size"] = digest, len(data)

    def edit(manifest: BundleManifest) -> BundleManifest:
        images = [
            dataclasses.replace(i, digest=digest) if i.digest == app.digest else i
            for i in manifest.images
        ]
        return dataclasses.replace(manifest, images=images)

    old = blob_member(app.digest)
    bundle = tamper.resign(
        capi_bundle.path,
        work / "size-abc.tar",
        capi_bundle.key.private,
        replace={old: data, INDEX_JSON: json.dumps(index).encode()},
        rename={old: blob_member(digest)},
        edit=edit,
    )
    outcome = verify(sandbox, bundle, capi_bundle.key.public, "--format", "json")
    assert_one_line(outcome, (1,), "NOT verified", app.reference)
    report = json.loads(outcome.stdout)
    assert any(
        "layers[0].size: expected a non-negative integer" in f["message"]
        for f in report["failures"]
    ), report["failures"]


# == family 4: YAML =================================================================================

NESTED_YAML = "a: " + "[" * 5000 + "]" * 5000 + "\n"
LAUGHS = "\n".join(
    [f"l0: &l0 [{', '.join(['lol'] * 9)}]"]
    + [f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]" for n in range(1, 9)]
    + ["providers: *l8", ""]
)


def test_nested_yaml_and_alias_bombs_in_specs_and_policies(
    sandbox: Sandbox, work: Path, capi_bundle: CollectedBundle
) -> None:
    key = capi_bundle.key
    for name, text, needle in (
        ("nested", NESTED_YAML, "nested deeper than 64 levels"),
        ("laughs", LAUGHS, "expands to more than"),
        ("block-nested", "".join("  " * i + "- \n" for i in range(300)), "nested deeper"),
    ):
        spec = work / f"{name}-spec.yaml"
        spec.write_text(text)
        outcome = sandbox.run("collect", spec, "--sign-key", key.private, "-o", work / "o.tar")
        assert_one_line(outcome, (2,), str(spec), needle)
        assert not (work / "o.tar").exists()
        policy = work / f"{name}-policy.yaml"
        policy.write_text(text)
        outcome = sandbox.run("verify", capi_bundle.path, "--key", key.public, "--policy", policy)
        assert_one_line(outcome, (2,), str(policy), needle)
        assert outcome.max_rss_mib < RSS_BOUND_MIB
    for special, kind in (("/dev/zero", "a device"), (str(work), "a directory")):
        outcome = sandbox.run("collect", special, "--sign-key", key.private, "-o", work / "o.tar")
        assert_one_line(outcome, (2,), special, f"is {kind}")


def test_nested_metadata_in_a_signed_bundle_is_a_provider_finding(
    sandbox: Sandbox, work: Path, capi_bundle: CollectedBundle
) -> None:
    provider = capi_bundle.manifest.providers[0]
    bundle = _resigned_member(
        capi_bundle, work / "nested-metadata.tar", {provider.metadata: NESTED_YAML.encode()}
    )
    outcome = verify(sandbox, bundle, capi_bundle.key.public, "--format", "json")
    assert_one_line(outcome, (1,), "NOT verified")
    report = json.loads(outcome.stdout)
    assert any(
        f["kind"] == "provider" and "nested deeper than 64 levels" in f["message"]
        for f in report["failures"]
    ), report["failures"]


def test_nothing_past_the_manifest_is_parsed_before_the_signature_verifies(
    sandbox: Sandbox, work: Path, capi_bundle: CollectedBundle
) -> None:
    """Signed by an untrusted key: a 10 MB metadata.yaml that would be a finding (and
    slow) if parsed, and a mistyped index.json, yield the signature failure alone."""
    untrusted, _ = tamper.new_key(work)
    provider = capi_bundle.manifest.providers[0]
    huge = (
        "releaseSeries:\n" + "  - {major: 1, minor: 9, contract: v1beta1}\n" * 250_000
    ) + NESTED_YAML
    assert len(huge) > 10_000_000
    bundle = tamper.resign(
        capi_bundle.path,
        work / "untrusted.tar",
        untrusted,
        replace={provider.metadata: huge.encode(), INDEX_JSON: b'{"manifests": "x"}'},
    )
    outcome = verify(
        sandbox,
        bundle,
        capi_bundle.key.public,
        "--format",
        "json",
    )
    assert_one_line(outcome, (1,), "NOT verified", SIGNATURE_NAME, "untrusted key")
    report = json.loads(outcome.stdout)
    assert [f["kind"] for f in report["failures"]] == ["signature"], report["failures"]
    assert report["providers"] == [] and report["images"] == []
