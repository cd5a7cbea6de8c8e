"""Hostile components files (issue 11, family 5): bounded size, depth, aliases, linear scans.

A release server (the fake GitHub) or a signed bundle hands airgap a components file
built to hurt: an alias bomb, nesting deep enough to crash libyaml's composer, numbers
that make PyYAML multiply ever larger integers, more than the 16 MiB cap, and the two
inputs that once made regular expressions quadratic (an ``image:`` line with 80,000
spaces, a comment full of unclosed ``${A:=``). Each run is the real CLI in a subprocess
with a timeout and a peak-RSS reading (``wait4``): a refusal is exit 2 with one line
naming the file; a file that is merely odd but valid goes through collect, configmaps
and import in bounded time. No test times anything beyond the subprocess timeout.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from airgap.core.limits import MAX_COMPONENTS_BYTES
from tests.harness import tamper
from tests.harness.bundle_fixtures import CollectedBundle
from tests.harness.hostile import Outcome, assert_one_line, run_measured
from tests.harness.images import TestImage
from tests.harness.registry import RegistryFactory
from tests.harness.releases import ReleaseServer, make_metadata

pytestmark = pytest.mark.e2e

COMPONENTS = "infrastructure-components.yaml"
RSS_BOUND_MIB = 300  # a 17 MiB file read whole, as text, stays far below
TIMEOUT = 90  # generous: each case takes a second or two when linear, forever when not


def _billion_laughs() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in "bcdefghi":
        previous = chr(ord(level) - 1)
        lines.append(f"{level}: &{level} [{','.join([f'*{previous}'] * 9)}]")
    return "\n".join(lines) + "\n"


HOSTILE: dict[str, tuple[Callable[[], str], str]] = {
    # name: (components text, what the one error line says)
    "billion-laughs": (_billion_laughs, "aliases expand to more than"),
    "alias-to-its-own-ancestor": (lambda: "a: &a [x, *a]\n", "refers to its own ancestor"),
    "100k-nested-flow": (lambda: "x: " + "[" * 100_000 + "\n", "nested deeper than"),
    "100k-nested-block": (lambda: "- " * 100_000 + "x\n", "nested deeper than"),
    # values in a workload (documents of other kinds are parsed, never built)
    "sexagesimal-4mb": (
        lambda: "kind: Deployment\nspec:\n  replicas: " + "1:" * 2_000_000 + "1\n",
        "integer longer than",
    ),
    "month-13": (lambda: "kind: Deployment\nspec: {paused: 2020-13-45}\n", "month must be"),
    "control-character": (lambda: "x: \x07\n", "malformed YAML"),
    "over-16-mib": (
        lambda: (
            "# padding line of a components file that is far too large\n"
            * (MAX_COMPONENTS_BYTES // 58 + 100)
        ),
        "larger than the 16 MiB limit",
    ),
    "one-11-mb-deployment": (  # ~2 GB and a minute to build, were it built
        lambda: "kind: Deployment\nspec:\n  x:\n" + "  - a: 1\n" * 1_300_000,
        "more than 250000 nodes to build",
    ),
    "image-with-80k-spaces": (
        lambda: _deployment("registry.example/a:b" + " " * 80_000 + "c"),
        "Deployment hostile-controller-manager container manager",
    ),
}


def _deployment(image_line_value: str) -> str:
    return (
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: hostile-system\n---\n"
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n"
        "  name: hostile-controller-manager\n  namespace: hostile-system\n"
        "spec:\n  template:\n    spec:\n      containers:\n      - name: manager\n"
        f"        image: {image_line_value}\n"
        '        args: ["--v=${LOG_LEVEL:=2}"]\n'
    )


def _publish(server: ReleaseServer, components: str) -> tuple[dict[str, object], dict[str, str]]:
    owner, repo = server.new_repo("cluster-api-provider-hostile")
    files = {
        "metadata.yaml": make_metadata([(0, 1, "v1beta1")]).encode(),
        COMPONENTS: components.encode(),
    }
    server.add_release(owner, repo, "v0.1.0", files)
    provider = {
        "name": "hostile",
        "type": "InfrastructureProvider",
        "version": "v0.1.0",
        "url": server.repo_url(owner, repo),
    }
    return {"providers": [provider]}, {"GITHUB_API_URL": server.api_url}


def _run(cwd: Path, *args: str | Path, env: dict[str, str] | None = None) -> Outcome:
    outcome = run_measured(*args, env={"TMPDIR": str(cwd), **(env or {})}, cwd=cwd, timeout=TIMEOUT)
    assert outcome.max_rss_mib < RSS_BOUND_MIB, outcome.max_rss_mib
    return outcome


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_collect_refuses_hostile_components_with_one_line(
    case: str, tmp_path: Path, release_server: ReleaseServer
) -> None:
    make, message = HOSTILE[case]
    spec, env = _publish(release_server, make())
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec))
    (tmp_path / "key").mkdir()
    assert _run(tmp_path, "keygen", tmp_path / "key" / "k.key").returncode == 0
    work = tmp_path / "work"
    work.mkdir()
    output = work / "bundle.tar"
    outcome = _run(
        work, "collect", spec_path, "--sign-key", tmp_path / "key" / "k.key", "-o", output, env=env
    )
    assert_one_line(outcome, (2,), COMPONENTS, "hostile", message)
    assert list(work.iterdir()) == []  # no bundle, no staging left behind


def test_a_signed_bundle_with_an_alias_bomb_fails_configmaps_and_import(
    tmp_path: Path, capi_bundle: CollectedBundle
) -> None:
    """What collect refuses, a (trusted) signer can still put in a bundle: import and
    configmaps refuse it the same way, before writing anything."""
    member = next(p.components for p in capi_bundle.manifest.providers)
    bundle = tamper.resign(
        capi_bundle.path,
        tmp_path / "bomb.tar",
        capi_bundle.key.private,
        replace={member: _billion_laughs().encode()},
    )
    out = tmp_path / "out"
    for command in ("configmaps", "import"):
        outcome = _run(
            tmp_path,
            command,
            bundle,
            "--key",
            capi_bundle.key.public,
            "--registry",
            "127.0.0.1:9/mirror",
            "--output-dir",
            out,
        )
        assert_one_line(outcome, (2,), member, "aliases expand to more than")
        assert not out.exists()


def test_slow_regex_inputs_in_valid_components_pass_through_every_command(
    tmp_path: Path,
    release_server: ReleaseServer,
    source_images: dict[str, TestImage],
    registry_factory: RegistryFactory,
) -> None:
    """Valid YAML that made two regular expressions quadratic: an ``image:`` key (in a
    ConfigMap, not a container) whose value has 80,000 spaces inside, and a last line,
    a 1.5 MB comment, repeating an unclosed ``${A:=`` (no ``}`` after it). The manager's
    own ``image:`` line ends in 80,000 spaces and a comment. Collect, configmaps and
    import all finish, and the rewrite keeps the line's bytes around the new reference."""
    app = source_images["app"].reference
    spaced = "  image: x" + " " * 80_000 + "y\n"
    config = f"---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: odd\ndata:\n{spaced}"
    unclosed = "# " + "${A:=" * 300_000 + "\n"
    components = _deployment(app + " " * 80_000 + "# the manager") + config + unclosed
    spec, env = _publish(release_server, components)
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec))
    key = tmp_path / "k.key"
    assert _run(tmp_path, "keygen", key).returncode == 0
    bundle = tmp_path / "bundle.tar"
    outcome = _run(tmp_path, "collect", spec_path, "--sign-key", key, "-o", bundle, env=env)
    assert outcome.returncode == 0, outcome.stderr

    target = registry_factory("plain")
    common = ["--key", str(key.with_suffix(".pub")), "--registry", f"{target.host}/mirror"]
    outcome = _run(tmp_path, "configmaps", bundle, *common, "--output-dir", tmp_path / "cm")
    assert outcome.returncode == 0, outcome.stderr
    outcome = _run(tmp_path, "import", bundle, *common, "--output-dir", tmp_path / "out", "-q")
    assert outcome.returncode == 0, outcome.stderr

    written = next((tmp_path / "out" / "components").rglob(COMPONENTS)).read_text()
    line = next(line for line in written.splitlines() if line.lstrip().startswith("image:"))
    assert line.startswith(f"        image: {target.host}/mirror/")
    assert line.endswith(" " * 80_000 + "# the manager")
    assert written.endswith(spaced + unclosed)  # carried byte for byte
    variables = (tmp_path / "out" / "operator" / "variables.md").read_text()
    assert "LOG_LEVEL" in variables


DUPLICATED = {
    # the same Deployment twice (clusterctl would apply the second over the first)
    "deployment": (
        _deployment("registry.example/a:v1")
        + "---\n"
        + _deployment("registry.example/a:v2").split("---\n", 1)[1],
        "'Deployment hostile-system/hostile-controller-manager' (apps API group) is "
        "defined twice, at lines 6 and 19",
    ),
    # a CRD (never built: only its head is read) repeated with its metadata last
    "crd-metadata-last": (
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
        "metadata: {name: things.hostile.example}\nspec: {group: hostile.example}\n---\n"
        "kind: CustomResourceDefinition\napiVersion: apiextensions.k8s.io/v1\n"
        "spec: {group: hostile.example}\nmetadata:\n  name: things.hostile.example\n",
        "'CustomResourceDefinition things.hostile.example' (apiextensions.k8s.io API group) "
        "is defined twice, at lines 1 and 6",
    ),
}


@pytest.mark.parametrize("case", sorted(DUPLICATED))
def test_collect_refuses_an_object_defined_twice_naming_both_lines(
    case: str, tmp_path: Path, release_server: ReleaseServer
) -> None:
    components, message = DUPLICATED[case]
    spec, env = _publish(release_server, components)
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec))
    (tmp_path / "key").mkdir()
    assert _run(tmp_path, "keygen", tmp_path / "key" / "k.key").returncode == 0
    work = tmp_path / "work"
    work.mkdir()
    output = work / "bundle.tar"
    outcome = _run(
        work, "collect", spec_path, "--sign-key", tmp_path / "key" / "k.key", "-o", output, env=env
    )
    assert_one_line(outcome, (2,), COMPONENTS, "hostile", message)
    assert list(work.iterdir()) == []
