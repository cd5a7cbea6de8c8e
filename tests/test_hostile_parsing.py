"""Hostile input, parsing and bounds (issue 11, families 4 to 6).

Every case feeds the real CLI something an attacker controls (a crafted bundle, spec,
policy, release server or registry) and checks the same contract: exit 1 or 2, exactly
one line on stderr, no traceback, bounded time (a subprocess timeout) and memory (peak
RSS, sampled), and nothing written outside the output directory (every command
runs in an empty working directory with an empty TMPDIR, both checked afterwards).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import gzip
import hashlib
import json
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from airgap.bundle.format import MANIFEST_NAME, SIGNATURE_NAME, ImageRecord, blob_member
from airgap.bundle.manifest import BundleManifest
from airgap.bundle.signing import load_private_key, sign
from airgap.core.limits import MAX_EXTENDED_HEADER_BYTES, MAX_MANIFEST_BYTES
from tests.harness import tamper
from tests.harness.bundle_fixtures import CollectedBundle, SigningKey
from tests.harness.cli import collect_args
from tests.harness.hostile import (
    END,
    Handler,
    HostileServer,
    LiarRegistry,
    Outcome,
    Request,
    TinyRegistry,
    Wire,
    assert_one_line,
    hostile_server,
    padded,
    pax_member,
    pax_record,
    raw_header,
    run_measured,
    send_signal_when,
    sparse_file,
    start_airgap,
    struct_negative_base256,
    wait_measured,
)

pytestmark = pytest.mark.e2e

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
        if kind != "a directory":  # click refuses directories itself
            keyed = sandbox.run("verify", capi_bundle.path, "--key", path, timeout=30)
            assert_one_line(keyed, (2,), f"public key {path} is {kind}")


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
    good = json.loads(tamper.member_data(capi_bundle.path, MANIFEST_NAME))

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
            tamper.member_data(capi_bundle.path, MANIFEST_NAME).replace(
                b"{", b'{"created": "x", ', 1
            ),
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
    index = json.loads(tamper.member_data(capi_bundle.path, INDEX_JSON))
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


def _swapped_manifest(
    capi_bundle: CollectedBundle, out: Path, image: ImageRecord, data: bytes
) -> Path:
    """The good bundle with ``image``'s manifest replaced by ``data`` everywhere (blob,
    index.json, manifest record), re-signed by the trusted key: only the layout checks
    can object."""
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    index = json.loads(tamper.member_data(capi_bundle.path, INDEX_JSON))
    for entry in index["manifests"]:
        if entry["digest"] == image.digest:
            entry["digest"], entry["size"] = digest, len(data)

    def edit(manifest: BundleManifest) -> BundleManifest:
        images = [
            dataclasses.replace(i, digest=digest) if i.digest == image.digest else i
            for i in manifest.images
        ]
        return dataclasses.replace(manifest, images=images)

    old = blob_member(image.digest)
    return tamper.resign(
        capi_bundle.path,
        out,
        capi_bundle.key.private,
        replace={old: data, INDEX_JSON: json.dumps(index).encode()},
        rename={old: blob_member(digest)},
        edit=edit,
    )


def test_mistyped_image_manifest_descriptors_are_findings(
    sandbox: Sandbox, work: Path, capi_bundle: CollectedBundle
) -> None:
    """The app's manifest with ``size: "abc"`` in a layer, re-signed consistently."""
    app = next(i for i in capi_bundle.manifest.images if i.reference.endswith("/app:v1"))
    original = json.loads(tamper.member_data(capi_bundle.path, blob_member(app.digest)))
    original["layers"][0]["size"] = "abc"
    bundle = _swapped_manifest(
        capi_bundle, work / "size-abc.tar", app, json.dumps(original).encode()
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


# A value PyYAML cannot build: int() refuses more than 4,300 digits, and no month 13.
UNBUILDABLE = (("9" * 5000, "integer longer than 128 characters"), ("2020-13-45", "month"))


def test_values_yaml_cannot_build_are_one_line_errors_not_tracebacks(
    sandbox: Sandbox, work: Path, capi_bundle: CollectedBundle
) -> None:
    key = capi_bundle.key
    provider = capi_bundle.manifest.providers[0]
    metadata = yaml.safe_load(tamper.member_data(capi_bundle.path, provider.metadata))
    for number, (value, needle) in enumerate(UNBUILDABLE):
        policy = work / f"policy-{number}.yaml"
        policy.write_text(f"allowedRegistries: [registry.k8s.io]\nmaxAge: {value}\n")
        outcome = sandbox.run("verify", capi_bundle.path, "--key", key.public, "--policy", policy)
        assert_one_line(outcome, (2,), f"{policy}:2:9: malformed YAML", needle)
        # the same value in a provider's metadata.yaml, signed: a finding naming its line
        series = metadata["releaseSeries"]
        edited = {**metadata, "releaseSeries": [{**series[0], "major": "MAJOR"}, *series[1:]]}
        text = yaml.safe_dump(edited).replace("major: MAJOR", f"major: {value}").encode()
        bundle = _resigned_member(capi_bundle, work / f"m{number}.tar", {provider.metadata: text})
        outcome = verify(sandbox, bundle, key.public, "--format", "json")
        assert_one_line(outcome, (1,), "NOT verified")
        failures = json.loads(outcome.stdout)["failures"]
        assert any(
            f["kind"] == "provider"
            and "malformed YAML at line" in f["message"]
            and needle in f["message"]
            for f in failures
        ), failures


def test_messages_quote_outside_input_briefly(
    sandbox: Sandbox, work: Path, capi_bundle: CollectedBundle
) -> None:
    """A value echoed in a message is cut short (80 characters), and the CLI bounds any
    error line; a file passed as the spec by mistake (a key, a token file: it may hold
    secrets) is described, and not one character of it is printed."""
    key = capi_bundle.key
    token = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789"
    for name, text in (
        ("token.txt", "token-" + "s" * 20_000),
        ("token.env", f"GITHUB_TOKEN={token}"),
        ("signing.key", key.private.read_text()),
    ):
        spec = work / name
        spec.write_text(text + "\n")
        outcome = sandbox.run("collect", spec, "--sign-key", key.private, "-o", work / "o.tar")
        line = assert_one_line(outcome, (2,), f"{spec}:1: must be a mapping, not text")
        secrets = ("token-", token, "GITHUB_TOKEN", "PRIVATE KEY", *text.splitlines()[1:2])
        assert not any(secret in line for secret in secrets), line
    provider = capi_bundle.manifest.providers[0]
    metadata = yaml.safe_load(tamper.member_data(capi_bundle.path, provider.metadata))
    metadata["releaseSeries"][0]["major"] = ["x" * 100] * 3000
    bundle = _resigned_member(
        capi_bundle, work / "long.tar", {provider.metadata: yaml.safe_dump(metadata).encode()}
    )
    outcome = verify(sandbox, bundle, key.public, "--format", "json")
    failures = json.loads(outcome.stdout)["failures"]
    messages = [f["message"] for f in failures if "must be a non-negative integer" in f["message"]]
    assert messages and all(len(m) < 400 for m in messages), failures
    long_path = work.joinpath(*["x" * 200] * 8, "bundle.tar")  # 1,600+ characters
    outcome = sandbox.run("inspect", long_path)
    line = assert_one_line(outcome, (2,), "more characters)")
    assert len(line) <= len("airgap: error: ") + 1000 + len("... (99999 more characters)"), line


ESCAPES = "\x1b[2J\x1b]0;owned\x07\x1b[31m"  # clear the screen, set the title, red


def test_terminal_escapes_in_a_bundle_are_shown_never_obeyed(
    sandbox: Sandbox, work: Path, capi_bundle: CollectedBundle
) -> None:
    """inspect, diff and a failed verify print fields of bundles nobody has verified: a
    field holding escape sequences must reach the terminal as text (``\\x1b[2J``)."""

    def edit(manifest: BundleManifest) -> BundleManifest:
        provider = dataclasses.replace(
            manifest.providers[0], contract=f"v1beta1{ESCAPES}", source=f"https://x/{ESCAPES}"
        )
        image = dataclasses.replace(manifest.images[0], platforms=[f"linux/amd64{ESCAPES}"])
        return dataclasses.replace(
            manifest,
            created=f"2026-11-24T00:00:00Z{ESCAPES}",
            tool_version=f"0.1.0{ESCAPES}",
            providers=[provider, *manifest.providers[1:]],
            images=[image, *manifest.images[1:]],
        )

    hostile = tamper.resign(
        capi_bundle.path, work / "escapes.tar", capi_bundle.key.private, edit=edit
    )
    shown = ESCAPES.encode("unicode_escape").decode("ascii")
    for args in (
        ("inspect", hostile),
        ("inspect", hostile, "--wide"),
        ("diff", capi_bundle.path, hostile),
        ("verify", hostile, "--no-signature"),
        ("verify", hostile, "--key", capi_bundle.key.public),
    ):
        outcome = sandbox.run(*args)
        assert "\x1b" not in outcome.stdout + outcome.stderr, args
        assert "\x07" not in outcome.stdout + outcome.stderr, args
        assert "Traceback" not in outcome.stderr, outcome.stderr
        assert shown in outcome.stdout + outcome.stderr, (args, outcome.stdout[-2000:])


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


# == family 5: bounded work ============================================================


@pytest.fixture
def spec_for(work: Path) -> Callable[..., Path]:
    """``spec_for(server, registry=...)`` -> a spec collecting the TinyRegistry image."""

    def write(server: HostileServer, tiny: TinyRegistry | None = None, **extra: Any) -> Path:
        spec: dict[str, Any] = {"registries": {server.host: {"plainHTTP": True}}, **extra}
        if tiny is not None:
            spec["images"] = [f"{server.host}/{tiny.name}:{tiny.tag}"]
        path = work / "spec.yaml"
        path.write_text(yaml.safe_dump(spec))
        return path

    return write


def collect(
    sandbox: Sandbox, spec: Path, key: SigningKey, out: Path, env: dict[str, str] | None = None
) -> Outcome:
    outcome = sandbox.run("collect", spec, "--sign-key", key.private, "-o", out, env=env)
    assert not out.exists()
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".")] == []
    return outcome


def test_an_endless_manifest_fails_fast_naming_the_url(
    sandbox: Sandbox, work: Path, signing_key: SigningKey, spec_for: Callable[..., Path]
) -> None:
    tiny = TinyRegistry(
        on_manifest=lambda request, wire: wire.endless(
            200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}
        )
    )
    with hostile_server(tiny) as server:
        outcome = collect(sandbox, spec_for(server, tiny), signing_key, work / "b.tar")
    url = f"{server.url}/v2/{tiny.name}/manifests/{tiny.tag}"
    assert_one_line(outcome, (1,), f"GET {url}", "over the 4 MiB limit")
    assert outcome.max_rss_mib < RSS_BOUND_MIB, outcome.max_rss_mib


def test_a_5_mib_manifest_is_refused_by_collect_and_by_verify(
    sandbox: Sandbox,
    work: Path,
    signing_key: SigningKey,
    spec_for: Callable[..., Path],
    capi_bundle: CollectedBundle,
) -> None:
    """One cap, MAX_MANIFEST_BYTES, on both sides: collect never signs what verify refuses."""
    tiny = TinyRegistry()
    padding = "x" * (MAX_MANIFEST_BYTES + 1024)
    big = json.loads(tiny.manifest)
    big["annotations"] = {"padding": padding}
    data = json.dumps(big).encode()
    assert MAX_MANIFEST_BYTES < len(data) < 5 * (1 << 20) + 4096
    tiny.on_manifest = lambda request, wire: wire.send(
        200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json"}, data
    )
    with hostile_server(tiny) as server:
        outcome = collect(sandbox, spec_for(server, tiny), signing_key, work / "b.tar")
    assert_one_line(outcome, (1,), tiny.name, "over the 4 MiB limit")

    # the same manifest in a bundle signed by the trusted key
    app = next(i for i in capi_bundle.manifest.images if i.reference.endswith("/app:v1"))
    original = json.loads(tamper.member_data(capi_bundle.path, blob_member(app.digest)))
    original["annotations"] = {"padding": padding}
    bundle = _swapped_manifest(capi_bundle, work / "big.tar", app, json.dumps(original).encode())
    outcome = verify(sandbox, bundle, capi_bundle.key.public, "--format", "json")
    assert_one_line(outcome, (1,), app.reference, "implausibly large")


def _api_server(body: Handler) -> HostileServer:
    """A GitHub-Enterprise-shaped API whose releases list is answered by ``body``."""

    def handle(request: Request, wire: Wire) -> None:
        if request.path == "/api/v3/repos/o/r/releases":
            body(request, wire)
        else:
            wire.send(404, {}, b"{}")

    return HostileServer(handle)


def _provider_spec(server: HostileServer) -> dict[str, Any]:
    return {
        "providers": [
            {
                "name": "odd",
                "type": "InfrastructureProvider",
                "version": "latest",
                "url": f"{server.url}/o/r/releases",
            }
        ]
    }


@pytest.mark.parametrize(
    ("kind", "needle"),
    [
        ("endless", "over the 32 MiB limit"),
        ("gzip-bomb", "over the 32 MiB limit"),
        # release files come over airgap's own transport as registry traffic does:
        # httpx's default one read ``100 Continue`` heads for as long as they came
        ("informational", "more than 5 informational (1xx) responses"),
    ],
)
def test_an_endless_or_inflating_releases_answer_fails_fast(
    kind: str,
    needle: str,
    sandbox: Sandbox,
    work: Path,
    signing_key: SigningKey,
    spec_for: Callable[..., Path],
) -> None:
    bomb = gzip.compress(b"[" * (200 << 20), compresslevel=9)  # 200 MiB in ~200 KiB

    def answer(request: Request, wire: Wire) -> None:
        if kind == "endless":
            wire.endless(200, {"Content-Type": "application/json"})
        elif kind == "informational":
            _endless_lines(b"", b"HTTP/1.1 100 Continue\r\n\r\n")(request, wire)
        else:
            wire.send(200, {"Content-Type": "application/json", "Content-Encoding": "gzip"}, bomb)

    server = _api_server(answer)
    try:
        spec = spec_for(server, **_provider_spec(server))
        outcome = collect(sandbox, spec, signing_key, work / "b.tar")
    finally:
        server.stop()
    line = assert_one_line(outcome, (1,), f"{server.url}/api/v3/repos/o/r/releases")
    assert needle in line, line
    assert outcome.max_rss_mib < RSS_BOUND_MIB, outcome.max_rss_mib


def test_endless_token_replies_and_error_bodies_are_cut_short(
    sandbox: Sandbox, work: Path, signing_key: SigningKey, spec_for: Callable[..., Path]
) -> None:
    tiny = TinyRegistry()
    with hostile_server(tiny) as server:
        realm = f"{server.url}/token"

        def challenge(request: Request, wire: Wire) -> None:
            wire.send(401, {"WWW-Authenticate": f'Bearer realm="{realm}",service="x"'})

        def token_or_manifest(request: Request, wire: Wire) -> None:
            wire.endless(200, {"Content-Type": "application/json"})

        tiny.on_ping = challenge
        server.handler = lambda request, wire: (
            token_or_manifest(request, wire) if request.path == "/token" else tiny(request, wire)
        )
        outcome = collect(sandbox, spec_for(server, tiny), signing_key, work / "b.tar")
        assert_one_line(outcome, (1,), f"GET {realm}", "over the 1 MiB limit")

        tiny.on_ping = None
        server.handler = tiny
        tiny.on_manifest = lambda request, wire: wire.endless(404, {"Content-Type": "text/plain"})
        outcome = collect(sandbox, spec_for(server, tiny), signing_key, work / "b.tar")
        assert_one_line(outcome, (1,), f"{tiny.name}/manifests/{tiny.tag}", "HTTP 404")
        assert outcome.max_rss_mib < RSS_BOUND_MIB, outcome.max_rss_mib


def test_a_huge_auth_challenge_is_parsed_in_linear_time(
    sandbox: Sandbox, work: Path, signing_key: SigningKey, spec_for: Callable[..., Path]
) -> None:
    """A 60 KB ``WWW-Authenticate`` of one word took the challenge parser ~30 s of CPU
    (every position rescanned the rest of the word); it is one pass now."""
    tiny = TinyRegistry()
    with hostile_server(tiny) as server:
        tiny.on_ping = lambda request, wire: wire.send(
            401, {"WWW-Authenticate": "Bearer " + "a" * 60_000}
        )
        spec = spec_for(server, tiny)
        # the old parser alone took ~25 s here; a hostile test's usual bound is 60 s
        outcome = sandbox.run(
            "collect", spec, "--sign-key", signing_key.private, "-o", work / "b.tar", timeout=10
        )
        assert_one_line(outcome, (1,), server.host, "bearer challenge without realm")


@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_server_sending_one_byte_a_second_fails_in_bounded_time(
    where: str,
    sandbox: Sandbox,
    work: Path,
    signing_key: SigningKey,
    spec_for: Callable[..., Path],
) -> None:
    """The progress deadline (AIRGAP_PROGRESS_TIMEOUT, here 0.5 s, for each of the
    five attempts) catches what no idle timeout can: every read returns a byte, so the
    connection is never idle."""
    tiny = TinyRegistry()
    manifest = tiny.manifest
    head = (
        f"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\n"
        f"Content-Length: {len(manifest)}\r\n\r\n"
    ).encode()
    if where == "headers":
        tiny.on_manifest = lambda request, wire: wire.trickle(head + manifest, 0.2)
    else:

        def trickle_layer(request: Request, wire: Wire) -> None:
            length = len(tiny.layer)
            wire.sock.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {length}\r\n\r\n".encode())
            wire.trickle(tiny.layer, 0.2)

        tiny.on_layer = trickle_layer
    env = {"AIRGAP_PROGRESS_TIMEOUT": "0.5", "AIRGAP_IDLE_TIMEOUT": "5"}
    with hostile_server(tiny) as server:
        outcome = collect(sandbox, spec_for(server, tiny), signing_key, work / "b.tar", env=env)
    assert_one_line(outcome, (1,), server.host, "no progress", "AIRGAP_PROGRESS_TIMEOUT")


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_a_slow_download_stops_collect_and_leaves_nothing(
    number: int,
    sandbox: Sandbox,
    work: Path,
    signing_key: SigningKey,
    spec_for: Callable[..., Path],
) -> None:
    tiny = TinyRegistry(layer=os.urandom(1 << 20))
    layer_requested = threading.Event()

    def slow_layer(request: Request, wire: Wire) -> None:
        layer_requested.set()
        wire.sock.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {len(tiny.layer)}\r\n\r\n".encode())
        wire.trickle(tiny.layer[:1000], 0.1)

    tiny.on_layer = slow_layer
    out_dir = work / "out"
    out_dir.mkdir()
    with hostile_server(tiny) as server:
        spec = spec_for(server, tiny)
        process, logs = start_airgap(
            *collect_args(spec, signing_key.private, out_dir / "b.tar"),
            env=sandbox.env,
            cwd=sandbox.cwd,
        )

        # the bundle's temporary file and the staging directory (in TMPDIR) exist by then
        def downloading() -> bool:
            staged = len(list(sandbox.tmp.iterdir())) == 1
            return layer_requested.is_set() and len(list(out_dir.iterdir())) == 1 and staged

        send_signal_when(process, downloading, number, timeout=30)
        # "within a second or two": the grace is 1.5 s; 3 s leaves room for a busy machine
        outcome = wait_measured(process, logs, timeout=3)
    assert_one_line(outcome, (128 + number,), f"interrupted ({signal.Signals(number).name})")
    assert list(out_dir.iterdir()) == []  # no bundle, no *.tmp, no staging directory
    assert list(sandbox.cwd.iterdir()) == [] and list(sandbox.tmp.iterdir()) == []


# == family 6: trust, but verify the registry ===========================================


def import_into(
    sandbox: Sandbox, capi_bundle: CollectedBundle, host: str, out: Path, *more: str
) -> Outcome:
    return sandbox.run(
        "import", capi_bundle.path, "--key", capi_bundle.key.public,
        "--registry", f"{host}/capi", "--plain-http", "--output-dir", out, "-q", *more,
    )  # fmt: skip


def test_a_registry_that_says_201_and_stores_nothing_fails_the_import(
    sandbox: Sandbox, work: Path, capi_bundle: CollectedBundle
) -> None:
    liar = LiarRegistry()
    with hostile_server(liar) as server:
        outcome = import_into(sandbox, capi_bundle, server.host, work / "out")
    line = assert_one_line(outcome, (1,), f"registry {server.host} accepted the push but")
    assert "does not resolve" in line and any(f"image {server.host}/capi/" in line for _ in (1,)), (
        line
    )
    assert any(seen.startswith("PUT /v2/capi/") and "/manifests/" in seen for seen in liar.seen)
    assert not (work / "out").exists()  # nothing is written for an import that failed


@pytest.mark.parametrize(
    ("liar", "needle"),
    [
        (LiarRegistry(upload_location=False), "upload session (HTTP 202) without a Location"),
        (LiarRegistry(chunk_min_length="abc"), "invalid OCI-Chunk-Min-Length 'abc'"),
        (LiarRegistry(chunk_min_length="-5"), "invalid OCI-Chunk-Min-Length '-5'"),
        (LiarRegistry(token_reply=b"<html>login</html>"), "unusable answer"),
        (LiarRegistry(token_reply=b'["a list"]'), "unusable answer"),
        (LiarRegistry(token_reply=b'{"token": 5}'), "reply.token: expected a string"),
    ],
    ids=["no-location", "chunk-min-abc", "chunk-min-negative", "token-html", "token-list",
         "token-number"],
)  # fmt: skip
def test_faulty_registry_answers_are_one_line_naming_the_registry(
    liar: LiarRegistry, needle: str, sandbox: Sandbox, work: Path, capi_bundle: CollectedBundle
) -> None:
    with hostile_server(liar) as server:
        liar.host = server.host
        outcome = import_into(sandbox, capi_bundle, server.host, work / "out")
    assert_one_line(outcome, (1,), server.host, needle)
    assert not (work / "out").exists()


def test_malformed_descriptors_and_redirect_loops_from_a_source_registry(
    sandbox: Sandbox, work: Path, signing_key: SigningKey, spec_for: Callable[..., Path]
) -> None:
    tiny = TinyRegistry()
    bad = json.loads(tiny.manifest)
    bad["layers"][0]["size"] = "abc"
    cases: list[tuple[Handler, str]] = [
        (
            lambda request, wire: wire.send(
                200,
                {"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
                json.dumps(bad).encode(),
            ),
            "malformed manifest for hostile/app:v1: manifest.layers[0].size: expected a "
            "non-negative integer, got the string 'abc'",
        ),
        (
            lambda request, wire: wire.send(302, {"Location": request.path}),
            "too many redirects",
        ),
        (
            lambda request, wire: wire.send(200, {"Content-Type": "text/html"}, b"<html>"),
            "malformed manifest for hostile/app:v1: manifest: not valid JSON",
        ),
        # any JSON object was carried, signed, as an image with no blobs
        (
            lambda request, wire: wire.send(
                200,
                {"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
                b'{"token": "tok-from-evil"}',
            ),
            "malformed manifest for hostile/app:v1: manifest.schemaVersion is None, not 2",
        ),
        (
            lambda request, wire: wire.send(
                200,
                {"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
                b'{"schemaVersion": 2, "layers": []}',
            ),
            "manifest.config: expected an object",
        ),
    ]
    with hostile_server(tiny) as server:
        for handler, needle in cases:
            tiny.on_manifest = handler
            outcome = collect(sandbox, spec_for(server, tiny), signing_key, work / "b.tar")
            assert_one_line(outcome, (1,), server.host, needle)


def _raw_answer(head: bytes, body: bytes = b"") -> Handler:
    """A handler that writes ``head`` (status line and headers, as bytes) and ``body``."""

    def answer(request: Request, wire: Wire) -> None:
        wire.sock.sendall(head + b"\r\n\r\n" + (body if request.method != "HEAD" else b""))

    return answer


def _endless_lines(first: bytes, line: bytes) -> Handler:
    """``first``, then ``line`` for as long as the client reads."""

    def answer(request: Request, wire: Wire) -> None:
        wire.keep_alive = False
        with contextlib.suppress(OSError):
            wire.sock.sendall(first)
            while True:
                wire.sock.sendall(line * 256)

    return answer


def test_hostile_answer_heads_and_framing_are_one_line_errors_in_bounded_time(
    sandbox: Sandbox, work: Path, signing_key: SigningKey, spec_for: Callable[..., Path]
) -> None:
    """Answers that once ended in a traceback, or kept the client reading for ever while
    data still arrived (so no idle timeout fired): endless 1xx heads, endless chunked
    trailers, one-byte chunks with 4 KiB extensions."""
    manifest_type = b"Content-Type: application/vnd.oci.image.manifest.v1+json"
    extension = b";" + b"x" * 4000
    cases: list[tuple[Handler, str]] = [
        (_endless_lines(b"", b"HTTP/1.1 100 Continue\r\n\r\n"), "informational (1xx)"),
        (
            _endless_lines(
                b"HTTP/1.1 200 OK\r\n" + manifest_type + b"\r\nTransfer-Encoding: chunked"
                b"\r\n\r\n1\r\n{\r\n0\r\n",
                b"X-Trailer: " + b"a" * 1000 + b"\r\n",
            ),
            "framing (chunk lines, extensions, trailers) over 64 KiB",
        ),
        (
            _endless_lines(
                b"HTTP/1.1 200 OK\r\n" + manifest_type + b"\r\nTransfer-Encoding: chunked\r\n\r\n",
                b"1" + extension + b"\r\n{\r\n",
            ),
            "framing (chunk lines, extensions, trailers) over 64 KiB",
        ),
    ]
    tiny = TinyRegistry()
    with hostile_server(tiny) as server:
        for handler, needle in cases:
            tiny.on_manifest = handler
            outcome = collect(sandbox, spec_for(server, tiny), signing_key, work / "b.tar")
            assert_one_line(outcome, (1,), server.host, needle)
            assert outcome.max_rss_mib < RSS_BOUND_MIB, outcome.max_rss_mib
        # a header byte past ASCII is the registry's business: collect goes on
        tiny.on_manifest = None
        tiny.on_ping = _raw_answer(b"HTTP/1.1 200 OK\r\nServer: caf\xe9\r\nContent-Length: 0")
        spec = spec_for(server, tiny)
        outcome = sandbox.run(
            "collect", spec, "--sign-key", signing_key.private, "-o", work / "b.tar"
        )
        assert outcome.returncode == 0, outcome.stderr


def test_a_deeply_nested_tag_list_is_no_tag_list(
    sandbox: Sandbox, work: Path, signing_key: SigningKey
) -> None:
    """An OCI chart's version constraint lists the repository's tags: a tags/list answer
    nested 200,000 deep ended collect in a RecursionError traceback."""

    def registry(request: Request, wire: Wire) -> None:
        if request.path == "/v2/":
            return wire.send(200, {})
        if request.path.endswith("/tags/list"):
            return wire.send(
                200, {"Content-Type": "application/json"}, b'{"tags":' + b"[" * 200_000
            )
        return wire.send(404, {"Content-Type": "application/json"}, b'{"errors": []}')

    with hostile_server(registry) as server:
        spec = work / "spec.yaml"
        chart = {"oci": f"oci://{server.host}/charts/x", "version": ">=1.0.0"}
        spec.write_text(yaml.safe_dump({"charts": [chart]}))
        outcome = collect(sandbox, spec, signing_key, work / "b.tar")
    assert_one_line(outcome, (1,), server.host, "answered tags/list with something else")


class _HugeLengthRegistry(LiarRegistry):
    """Every blob HEAD answers 200 with a Content-Length of 5,000 digits (or ``²``)."""

    length: str = "9" * 5000

    def __call__(self, request: Request, wire: Wire) -> None:
        if request.method == "HEAD" and "/blobs/" in request.path:
            self.seen.append(f"{request.method} {request.path}")
            return wire.send(200, {"Content-Length": self.length}, length=False)
        if request.method == "POST" and "mount=" in request.query:
            return wire.send(400, {})  # no mount: import asks by HEAD instead
        return super().__call__(request, wire)


@pytest.mark.parametrize("length", ["9" * 5000, "\u00b2"])
def test_a_blob_head_with_an_unreadable_length_is_one_line(
    length: str, sandbox: Sandbox, work: Path, capi_bundle: CollectedBundle
) -> None:
    """int() refuses 4,300 digits with a ValueError, and takes ``²`` for a digit."""
    liar = _HugeLengthRegistry()
    liar.length = length
    with hostile_server(liar) as server:
        outcome = import_into(sandbox, capi_bundle, server.host, work / "out")
    assert_one_line(outcome, (1,), server.host, "invalid Content-Length")
    assert not (work / "out").exists()


def test_a_challenge_from_where_the_ping_was_redirected_gets_no_credentials(
    sandbox: Sandbox, work: Path, capi_bundle: CollectedBundle
) -> None:
    """A registry whose ``/v2/`` redirects to another origin, which answers 401 with a
    bearer realm of its own: that realm was asked for a token with the registry's
    Basic credentials. The challenge is not believed; nothing is sent there."""

    def evil(request: Request, wire: Wire) -> None:
        realm = f"http://{evil_server.host}/token"
        wire.send(401, {"WWW-Authenticate": f'Bearer realm="{realm}",service="evil"'})

    with hostile_server(evil) as evil_server:

        def registry(request: Request, wire: Wire) -> None:
            wire.send(302, {"Location": f"{evil_server.url}{request.path}"})

        with hostile_server(registry) as server:
            secret = base64.b64encode(b"alice:S3cretPass").decode()
            authfile = work / "auth.json"
            authfile.write_text(json.dumps({"auths": {server.host: {"auth": secret}}}))
            outcome = sandbox.run(
                "status", capi_bundle.path, "--key", capi_bundle.key.public,
                "--registry", f"{server.host}/capi", "--plain-http", "--authfile", authfile,
            )  # fmt: skip
        requests = list(evil_server.requests)
    assert outcome.returncode == 1, outcome.stderr
    assert "S3cretPass" not in outcome.stdout + outcome.stderr
    assert requests and all(r.path == "/v2/" for r in requests), [r.path for r in requests]
    assert not any("authorization" in r.headers for r in requests)


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs (root only): a disk that fills up."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode(errors='replace')}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_names_the_file_it_could_not_write(
    sandbox: Sandbox, tiny_disk: Path, signing_key: SigningKey, spec_for: Callable[..., Path]
) -> None:
    tiny = TinyRegistry(layer=os.urandom(1 << 20))  # 1 MiB into 256 KiB
    bundle = tiny_disk / "b.tar"
    with hostile_server(tiny) as server:
        outcome = sandbox.run(
            "collect", spec_for(server, tiny), "--sign-key", signing_key.private, "-o", bundle
        )
    # refused before the layer is downloaded (issue 46: space is checked first), naming
    # the disk, what the bundle needs and what is free
    assert_one_line(outcome, (1,), "not enough space", str(tiny_disk), "free")
    assert list(tiny_disk.iterdir()) == []  # no partial bundle, no staging directory
