#!/usr/bin/env python3
"""Provider handling alone: collect, configmaps, import and re-import of the five
realistic providers.

    .venv/bin/python benchmarks/provider_timing.py [--repeats 5] [--airgap-path DIR]

The images are two tiny ones, so nearly all of each command's time is provider handling
(fetch, parse, discovery, rewrite, ConfigMaps, CRs) plus process start-up. Prints the
median wall time per command and, when airgap reports them (``AIRGAP_PHASE_TIMES``), the
median seconds of each phase. ``--airgap-path`` runs another airgap tree (e.g. a
``git archive`` of an older commit) for before/after comparisons. Not a test: timings.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.workload import publish_realistic  # noqa: E402
from tests.harness import skopeo  # noqa: E402
from tests.harness.images import OciLayout  # noqa: E402
from tests.harness.registry import RegistryServer  # noqa: E402
from tests.harness.releases import ReleaseServer  # noqa: E402

Times = dict[str, tuple[float, float]]  # phase -> (wall, CPU) seconds


def _run(cmd: list[str], env: dict[str, str], phases: Path) -> tuple[float, float, Times]:
    """Wall and CPU seconds of ``cmd`` (the child's rusage) and its phase times."""
    phases.unlink(missing_ok=True)
    before = os.times()
    started = time.perf_counter()
    result = subprocess.run(cmd, env=env, cwd=phases.parent, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {result.stderr.strip()}")
    raw = json.loads(phases.read_text()) if phases.is_file() else {}
    return seconds, cpu, {k: (v["seconds"], v["cpu_seconds"]) for k, v in raw.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--airgap-path", type=Path, help="PYTHONPATH entry holding airgap/")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="airgap-provider-timing-"))
    skopeo.configure(work / "skopeo")
    source = RegistryServer(work / "source", "plain")
    releases = ReleaseServer().start()
    try:
        layout = OciLayout(work / "layout")
        images = []
        for name in ("manager", "sidecar"):
            layout.tag(name, layout.add_image([f"provider-timing-{name}"]))
            ref = f"{source.host}/bench-providers/{name}:v1"
            skopeo.copy(layout.ref(name), skopeo.docker_ref(ref, source), dest_registry=source)
            images.append(ref)
        spec = work / "spec.yaml"
        providers = publish_realistic(releases, images).entries
        document = {"providers": providers, "registries": {source.host: {"plainHTTP": True}}}
        spec.write_text(json.dumps(document))  # JSON is YAML
        phases = work / "phases.json"
        env = {
            **os.environ,
            "GITHUB_API_URL": releases.api_url,
            "AIRGAP_CACHE_DIR": str(work / "cache"),
            "AIRGAP_PHASE_TIMES": str(phases),
        }
        if args.airgap_path:
            env["PYTHONPATH"] = str(args.airgap_path.resolve())
        airgap = [sys.executable, "-c", "from airgap.cli import main; main()"]
        key, bundle = work / "k.key", work / "bundle.tar"
        subprocess.run([*airgap, "keygen", str(key)], env=env, cwd=work, check=True)
        target_args = ["--key", str(key.with_suffix(".pub")), "--plain-http"]
        results: dict[str, list[tuple[float, float, Times]]] = {}
        for rep in range(args.repeats):
            collect = ["collect", str(spec), "--sign-key", str(key), "-o", str(bundle), "-q"]
            configmaps = ["configmaps", str(bundle), *target_args, "--registry"]
            configmaps += ["127.0.0.1:1/mirror", "--output-dir", str(work / "cm")]
            commands = {"collect": [*airgap, *collect], "configmaps": [*airgap, *configmaps]}
            for name, cmd in commands.items():
                if name == "collect":
                    bundle.unlink(missing_ok=True)
                results.setdefault(name, []).append(_run(cmd, env, phases))
            with RegistryServer(work / f"target{rep}", "plain") as target:
                shutil.rmtree(work / "cache", ignore_errors=True)
                cmd = [*airgap, "import", str(bundle), *target_args, "-q"]
                cmd += ["--registry", f"{target.host}/mirror", "--output-dir", str(work / "out")]
                results.setdefault("import", []).append(_run(cmd, env, phases))
                # the same bundle again into the now-full registry and the same output
                # directory: what a re-import costs (issue 12: < 3% of the import)
                results.setdefault("re-import", []).append(_run(cmd, env, phases))
        print("medians, seconds: wall / CPU")
        for name, samples in results.items():
            wall = statistics.median(s for s, _, _ in samples)
            cpu = statistics.median(c for _, c, _ in samples)
            print(f"{name:10s} command {wall:.3f} / {cpu:.3f}")
            keys = sorted({k for _, _, times in samples for k in times})
            for phase in keys:
                phase_wall = statistics.median(t.get(phase, (0.0, 0.0))[0] for _, _, t in samples)
                phase_cpu = statistics.median(t.get(phase, (0.0, 0.0))[1] for _, _, t in samples)
                print(f"{'':10s} {phase:18s} {phase_wall:.3f} / {phase_cpu:.3f}")
            if keys:
                mine = [k for k in keys if k.startswith("providers/")]
                total = [sum(t.get(k, (0.0, 0.0))[0] for k in mine) for _, _, t in samples]
                total_cpu = [sum(t.get(k, (0.0, 0.0))[1] for k in mine) for _, _, t in samples]
                print(
                    f"{'':10s} {'providers, total':18s} {statistics.median(total):.3f} / "
                    f"{statistics.median(total_cpu):.3f}"
                )
    finally:
        releases.stop()
        source.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
