"""Peak RSS per command against the number of images: what each image costs in memory.

    .venv/bin/python benchmarks/rss_per_image.py [--counts 40,400,2000] [--airgap-path DIR]

Issue 12's scale target asks for every command's peak RSS on 2,000 images to be within
10% of its peak on 40, so the per-image memory must be near zero. This measures it on
tiny images (one config and one unique 1 KiB layer each, written straight into a
registry's filesystem storage as ``benchmarks/scale.py`` does, so nothing is pushed):
``collect``, ``verify`` and ``import`` of N images, each started by
``benchmarks/launcher.py`` (the exact peak of that process, see benchmarks/README.md
"Peak RSS"), and prints MiB per command and the growth in bytes per image. A few
minutes for 40/400/2,000. ``--airgap-path`` measures another checkout's ``airgap``
package (``git archive REV airgap | tar -x -C DIR``) for a before/after comparison.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.measure import Runner, fresh_registry, hermetic_env  # noqa: E402
from benchmarks.scale import _Storage  # noqa: E402
from tests.harness.registry import RegistryServer  # noqa: E402

MIB = 1 << 20


def generate(storage_root: Path, count: int) -> list[str]:
    """``count`` tiny single-platform images in distribution's storage layout."""
    storage = _Storage(storage_root)
    references = []
    for i in range(count):
        layer = hashlib.shake_256(f"rss-layer-{i}".encode()).digest(1024)
        repository = f"rss/i{i:04d}"
        storage.put_image(repository, {"rss": str(i)}, [(storage.put_bytes(layer), len(layer))])
        references.append(f"{repository}:v1")
    return references


def airgap_command(path: Path | None) -> list[str]:
    if path is None:
        script = Path(sys.executable).parent / "airgap"
        if script.is_file():
            return [str(script)]
    # -P: the current directory (the repository, whose airgap/ would shadow the other
    # checkout on PYTHONPATH) is not put first on sys.path
    return [sys.executable, "-P", "-c", "from airgap.cli import main; main()"]


def measure(work: Path, counts: list[int], airgap_path: Path | None) -> dict[int, dict[str, float]]:
    env = hermetic_env(work / "env")
    if airgap_path is not None:
        env["PYTHONPATH"] = str(airgap_path.resolve())
    runner = Runner(work / "logs", env)
    airgap = airgap_command(airgap_path)
    key, pub = work / "rss.key", work / "rss.pub"
    runner.run([*airgap, "keygen", str(key), "--force"], "keygen")
    results: dict[int, dict[str, float]] = {}
    try:
        for count in counts:
            storage = work / f"source-{count}"
            shutil.rmtree(storage, ignore_errors=True)
            references = generate(storage / "storage", count)
            source = RegistryServer(storage, "plain")
            bundle = work / f"rss-{count}.tar"
            try:
                spec = work / f"spec-{count}.yaml"
                lines = ["images:", *(f"  - {source.host}/{r}" for r in references)]
                lines += ["registries:", f'  "{source.host}": {{plainHTTP: true}}']
                spec.write_text("\n".join(lines) + "\n")
                cmd = [*airgap, "collect", str(spec), "--sign-key", str(key), "-o", str(bundle)]
                collect = runner.run([*cmd, "-q", "--force"], f"collect-{count}")
            finally:
                source.stop()
                shutil.rmtree(storage, ignore_errors=True)
            verify = runner.run([*airgap, "verify", str(bundle), "--key", str(pub)], "verify")
            with fresh_registry(work / f"target-{count}") as target:
                imported = runner.run(
                    [
                        *airgap,
                        "import",
                        str(bundle),
                        "--key",
                        str(pub),
                        "--registry",
                        f"{target.host}/mirror",
                        "--plain-http",
                        "-q",
                    ],
                    f"import-{count}",
                )
            bundle.unlink()
            results[count] = {
                name: sample.rss_kib / 1024
                for name, sample in (("collect", collect), ("verify", verify), ("import", imported))
            }
            print(json.dumps({"images": count, **results[count]}), flush=True)
    finally:
        runner.close()
    return results


def report(results: dict[int, dict[str, float]]) -> None:
    counts = sorted(results)
    first, last = counts[0], counts[-1]
    print(f"\n| command | {' | '.join(f'{c} images' for c in counts)} | growth | ratio |")
    print(f"| --- |{' ---: |' * (len(counts) + 2)}")
    for name in ("collect", "verify", "import"):
        peaks = [results[c][name] for c in counts]
        per_image = (peaks[-1] - peaks[0]) * MIB / max(1, last - first)
        print(
            f"| {name} | {' | '.join(f'{p:.1f} MiB' for p in peaks)} "
            f"| {per_image:.0f} B/image | {peaks[-1] / peaks[0]:.2f}x |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="40,400,2000", help="image counts (40,400,2000)")
    parser.add_argument("--airgap-path", type=Path, help="directory holding another airgap/")
    parser.add_argument("--work", type=Path, help="work directory (a temporary one)")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    work = args.work or Path(tempfile.mkdtemp(prefix="airgap-rss-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        report(measure(work.resolve(), counts, args.airgap_path))
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
