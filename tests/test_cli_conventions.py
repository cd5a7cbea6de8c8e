"""Conventions users bring from skopeo, podman, oras and crane (issue 14): --version and
version, python -m airgap, shell completion, --format json on collect and import,
--debug request lines without secrets, and proxies (HTTPS_PROXY, NO_PROXY, loopback
never proxied, an error through a proxy names it).

Real components only: the entry point in a subprocess, real registries and a token
server on loopback, a real bash running the completion script, a real (refusing)
CONNECT proxy on a socket.
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from airgap import __version__
from airgap.providers.types import ProviderType
from tests.harness.bundle_fixtures import SigningKey
from tests.harness.capi import write_spec
from tests.harness.cli import AIRGAP, assert_clean_failure, collect_args, run_airgap
from tests.harness.faultproxy import FaultProxyFactory
from tests.harness.images import TestImage
from tests.harness.registry import RegistryFactory
from tests.harness.registry_fixtures import PASSWORD, USERNAME
from tests.harness.releases import ReleaseServer, make_release_files

VENV_BIN = Path(sys.executable).parent
INFRA = ProviderType.INFRASTRUCTURE


# -- version, python -m -----------------------------------------------------------------


@pytest.mark.e2e
def test_version_flag_command_and_module_agree() -> None:
    expected = f"airgap {__version__}\n"
    for args in (["--version"], ["-V"], ["version"]):
        result = run_airgap(*args)
        assert (result.returncode, result.stdout, result.stderr) == (0, expected, ""), args
    module = subprocess.run(
        [sys.executable, "-m", "airgap", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (module.returncode, module.stdout) == (0, expected)
    usage = subprocess.run(
        [sys.executable, "-m", "airgap", "collect"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert usage.returncode == 2
    assert usage.stderr.startswith("airgap: error: Missing argument 'SPEC' (see airgap collect")


# -- shell completion -------------------------------------------------------------------


def _bash_complete(*words: str) -> list[str]:
    """What bash offers after sourcing ``airgap completion bash`` for ``airgap WORDS``."""
    script = (
        'source <(airgap completion bash) && COMP_WORDS=("$@") && '
        "COMP_CWORD=$((${#COMP_WORDS[@]} - 1)) && _airgap_completion airgap && "
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
    result = subprocess.run(
        ["bash", "-c", script, "bash", "airgap", *words],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    return [line for line in result.stdout.splitlines() if line]


@pytest.mark.integration
def test_bash_completion_completes_commands_and_options() -> None:
    assert _bash_complete("im") == ["import"]
    assert set(_bash_complete("")) >= {"collect", "import", "verify", "completion", "version"}
    assert _bash_complete("import", "--dry") == ["--dry-run"]
    assert "--provider-source" in _bash_complete("configmaps", "--prov")
    assert _bash_complete("completion", "f") == ["fish"]


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("shell", "marker"),
    [("zsh", "#compdef airgap"), ("fish", "complete --no-files --command airgap")],
)
def test_zsh_and_fish_scripts_speak_the_same_protocol(shell: str, marker: str) -> None:
    source = run_airgap("completion", shell)
    assert source.returncode == 0 and marker in source.stdout
    assert f"_AIRGAP_COMPLETE={shell}_complete" in source.stdout
    # what the script asks airgap for, answered by airgap itself
    env = {"_AIRGAP_COMPLETE": f"{shell}_complete", "COMP_WORDS": "airgap im", "COMP_CWORD": "1"}
    if shell == "fish":
        env["COMP_CWORD"] = "im"
    answer = run_airgap(env=env)
    assert answer.returncode == 0 and "import" in answer.stdout


# -- --format json ----------------------------------------------------------------------


@pytest.fixture
def small_bundle(
    tmp_path: Path, source_images: dict[str, TestImage], signing_key: SigningKey
) -> tuple[Path, dict[str, object]]:
    spec = write_spec(tmp_path / "spec.yaml", {"images": [source_images["app"].reference]})
    bundle = tmp_path / "small.tar"
    result = run_airgap(
        "collect", spec, "--sign-key", signing_key.private, "-o", bundle, "--format", "json"
    )
    assert result.returncode == 0, result.stderr
    return bundle, json.loads(result.stdout)


@pytest.mark.e2e
def test_collect_format_json_has_the_inventory_keys(
    small_bundle: tuple[Path, dict[str, object]],
) -> None:
    bundle, document = small_bundle
    inventory = json.loads(run_airgap("inspect", bundle, "--format", "json").stdout)
    assert document.pop("bundle") == str(bundle)
    assert isinstance(document.pop("duration_seconds"), float)
    assert document == inventory


@pytest.mark.e2e
def test_import_format_json_is_the_report_file(
    tmp_path: Path,
    small_bundle: tuple[Path, dict[str, object]],
    signing_key: SigningKey,
    registry_factory: RegistryFactory,
) -> None:
    bundle, _ = small_bundle
    target = registry_factory("plain")
    common: list[str | Path] = ["--key", signing_key.public, "--registry", f"{target.host}/mirror"]
    dry = run_airgap("import", bundle, *common, "--dry-run", "--format", "json")
    assert dry.returncode == 0, dry.stderr
    text = run_airgap("import", bundle, *common, "--dry-run").stdout.splitlines()
    pairs = json.loads(dry.stdout)["mappings"]
    assert [f"{p['source']} -> {p['target']}" for p in pairs] == text
    out = tmp_path / "out"
    result = run_airgap("import", bundle, *common, "--output-dir", out, "--format", "json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == json.loads((out / "import-report.json").read_text())
    assert json.loads(result.stdout)["blobs_uploaded"] > 0


# -- --debug ----------------------------------------------------------------------------

DEBUG_LINE = re.compile(
    r"^airgap: debug: (GET|HEAD|POST|PUT|PATCH|DELETE) (https?://\S+) (\d{3}) "
    r"(sent \d+(\.\d)? [KMG]?i?B, )?received \d+(\.\d)? [KMG]?i?B in \d+\.\d{3} s$"
)


@pytest.mark.e2e
def test_debug_logs_one_line_per_request_and_no_secret(
    small_bundle: tuple[Path, dict[str, object]],
    signing_key: SigningKey,
    registry_factory: RegistryFactory,
    fault_proxy_factory: FaultProxyFactory,
) -> None:
    bundle, _ = small_bundle
    registry = registry_factory("token")
    token_server = registry.token_server
    assert token_server is not None
    proxy = fault_proxy_factory(registry)
    result = run_airgap(
        "import",
        bundle,
        "--key",
        signing_key.public,
        "--registry",
        f"{proxy.host}/mirror",
        "--username",
        USERNAME,
        "--password-stdin",
        "--debug",
        input=PASSWORD + "\n",
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("airgap: debug:")]
    assert lines and all(DEBUG_LINE.match(line) for line in lines), lines
    to_registry = [line for line in lines if f"//{proxy.host}/" in line]
    to_tokens = [line for line in lines if f"//{token_server.host}/" in line]
    assert len(to_registry) == len(proxy.requests)  # one line per request, no more, no less
    assert len(to_tokens) == len(token_server.requests) > 0
    assert len(lines) == len(to_registry) + len(to_tokens)
    logged = Counter(
        (match.group(1), int(match.group(3)))
        for match in map(DEBUG_LINE.match, to_registry)
        if match is not None
    )
    assert logged == Counter((record.method, record.status) for record in proxy.requests)
    assert any("scope=repository" in line for line in to_tokens)
    uploads = r"PUT \S+[?&]digest=sha256:[0-9a-f]{64} 201 sent"
    assert any(re.search(uploads, line) for line in lines), "\n".join(lines)
    secrets = (PASSWORD, base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode(), "eyJ")
    for secret in secrets:
        assert secret not in result.stderr + result.stdout
    assert "_state=" not in result.stderr or "_state=…" in result.stderr
    assert not re.search(r"_state=[^…&\s]", result.stderr)
    quiet = run_airgap(
        "import",
        bundle,
        "--key",
        signing_key.public,
        "--registry",
        f"{proxy.host}/again",
        "--username",
        USERNAME,
        "--password-stdin",
        input=PASSWORD + "\n",
    )
    assert quiet.returncode == 0 and "debug" not in quiet.stderr


# -- proxies ------------------------------------------------------------------------------


class RefusingProxy:
    """A forward proxy on loopback that answers every request (CONNECT or not) 403 and
    remembers the request lines it got."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self.requests: list[str] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return
            with connection:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = connection.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                self.requests.append(data.split(b"\r\n", 1)[0].decode("latin-1"))
                connection.sendall(
                    b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                )

    def close(self) -> None:
        self._server.close()


@pytest.fixture
def refusing_proxy() -> Iterator[RefusingProxy]:
    proxy = RefusingProxy()
    yield proxy
    proxy.close()


def _collect(
    spec_images: list[str], tmp_path: Path, key: SigningKey, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    spec = write_spec(tmp_path / "spec.yaml", {"images": spec_images})
    clean = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    output = tmp_path / "o.tar"
    output.unlink(missing_ok=True)
    return subprocess.run(
        [*AIRGAP, "collect", str(spec), "--sign-key", str(key.private), "-o", str(output), "-q"],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.e2e
def test_an_error_through_a_proxy_names_the_proxy(
    tmp_path: Path, signing_key: SigningKey, refusing_proxy: RefusingProxy
) -> None:
    proxy_url = f"http://proxyuser:proxy-s3cret@127.0.0.1:{refusing_proxy.port}"
    env = {"HTTPS_PROXY": proxy_url}
    result = _collect(["registry.example.test/team/app:v1"], tmp_path, signing_key, env)
    line = assert_clean_failure(
        result, 1, f"through proxy http://127.0.0.1:{refusing_proxy.port} (HTTPS_PROXY)"
    )
    assert "registry.example.test" in line and "403" in line
    assert "proxy-s3cret" not in result.stderr and "proxyuser" not in result.stderr
    assert refusing_proxy.requests == ["CONNECT registry.example.test:443 HTTP/1.1"]


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        ("HTTPS_PROXY", "::::", "Invalid port"),
        ("http_proxy", "http://proxyuser:proxy-s3cret@host:bad", "Invalid port: 'bad'"),
        ("ALL_PROXY", "a\x1b[2Jb", "non-printable"),
        ("NO_PROXY", "\u0661\u0662", "IDNA"),
        ("HTTP_PROXY", "http://proxy:99999", "Invalid port: 99999 (1 to 65535)"),
        ("HTTPS_PROXY", "http://proxy:0", "Invalid port: 0"),
    ],
)
def test_a_proxy_variable_httpx_cannot_parse_is_one_line_naming_it(
    tmp_path: Path,
    signing_key: SigningKey,
    source_images: dict[str, TestImage],
    variable: str,
    value: str,
    problem: str,
) -> None:
    # httpx raised InvalidURL from inside the client's constructor: a traceback
    result = _collect([source_images["app"].reference], tmp_path, signing_key, {variable: value})
    upper = variable.upper()
    line = assert_clean_failure(
        result, 2, f"{upper} (or {upper.lower()}) is not a usable proxy setting", problem
    )
    assert "proxy-s3cret" not in line and "\x1b" not in line


@pytest.mark.e2e
def test_a_redirect_to_a_proxied_host_names_the_proxy_and_both_urls(
    tmp_path: Path,
    signing_key: SigningKey,
    refusing_proxy: RefusingProxy,
    release_server: ReleaseServer,
) -> None:
    """A release asset redirects, as on github.com, to another host (the fake GitHub's
    CDN on 127.0.0.2): only 127.0.0.1, localhost and [::1] go direct, so the asset goes
    through HTTP_PROXY, and its failure names the proxy and the URL it failed on."""
    if not release_server.cdn_url.startswith("http://127.0.0.2:"):
        pytest.skip("127.0.0.2 cannot be bound here")
    owner, repo = release_server.new_repo("proxied")
    release_server.add_release(
        owner,
        repo,
        "v1.0.0",
        make_release_files(INFRA, "p-system", ["127.0.0.1:9/never/pulled:v1"], [(1, 0, "v1beta1")]),
    )
    provider = {"name": "proxied", "type": "InfrastructureProvider", "version": "v1.0.0"}
    provider["url"] = release_server.repo_url(owner, repo)
    spec = write_spec(tmp_path / "spec.yaml", {"providers": [provider]})
    clean = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()  # nothing listens there: a proxy that cannot be reached
    for proxy, failure in (
        (f"http://127.0.0.1:{refusing_proxy.port}", "HTTP 403"),
        (f"http://127.0.0.1:{closed_port}", "cannot connect"),
    ):
        result = subprocess.run(
            [*AIRGAP, *collect_args(spec, signing_key.private, tmp_path / "o.tar"), "-q"],
            env={**clean, "HTTP_PROXY": proxy},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        line = assert_clean_failure(result, 1, f"through proxy {proxy} (HTTP_PROXY)", failure)
        assert release_server.cdn_url in line, line
        if failure == "cannot connect":  # a transport failure: where the redirect came from
            assert f"(redirected from {release_server.url}/" in line, line


@pytest.mark.e2e
def test_no_proxy_and_loopback_go_direct(
    tmp_path: Path,
    signing_key: SigningKey,
    refusing_proxy: RefusingProxy,
    source_images: dict[str, TestImage],
) -> None:
    proxy_url = f"http://127.0.0.1:{refusing_proxy.port}"
    everything = {"HTTPS_PROXY": proxy_url, "HTTP_PROXY": proxy_url, "ALL_PROXY": proxy_url}
    # a loopback registry is never proxied (as Go's ProxyFromEnvironment has it)
    result = _collect([source_images["app"].reference], tmp_path, signing_key, everything)
    assert result.returncode == 0, result.stderr
    # NO_PROXY is honoured: straight to a name that does not resolve, not retried
    bypass = {**everything, "NO_PROXY": "example.test"}
    result = _collect(["registry.example.test/team/app:v1"], tmp_path, signing_key, bypass)
    line = assert_clean_failure(result, 1, "cannot resolve the host name")
    assert "proxy" not in line
    assert refusing_proxy.requests == []


@pytest.mark.e2e
def test_a_registry_reached_through_a_plain_http_proxy_names_it(
    tmp_path: Path,
    signing_key: SigningKey,
    refusing_proxy: RefusingProxy,
    registry_factory: RegistryFactory,
) -> None:
    # a plain-HTTP registry by a name that only the proxy could resolve
    env = {"HTTP_PROXY": f"http://127.0.0.1:{refusing_proxy.port}"}
    spec_images = ["registry.example.test:5000/team/app:v1"]
    spec = write_spec(
        tmp_path / "spec.yaml",
        {"images": spec_images, "registries": {"registry.example.test:5000": {"plainHTTP": True}}},
    )
    clean = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    result = subprocess.run(
        [
            *AIRGAP,
            *collect_args(spec, signing_key.private, tmp_path / "o.tar"),
        ],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert_clean_failure(
        result, 1, f"(through proxy http://127.0.0.1:{refusing_proxy.port} (HTTP_PROXY))", "403"
    )
    assert refusing_proxy.requests[0].startswith("GET http://registry.example.test:5000/v2/")
