"""Real node runtimes on loopback: a private containerd daemon, and podman with its own roots.

Neither touches the host's runtimes: containerd gets its own root, state, socket and no
TCP listener (the CRI plugin, which would open a streaming port, is disabled); podman gets
its own storage, run root, tmp dir and ``$HOME``, so it reads registries.conf drop-ins
and per-host CAs from ``$HOME/.config/containers/`` exactly as it would from
``/etc/containers/``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

CTR_TIMEOUT = 120
START_TIMEOUT = 30


def missing_runtime() -> str | None:
    """Why the runtime tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "containerd and podman pulls need root (run the suite as root)"
    for tool in ("containerd", "ctr", "podman"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/bootstrap.sh installs it)"
    return None


class Containerd:
    """``containerd`` on a private unix socket; ``ctr`` talks to it."""

    def __init__(self) -> None:
        # unix socket paths are limited to 108 bytes: keep them short, under /tmp
        self.directory = Path(tempfile.mkdtemp(prefix="airgap-ctrd-", dir="/tmp"))
        self.socket = self.directory / "c.sock"
        self.log_file = self.directory / "containerd.log"
        config = self.directory / "config.toml"
        config.write_text(
            "\n".join(
                [
                    "version = 2",
                    f'root = "{self.directory / "root"}"',
                    f'state = "{self.directory / "state"}"',
                    'disabled_plugins = ["io.containerd.grpc.v1.cri"]',
                    "[grpc]",
                    f'  address = "{self.socket}"',
                    "[ttrpc]",
                    f'  address = "{self.directory / "t.sock"}"',
                    '[plugins."io.containerd.internal.v1.opt"]',
                    f'  path = "{self.directory / "opt"}"',
                    "",
                ]
            )
        )
        with self.log_file.open("wb") as log:
            self._process = subprocess.Popen(
                ["containerd", "--config", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"containerd exited: {self.log_file.read_text()[-2000:]}")
            if self.socket.exists() and self.ctr("version", check=False).returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError(f"containerd not ready: {self.log_file.read_text()[-2000:]}")

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            ["ctr", "--address", str(self.socket), "--namespace", "airgap-test", *args],
            capture_output=True,
            text=True,
            timeout=CTR_TIMEOUT,
            check=False,
        )
        if check:
            assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result

    def image_digests(self) -> dict[str, str]:
        """Image name -> the digest of its top manifest or index."""
        lines = self.ctr("images", "ls").stdout.splitlines()[1:]
        return {line.split()[0]: line.split()[2] for line in lines if line.strip()}

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
        shutil.rmtree(self.directory, ignore_errors=True)


class Podman:
    """podman with private storage and a private ``$HOME`` standing in for /etc/containers."""

    def __init__(self) -> None:
        # podman refuses a run root longer than 50 characters: keep it short, under /tmp
        self.directory = Path(tempfile.mkdtemp(prefix="airgap-podman-", dir="/tmp"))
        self.home = self.directory / "home"
        self.config = self.home / ".config" / "containers"
        self.config.mkdir(parents=True)
        # a per-user registries.conf makes containers/image read only the per-user drop-ins
        (self.config / "registries.conf").write_text("unqualified-search-registries = []\n")
        policy = {"default": [{"type": "insecureAcceptAnything"}]}
        (self.config / "policy.json").write_text(json.dumps(policy))
        self.auth_file = self.directory / "auth.json"

    def install(self, containers_dir: Path) -> None:
        """What a node does with ``mirror/containers/``: copy it to /etc/containers/."""
        shutil.copytree(containers_dir, self.config, dirs_exist_ok=True)

    def podman(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home)}
        if self.auth_file.exists():  # podman refuses a REGISTRY_AUTH_FILE that is missing
            env["REGISTRY_AUTH_FILE"] = str(self.auth_file)
        result = subprocess.run(
            [
                "podman",
                "--root",
                str(self.directory / "storage"),
                "--runroot",
                str(self.directory / "run"),
                "--tmpdir",
                str(self.directory / "tmp"),
                "--storage-driver",
                "vfs",
                "--cgroup-manager",
                "cgroupfs",
                "--events-backend",
                "none",
                *args,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=CTR_TIMEOUT,
            check=False,
        )
        if check:
            assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
