"""One apply command everywhere: ``kubectl apply --server-side -k capi-out/operator``.

Client-side apply keeps a copy of each object in an annotation capped at 256 KiB, so a
provider ConfigMap near the 1 MiB limit is refused; every place a user might copy the
command from (README, demo, the files an import writes) must say server-side.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.harness.bundle_fixtures import CollectedBundle
from tests.harness.cli import run_airgap
from tests.harness.registry import RegistryFactory

ROOT = Path(__file__).resolve().parent.parent
COMMAND = "kubectl apply --server-side -k capi-out/operator"
# "kubectl apply" and the flags after it, up to the end of the command
_APPLY = re.compile(r"kubectl\s+apply\b[^`\n\"')]*")


def client_side_applies(text: str) -> list[str]:
    """Every ``kubectl apply`` in ``text`` that is not server-side."""
    return [m.group(0) for m in _APPLY.finditer(text) if "--server-side" not in m.group(0)]


@pytest.mark.unit
def test_the_check_itself_tells_the_two_apart() -> None:
    assert client_side_applies("run `kubectl apply -k capi-out/operator/` now") == [
        "kubectl apply -k capi-out/operator/"
    ]
    assert client_side_applies('print("# kubectl apply -f x.yaml")') == ["kubectl apply -f x.yaml"]
    assert client_side_applies(f"`{COMMAND}` and\n#   {COMMAND}\n") == []


@pytest.mark.unit
def test_docs_and_sources_say_server_side() -> None:
    paths = [
        ROOT / "README.md",
        ROOT / "benchmarks" / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "scripts").iterdir()),
        *sorted((ROOT / "airgap").rglob("*.py")),
        *sorted((ROOT / "bundles").iterdir()),
    ]
    found = {
        str(path.relative_to(ROOT)): bad
        for path in paths
        if path.is_file() and (bad := client_side_applies(path.read_text(encoding="utf-8")))
    }
    assert found == {}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert COMMAND in readme
    # the reason is explained once, not repeated
    assert readme.count("last-applied-configuration") == 1
    assert "256 KiB" in readme


@pytest.mark.e2e
def test_every_file_an_import_writes_says_server_side(
    capi_bundle: CollectedBundle, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    registry = registry_factory("plain")
    out = tmp_path / "capi-out"
    result = run_airgap(
        *capi_bundle.import_args(f"{registry.host}/capi"),
        "--output-dir",
        out,
        "-q",
    )
    assert result.returncode == 0, result.stderr
    texts = {}
    for path in sorted(out.rglob("*")):
        if path.is_file():
            try:
                texts[str(path.relative_to(out))] = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue  # gzip-compressed components, say
    assert "operator/kustomization.yaml" in texts
    assert COMMAND in texts["operator/kustomization.yaml"]
    found = {name: bad for name, text in texts.items() if (bad := client_side_applies(text))}
    assert found == {}
    stdout_found = client_side_applies(result.stdout + result.stderr)
    assert stdout_found == []
