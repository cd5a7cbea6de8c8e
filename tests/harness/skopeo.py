"""Thin, hermetic wrappers around the ``skopeo`` CLI.

skopeo is the independent reference implementation the tests compare airgap against
(push the corpus, read back what a registry *really* serves).  Every call runs with an
isolated auth file, registries.conf, signature policy and TMPDIR so the host's container
configuration can never leak into a test, and failures raise with skopeo's stderr.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from tests.harness.tiers import need_tool

__all__ = [
    "RegistryLike",
    "SkopeoError",
    "configure",
    "copy",
    "digest_of",
    "docker_ref",
    "list_tags",
    "raw_manifest",
    "raw_manifest_oci",
    "registry_flags",
    "run",
]

SKOPEO = os.environ.get("AIRGAP_TEST_SKOPEO_BIN", "skopeo")
DEFAULT_TIMEOUT = 300.0


class RegistryLike(Protocol):
    """What the wrappers need to know about a registry (``RegistryServer`` fits)."""

    host: str
    scheme: str
    cert_dir: Path | None
    username: str | None
    password: str | None


class SkopeoError(RuntimeError):
    """skopeo exited non-zero; ``stderr`` holds its explanation."""

    def __init__(self, args: Sequence[str], returncode: int, stderr: str) -> None:
        super().__init__(f"skopeo failed ({returncode}): {' '.join(args)}\n{stderr.strip()}")
        self.args_ = list(args)
        self.returncode = returncode
        self.stderr = stderr


_workdir: Path | None = None


def configure(workdir: Path) -> None:
    """Put skopeo's isolated config files under ``workdir`` (called by conftest)."""
    global _workdir
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "auth.json").write_text('{"auths": {}}\n')
    (workdir / "registries.conf").write_text("# hermetic: no mirrors, no short names\n")
    (workdir / "policy.json").write_text(
        json.dumps({"default": [{"type": "insecureAcceptAnything"}]}) + "\n"
    )
    (workdir / "registries.d").mkdir(exist_ok=True)
    (workdir / "tmp").mkdir(exist_ok=True)
    _workdir = workdir


def _ensure_workdir() -> Path:
    if _workdir is None:
        # Outside pytest (ad-hoc scripts): fall back to a private temp dir.
        configure(Path(tempfile.mkdtemp(prefix="airgap-skopeo-")))
    assert _workdir is not None
    return _workdir


def _env() -> dict[str, str]:
    workdir = _ensure_workdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
    }
    env.update(
        {
            "REGISTRY_AUTH_FILE": str(workdir / "auth.json"),
            "CONTAINERS_REGISTRIES_CONF": str(workdir / "registries.conf"),
            "TMPDIR": str(workdir / "tmp"),
            "NO_PROXY": "127.0.0.1,localhost,::1",
        }
    )
    return env


def run(args: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT) -> bytes:
    """Run ``skopeo <global flags> ARGS``; return stdout, raise :class:`SkopeoError`."""
    workdir = _ensure_workdir()
    cmd = [
        need_tool("skopeo", SKOPEO),
        "--policy",
        str(workdir / "policy.json"),
        "--registries.d",
        str(workdir / "registries.d"),
        *args,
    ]
    proc = subprocess.run(
        cmd, capture_output=True, env=_env(), timeout=timeout, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        raise SkopeoError(cmd, proc.returncode, proc.stderr.decode(errors="replace"))
    return proc.stdout


def digest_of(data: bytes) -> str:
    """``sha256:<hex>`` of raw bytes (a manifest's digest is the hash of its exact bytes)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def registry_flags(registry: RegistryLike | None, prefix: str = "") -> list[str]:
    """TLS/credential flags for ``registry``; ``prefix`` is ``""``, ``"src-"`` or ``"dest-"``."""
    if registry is None:
        return [f"--{prefix}tls-verify=false"]
    flags: list[str] = []
    if registry.scheme == "http":
        # Plain HTTP registry: containers/image only falls back to http:// without TLS verify.
        flags.append(f"--{prefix}tls-verify=false")
    elif registry.cert_dir is not None:
        flags += [f"--{prefix}tls-verify=true", f"--{prefix}cert-dir", str(registry.cert_dir)]
    if registry.username is not None and registry.password is not None:
        flags += [f"--{prefix}creds", f"{registry.username}:{registry.password}"]
    else:
        flags.append(f"--{prefix}no-creds")
    return flags


def docker_ref(ref: str, registry: RegistryLike | None = None) -> str:
    """``docker://HOST/REPO:TAG`` for ``ref``; a ref without ``registry.host`` gets it prefixed."""
    ref = ref.removeprefix("docker://")
    if registry is not None and not ref.startswith(registry.host + "/"):
        ref = f"{registry.host}/{ref}"
    return "docker://" + ref


def raw_manifest(ref: str, *, registry: RegistryLike | None) -> bytes:
    """Exact manifest bytes the registry serves for ``ref`` (tag or ``@sha256:...``)."""
    return run(["inspect", "--raw", *registry_flags(registry), docker_ref(ref, registry)])


def raw_manifest_oci(layout_dir: Path, ref_name: str) -> bytes:
    """Exact manifest bytes stored in an OCI layout under ``ref_name`` (or ``@digest``)."""
    return run(["inspect", "--raw", f"oci:{layout_dir}:{ref_name}"])


def list_tags(repository: str, *, registry: RegistryLike | None) -> list[str]:
    """Tags of ``repository`` (without host) as the registry lists them."""
    out = run(["list-tags", *registry_flags(registry), docker_ref(repository, registry)])
    tags: list[str] = json.loads(out).get("Tags") or []
    return tags


def copy(
    src: str,
    dest: str,
    *,
    src_registry: RegistryLike | None = None,
    dest_registry: RegistryLike | None = None,
    all_images: bool = True,
    format: str | None = None,
    preserve_digests: bool = False,
    extra_args: Sequence[str] = (),
) -> None:
    """``skopeo copy SRC DEST`` with transport-qualified refs (``oci:DIR:NAME``, ``docker://``).

    TLS/credential flags are added only for ``docker://`` sides, from the given registries.
    """
    args = ["copy", "--retry-times", "0"]
    if all_images:
        args.append("--all")
    if format is not None:
        args += ["--format", format]
    if preserve_digests:
        args.append("--preserve-digests")
    if src.startswith("docker://"):
        args += registry_flags(src_registry, "src-")
    if dest.startswith("docker://"):
        args += registry_flags(dest_registry, "dest-")
    args += [*extra_args, src, dest]
    run(args)
