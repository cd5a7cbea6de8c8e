#!/usr/bin/env python3
"""Collect of a spec with 20 Helm charts: how long finding their images takes.

    .venv/bin/python benchmarks/chart_timing.py [--repeats 5] [--airgap-path DIR]

Twenty charts shaped like the ones platform teams carry (an ``_helpers.tpl`` image
helper with a registry default, a Deployment, a DaemonSet, a pre-install hook Job, a
``helm test`` Pod, a vendored subchart switched on by a condition) are served from a
classic chart repository on loopback; their images are two tiny ones in a loopback
registry, so nearly all of collect's time is fetching the charts and finding their
images, plus process start-up. Prints the median wall and CPU seconds of the command.
``--airgap-path`` runs another airgap tree (e.g. a ``git archive`` of an older commit)
for before/after comparisons. Not a test: timings.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.provider_timing import _run as run_timed  # noqa: E402
from tests.harness import skopeo  # noqa: E402
from tests.harness.chartrepo import package  # noqa: E402
from tests.harness.images import OciLayout  # noqa: E402
from tests.harness.registry import RegistryServer  # noqa: E402
from tests.harness.releases import ReleaseServer  # noqa: E402

CHARTS = 20

HELPERS = """\
{{- define "app.image" -}}
{{- $registry := default .Values.global.imageRegistry .Values.image.registry -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- printf "%s/%s:%s" $registry .Values.image.repository $tag -}}
{{- end -}}
{{- define "app.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
"""

POD = """\
    metadata:
      labels:
        {{- include "app.labels" . | nindent 8 }}
    spec:
      containers:
        - name: main
          image: {{ include "app.image" . | quote }}
          args: ["--v=2"]
"""

DEPLOYMENT = (
    """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
spec:
  replicas: {{ .Values.replicas }}
  selector:
    matchLabels:
      {{- include "app.labels" . | nindent 6 }}
  template:
"""
    + POD
    + """\
{{- if .Values.sidecar.enabled }}
        - name: sidecar
          image: "{{ .Values.sidecar.image.repository }}:{{ .Values.sidecar.image.tag }}"
{{- end }}
"""
)

DAEMONSET = (
    """\
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ .Release.Name }}-agent
spec:
  selector:
    matchLabels:
      {{- include "app.labels" . | nindent 6 }}
  template:
"""
    + POD
)

HOOK = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-migrate
  annotations:
    helm.sh/hook: pre-install
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: migrate
          image: "{{ .Values.sidecar.image.repository }}:{{ .Values.sidecar.image.tag }}"
"""

TEST_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: {{ .Release.Name }}-test
  annotations:
    helm.sh/hook: test
spec:
  containers:
    - name: test
      image: "{{ .Values.sidecar.image.repository }}:{{ .Values.sidecar.image.tag }}"
"""


def chart(name: str, registry: str, manager: str, sidecar: str) -> bytes:
    """One chart: its own templates and a vendored subchart (a metrics exporter)."""
    sub = package(
        "exporter",
        {
            "Chart.yaml": "apiVersion: v2\nname: exporter\nversion: 0.1.0\n",
            "values.yaml": f"image:\n  repository: {registry}/{sidecar}\n  tag: v1\n",
            "templates/deployment.yaml": (
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: exporter\n"
                "spec:\n  template:\n    spec:\n      containers:\n        - name: e\n"
                '          image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"\n'
            ),
        },
    )
    chart_yaml = (
        f"apiVersion: v2\nname: {name}\nversion: 1.0.0\nappVersion: v1\n"
        "dependencies:\n  - name: exporter\n    version: 0.1.0\n"
        "    condition: exporter.enabled\n"
    )
    values = (
        f"global:\n  imageRegistry: {registry}\nreplicas: 2\n"
        f"image:\n  registry: ''\n  repository: {manager}\n  tag: ''\n"
        f"sidecar:\n  enabled: true\n  image:\n    repository: {registry}/{sidecar}\n"
        "    tag: v1\nexporter:\n  enabled: true\n"
    )
    return package(
        name,
        {
            "Chart.yaml": chart_yaml,
            "values.yaml": values,
            "templates/_helpers.tpl": HELPERS,
            "templates/deployment.yaml": DEPLOYMENT,
            "templates/daemonset.yaml": DAEMONSET,
            "templates/hook.yaml": HOOK,
            "templates/tests/test-connection.yaml": TEST_POD,
            "charts/exporter-0.1.0.tgz": sub,
        },
    )


def publish(releases: ReleaseServer, registry: str, images: tuple[str, str]) -> str:
    """The 20 charts in a classic repository; returns its URL."""
    entries: dict[str, list[dict[str, object]]] = {}
    for number in range(CHARTS):
        name = f"chart{number:02d}"
        data = chart(name, registry, *images)
        releases.add_plain(f"bench-charts/{name}-1.0.0.tgz", data)
        digest = hashlib.sha256(data).hexdigest()
        entries[name] = [
            {"name": name, "version": "1.0.0", "digest": digest, "urls": [f"{name}-1.0.0.tgz"]}
        ]
    index = json.dumps({"apiVersion": "v1", "entries": entries}).encode()
    releases.add_plain("bench-charts/index.yaml", index)
    return releases.plain_url("bench-charts") + "/"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--airgap-path", type=Path, help="PYTHONPATH entry holding airgap/")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="airgap-chart-timing-"))
    skopeo.configure(work / "skopeo")
    source = RegistryServer(work / "source", "plain")
    releases = ReleaseServer().start()
    try:
        layout = OciLayout(work / "layout")
        for name in ("manager", "sidecar"):
            layout.tag(name, layout.add_image([f"chart-timing-{name}"]))
            ref = f"{source.host}/bench-charts/{name}:v1"
            skopeo.copy(layout.ref(name), skopeo.docker_ref(ref, source), dest_registry=source)
        repo = publish(releases, source.host, ("bench-charts/manager", "bench-charts/sidecar"))
        names = [f"chart{number:02d}" for number in range(CHARTS)]
        document = {
            "charts": [{"repo": repo, "name": name, "version": "1.0.0"} for name in names],
            "registries": {source.host: {"plainHTTP": True}},
        }
        spec = work / "spec.yaml"
        spec.write_text(json.dumps(document))  # JSON is YAML
        env = {**os.environ, "AIRGAP_CACHE_DIR": str(work / "cache")}
        if args.airgap_path:
            env["PYTHONPATH"] = str(args.airgap_path.resolve())
        airgap = [sys.executable, "-c", "from airgap.cli import main; main()"]
        key, bundle = work / "k.key", work / "bundle.tar"
        subprocess.run([*airgap, "keygen", str(key)], env=env, cwd=work, check=True)
        samples = []
        for _ in range(args.repeats):
            bundle.unlink(missing_ok=True)
            shutil.rmtree(work / "cache", ignore_errors=True)
            collect = ["collect", str(spec), "--sign-key", str(key), "-o", str(bundle), "-q"]
            seconds, cpu, _ = run_timed([*airgap, *collect], env, work / "phases.json")
            samples.append((seconds, cpu))
        wall = statistics.median(s for s, _ in samples)
        cpu = statistics.median(c for _, c in samples)
        print(f"collect of {CHARTS} charts, median of {len(samples)}: {wall:.3f} s wall, ", end="")
        print(f"{cpu:.3f} s CPU")
    finally:
        releases.stop()
        source.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
