"""A disconnected host in a network namespace: run as
``unshare -n sh -c 'ip link set lo up && exec python -m tests.harness.offline_host PLAN'``.

Inside, it starts a ``docker-registry`` on loopback (the harness's ``RegistryServer``)
and a tripwire (a loopback listener that records every connection made to it; proxy
variables and pip's index URL point there), runs the plan's steps one after another
as ``sh -ec SCRIPT`` with the step's environment (``@REGISTRY@`` and ``@TRIPWIRE@``
replaced), and writes each step's exit code and output, and the tripwire's count, to
the plan's result file. The test asserts; this only runs and records.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.harness.registry import RegistryServer

STEP_TIMEOUT = 600.0


class Tripwire:
    """A loopback listener that never answers: whoever connects waits in its backlog,
    where ``count`` finds them afterwards (no thread, so nothing is missed by a race)."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(64)
        self.address = f"127.0.0.1:{self.socket.getsockname()[1]}"

    def count(self) -> int:
        self.socket.setblocking(False)
        connections = 0
        while True:
            try:
                connection, _ = self.socket.accept()
            except BlockingIOError:
                return connections
            connections += 1
            connection.close()


def _run_step(step: dict[str, Any], work: Path, replace: dict[str, str]) -> dict[str, Any]:
    def filled(text: str) -> str:
        for key, value in replace.items():
            text = text.replace(key, value)
        return text

    env = {key: filled(value) for key, value in step["env"].items()}
    try:
        done = subprocess.run(
            ["/bin/sh", "-ec", filled(step["script"])],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"name": step["name"], "returncode": None, "stdout": "", "stderr": "timed out"}
    return {
        "name": step["name"],
        "returncode": done.returncode,
        "stdout": done.stdout,
        "stderr": done.stderr,
    }


def main(plan_path: str) -> int:
    plan = json.loads(Path(plan_path).read_text())
    work = Path(plan["work"])
    tripwire = Tripwire()
    registry = RegistryServer(Path(plan["registry_dir"]))
    try:
        replace = {"@REGISTRY@": registry.host, "@TRIPWIRE@": tripwire.address}
        results = [_run_step(step, work, replace) for step in plan["steps"]]
    finally:
        registry.stop()
    document = {"steps": results, "tripwire": tripwire.count(), "registry": registry.host}
    Path(plan["result"]).write_text(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
