#!/usr/bin/env python3
"""airgap benchmark: collect, import, re-import and verify against skopeo, openssl and
the registry's raw ingest limit, on loopback registries this script starts itself.

    .venv/bin/python benchmarks/run.py [--images 40] [--repeats 3] [--layer-scale 1.0] [--scale]
                                       [--out bench-out/] [--quick] [--profile]

Writes OUT/results.json, prints a table and (full runs) updates the Benchmark section
of the top-level README. See benchmarks/README.md for what is measured and how.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import report, scale, serving  # noqa: E402
from benchmarks.measure import (  # noqa: E402
    Runner,
    Sample,
    dump_json,
    fresh_registry,
    hermetic_env,
    machine_info,
    raw_download,
    raw_ingest,
    read_through,
    recycle_pages,
    registry_has_blobs,
    registry_pid,
    settle_page_cache,
    skopeo_cmd,
)
from benchmarks.workload import (  # noqa: E402
    GIB,
    MIB,
    ImageSet,
    PublishedProviders,
    Workload,
    blob_repositories,
    publish_realistic,
)
from tests.harness import skopeo  # noqa: E402
from tests.harness.registry import REGISTRY_BINARY, RegistryServer  # noqa: E402
from tests.harness.releases import ReleaseServer  # noqa: E402

TARGET_PREFIX = "mirror"
# just-freed pages before a scale-run writer: no more than memory can hold anyway
SCALE_FRESH_PAGES = 4 * GIB
# manager images of the five realistic providers: the first main images (the spec
# lists them again as plain images, so the bytes moved stay those of the main set)
PROVIDER_IMAGES = 6
SERVE_PARALLEL = 8  # blobs pulled at once from airgap serve and docker-registry
# the scale run's download reference: curl's GETs this many at a time (the main run's
# download limit varies by ~2% between 4, 8 and 16)
SCALE_DOWNLOAD_PARALLEL = 8


def snapshot_airgap(out: Path, source: str) -> dict[str, Any]:
    """Freeze the airgap package the benchmark runs: others may edit the working tree
    while a run is going. ``head``: the committed tree; ``worktree``: a copy of it now."""
    snapshot = out / "airgap-src"
    shutil.rmtree(snapshot, ignore_errors=True)
    snapshot.mkdir(parents=True)

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    commit = git("rev-parse", "--short=12", "HEAD")
    if source == "head":
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "HEAD", "airgap"], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(snapshot)], input=archive.stdout, check=True)
        dirty = False
    else:
        shutil.copytree(
            ROOT / "airgap", snapshot / "airgap", ignore=shutil.ignore_patterns("__pycache__")
        )
        dirty = bool(git("status", "--porcelain", "--", "airgap"))
    # byte-compiled like an installed package (pip compiles at install time), so no run
    # pays for compiling airgap's sources, even with PYTHONDONTWRITEBYTECODE set
    compileall.compile_dir(snapshot / "airgap", quiet=1)
    return {"source": source, "commit": commit, "dirty": dirty, "path": str(snapshot)}


def airgap_command() -> list[str]:
    script = Path(sys.executable).parent / "airgap"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "from airgap.cli import main; main()"]


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out: Path = args.out.resolve()
        self.work = self.out / "work"
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)
        self.env = hermetic_env(self.out / "env")
        self.airgap_tree = snapshot_airgap(self.out, args.airgap_source)
        # every airgap command imports the frozen copy (PYTHONPATH precedes the editable
        # install's finder), not whatever the working tree holds mid-run
        self.env["PYTHONPATH"] = self.airgap_tree["path"]
        # the realistic provider releases come from a fake GitHub on loopback; every
        # airgap command writes its phase times (airgap/core/phases.py) for provider lines
        self.releases = ReleaseServer().start()
        self.env["GITHUB_API_URL"] = self.releases.api_url
        self.phase_file = self.out / "env" / "phases.json"
        self.env["AIRGAP_PHASE_TIMES"] = str(self.phase_file)
        shutil.rmtree(self.out / "logs", ignore_errors=True)
        self.runner = Runner(self.out / "logs", self.env)
        self.airgap = airgap_command()
        self.samples: dict[str, list[Sample]] = {}
        self.phase_detail: dict[str, list[dict[str, dict[str, float]]]] = {}
        self.sizes: dict[str, int] = {}
        self.rows: list[report.Row] = []
        self.workload = Workload(
            self.out,
            images=args.images,
            scale=args.layer_scale,
            small_count=max(args.small_counts),
            big_size=args.big_mib * MIB,
            log=self.log,
        )
        self.started = time.monotonic()
        self.load_start = _load()
        self.page_cache_dropped = False

    def log(self, message: str) -> None:
        elapsed = time.monotonic() - getattr(self, "started", time.monotonic())
        print(f"[{elapsed:7.1f}s] {message}", flush=True)

    # -- bookkeeping ------------------------------------------------------------------

    def record(self, key: str, phase: str, tool: str, size: int, sample: Sample) -> None:
        if key not in self.samples:
            self.samples[key] = []
            self.sizes[key] = size
            self.rows.append(report.Row(key, phase, tool, size))
        self.samples[key].append(sample)
        rate = size / MIB / sample.seconds if sample.seconds else 0.0
        self.log(
            f"  {key:24s} {sample.seconds:8.2f}s {rate:8.1f} MiB/s "
            f"rss {sample.rss_kib / 1024:6.1f} MiB  cpu {sample.cpu_seconds:6.2f}s "
            f"+ registry {sample.server_cpu_seconds:6.2f}s"
        )

    # -- setup ------------------------------------------------------------------------

    def setup(self) -> RegistryServer:
        self.log(f"out: {self.out}")
        tree = self.airgap_tree
        state = "with uncommitted changes" if tree["dirty"] else "clean"
        self.log(f"airgap: {tree['source']} at {tree['commit']} ({state}), from {tree['path']}")
        self.workload.prepare()
        for image_set in (self.workload.main, self.workload.big, self.workload.small):
            self.log(f"workload {image_set.name}: {image_set.summary()}")
        source = self.workload.start_source()
        self.source_pid = registry_pid(source)
        self.log(f"source registry {source.host}")
        images = self.workload.references(self.workload.main)[:PROVIDER_IMAGES]
        self.providers: PublishedProviders = publish_realistic(self.releases, images)
        self.log(f"providers: {self.providers.summary()}")
        env_dir = self.out / "env"
        self.key = env_dir / "bench.key"
        self.pub = env_dir / "bench.pub"
        self.runner.run([*self.airgap, "keygen", str(self.key), "--force"], "keygen")
        self.small_sets = {
            count: self.workload.small.subset(count, self.workload.layout)
            for count in self.args.small_counts
        }
        self.specs = {
            "main": self.spec("main", self.workload.main),
            "big": self.spec("big", self.workload.big),
            **{f"small{c}": self.spec(f"small{c}", s) for c, s in self.small_sets.items()},
        }
        return source

    def spec(self, name: str, image_set: ImageSet) -> Path:
        assert self.workload.registry is not None
        host = self.workload.registry.host
        lines = []
        if name == "main":  # the realistic providers ride along with the main images
            lines.append("providers:")
            lines += [
                f"  - {{name: {p['name']}, type: {p['type']}, version: {p['version']}}}"
                for p in self.providers.entries
            ]
        lines.append("images:")
        lines += [f"  - {ref}" for ref in self.workload.references(image_set)]
        lines += ["registries:", f'  "{host}": {{plainHTTP: true}}']
        path = self.out / "env" / f"{name}.yaml"
        path.write_text("\n".join(lines) + "\n")
        return path

    # -- commands ---------------------------------------------------------------------

    def collect(self, spec: str, bundle: Path) -> list[str]:
        bundle.unlink(missing_ok=True)
        return [
            *self.airgap,
            "collect",
            str(self.specs[spec]),
            "--sign-key",
            str(self.key),
            "-o",
            str(bundle),
            "-q",
        ]

    def import_(
        self, bundle: Path, registry: RegistryServer, output_dir: Path | None = None
    ) -> list[str]:
        outputs = ["--output-dir", str(output_dir)] if output_dir else []
        return [
            *self.airgap,
            "import",
            str(bundle),
            "--key",
            str(self.pub),
            "--registry",
            f"{registry.host}/{TARGET_PREFIX}",
            "--plain-http",
            "-q",
            *outputs,
        ]

    def configmaps(self, bundle: Path, registry: RegistryServer, output_dir: Path) -> list[str]:
        return [
            *self.airgap,
            "configmaps",
            str(bundle),
            "--key",
            str(self.pub),
            "--registry",
            f"{registry.host}/{TARGET_PREFIX}",
            "--plain-http",
            "--output-dir",
            str(output_dir),
        ]

    def measured(
        self, cmd: list[str], name: str, row: report.Row, *, watch: list[int] | None = None
    ) -> None:
        """Run a main-workload airgap command and record it as ``row``, then its
        provider handling (the sum of its ``providers/…`` phase times) as a line of its
        own, ``providers/<command>``."""
        self.phase_file.unlink(missing_ok=True)
        sample = self.runner.run(cmd, name, watch=watch or [])
        self.record(row.key, row.phase, row.tool, row.bytes, sample)
        times = json.loads(self.phase_file.read_text()) if self.phase_file.is_file() else {}
        phases = [value for key, value in times.items() if key.startswith("providers/")]
        command = row.key.split("/", 1)[0]
        self.record(
            f"providers/{command}",
            f"{command}: provider handling",
            f"airgap ({len(self.providers.entries)} providers)",
            self.providers.bytes,
            Sample(
                sum(_phase(p)[0] for p in phases), 0, cpu_seconds=sum(_phase(p)[1] for p in phases)
            ),
        )
        self.phase_detail.setdefault(command, []).append(times)

    def cold(self) -> None:
        """Forget earlier verifications: the next import hashes the whole bundle."""
        shutil.rmtree(self.env["AIRGAP_CACHE_DIR"], ignore_errors=True)

    def verify(self, bundle: Path) -> list[str]:
        return [*self.airgap, "verify", str(bundle), "--key", str(self.pub)]

    def skopeo_pull(self, layout: Path) -> list[list[str]]:
        source = self.workload.registry
        assert source is not None
        flags = skopeo.registry_flags(source, "src-")
        return [
            skopeo_cmd(
                self.out / "env",
                "copy",
                "--all",
                *flags,
                f"docker://{source.host}/{image.repository}:{image.tag}",
                f"oci:{layout}:{image.name}",
            )
            for image in self.workload.main.images
        ]

    def skopeo_push(self, layout: Path, registry: RegistryServer) -> list[list[str]]:
        flags = skopeo.registry_flags(registry, "dest-")
        return [
            skopeo_cmd(
                self.out / "env",
                "copy",
                "--all",
                "--preserve-digests",
                *flags,
                f"oci:{layout}:{image.name}",
                f"docker://{registry.host}/{TARGET_PREFIX}/{image.repository}:{image.tag}",
            )
            for image in self.workload.main.images
        ]

    # -- one repetition -----------------------------------------------------------------

    def alternate(self, rep: int, *steps: Callable[[], None]) -> None:
        """Run ``steps`` in order on even repetitions, reversed on odd ones."""
        for step in steps if rep % 2 == 0 else reversed(steps):
            step()

    def settle(self) -> None:
        """Every repetition starts from the same memory state (see settle_page_cache).
        Not in --quick runs: they check the harness, not timings, and need not empty the
        machine's page cache."""
        if self.args.quick:
            return
        started = time.monotonic()
        inputs = [self.workload.layout.root, self.workload.root / "source-registry"]
        self.page_cache_dropped = settle_page_cache(inputs)
        state = "dropped" if self.page_cache_dropped else "not dropped (needs root)"
        self.log(f"  page cache {state}, workload re-read in {time.monotonic() - started:.1f}s")

    def fresh_pages(self, size: int) -> None:
        """Untimed: just-freed pages for the next writer (see recycle_pages)."""
        recycle_pages(self.work, size)

    def repetition(self, rep: int) -> None:
        self.settle()
        main = self.workload.main
        size = main.bytes
        bundle = self.work / "main.tar"
        layout = self.work / "skopeo-oci"
        run = self.runner.run
        source = [self.source_pid]

        def airgap_collect() -> None:
            self.fresh_pages(size)
            row = report.Row("collect/airgap", "collect", "airgap", size)
            self.measured(self.collect("main", bundle), "collect-airgap", row, watch=source)

        def skopeo_collect() -> None:
            shutil.rmtree(layout, ignore_errors=True)
            self.fresh_pages(size)
            pull = self.skopeo_pull(layout)
            sample = self.runner.run_loop(pull, "collect-skopeo", watch=source)
            self.record("collect/skopeo", "collect", "skopeo copy loop", size, sample)

        # the raw download limit next to the collects, in the same memory state
        self.alternate(rep, airgap_collect, skopeo_collect, lambda: self.raw_get(rep))

        with (
            fresh_registry(self.work / "target-airgap") as target_a,
            fresh_registry(self.work / "target-skopeo") as target_s,
        ):

            def airgap_import(key: str = "import/airgap", phase: str = "import") -> None:
                cmd = self.import_(bundle, target_a, self.work / "import-out")
                watch = [registry_pid(target_a)]
                row = report.Row(key, phase, "airgap --output-dir", size)
                if key == "import/airgap":
                    self.cold()  # the re-import may use what this import verified
                    self.fresh_pages(size)
                    self.measured(cmd, "import-airgap", row, watch=watch)
                else:
                    sample = run(cmd, key.replace("/", "-"), watch=watch)
                    self.record(key, phase, row.tool, size, sample)

            def skopeo_import(key: str = "import/skopeo", phase: str = "import") -> None:
                if key == "import/skopeo":
                    self.fresh_pages(size)
                sample = self.runner.run_loop(
                    self.skopeo_push(layout, target_s),
                    key.replace("/", "-"),
                    watch=[registry_pid(target_s)],
                )
                self.record(key, phase, "skopeo copy loop", size, sample)

            # the raw limit is measured here, next to the imports, in the same memory
            # state: with the bundle and layout cached, new pages cost more reclaim
            self.alternate(rep, airgap_import, skopeo_import, lambda: self.raw(rep))
            if rep == 0:
                self.check_targets(target_a, target_s)
            self.alternate(
                rep,
                lambda: airgap_import("reimport/airgap", "re-import (unchanged)"),
                lambda: skopeo_import("reimport/skopeo", "re-import (unchanged)"),
            )
            # operator ConfigMaps, CRs and a clusterctl repository, no image pushed
            cmd = self.configmaps(bundle, target_a, self.work / "configmaps-out")
            row = report.Row("configmaps/airgap", "configmaps", "airgap", self.providers.bytes)
            self.measured(cmd, "configmaps-airgap", row)

        bundle_size = bundle.stat().st_size

        def airgap_verify() -> None:
            read_through(bundle)  # the same page-cache state for both (read_through)
            sample = run(self.verify(bundle), "verify-airgap")
            self.record("verify/airgap", "verify", "airgap", bundle_size, sample)

        def openssl_verify() -> None:
            read_through(bundle)
            sample = run(["openssl", "dgst", "-sha256", str(bundle)], "verify-openssl")
            self.record("verify/openssl", "verify", "openssl dgst -sha256", bundle_size, sample)

        self.alternate(rep, airgap_verify, openssl_verify)
        self.serve(rep, bundle)
        shutil.rmtree(layout, ignore_errors=True)
        bundle.unlink()
        self.page_cache(size)

        self.big(rep)
        self.linearity(rep)

    def scale_run(self) -> None:
        """Once, after the repetitions: collect, verify and a cold import of 2,000 images
        (benchmarks/scale.py), for peak RSS against the 40-image run and time per byte.

        Time per byte is also compared with 40 images of the very same shape (the same
        generator, layer sizes, base sharing and sparse content; ``SHAPE_REPEATS`` runs,
        medians): the 40-image main run has five times fewer images per GiB and random
        rather than sparse content, so against it the ratio mixes growth in size with a
        change of workload; against the same shape it is growth alone."""
        images, total = self.args.scale_images, int(self.args.scale_gib * GIB)
        shape_images = min(scale.SHAPE_IMAGES, images)
        shape_set = self._scale_set("shape-workload", shape_images, total * shape_images // images)
        scale_set = self._scale_set("scale-workload", images, total)
        need = scale.required_disk(scale_set.bytes)
        free = scale.free_bytes(self.work)
        if free < need:
            raise SystemExit(
                f"error: the scale run needs {need / GIB:.0f} GiB free in {self.work} "
                f"(bundle and target registry), {free / GIB:.0f} GiB are"
            )
        for _ in range(scale.SHAPE_REPEATS):
            self._scale_commands("shape", self.out / "shape-workload", shape_set)
        self._scale_commands("scale", self.out / "scale-workload", scale_set)

    def _scale_set(self, name: str, images: int, total: int) -> scale.ScaleSet:
        """A generated scale workload under ``out/NAME``, made once and cached."""
        root = self.out / name
        marker = root / "generated.json"
        cached = json.loads(marker.read_text()) if marker.is_file() else {}
        if cached.get("plan") == [images, total, scale.GENERATOR]:
            return scale.ScaleSet(cached["references"], cached["bytes"], cached["blobs"])
        self.log(f"{name}: generating {images} images (sparse, once, cached)")
        marker.unlink(missing_ok=True)
        scale_set = scale.generate(root / "registry" / "storage", images, total)
        plan = {"plan": [images, total, scale.GENERATOR]}
        marker.write_text(json.dumps({**plan, **scale_set.__dict__}))
        return scale_set

    def _scale_commands(self, label: str, root: Path, scale_set: scale.ScaleSet) -> None:
        """curl's download, collect (both from a registry over ``root``'s storage), verify,
        openssl and a cold import of one generated set, recorded as ``LABEL-COMMAND/TOOL``.
        curl and openssl are the machine's own reading and writing of the same bytes at
        the same size: how far a growth in time per byte is the machine's."""
        self.settle()
        source = RegistryServer(root / "registry", "plain")
        try:
            spec = self.out / "env" / f"{label}.yaml"
            images = [f"  - {source.host}/{ref}" for ref in scale_set.references]
            registries = ["registries:", f'  "{source.host}": {{plainHTTP: true}}']
            spec.write_text("\n".join(["images:", *images, *registries]) + "\n")
            bundle = self.work / f"{label}.tar"
            size = scale_set.bytes
            self.log(f"{label}: {len(images)} images, {size / GIB:.1f} GiB of distinct blobs")
            self._scale_download(label, source, root / "registry" / "storage")
            self.fresh_pages(min(size, SCALE_FRESH_PAGES))
            cmd = [*self.airgap, "collect", str(spec), "--sign-key", str(self.key)]
            sample = self.runner.run(
                [*cmd, "-o", str(bundle), "-q"], f"{label}-collect", watch=[registry_pid(source)]
            )
            self.record(f"{label}-collect/airgap", f"{label}: collect", "airgap", size, sample)
        finally:
            source.stop()
        bundle_size = bundle.stat().st_size
        # verify and openssl each read the bundle cold, at both sizes: 20 GiB cannot stay
        # in the page cache after collect, so the 40-image baseline must not either
        settle_page_cache([])
        sample = self.runner.run(self.verify(bundle), f"{label}-verify")
        self.record(f"{label}-verify/airgap", f"{label}: verify", "airgap", bundle_size, sample)
        # the same bundle hashed by openssl, as cold: what reading it costs at this size
        settle_page_cache([])
        sample = self.runner.run(["openssl", "dgst", "-sha256", str(bundle)], f"{label}-openssl")
        self.record(
            f"{label}-verify/openssl",
            f"{label}: verify",
            "openssl dgst -sha256",
            bundle_size,
            sample,
        )
        with fresh_registry(self.work / f"target-{label}") as target:
            self.cold()
            self.fresh_pages(min(size, SCALE_FRESH_PAGES))
            sample = self.runner.run(
                self.import_(bundle, target), f"{label}-import", watch=[registry_pid(target)]
            )
            self.record(f"{label}-import/airgap", f"{label}: import", "airgap", size, sample)
        bundle.unlink()

    def _scale_download(self, label: str, source: RegistryServer, storage: Path) -> None:
        """The set's configs and layers fetched by curl into one new file, as the main
        run's download limit: collect's reference at this size."""
        repositories, sizes = scale.layer_sources(storage)
        size = sum(sizes.values())
        self.fresh_pages(min(size, SCALE_FRESH_PAGES))
        sample = raw_download(
            source,
            repositories,
            sizes,
            SCALE_DOWNLOAD_PARALLEL,
            self.env,
            self.work / "raw",
            self.work / f"{label}-download.bin",
        )
        tool = f"curl --parallel x{SCALE_DOWNLOAD_PARALLEL}"
        self.record(f"{label}-collect/curl", f"{label}: collect", tool, size, sample)

    def page_cache(self, size: int) -> None:
        """Calibration: writing as many bytes as the workload into a new file (dd, page
        cache only). On this VM freshly allocated memory is slow to touch, so this varies."""
        target = self.work / "page-cache.bin"
        count = max(1, size // MIB)
        cmd = ["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={count}"]
        sample = self.runner.run(cmd, "page-cache-dd")
        self.record("pagecache/dd", "page-cache write (new file)", "dd bs=1M", count * MIB, sample)
        target.unlink()

    def check_targets(self, *registries: RegistryServer) -> None:
        """Untimed: both tools really pushed every image (and nothing was skipped)."""
        for registry in registries:
            repos = [f"{TARGET_PREFIX}/{image.repository}" for image in self.workload.main.images]
            for repo, image in zip(repos, self.workload.main.images, strict=True):
                raw = skopeo.raw_manifest(f"{registry.host}/{repo}:{image.tag}", registry=registry)
                if not raw:
                    raise RuntimeError(f"{registry.host}/{repo} is missing")
        self.log("  check: every image is in both target registries")

    def serve(self, rep: int, bundle: Path) -> None:
        """Pulls served by ``airgap serve`` from the bundle against docker-registry
        serving the same blobs from its store (benchmarks/serving.py)."""
        assert self.workload.registry is not None
        if not hasattr(self, "blob_repositories"):
            self.blob_repositories = blob_repositories(self.workload.layout, self.workload.main)
        sizes = self.workload.main.layer_blobs
        size = sum(sizes.values())
        served = serving.Served(self.airgap, bundle, self.pub, self.env)
        tool = f"curl --parallel x{SERVE_PARALLEL}"

        def pull(key: str, host: str, pid: int, what: str) -> None:
            sample = serving.pull_all(
                host,
                pid,
                self.blob_repositories,
                sizes,
                SERVE_PARALLEL,
                self.env,
                self.work / "serve",
            )
            self.record(key, "serve pulls", f"{what} ({tool})", size, sample)

        registry = self.workload.registry
        try:
            self.alternate(
                rep,
                lambda: pull("serve/airgap", served.host, served.pid, "airgap serve"),
                lambda: pull("serve/registry", registry.host, self.source_pid, "docker-registry"),
            )
        finally:
            served.stop()

    def raw(self, rep: int) -> None:
        blobs = self.workload.main.layer_blobs
        paths = {digest: self.workload.layout.blob_path(digest) for digest in blobs}
        size = sum(blobs.values())
        order = list(self.args.raw_parallel)
        for parallel in order if rep % 2 == 0 else reversed(order):
            self.fresh_pages(size)
            with fresh_registry(self.work / "target-raw") as target:
                sample = raw_ingest(target, paths, blobs, parallel, self.env, self.work / "raw")
                if rep == 0 and not registry_has_blobs(target, "raw/blobs", list(blobs)[:5]):
                    raise RuntimeError("raw ingest: uploaded blobs are not in the registry")
            self.record(
                f"raw/curl-x{parallel}",
                "raw registry ingest",
                f"curl --parallel x{parallel}",
                size,
                sample,
            )

    def raw_get(self, rep: int) -> None:
        """The raw download limit: curl --parallel GETs of the main set's configs and
        layers from the source registry into one new file, as collect writes its bundle
        (same parallelisms and order as the ingest limit)."""
        assert self.workload.registry is not None
        if not hasattr(self, "blob_repositories"):
            self.blob_repositories = blob_repositories(self.workload.layout, self.workload.main)
        sizes = self.workload.main.layer_blobs
        size = sum(sizes.values())
        order = list(self.args.raw_parallel)
        for parallel in order if rep % 2 == 0 else reversed(order):
            self.fresh_pages(size)
            sample = raw_download(
                self.workload.registry,
                self.blob_repositories,
                sizes,
                parallel,
                self.env,
                self.work / "raw",
                self.work / "raw-download.bin",
            )
            self.record(
                f"rawget/curl-x{parallel}",
                "raw registry download",
                f"curl --parallel x{parallel}",
                size,
                sample,
            )

    def big(self, rep: int) -> None:
        size = self.workload.big.bytes
        bundle = self.work / "big.tar"
        source = [self.source_pid]
        self.fresh_pages(size)
        sample = self.runner.run(self.collect("big", bundle), "big-collect", watch=source)
        self.record("big-collect/airgap", "1 GiB layer: collect", "airgap", size, sample)
        sample = self.runner.run(self.verify(bundle), "big-verify")
        self.record("big-verify/airgap", "1 GiB layer: verify", "airgap", size, sample)
        self.cold()
        self.fresh_pages(size)
        with fresh_registry(self.work / "target-big") as target:
            sample = self.runner.run(
                self.import_(bundle, target), "big-import", watch=[registry_pid(target)]
            )
        self.record("big-import/airgap", "1 GiB layer: import", "airgap", size, sample)
        bundle.unlink(missing_ok=True)

    def linearity(self, rep: int) -> None:
        counts = list(self.args.small_counts)
        for count in counts if rep % 2 == 0 else reversed(counts):
            image_set = self.small_sets[count]
            bundle = self.work / f"small{count}.tar"
            sample = self.runner.run(
                self.collect(f"small{count}", bundle),
                f"small{count}-collect",
                watch=[self.source_pid],
            )
            self.record(
                f"small{count}-collect/airgap",
                f"{count} tiny images: collect",
                "airgap",
                image_set.bytes,
                sample,
            )
            self.cold()
            with fresh_registry(self.work / "target-small") as target:
                sample = self.runner.run(
                    self.import_(bundle, target),
                    f"small{count}-import",
                    watch=[registry_pid(target)],
                )
            self.record(
                f"small{count}-import/airgap",
                f"{count} tiny images: import",
                "airgap",
                image_set.bytes,
                sample,
            )
            sample = self.runner.run(self.verify(bundle), f"small{count}-verify")
            self.record(
                f"small{count}-verify/airgap",
                f"{count} tiny images: verify",
                "airgap",
                image_set.bytes,
                sample,
            )
            bundle.unlink(missing_ok=True)

    # -- profiles ---------------------------------------------------------------------

    def profile(self) -> None:
        """py-spy (wall clock, idle included, every thread) over each airgap command."""
        from benchmarks.profile_summary import summarise_file

        py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        if not Path(py_spy).is_file():
            self.log("profile: py-spy not found (.venv/bin/pip install py-spy); skipped")
            return
        profiles = self.out / "profiles"
        profiles.mkdir(exist_ok=True)
        bundle = self.work / "main.tar"

        def record(name: str, cmd: list[str], gil: bool) -> None:
            suffix = ".gil" if gil else ""
            target = profiles / f"{name}{suffix}.speedscope.json"
            wrapped = [py_spy, "record", "--rate", "200", "--threads", "--nonblocking"]
            wrapped += ["--gil"] if gil else ["--idle"]
            wrapped += ["--format", "speedscope", "-o", str(target), "--", *cmd]
            sample = self.runner.run(wrapped, f"profile-{name}{suffix}")
            summary = target.with_suffix(".txt")
            summary.write_text(summarise_file(target))
            what = "GIL holders" if gil else "wall clock"
            self.log(f"profile {name} ({what}) {sample.seconds:.1f}s -> {summary}")

        for gil in (False, True):
            record("collect", self.collect("main", bundle), gil)
            self.cold()
            with fresh_registry(self.work / "target-profile") as target:
                record("import", self.import_(bundle, target), gil)
                record("reimport", self.import_(bundle, target), gil)
            record("verify", self.verify(bundle), gil)

    # -- the whole run ------------------------------------------------------------------

    def results(self) -> dict[str, Any]:
        measurements = {
            key: report.summarise(samples, self.sizes[key]) for key, samples in self.samples.items()
        }
        raw_keys = [key for key in measurements if key.startswith("raw/")]
        get_keys = [key for key in measurements if key.startswith("rawget/")]
        metrics = report.derive(measurements, raw_keys, get_keys)
        metrics["small_counts"] = list(self.args.small_counts)
        workload = {
            "providers": self.providers.summary(),
            "main": self.workload.main.summary(),
            "big": self.workload.big.summary(),
            **{f"small{c}": s.summary() for c, s in self.small_sets.items()},
        }
        return {
            "command": self.args.command_line,
            "params": {
                "images": self.args.images,
                "repeats": self.args.repeats,
                "scale": self.args.layer_scale,
                "scale_run": self.args.scale,
                "quick": self.args.quick,
                "big_mib": self.args.big_mib,
                "small_counts": list(self.args.small_counts),
                "raw_parallel": list(self.args.raw_parallel),
                "airgap_concurrency": 8,
                "page_cache_dropped_each_repetition": self.page_cache_dropped,
            },
            "airgap": self.airgap_tree,
            "machine": {**machine_info(), "loadavg_start": self.load_start, "loadavg_end": _load()},
            "workload": workload,
            "rows": [row.__dict__ for row in self.rows],
            "measurements": measurements,
            "metrics": metrics,
            "targets": report.evaluate(metrics),
            "provider_phases": self.phase_detail,
            "total_seconds": round(time.monotonic() - self.started, 1),
        }

    def run(self) -> dict[str, Any] | None:
        self.setup()
        try:
            for rep in range(self.args.repeats):
                self.log(f"repetition {rep + 1}/{self.args.repeats}")
                self.repetition(rep)
                shutil.rmtree(self.work, ignore_errors=True)
                self.work.mkdir()
            if self.args.scale:
                self.scale_run()
            results = self.results() if self.args.repeats else None
            if self.args.profile:
                self.profile()
        finally:
            self.workload.stop()
            self.releases.stop()
            self.runner.close()
            if not self.args.keep:
                shutil.rmtree(self.work, ignore_errors=True)
        return results


def _phase(value: Any) -> tuple[float, float]:
    """(wall, CPU) seconds of one phase; older airgap wrote wall seconds alone."""
    if isinstance(value, dict):
        return float(value["seconds"]), float(value["cpu_seconds"])
    return float(value), 0.0


def _load() -> list[float]:
    """1/5/15-minute load averages: other work on the machine shows up here."""
    return [round(x, 2) for x in os.getloadavg()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=None, help="main images (default 40)")
    parser.add_argument("--repeats", type=int, default=None, help="repetitions (default 5)")
    parser.add_argument("--layer-scale", type=float, default=None, help="layer size factor (1.0)")
    parser.add_argument(
        "--scale",
        action="store_true",
        help="also the scale run: 2,000 images, >= 20 GiB bundle (~45 GiB of free disk)",
    )
    parser.add_argument(
        "--scale-images", type=int, default=scale.SCALE_IMAGES, help="scale run images (2000)"
    )
    parser.add_argument(
        "--scale-gib", type=float, default=scale.SCALE_BYTES / GIB, help="scale run GiB (20)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out", help="output dir")
    parser.add_argument("--quick", action="store_true", help="tiny workload, 1 repeat")
    parser.add_argument("--big-mib", type=int, default=None, help="big layer MiB (1024)")
    parser.add_argument(
        "--small-counts", default=None, help="tiny-image counts for linearity (40,400)"
    )
    parser.add_argument("--raw-parallel", default=None, help="curl parallelisms (4,8,16)")
    parser.add_argument("--profile", action="store_true", help="also py-spy each command")
    parser.add_argument("--no-readme", action="store_true", help="do not update README.md")
    parser.add_argument(
        "--readme-only", action="store_true", help="rewrite README.md from OUT/results.json"
    )
    parser.add_argument("--keep", action="store_true", help="keep bundles and layouts")
    parser.add_argument(
        "--airgap-source",
        choices=["head", "worktree"],
        default="head",
        help="benchmark the committed airgap (head) or a copy of the working tree",
    )
    args = parser.parse_args(argv)
    quick = args.quick
    args.images = args.images or (6 if quick else 40)
    args.repeats = args.repeats if args.repeats is not None else (1 if quick else 5)
    args.layer_scale = args.layer_scale or (0.02 if quick else 1.0)
    args.big_mib = args.big_mib or (32 if quick else GIB // MIB)
    small = args.small_counts or ("4,40" if quick else "40,400")
    args.small_counts = sorted({int(c) for c in small.split(",")})
    raw = args.raw_parallel or ("8" if quick else "4,8,16")
    args.raw_parallel = [int(p) for p in raw.split(",")]
    args.command_line = shlex.join(
        [".venv/bin/python", "benchmarks/run.py", *(sys.argv[1:] if argv is None else argv)]
    )
    return args


def missing_tools() -> list[str]:
    """What the run needs and cannot find (scripts/bootstrap.sh installs most of it)."""
    needed = [REGISTRY_BINARY, skopeo.SKOPEO, "curl", "openssl"]
    return [tool for tool in needed if shutil.which(tool) is None]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.readme_only:
        saved_path = args.out.resolve() / "results.json"
        if not saved_path.is_file():
            sys.exit(f"error: {saved_path} does not exist; run the benchmark first")
        saved = json.loads(saved_path.read_text())
        _update_readmes(saved)
        print(f"updated the Benchmark sections of the READMEs from {args.out}")
        return 0
    missing = missing_tools()
    if missing:
        sys.exit(f"error: not found: {', '.join(missing)} (see benchmarks/README.md)")
    bench = Bench(args)
    results = bench.run()
    if results is None:
        return 0
    out = args.out.resolve()
    dump_json(out / "results.json", results)
    print()
    print(report.table(results))
    print()
    print(report.targets_table(results))
    print(f"\nwrote {out / 'results.json'} in {results['total_seconds']:.0f}s")
    if not args.quick and not args.no_readme:
        _update_readmes(results)
        print(f"updated the Benchmark section of {ROOT / 'README.md'}")
    return 0


def _update_readmes(results: dict[str, Any]) -> None:
    """The current table, in the top-level README and in the method's own."""
    report.update_readme(ROOT / "README.md", results)
    report.update_readme(ROOT / "benchmarks" / "README.md", results, method="#benchmark")


if __name__ == "__main__":
    sys.exit(main())
