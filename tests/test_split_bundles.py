"""Split bundles (issue 16): ``collect --part-size`` onto a size-limited medium, and
every reader (verify, inspect, import, configmaps) working from the parts directly.

The medium is a real tmpfs mounted for the test with just room for the bundle, and the
collect runs with RLIMIT_FSIZE set to the part size, as a FAT32 stick refuses a file
past 4 GiB - 1 byte: a part one byte too long fails the write (EFBIG), so a passing
collect proves no part ever grew past the part size, not only that it ended smaller.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from airgap.bundle.parts import PartsList, part_name, parts_list_path, parts_signature_path
from airgap.bundle.reader import read_head
from tests.harness.bundle_fixtures import SigningKey
from tests.harness.capi import publish_capi, write_spec
from tests.harness.cli import AIRGAP, assert_clean_failure, collect_args, run_airgap
from tests.harness.images import TestImage
from tests.harness.registry import RegistryFactory
from tests.harness.releases import ReleaseServer
from tests.harness.skopeo import raw_manifest
from tests.harness.tamper import blob_data
from tests.harness.tmpfs import mount_tmpfs, unmount

pytestmark = pytest.mark.e2e

PART = 32 << 10  # small parts of a small bundle: several, with members across them
EPOCH = "1700000000"  # the same creation time for both collects: byte-identical bundles


@dataclass(frozen=True)
class Split:
    single: Path  # the same spec collected as one file
    bundle: Path  # NAME.tar on the medium (only its parts exist)
    parts: list[Path]
    key: SigningKey
    env: dict[str, str]
    spec: Path


def _collect_limited(
    spec: Path, key: Path, output: Path, part_size: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """``airgap collect`` with every file it writes capped at ``PART`` bytes."""

    def cap_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (PART, PART))

    return subprocess.run(
        [
            *AIRGAP,
            *collect_args(spec, key, output),
            "-q",
            "--part-size",
            part_size,
        ],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        preexec_fn=cap_file_size,
    )


@pytest.fixture(scope="module")
def split(
    tmp_path_factory: pytest.TempPathFactory,
    release_server: ReleaseServer,
    source_images: dict[str, TestImage],
    signing_key: SigningKey,
) -> Iterator[Split]:
    directory = tmp_path_factory.mktemp("split")
    providers = publish_capi(release_server, source_images)
    spec = write_spec(directory / "capi.yaml", providers.spec)
    env = {**providers.env, "SOURCE_DATE_EPOCH": EPOCH}
    single = directory / "single.tar"
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", single, env=env)
    assert result.returncode == 0, result.stderr
    media = directory / "media"
    # room for the parts, the parts list and collect's staging of provider files: a
    # bundle written twice (as a temporary copy, say) would not fit
    mount_tmpfs(media, single.stat().st_size + 2 * PART)
    try:
        bundle = media / "capi.tar"
        result = _collect_limited(spec, signing_key.private, bundle, "32KiB", env)
        assert result.returncode == 0, result.stderr
        parts = sorted(media.glob("capi.tar.[0-9]*"))
        yield Split(single, bundle, parts, signing_key, env, spec)
    finally:
        unmount(media)


def test_parts_never_exceed_the_part_size_and_cat_gives_the_single_file(split: Split) -> None:
    sizes = [part.stat().st_size for part in split.parts]
    assert len(sizes) >= 3, sizes
    assert all(size == PART for size in sizes[:-1]) and 0 < sizes[-1] <= PART
    assert [p.name for p in split.parts] == [f"capi.tar.{i:03d}" for i in range(len(sizes))]
    assert not split.bundle.exists()
    joined = b"".join(part.read_bytes() for part in split.parts)
    assert joined == split.single.read_bytes()  # byte for byte: cat is the fallback
    listed = PartsList.from_bytes(parts_list_path(split.bundle).read_bytes(), "parts list")
    assert [p.size for p in listed.parts] == sizes and listed.size == len(joined)
    assert listed.part_size == PART and listed.bundle == "capi.tar"
    assert parts_signature_path(split.bundle).is_file()
    assert read_head(split.bundle).manifest_bytes == read_head(split.single).manifest_bytes


def test_a_part_past_the_file_size_limit_fails_cleanly(split: Split, tmp_path: Path) -> None:
    # the control for the fixture: under the same cap, 64 KiB parts cannot be written
    result = _collect_limited(
        split.spec, split.key.private, tmp_path / "big.tar", "64KiB", split.env
    )
    assert_clean_failure(result, 1, "big.tar.000")
    assert not list(tmp_path.glob("*big.tar*")), list(tmp_path.iterdir())


def test_verify_and_inspect_read_the_parts(split: Split) -> None:
    for named in (split.bundle, split.parts[0]):
        result = run_airgap("verify", named, "--key", split.key.public)
        assert result.returncode == 0, result.stderr
        assert "Bundle verified" in result.stdout
    result = run_airgap("inspect", split.bundle)
    assert result.returncode == 0, result.stderr
    assert f"capi.tar ({len(split.parts)} parts): created" in result.stdout
    single = json.loads(run_airgap("inspect", split.single, "--format", "json").stdout)
    parted = json.loads(run_airgap("inspect", split.bundle, "--format", "json").stdout)
    assert single == parted
    result = run_airgap("inspect", split.parts[1])
    assert_clean_failure(result, 2, "capi.tar.001 is part 2 of a split bundle")


def test_import_and_configmaps_read_the_parts(
    split: Split, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    registry = registry_factory("plain")
    result = run_airgap(
        "import",
        split.bundle,
        "--key",
        split.key.public,
        "--registry",
        f"{registry.host}/mirror",
        "--output-dir",
        tmp_path / "out",
        "-q",
    )
    assert result.returncode == 0, result.stderr
    manifest = read_head(split.single).manifest
    for image in manifest.images:
        path = image.reference.split("/", 1)[1].split(":")[0].split("@")[0]
        served = raw_manifest(f"mirror/{path}@{image.digest}", registry=registry)
        assert served == blob_data(split.single, image.digest)
    result = run_airgap(
        "configmaps",
        split.parts[0],
        "--key",
        split.key.public,
        "--registry",
        f"{registry.host}/mirror",
        "--output-dir",
        tmp_path / "cm",
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "cm" / "operator" / "kustomization.yaml").is_file()


def _copy(split: Split, directory: Path) -> tuple[Path, list[Path]]:
    directory.mkdir()
    for path in [*split.parts, parts_list_path(split.bundle), parts_signature_path(split.bundle)]:
        shutil.copyfile(path, directory / path.name)
    bundle = directory / "capi.tar"
    return bundle, [directory / p.name for p in split.parts]


def test_a_damaged_part_is_named(split: Split, tmp_path: Path) -> None:
    bundle, parts = _copy(split, tmp_path / "copy")
    count = len(parts)
    data = bytearray(parts[1].read_bytes())
    data[PART // 2] ^= 0xFF  # inside a blob: the member no longer hashes
    parts[1].write_bytes(bytes(data))
    result = run_airgap("verify", bundle, "--key", split.key.public)
    line = assert_clean_failure(result, 1, f"part 2 of {count} (capi.tar.001): sha256 mismatch")
    assert "capi.tar.000" not in line and "capi.tar.002" not in line
    result = run_airgap(
        "import", bundle, "--key", split.key.public, "--registry", "127.0.0.1:9/x", "--reverify"
    )
    assert_clean_failure(result, 1, "part 2 of")


def test_a_missing_or_short_part_is_named(split: Split, tmp_path: Path) -> None:
    bundle, parts = _copy(split, tmp_path / "copy")
    count = len(parts)
    parts[2].unlink()
    result = run_airgap("verify", bundle, "--key", split.key.public)
    assert_clean_failure(result, 1, f"part 3 of {count} (capi.tar.002): missing")
    shutil.copyfile(split.parts[2], parts[2])
    with parts[-1].open("r+b") as handle:
        handle.truncate(parts[-1].stat().st_size - 1)
    result = run_airgap("verify", bundle, "--key", split.key.public)
    assert_clean_failure(result, 1, f"part {count} of {count} (capi.tar.{count - 1:03d})")


def test_a_parts_list_claiming_absurd_sizes_is_refused_before_any_part_is_read(
    split: Split, tmp_path: Path
) -> None:
    """2**70 bytes in parts of 1: the list of sizes that claim stands for would not fit
    in memory (an OverflowError traceback before); the count is checked first."""
    bundle, _ = _copy(split, tmp_path / "copy")
    listed = parts_list_path(bundle)
    document = json.loads(listed.read_bytes())
    for size, part_size in ((2**70, 100), (10**12, 1)):
        listed.write_text(json.dumps({**document, "size": size, "partSize": part_size}))
        for command in (("inspect", bundle), ("verify", bundle, "--key", split.key.public)):
            result = run_airgap(*command, timeout=60)
            assert_clean_failure(result, 1, "capi.tar.parts.json", "do not cut")


def test_the_parts_list_is_signed_and_bound_to_its_bundle(split: Split, tmp_path: Path) -> None:
    bundle, parts = _copy(split, tmp_path / "copy")
    listed = parts_list_path(bundle)
    original = listed.read_bytes()
    listed.write_bytes(original.replace(b'"partSize": ', b'"partSize":  '))  # same meaning
    result = run_airgap("verify", bundle, "--key", split.key.public)
    assert_clean_failure(result, 1, "capi.tar.parts.json: does not verify with any trusted key")
    listed.unlink()
    result = run_airgap("verify", bundle, "--key", split.key.public)
    assert_clean_failure(result, 1, "capi.tar.parts.json: is missing")
    # parts from another bundle of the same spec under this list: refused by the list
    other = tmp_path / "other"
    other.mkdir()
    result = run_airgap(
        *collect_args(split.spec, split.key.private, other / "capi.tar"),
        "--part-size",
        "32KiB",
        "-q",
        env={**split.env, "SOURCE_DATE_EPOCH": "1700000001"},
    )
    assert result.returncode == 0, result.stderr
    listed.write_bytes(original)
    for index, part in enumerate(parts):
        shutil.copyfile(part_name(other / "capi.tar", index), part)
    result = run_airgap("verify", bundle, "--key", split.key.public)
    assert_clean_failure(result, 1, "belongs to another bundle")
