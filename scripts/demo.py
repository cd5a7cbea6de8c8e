"""End-to-end demo of airgap on loopback: nothing here reaches beyond 127.0.0.1.

It collects ``bundles/capi-management.yaml``, the complete management-cluster example
(core, kubeadm bootstrap and control plane, Docker with its cluster templates,
cert-manager and the Cluster API operator with its chart), as written, plus one
``registries:`` section: a local registry stands in for registry.k8s.io and quay.io (a
pull mirror, so the bundle keeps the real references), and a fake GitHub serves the
releases the example names, laid out as the real ones are (cluster-api, cert-manager,
cluster-api-operator), through ``GITHUB_API_URL``. The disconnected side verifies the
bundle (writing its review report, ``capi-demo-review.html``), imports it into a TLS +
password registry (twice: the second sends nothing) and asks ``airgap status`` about the
mirror. Everything lands in ./demo-out/.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from airgap.content.kubeadm import CONSTANTS_PATH, kubeadm_images, parse_constants  # noqa: E402
from airgap.providers.types import ProviderType  # noqa: E402
from tests.harness import skopeo  # noqa: E402
from tests.harness.images import CorpusEntry, OciLayout, build_corpus, push_corpus  # noqa: E402
from tests.harness.management import (  # noqa: E402
    CertManagerImages,
    cluster_templates,
    publish_cert_manager,
    publish_operator,
)
from tests.harness.pki import make_pki  # noqa: E402
from tests.harness.realistic import REALISTIC_PROVIDERS, realistic_components  # noqa: E402
from tests.harness.registry import RegistryMode, RegistryServer  # noqa: E402
from tests.harness.releases import ReleaseServer, make_metadata  # noqa: E402

EXAMPLE = ROOT / "bundles" / "capi-management.yaml"
DEMO_PASSWORD = "demo-pass"  # noqa: S105 - a throwaway loopback registry
MIRROR_PREFIX = {"registry.k8s.io": "k8s", "quay.io": "quay"}


def example() -> dict[str, object]:
    """The example spec, as the demo collects it (plus its registries: section)."""
    loaded = yaml.safe_load(EXAMPLE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def versions(spec: dict[str, object]) -> tuple[str, str, str]:
    """Cluster API's, cert-manager's and the operator's versions in the example."""
    providers = spec["providers"]
    assert isinstance(providers, list)
    (capi,) = {str(p["version"]) for p in providers}
    cert_manager, operator = spec["certManager"], spec["operator"]
    assert isinstance(cert_manager, dict) and isinstance(operator, dict)
    return capi, str(cert_manager["version"]), str(operator["version"])


def kubernetes_images(spec: dict[str, object]) -> dict[str, tuple[str, str]]:
    """The kubeadm images of the example's Kubernetes version, as its constants.go says
    (tests/kubeadm holds the excerpt served below), each played by a multi-arch image."""
    found: dict[str, tuple[str, str]] = {}
    for version in kubernetes_versions(spec):
        constants = parse_constants(kubeadm_constants(version), version)
        for image in kubeadm_images(version, constants):
            found[image] = ("multiarch", f"kubeadm {version}")
    return found


def kubernetes_versions(spec: dict[str, object]) -> list[str]:
    section = spec.get("kubernetes")
    assert isinstance(section, dict)
    return [str(v) for v in section["versions"]]


def kubeadm_constants(version: str) -> str:
    return (ROOT / "tests" / "kubeadm" / f"constants-{version}.go").read_text()


def upstream_images(capi: str, cert_manager: str, operator: str) -> dict[str, tuple[str, str]]:
    """Upstream reference -> (corpus image playing it, its role)."""
    return {
        f"registry.k8s.io/cluster-api/cluster-api-controller:{capi}": ("app", "core"),
        f"registry.k8s.io/cluster-api/kubeadm-bootstrap-controller:{capi}": (
            "sidecar",
            "bootstrap",
        ),
        f"registry.k8s.io/cluster-api/kubeadm-control-plane-controller:{capi}": (
            "dockerv2",
            "control-plane",
        ),
        f"registry.k8s.io/cluster-api/capd-manager:{capi}": ("multiarch", "docker"),
        f"quay.io/jetstack/cert-manager-controller:{cert_manager}": ("app", "controller"),
        f"quay.io/jetstack/cert-manager-cainjector:{cert_manager}": ("sidecar", "cainjector"),
        f"quay.io/jetstack/cert-manager-webhook:{cert_manager}": ("multiarch", "webhook"),
        f"registry.k8s.io/capi-operator/cluster-api-operator:{operator}": (
            "dockerlist",
            "operator",
        ),
    }


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


def publish_releases(server: ReleaseServer, spec: dict[str, object]) -> dict[str, str]:
    """The releases the example names, where their default URLs point: Cluster API
    (with the Docker provider's templates), cert-manager and the operator."""
    capi, cert_manager, operator = versions(spec)
    by_role = {role: ref for ref, (_, role) in upstream_images(*versions(spec)).items()}
    minor = int(capi.split(".")[1])
    image_of = {
        ProviderType.CORE: by_role["core"],
        ProviderType.BOOTSTRAP: by_role["bootstrap"],
        ProviderType.CONTROL_PLANE: by_role["control-plane"],
        ProviderType.INFRASTRUCTURE: by_role["docker"],
    }
    # the four providers of the Cluster API release at their real sizes (core ~1.2 MB of
    # CRDs with OpenAPI schemas, webhooks, RBAC, clusterctl variables with defaults),
    # so the demo carries what a real release carries
    encoded = {
        "metadata.yaml": make_metadata([(1, minor - 1, "v1beta1"), (1, minor, "v1beta2")]).encode()
    }
    for provider in REALISTIC_PROVIDERS:
        if provider.repository == "kubernetes-sigs/cluster-api":
            shaped = replace(provider, version=capi)
            text = realistic_components(shaped, [image_of[provider.type]])
            encoded[provider.components_file] = text.encode()
    # the default flavor and a ClusterClass (the addon flavor of the tests is left out)
    templates = cluster_templates(by_role["core"], by_role["docker"])
    encoded |= {name: data for name, data in templates.items() if "addon" not in name}
    server.add_release("kubernetes-sigs", "cluster-api", capi, encoded)
    images = CertManagerImages(
        controller=by_role["controller"],
        cainjector=by_role["cainjector"],
        webhook=by_role["webhook"],
        acmesolver=f"quay.io/jetstack/cert-manager-acmesolver:{cert_manager}",
    )
    publish_cert_manager(server, images, cert_manager)
    publish_operator(server, by_role["operator"], operator)
    for version in kubernetes_versions(spec):  # laid out as raw.githubusercontent.com
        path = f"kubernetes/{version}/{CONSTANTS_PATH}"
        server.add_plain(path, kubeadm_constants(version).encode())
    return {"GITHUB_API_URL": server.api_url}


def write_spec(
    path: Path, spec: dict[str, object], mirror: RegistryServer, releases: ReleaseServer
) -> None:
    """The example, plus the mirror standing in for the upstream registries and the
    fake GitHub's raw files for the Kubernetes source."""
    kubernetes = spec["kubernetes"]
    assert isinstance(kubernetes, dict)
    spec = {
        **spec,
        "kubernetes": {**kubernetes, "url": releases.plain_url("kubernetes")},
        "registries": {
            host: {"mirror": f"{mirror.host}/{prefix}"} for host, prefix in MIRROR_PREFIX.items()
        },
    }
    path.write_text(
        f"# {EXAMPLE.relative_to(ROOT)} as written, plus a registries: section: upstream\n"
        "# registries are pulled through a local mirror, so nothing leaves this machine while\n"
        "# the bundle keeps the real names; kubernetes.url: kubeadm's constants.go from the\n"
        "# fake GitHub's raw files.\n" + yaml.safe_dump(spec, sort_keys=False)
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
                "requiredContent": ["certManager", "operator", "templates", "kubernetes"],
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
        spec = example()
        upstream = upstream_images(*versions(spec)) | kubernetes_images(spec)
        entries = {
            reference: CorpusEntry(corpus, *mirror_reference(reference))
            for reference, (corpus, _role) in upstream.items()
        }
        pushed = push_corpus(layout, mirror, entries)
        for reference, image in pushed.items():
            print(f"  {reference}  (served from {image.reference})")

        step(
            "Publishing the releases the example names on a local fake GitHub "
            "(cluster-api, cert-manager, cluster-api-operator)"
        )
        env = publish_releases(releases, spec)
        print(f"  GITHUB_API_URL={env['GITHUB_API_URL']}")

        step(f"Connected side: key, spec ({EXAMPLE.relative_to(ROOT)}), collect, inspect")
        airgap("keygen", out / "signing.key")
        write_spec(out / "capi-demo.yaml", spec, mirror, releases)
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
        # the review report: one self-contained HTML page a reviewer signs off
        airgap(
            "verify",
            bundle,
            "--key",
            out / "signing.pub",
            "--policy",
            out / "policy.yaml",
            "--report",
            out / "capi-demo-review.html",
        )
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
        # import and status talk to the same registry with the same bundle and key
        mirror_args = [
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
        ]
        import_args = ["import", *mirror_args, "--output-dir", out / "capi-out"]
        airgap(*import_args, stdin=f"{DEMO_PASSWORD}\n")
        print("\n# importing the same bundle again sends nothing:")
        airgap(*import_args, stdin=f"{DEMO_PASSWORD}\n")

        step("Disconnected side: is the mirror complete? (ClusterOperator-style conditions)")
        airgap("status", *mirror_args, stdin=f"{DEMO_PASSWORD}\n")

        step("What the disconnected side gets")
        for path in sorted((out / "capi-out").rglob("*")):
            if path.is_file():
                print(f"  {path.relative_to(out)}")
        print(f"\n# {out / 'capi-out/operator/README.md'}: the install order and the waits")
        print((out / "capi-out/operator/README.md").read_text())
        print(f"# or: clusterctl init --config {out / 'capi-out/clusterctl/clusterctl.yaml'}")
        step("Workload clusters: the Component that makes their nodes pull from the mirror")
        component = out / "capi-out" / "workload" / "node-mirror"
        print(f"# {component / 'kustomization.yaml'}: add it to a generated cluster's")
        print("# kustomization (components:), see docs/workload-clusters.md")
        print((component / "kustomization.yaml").read_text())
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
