"""A re-import into an output directory that holds the outputs of the same bundle,
imported with the same options, rebuilds nothing (``importing.outputcache``); anything
else (a file edited or deleted, another option, another bundle, other variable values)
rebuilds everything. "Rebuilt" is what ``AIRGAP_PHASE_TIMES`` shows: the provider
rewrite and output phases ran. Never timed."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from airgap.configmaps.variables import VariableValues
from airgap.importing import outputcache
from airgap.oci.manifest import OCI_MANIFEST
from tests.harness.bundle_fixtures import CollectedBundle
from tests.harness.capi import write_spec
from tests.harness.cli import run_airgap
from tests.harness.pki import Pki
from tests.harness.registry import RegistryServer
from tests.harness.registry_fixtures import start_registry, stop_registry

# every run names the same location for clusterctl.yaml's file:// URLs, so a copy of
# the first output directory is the output of an import with the same options
LOCATION = "/srv/airgap-outputs"
REBUILT = {"providers/rewrite", "providers/outputs"}


@dataclass(frozen=True)
class First:
    registry: RegistryServer
    out: Path

    def files(self) -> dict[str, bytes]:
        return tree(self.out)


def tree(root: Path) -> dict[str, bytes]:
    """Every output file but the report (its counts and duration change every run)."""
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name != "import-report.json"
    }


def reimport(
    bundle: CollectedBundle, first: First, out: Path, *extra: str, **environ: str
) -> tuple[set[str], dict[str, Any]]:
    """Import ``bundle`` into the first import's registry and ``out``: the phases that
    ran and the report."""
    phases = out.parent / f"{out.name}-phases.json"
    result = run_airgap(
        *bundle.import_args(f"{first.registry.host}/capi"),
        "--output-dir",
        out,
        "--output-location",
        LOCATION,
        "-q",
        *extra,
        env={"AIRGAP_PHASE_TIMES": str(phases), **environ},
    )
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "import-report.json").read_text())
    return set(json.loads(phases.read_text())), report


@pytest.fixture(scope="module")
def first(
    capi_bundle: CollectedBundle, tmp_path_factory: pytest.TempPathFactory, pki: Pki
) -> Iterator[First]:
    registry = start_registry(tmp_path_factory.mktemp("outputs-cache-target"), "plain", pki)
    try:
        made = First(registry, tmp_path_factory.mktemp("outputs-cache") / "out")
        ran, _ = reimport(capi_bundle, made, made.out)
        assert ran >= REBUILT  # a first import builds every output
        yield made
    finally:
        stop_registry(registry)


def copy_of(first: First, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(first.out, out)  # modes too: the Secrets' 0600 is part of the output
    return out


@pytest.mark.e2e
def test_reimport_of_the_same_bundle_rebuilds_nothing(
    capi_bundle: CollectedBundle, first: First, tmp_path: Path
) -> None:
    out = copy_of(first, tmp_path)
    earlier = json.loads((first.out / "import-report.json").read_text())
    ran, report = reimport(capi_bundle, first, out)
    assert not ran & REBUILT and "import/outputs-check" in ran, ran
    assert tree(out) == first.files()  # byte-identical, the record included
    assert report["changed"] is False
    assert report["variables_missing"] == earlier["variables_missing"] != {}
    # the conditions are those of a full import (manifests images confirmed by HEAD),
    # and each keeps the lastTransitionTime of the import before
    assert report["conditions"] == earlier["conditions"]
    assert {c["status"] for c in report["conditions"] if c["type"] == "Available"} == {"True"}


@pytest.mark.e2e
def test_an_edited_or_deleted_output_is_rebuilt(
    capi_bundle: CollectedBundle, first: First, tmp_path: Path
) -> None:
    out = copy_of(first, tmp_path)
    configmap = next(
        path
        for path in sorted(out.rglob("*.yaml"))
        if path.is_file() and b"kind: ConfigMap" in path.read_bytes()
    )
    configmap.write_bytes(configmap.read_bytes() + b"# edited\n")
    deleted = out / "mapping.txt"
    deleted.unlink()
    ran, _ = reimport(capi_bundle, first, out)
    assert ran >= REBUILT, ran  # not trusted: rebuilt
    assert tree(out) != first.files()  # a new record (its salt), the outputs restored:
    files = first.files()
    assert configmap.read_bytes() == files[str(configmap.relative_to(out))]
    assert deleted.read_bytes() == files["mapping.txt"]
    del files[outputcache.RECORD]
    assert {k: v for k, v in tree(out).items() if k != outputcache.RECORD} == files


@pytest.mark.e2e
def test_another_option_rebuilds(
    capi_bundle: CollectedBundle, first: First, tmp_path: Path
) -> None:
    out = copy_of(first, tmp_path)
    ran, _ = reimport(capi_bundle, first, out, "--no-pin")
    assert ran >= REBUILT, ran
    components = next(out.glob("components/cluster-api/*/core-components.yaml")).read_text()
    assert "@sha256:" not in components  # the --no-pin outputs, not the pinned ones
    ran, _ = reimport(capi_bundle, first, out, "--no-pin")  # now they are recorded
    assert not ran & REBUILT, ran


@pytest.mark.e2e
def test_the_oci_provider_source_is_never_recorded(
    capi_bundle: CollectedBundle, first: First, tmp_path: Path
) -> None:
    """Its CRs carry the credentials the registry asked for, and its artifacts are
    pushed as they are built: rebuilt every time, and an earlier record removed."""
    out = copy_of(first, tmp_path)
    ran, _ = reimport(capi_bundle, first, out, "--provider-source", "oci")
    assert ran >= REBUILT, ran
    assert not (out / outputcache.RECORD).exists()
    ran, _ = reimport(capi_bundle, first, out)  # back to the selector: rebuilt
    assert ran >= REBUILT, ran
    assert (out / outputcache.RECORD).is_file()


@pytest.mark.e2e
def test_another_variable_value_rebuilds(
    capi_bundle: CollectedBundle, first: First, tmp_path: Path
) -> None:
    """A value for a variable the components name (from the environment, as clusterctl
    reads it) fills its Secret: rebuilt, and no longer missing."""
    out = copy_of(first, tmp_path)
    ran, report = reimport(capi_bundle, first, out, PROVIDER_CREDENTIALS="c2VjcmV0")
    assert ran >= REBUILT, ran
    assert report["variables_missing"] == {}
    assert b"c2VjcmV0" not in (out / outputcache.RECORD).read_bytes()
    assert (out / outputcache.RECORD).stat().st_mode & 0o777 == 0o600


@pytest.mark.e2e
def test_another_bundle_rebuilds(
    capi_bundle: CollectedBundle, first: First, tmp_path: Path
) -> None:
    """The same providers collected again: another signed manifest (its creation
    time), so another digest; the outputs are rebuilt from it."""
    spec = write_spec(tmp_path / "capi.yaml", capi_bundle.providers.spec)
    again = tmp_path / "again.tar"
    result = run_airgap(
        "collect", spec, "--sign-key", capi_bundle.key.private, "-o", again, "-q",
        env=capi_bundle.providers.env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    other = CollectedBundle(again, capi_bundle.key, capi_bundle.providers, capi_bundle.manifest)
    out = copy_of(first, tmp_path)
    ran, _ = reimport(other, first, out)
    assert ran >= REBUILT, ran
    record = json.loads((out / outputcache.RECORD).read_text())
    earlier = json.loads((first.out / outputcache.RECORD).read_text())
    assert record["key"]["bundle"] != earlier["key"]["bundle"]


@pytest.mark.e2e
def test_a_manifests_image_gone_from_the_target_is_rebuilt_and_pushed(
    capi_bundle: CollectedBundle, first: First, tmp_path: Path
) -> None:
    """The outputs are whole, but a manifests image they name is no longer in the
    target: confirmed by one HEAD, found missing, everything rebuilt and it is pushed
    again. (Last here: the shared target is whole again after it.)"""
    out = copy_of(first, tmp_path)
    image = json.loads((out / outputcache.RECORD).read_text())["manifestsImages"][0]
    url = f"{first.registry.url}/v2/{image['repository']}/manifests"
    assert httpx.delete(f"{url}/{image['digest']}").status_code == 202
    assert httpx.head(f"{url}/{image['tag']}").status_code == 404
    ran, report = reimport(capi_bundle, first, out)
    assert ran >= REBUILT, ran
    head = httpx.head(f"{url}/{image['tag']}", headers={"Accept": OCI_MANIFEST})
    assert head.headers["Docker-Content-Digest"] == image["digest"]
    files = {k: v for k, v in first.files().items() if k != outputcache.RECORD}
    assert {k: v for k, v in tree(out).items() if k != outputcache.RECORD} == files
    assert {c["status"] for c in report["conditions"] if c["type"] == "Available"} == {"True"}


def _options_key(location: Path) -> dict[str, object]:
    """The key of an import of an empty bundle manifest with default options."""
    return outputcache.options_key(
        bundle_manifest=b"{}",
        target="registry.example/capi",
        keep_registry=False,
        pin=True,
        namespace=None,
        provider_source="selector",
        location=location,
        ca_pem=None,
    )


@pytest.mark.unit
def test_the_record_holds_variable_names_never_values(tmp_path: Path) -> None:
    """Other values for the variables the outputs asked for are another output (the
    Secrets): no match. The record is a secret file and names no value."""
    key = _options_key(tmp_path)
    files = {"operator/secret.yaml": b"token: s3cret-value\n", "mapping.txt": b"a=b\n"}
    given = VariableValues.from_sources({"token": "s3cret-value"}, {})
    # a SecretBytes, typed as bytes: mypy's `bytes in x` check knows no subclass of bytes
    record: bytes = outputcache.record_bytes(
        key,
        files,
        asked={"TOKEN", "UNSET"},
        values=given,
        published=[],
        missing={"Secret x": ["UNSET"]},
        references={},
        plain_http=True,
    )
    assert b"s3cret-value" not in record
    (tmp_path / "operator").mkdir()
    for name, data in [*files.items(), (outputcache.RECORD, bytes(record))]:
        (tmp_path / name).write_bytes(data)
        (tmp_path / name).chmod(0o644)
    found = outputcache.load(tmp_path, key, given)
    assert found is not None and sorted(found.files) == sorted(files)
    assert found.missing == {"Secret x": ["UNSET"]}
    environment = VariableValues.from_sources({"token": "s3cret-value"}, {"TOKEN": "other"})
    assert outputcache.load(tmp_path, key, environment) is None
    assert outputcache.load(tmp_path, {**key, "pin": False}, given) is None
    (tmp_path / "mapping.txt").chmod(0o600)  # a mode write_tree would not leave
    assert outputcache.load(tmp_path, key, given) is None
    (tmp_path / "mapping.txt").chmod(0o644)
    assert outputcache.load(tmp_path, key, given) is not None
    (tmp_path / "elsewhere.txt").write_bytes(files["mapping.txt"])
    (tmp_path / "mapping.txt").unlink()
    (tmp_path / "mapping.txt").symlink_to(tmp_path / "elsewhere.txt")  # same bytes
    assert outputcache.load(tmp_path, key, given) is None  # never read through a link
    for hostile in (b"[" * 100_000, b'{"format": 1, "key": 5}', b"\xff", b""):
        (tmp_path / outputcache.RECORD).write_bytes(hostile)
        assert outputcache.load(tmp_path, key, given) is None


@pytest.mark.unit
def test_every_listed_file_must_match_its_size_mode_and_hash(tmp_path: Path) -> None:
    """Each listed file is hashed as it is read, through a buffer smaller than the
    largest: a change anywhere in it, one byte more or less, or another mode, and the
    record matches no longer; put back as it was, it matches again."""
    key = _options_key(tmp_path)
    big = bytes(range(256)) * (3 * 4096 + 7)  # ~3 MiB: several reads of the buffer
    files = {"components.yaml": big, "small.txt": b"a=b\n"}
    values = VariableValues.from_sources({}, {})
    record = outputcache.record_bytes(
        key,
        files,
        asked=set(),
        values=values,
        published=[],
        missing={},
        references={},
        plain_http=False,
    )
    for name, data in [*files.items(), (outputcache.RECORD, bytes(record))]:
        (tmp_path / name).write_bytes(data)
        (tmp_path / name).chmod(0o644)
    assert outputcache.load(tmp_path, key, values) is not None
    changed_last = big[:-1] + bytes([big[-1] ^ 1])
    changed_first = bytes([big[0] ^ 1]) + big[1:]
    for altered in (changed_last, changed_first, big + b"\n", big[:-1]):
        (tmp_path / "components.yaml").write_bytes(altered)
        assert outputcache.load(tmp_path, key, values) is None
    (tmp_path / "components.yaml").write_bytes(big)
    assert outputcache.load(tmp_path, key, values) is not None
    (tmp_path / "small.txt").chmod(0o640)
    assert outputcache.load(tmp_path, key, values) is None
