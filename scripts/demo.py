"""End-to-end demo of airgap on loopback: nothing here reaches beyond 127.0.0.1.

Connected side: a local registry stands in for registry.k8s.io and quay.io (configured as
a pull mirror in the bundle spec, so the bundle keeps the real references) and a fake
GitHub serves Cluster API releases. airgap collects them into a signed bundle, then the
disconnected side verifies it. Everything lands in ./demo-out/.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from airgap.providers.types import ProviderType  # noqa: E402
from tests.harness import skopeo  # noqa: E402
from tests.harness.images import CorpusEntry, OciLayout, build_corpus, push_corpus  # noqa: E402
from tests.harness.pki import make_pki  # noqa: E402
from tests.harness.registry import RegistryMode, RegistryServer  # noqa: E402
from tests.harness.releases import ReleaseServer, make_components, make_metadata  # noqa: E402

CAPI = "v1.9.4"
UPSTREAM_IMAGES = {
    # corpus image -> the upstream reference it plays in the demo
    "app": f"registry.k8s.io/cluster-api/cluster-api-controller:{CAPI}",
    "sidecar": f"registry.k8s.io/cluster-api/kubeadm-bootstrap-controller:{CAPI}",
    "dockerv2": f"registry.k8s.io/cluster-api/kubeadm-control-plane-controller:{CAPI}",
    "multiarch": f"registry.k8s.io/cluster-api/capd-manager:{CAPI}",
    "dockerlist": "quay.io/jetstack/cert-manager-controller:v1.16.1",
}
DEMO_PASSWORD = "demo-pass"  # noqa: S105 - a throwaway loopback registry
MIRROR_PREFIX = {"registry.k8s.io": "k8s", "quay.io": "quay"}


def step(title: str) -> None:
    print(f"\n=== {title}", flush=True)


def airgap(*args: object, env: dict[str, str] | None = None, stdin: str | None = None) -> None:
    command = [str(ROOT / ".venv/bin/airgap"), *map(str, args)]
    shown = "$ airgap " + " ".join(shlex.quote(str(a)) for a in args)
    print(shown + (" <<< '********'" if stdin else ""), flush=True)
    subprocess.run(command, check=True, env={**os.environ, **(env or {})}, input=stdin, text=True)


def mirror_reference(upstream: str) -> tuple[str, str]:
    host, _, rest = upstream.partition("/")
    repository, _, tag = rest.rpartition(":")
    return f"{MIRROR_PREFIX[host]}/{repository}", tag


def publish_releases(server: ReleaseServer) -> dict[str, str]:
    files = {
        "metadata.yaml": make_metadata([(1, 8, "v1beta1"), (1, 9, "v1beta1")]),
        "core-components.yaml": make_components(
            ProviderType.CORE, "capi-system", [UPSTREAM_IMAGES["app"]]
        ),
        "bootstrap-components.yaml": make_components(
            ProviderType.BOOTSTRAP, "capi-kubeadm-bootstrap-system", [UPSTREAM_IMAGES["sidecar"]]
        ),
        "control-plane-components.yaml": make_components(
            ProviderType.CONTROL_PLANE,
            "capi-kubeadm-control-plane-system",
            [UPSTREAM_IMAGES["dockerv2"]],
        ),
        "infrastructure-components-development.yaml": make_components(
            ProviderType.INFRASTRUCTURE, "capd-system", [UPSTREAM_IMAGES["multiarch"]]
        ),
    }
    for tag in ("v1.8.9", CAPI):
        server.add_release(
            "kubernetes-sigs", "cluster-api", tag, {k: v.encode() for k, v in files.items()}
        )
    return {"GITHUB_API_URL": server.api_url}


def write_spec(path: Path, mirror: RegistryServer) -> None:
    spec = {
        "providers": [
            {"name": "cluster-api", "type": "CoreProvider", "version": "latest"},
            {"name": "kubeadm", "type": "BootstrapProvider", "version": CAPI},
            {"name": "kubeadm", "type": "ControlPlaneProvider", "version": CAPI},
            {"name": "docker", "type": "InfrastructureProvider", "version": CAPI},
        ],
        "images": [UPSTREAM_IMAGES["dockerlist"]],
        "registries": {
            host: {"mirror": f"{mirror.host}/{prefix}"} for host, prefix in MIRROR_PREFIX.items()
        },
    }
    path.write_text(
        "# Bundle spec written by the demo: upstream registries are pulled through a local\n"
        "# mirror, so nothing leaves this machine while the bundle keeps the real names.\n"
        + yaml.safe_dump(spec, sort_keys=False)
    )


def write_policy(path: Path) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "allowedRegistries": ["registry.k8s.io", "quay.io/jetstack/*"],
                "forbiddenTags": ["latest"],
                "requiredPlatforms": ["linux/amd64", "linux/arm64"],
                "maxAge": "30d",
                "requiredProviderTypes": ["CoreProvider", "InfrastructureProvider"],
            },
            sort_keys=False,
        )
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / "demo-out")
    args = parser.parse_args()
    out: Path = args.out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    work = Path(tempfile.mkdtemp(prefix="airgap-demo-"))
    skopeo.configure(work / "skopeo")
    servers: list[RegistryServer] = []
    releases = ReleaseServer().start()
    try:
        step("Starting a local registry that stands in for registry.k8s.io and quay.io")
        pki = make_pki(work / "pki")
        mirror = RegistryServer(work / "mirror", RegistryMode.PLAIN, pki=pki)
        servers.append(mirror)
        layout = OciLayout(work / "corpus")
        build_corpus(layout)
        entries = {
            name: CorpusEntry(name, *mirror_reference(upstream))
            for name, upstream in UPSTREAM_IMAGES.items()
        }
        pushed = push_corpus(layout, mirror, entries)
        for name, image in pushed.items():
            print(f"  {UPSTREAM_IMAGES[name]}  (served from {image.reference})")

        step("Publishing Cluster API releases on a local fake GitHub")
        env = publish_releases(releases)
        print(f"  GITHUB_API_URL={env['GITHUB_API_URL']}")

        step("Connected side: key, spec, collect, inspect")
        airgap("keygen", out / "signing.key")
        write_spec(out / "capi-demo.yaml", mirror)
        bundle = out / "capi-demo.tar"
        airgap(
            "collect",
            out / "capi-demo.yaml",
            "--sign-key",
            out / "signing.key",
            "-o",
            bundle,
            env=env,
        )
        airgap("inspect", bundle)

        step("Disconnected side: verify signature, digests, providers and policy")
        write_policy(out / "policy.yaml")
        airgap("verify", bundle, "--key", out / "signing.pub", "--policy", out / "policy.yaml")
        with (out / "capi-demo.spdx.json").open("w") as sbom:
            print(
                f"$ airgap verify {bundle} --key {out / 'signing.pub'} --sbom spdx > "
                f"{out / 'capi-demo.spdx.json'}"
            )
            subprocess.run(
                [
                    str(ROOT / ".venv/bin/airgap"),
                    "verify",
                    str(bundle),
                    "--key",
                    str(out / "signing.pub"),
                    "--sbom",
                    "spdx",
                ],
                check=True,
                stdout=sbom,
            )
        step("Disconnected side: a TLS registry with a password (the local registry)")
        local = RegistryServer(
            work / "local", RegistryMode.BASIC, pki=pki, username="admin", password=DEMO_PASSWORD
        )
        servers.append(local)
        assert local.ca_file is not None
        shutil.copy(local.ca_file, out / "local-ca.pem")
        target = f"{local.host}/capi"
        import_args = [
            "import",
            bundle,
            "--key",
            out / "signing.pub",
            "--registry",
            target,
            "--ca-file",
            out / "local-ca.pem",
            "--username",
            "admin",
            "--password-stdin",
            "--output-dir",
            out / "capi-out",
        ]
        airgap(*import_args, stdin=f"{DEMO_PASSWORD}\n")
        print("\n# importing the same bundle again sends nothing:")
        airgap(*import_args, stdin=f"{DEMO_PASSWORD}\n")

        step("What the disconnected side gets")
        for path in sorted((out / "capi-out").rglob("*")):
            if path.is_file():
                print(f"  {path.relative_to(out)}")
        print(
            f"\n# kubectl apply --server-side -k {out / 'capi-out/operator'}"
            "   (Cluster API operator; server-side, see the README)"
        )
        print(f"# clusterctl init --config {out / 'capi-out/clusterctl/clusterctl.yaml'}")
        step(f"Done: everything is in {out}")
        return 0
    except subprocess.CalledProcessError as exc:
        print(f"demo: step failed with exit code {exc.returncode}", file=sys.stderr)
        return 1
    finally:
        releases.stop()
        for server in servers:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
