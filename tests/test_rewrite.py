"""Pure tests for target mapping, in-place components rewriting and mirror configs."""

from __future__ import annotations

import tomllib

import pytest
import yaml

from airgap.core.errors import InputError
from airgap.mirror import nodeconfig
from airgap.rewrite.mapping import Target, map_images
from airgap.rewrite.references import Lookup, rewrite_images

pytestmark = pytest.mark.unit

COMPONENTS = """\
# leading comment stays
apiVersion: v1
kind: Namespace
metadata:
  name: capi-system
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: capi-controller-manager   # trailing comment
spec:
  template:
    spec:
      initContainers:
      - name: init
        image: "busybox"
      containers:
      - name: manager
        image: registry.k8s.io/cluster-api/cluster-api-controller:v1.9.4  # the manager
        args: ["--feature-gates=MachinePool=${EXP_MACHINE_POOL:=true}"]
      - image: '${CAPD_IMAGE:=registry.k8s.io/cluster-api/capd-manager:v1.9.4}'
        name: capd
      - name: other
        image: quay.io/not/in-bundle:v1
"""


def _lookup(table: dict[str, str]) -> Lookup:
    return table.get


def test_rewrite_changes_only_bundle_image_values() -> None:
    table = {
        "registry.k8s.io/cluster-api/cluster-api-controller:v1.9.4": "reg.local/capi/c:v1.9.4@sha256:aa",
        "registry.k8s.io/cluster-api/capd-manager:v1.9.4": "reg.local/capi/d:v1.9.4@sha256:bb",
        "docker.io/library/busybox:latest": "reg.local/capi/library/busybox:latest",
    }
    text, changes = rewrite_images(COMPONENTS, _lookup(table))
    assert len(changes) == 3
    old_lines, new_lines = COMPONENTS.splitlines(), text.splitlines()
    assert len(old_lines) == len(new_lines)
    differing = [(o, n) for o, n in zip(old_lines, new_lines, strict=True) if o != n]
    assert len(differing) == 3 and all("image:" in o for o, _ in differing)
    assert '        image: "reg.local/capi/library/busybox:latest"' in new_lines
    assert "        image: reg.local/capi/c:v1.9.4@sha256:aa  # the manager" in new_lines
    assert "      - image: '${CAPD_IMAGE:=reg.local/capi/d:v1.9.4@sha256:bb}'" in new_lines
    assert "quay.io/not/in-bundle:v1" in text and "${EXP_MACHINE_POOL:=true}" in text
    assert text.startswith("# leading comment stays\n")


def test_rewrite_keeps_crlf_line_endings() -> None:
    source = "containers:\r\n- image: nginx\r\n  name: x\r\n"
    text, _ = rewrite_images(source, _lookup({"docker.io/library/nginx:latest": "r/n:1"}))
    assert text == "containers:\r\n- image: r/n:1\r\n  name: x\r\n"


def test_an_ipv6_target_is_quoted_where_the_value_was_plain() -> None:
    """``image: [::1]:5000/x`` is a YAML flow sequence, not a string: import into an
    IPv6 registry wrote components that no longer parsed (and then blamed them)."""
    source = (
        "containers:\n"
        "- image: registry.k8s.io/a:v1\n"
        "  name: plain\n"
        "- image: 'registry.k8s.io/a:v1'  # quoted already\n"
        "- image: ${A_IMAGE:=registry.k8s.io/a:v1}\n"
    )
    target = "[::1]:5000/capi/a:v1@sha256:" + "a" * 64
    text, changes = rewrite_images(source, _lookup({"registry.k8s.io/a:v1": target}))
    assert len(changes) == 3
    assert f'- image: "{target}"\n' in text
    assert f"- image: '{target}'  # quoted already\n" in text
    # quoted too: clusterctl substitutes the default into the text before parsing it
    assert f'- image: "${{A_IMAGE:={target}}}"\n' in text
    substituted = text.replace(f"${{A_IMAGE:={target}}}", target)
    images = [c["image"] for c in yaml.safe_load(substituted)["containers"]]
    assert images == [target, target, target]


def test_mapping_drops_host_keeps_path_adds_prefix() -> None:
    target = Target.parse("registry.local:5000/capi")
    (mapping,) = map_images(["registry.k8s.io/cluster-api/cluster-api-controller:v1.9.4"], target)
    assert (
        str(mapping.target) == "registry.local:5000/capi/cluster-api/cluster-api-controller:v1.9.4"
    )
    assert mapping.pinned("sha256:" + "a" * 64).endswith(":v1.9.4@sha256:" + "a" * 64)


def test_collision_is_an_error_unless_source_registry_is_kept() -> None:
    target = Target.parse("registry.local:5000")
    refs = ["registry.k8s.io/x/y:v1", "quay.io/x/y:v2"]
    with pytest.raises(InputError, match="--keep-source-registry"):
        map_images(refs, target)
    kept = map_images([*refs, "127.0.0.1:5000/x/y:v3"], target, keep_registry=True)
    assert [m.target.repository for m in kept] == [
        "registry.k8s.io/x/y",
        "quay.io/x/y",
        "127.0.0.1-5000/x/y",
    ]


def test_same_repository_twice_is_not_a_collision() -> None:
    mappings = map_images(["quay.io/x/y:v1", "quay.io/x/y:v2"], Target.parse("r.local"))
    assert [str(m.target) for m in mappings] == ["r.local/x/y:v1", "r.local/x/y:v2"]


@pytest.mark.parametrize("bad", ["", "/nohost", "UPPER CASE/x"])
def test_bad_target_is_a_usage_error(bad: str) -> None:
    with pytest.raises(InputError):
        Target.parse(bad)


@pytest.mark.parametrize(
    ("registry", "message"),
    [
        ("reg.local:0065536/x", "the port must be 1 to 65535"),  # leading zeros counted
        ("reg.local:99999/x", "the port must be 1 to 65535"),
        ("reg.local:" + "9" * 5000 + "/x", "the port must be 1 to 65535"),
        ("HTTPS://reg.local/x", "is not a valid registry/prefix"),  # not "the port"
        ("reg.local:/x", "is not a valid registry/prefix"),
    ],
)
def test_a_target_port_is_checked_as_the_number_it_is(registry: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as caught:
        Target.parse(registry)
    assert len(str(caught.value)) < 200  # the value is quoted briefly
    assert Target.parse("reg.local:000080/x").host == "reg.local:000080"


def test_node_configs_for_an_ipv6_target_name_it_as_their_server() -> None:
    """containerd 1.6 and 1.7 refuse ``[host."http://[::1]:5000"]`` (a bracket in a
    table header), and containerd 2 skips the same table written inline (it orders
    hosts by their headers): an IPv6 mirror is the file's ``server``, its settings at
    the top, with the empty ``[host]`` table 1.6 requires."""
    target = Target.parse("[::1]:5000/capi")
    access = nodeconfig.MirrorAccess(ca=True)
    text = nodeconfig.containerd_hosts_toml("registry.k8s.io", target, False, access)
    assert not any(
        line.startswith("[host.") or line.startswith("host") for line in text.splitlines()
    )
    hosts = tomllib.loads(text)
    assert hosts == {
        "server": "https://[::1]:5000/v2/capi",
        "capabilities": ["pull", "resolve"],
        "override_path": True,
        "ca": "ca.crt",
        "host": {},
    }
    own = tomllib.loads(nodeconfig.containerd_target_hosts_toml(target, access))
    assert own == {
        "server": "https://[::1]:5000",
        "capabilities": ["pull", "resolve"],
        "ca": "ca.crt",
        "host": {},
    }


def test_node_configs_parse_and_name_the_hosts() -> None:
    target = Target.parse("registry.local:5000/capi")
    mappings = map_images(["registry.k8s.io/a/b:v1", "docker.io/library/nginx:1"], target)
    hosts = tomllib.loads(
        nodeconfig.containerd_hosts_toml(
            "registry.k8s.io", target, False, nodeconfig.MirrorAccess(ca=True)
        )
    )
    assert hosts["server"] == "https://registry.k8s.io"
    (mirror,) = hosts["host"].items()
    assert mirror == (
        "https://registry.local:5000/v2/capi",
        {"capabilities": ["pull", "resolve"], "override_path": True, "ca": "ca.crt"},
    )
    docker = tomllib.loads(nodeconfig.containerd_hosts_toml("docker.io", target, False))
    assert docker["server"] == "https://registry-1.docker.io"
    conf = tomllib.loads(nodeconfig.registries_conf(mappings, target, False))
    assert [(r["prefix"], r["mirror"][0]["location"]) for r in conf["registry"]] == [
        ("docker.io", "registry.local:5000/capi"),
        ("registry.k8s.io", "registry.local:5000/capi"),
    ]
    idms, itms = yaml.safe_load_all(nodeconfig.mirror_sets(mappings, target, True))
    assert idms["kind"] == "ImageDigestMirrorSet" and itms["kind"] == "ImageTagMirrorSet"
    assert idms["spec"]["imageDigestMirrors"][1] == {
        "source": "registry.k8s.io",
        "mirrors": ["registry.local:5000/capi/registry.k8s.io"],
    }
    override = yaml.safe_load(
        nodeconfig.clusterctl_images(
            {"cluster-api": ["registry.k8s.io/a/b:v1"]}, {str(m.source): m for m in mappings}
        )
    )
    assert override == {
        "images": {"cluster-api/b": {"repository": "registry.local:5000/capi/a", "tag": "v1"}}
    }


def test_node_files_carry_the_ca_where_each_runtime_reads_it() -> None:
    target = Target.parse("registry.local:5000/capi")
    mappings = map_images(["registry.k8s.io/a/b:v1", "quay.io/c/d:v2"], target)
    pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    files = nodeconfig.node_files(mappings, target, False, ca_pem=pem, plain_http=False)
    hosts = ["quay.io", "registry.k8s.io", "registry.local:5000"]
    for host in hosts:  # each hosts.toml names ca.crt, which sits in its own directory
        config = tomllib.loads(files[f"mirror/containerd/certs.d/{host}/hosts.toml"].decode())
        cas = [config.get("ca")] + [h.get("ca") for h in config.get("host", {}).values()]
        assert "ca.crt" in cas and files[f"mirror/containerd/certs.d/{host}/ca.crt"] == pem
    assert files["mirror/containers/certs.d/registry.local:5000/ca.crt"] == pem
    target_toml = tomllib.loads(
        files["mirror/containerd/certs.d/registry.local:5000/hosts.toml"].decode()
    )
    assert target_toml == {
        "server": "https://registry.local:5000",
        "ca": "ca.crt",
        "host": {
            "https://registry.local:5000": {"capabilities": ["pull", "resolve"], "ca": "ca.crt"}
        },
    }
    readme = files["mirror/README.md"].decode()
    assert "cp -r containerd/certs.d/. /etc/containerd/certs.d/" in readme
    assert "cp -r containers/. /etc/containers/" in readme
    assert 'registry.configs."registry.local:5000".auth' in readme and "auth.json" in readme
    tomllib.loads(files["mirror/containers/registries.conf.d/50-airgap-capi.conf"].decode())


def test_node_files_for_a_plain_http_target() -> None:
    target = Target.parse("registry.local:5000")
    mappings = map_images(["registry.k8s.io/a/b:v1"], target)
    files = nodeconfig.node_files(mappings, target, False, ca_pem=None, plain_http=True)
    assert not [name for name in files if name.endswith(".crt")]
    hosts = tomllib.loads(files["mirror/containerd/certs.d/registry.k8s.io/hosts.toml"].decode())
    assert list(hosts["host"]) == ["http://registry.local:5000"]
    target_toml = files["mirror/containerd/certs.d/registry.local:5000/hosts.toml"].decode()
    assert tomllib.loads(target_toml) == {
        "server": "http://registry.local:5000",
        "host": {"http://registry.local:5000": {"capabilities": ["pull", "resolve"]}},
    }
    conf = tomllib.loads(files["mirror/containers/registries.conf.d/50-airgap-capi.conf"].decode())
    assert conf["registry"][0]["mirror"] == [{"location": "registry.local:5000", "insecure": True}]
    assert conf["registry"][1] == {"location": "registry.local:5000", "insecure": True}
    assert "plain HTTP" in files["mirror/README.md"].decode()
