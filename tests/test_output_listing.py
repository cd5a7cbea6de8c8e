"""``--output-dir`` holds what the last write put there: files an earlier import or
configmaps wrote and this one does not are removed (``importing.outputlisting``), and
nothing else is. Real imports into a real registry; the listing's logic also alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airgap.core.fsutil import remove_files
from airgap.importing.outputlisting import IMPORT, LISTING, OPERATOR, plan, read
from tests.harness.bundle_fixtures import CollectedBundle
from tests.harness.cli import run_airgap
from tests.harness.management_fixtures import ManagementBundle
from tests.harness.registry import RegistryServer


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


def _write(command: str, bundle: CollectedBundle | ManagementBundle, host: str, out: Path) -> None:
    quiet = ["-q"] if command == "import" else []
    result = run_airgap(
        command, bundle.path, "--key", bundle.key.public, "--registry", host,
        "--plain-http", "--output-dir", out, *quiet,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


_VARYING = {"import-report.json", ".airgap-outputs.json"}  # times, a salt


@pytest.mark.e2e
def test_a_later_import_leaves_only_its_own_files(
    management_bundle: ManagementBundle,
    capi_bundle: CollectedBundle,
    plain_registry: RegistryServer,
    tmp_path: Path,
) -> None:
    """A whole management cluster imported to one prefix, then a smaller bundle to
    another, into the same directory: what is left is what the second import alone
    writes (cert-manager's and the operator's steps, the first prefix's node configs
    and components are gone); a file the user put there stays, and so does a link."""
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    _write("import", management_bundle, f"{plain_registry.host}/first", out)
    assert (out / "operator" / "00-cert-manager").is_dir()
    (out / "notes.txt").write_text("mine\n")
    os.symlink("/etc/hostname", out / "operator" / "mine.yaml")
    _write("import", capi_bundle, f"{plain_registry.host}/second", out)
    _write("import", capi_bundle, f"{plain_registry.host}/second", fresh)
    left = {name for name in _tree(out) if name != "notes.txt"}
    assert left == set(_tree(fresh)), sorted(left ^ set(_tree(fresh)))
    assert (out / "notes.txt").read_text() == "mine\n" and (
        out / "operator" / "mine.yaml"
    ).is_symlink()
    assert not (out / "operator" / "00-cert-manager").exists()
    for name, data in _tree(out).items():
        assert b"/first/" not in data, name
    for name, data in _tree(fresh).items():
        if name not in _VARYING and name != LISTING:  # file:// URLs name the directory
            expected = data.replace(str(fresh).encode(), str(out).encode())
            assert (out / name).read_bytes() == expected, name


@pytest.mark.e2e
def test_configmaps_into_an_imports_directory_replaces_only_the_operators_part(
    capi_bundle: CollectedBundle, plain_registry: RegistryServer, tmp_path: Path
) -> None:
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    _write("import", capi_bundle, f"{plain_registry.host}/one", out)
    imported = _tree(out)
    _write("configmaps", capi_bundle, f"{plain_registry.host}/two", out)
    _write("configmaps", capi_bundle, f"{plain_registry.host}/two", fresh)
    now = _tree(out)
    listing = read(out)
    operator = {name for name, part in listing.items() if part == OPERATOR}
    assert operator == set(_tree(fresh)) - {LISTING}
    for name in operator:  # file:// URLs name the directory
        assert now[name] == _tree(fresh)[name].replace(bytes(fresh), bytes(out)), name
    # the node configs and components import wrote stay, as import wrote them
    kept = {name for name, part in listing.items() if part == IMPORT}
    assert any(name.startswith("mirror/") for name in kept)
    for name in kept:
        assert now[name] == imported[name], name


@pytest.mark.unit
def test_the_plan_removes_only_listed_files_of_replaced_parts() -> None:
    earlier = {"a": OPERATOR, "b": OPERATOR, "m": IMPORT, "n": IMPORT}
    listing, stale = plan(earlier, {"a": OPERATOR, "c": OPERATOR}, (OPERATOR,))
    assert stale == {"b": OPERATOR}
    assert listing == {"a": OPERATOR, "c": OPERATOR, "m": IMPORT, "n": IMPORT}
    listing, stale = plan(earlier, {"m": IMPORT}, (OPERATOR, IMPORT))
    assert (listing, stale) == ({"m": IMPORT}, {"a": OPERATOR, "b": OPERATOR, "n": IMPORT})


@pytest.mark.unit
def test_a_hostile_listing_removes_nothing_outside_the_directory(tmp_path: Path) -> None:
    """A listing is read from the directory, which someone else may have written:
    paths that leave it, links and non-files are never removed."""
    out, outside = tmp_path / "out", tmp_path / "outside.txt"
    (out / "d").mkdir(parents=True)
    outside.write_text("keep")
    (out / "d" / "f").write_text("x")
    os.symlink(outside, out / "d" / "link")
    os.symlink(tmp_path, out / "up")
    os.mkfifo(out / "fifo")
    (out / LISTING).write_text(
        '{"format": 1, "files": {"../outside.txt": "import", "/etc/passwd": "import",'
        ' "d/link": "import", "up/outside.txt": "import", "fifo": "import", "d/f": "import",'
        ' "x": "elsewhere"}}'
    )
    assert set(read(out)) == {"d/link", "up/outside.txt", "fifo", "d/f"}
    left = remove_files(out, sorted(read(out)))
    assert sorted(left) == ["d/link", "fifo", "up/outside.txt"]
    assert outside.read_text() == "keep" and not (out / "d" / "f").exists()
    assert (out / "d" / "link").is_symlink()
