"""Pure tests of the Cluster API operator objects (``airgap.configmaps.objects``/``emit``).

Every object is judged by schemas: Kubernetes' own (strict) for Namespaces, ConfigMaps
and Secrets, and ``tests/schemas/operator-v1alpha2-provider.json`` for provider CRs.
"""

from __future__ import annotations

import base64
import copy
import gzip
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from airgap.bundle.format import ProviderRecord
from airgap.configmaps import emit, objects
from airgap.configmaps.objects import (
    COMPRESSED_ANNOTATION,
    CONFIGMAP_LIMIT,
    NAME_LABEL,
    SELECTOR_LABEL,
    TYPE_LABEL,
    VERSION_LABEL,
    ConfigMapTooLargeError,
    ProviderVersion,
)
from airgap.configmaps.overrides import image_overrides
from airgap.core.errors import EXIT_FAILURE, AirgapError
from airgap.core.fsutil import SecretBytes
from airgap.providers.components import Variable, parse_components
from airgap.providers.types import ProviderType
from airgap.rewrite.providers import RewrittenProvider
from tests.harness.releases import make_components, make_metadata
from tests.schemas import (
    PROVIDER_KINDS,
    configmap_size,
    crd_errors,
    provider_errors,
    selector_matches,
    validate_kubernetes,
    validate_object,
    validate_provider,
)

METADATA = make_metadata([(1, 9, "v1beta1"), (1, 10, "v1beta1")])
IMAGE = "registry.local:5000/capi/app@sha256:" + "a" * 64


def provider(
    ptype: ProviderType = ProviderType.INFRASTRUCTURE,
    name: str = "docker",
    version: str = "v1.9.4",
    components: str | None = None,
    namespace: str = "capd-system",
    metadata: str = METADATA,
) -> ProviderVersion:
    if components is None:
        components = make_components(ptype, namespace, [IMAGE])
    return ProviderVersion(name, ptype, version, metadata, components, namespace)


def rewritten(
    ptype: ProviderType,
    name: str,
    version: str,
    namespace: str,
    *,
    components: str | None = None,
) -> RewrittenProvider:
    label = ptype.label(name)
    if components is None:
        components = make_components(ptype, namespace, [IMAGE])
    record = ProviderRecord(
        name=name,
        type=ptype.kind,
        version=version,
        contract="v1beta1",
        label=label,
        source="test",
        metadata=f"providers/{label}/{version}/metadata.yaml",
        components=f"providers/{label}/{version}/{ptype.components_file}",
        images=[IMAGE],
    )
    parsed = parse_components(components, record.components)
    return RewrittenProvider(record, ptype.components_file, components, METADATA, parsed)


def standard_set() -> list[RewrittenProvider]:
    """Core, kubeadm bootstrap + control plane, docker in two versions (v1.9.3 first)."""
    return [
        rewritten(ProviderType.CORE, "cluster-api", "v1.9.4", "capi-system"),
        rewritten(ProviderType.BOOTSTRAP, "kubeadm", "v1.9.4", "capi-kubeadm-bootstrap-system"),
        rewritten(
            ProviderType.CONTROL_PLANE, "kubeadm", "v1.9.4", "capi-kubeadm-control-plane-system"
        ),
        rewritten(ProviderType.INFRASTRUCTURE, "docker", "v1.9.3", "capd-system"),
        rewritten(ProviderType.INFRASTRUCTURE, "docker", "v1.9.4", "capd-system"),
    ]


def load_operator(files: dict[str, bytes]) -> dict[str, list[dict[str, Any]]]:
    """resource path (relative to operator/) -> its objects, in kustomization order:
    the top kustomization names the step directories, each a kustomization of files."""
    loaded: dict[str, list[dict[str, Any]]] = {}

    def expand(directory: str) -> None:
        kustomization = yaml.safe_load(files[f"operator/{directory}kustomization.yaml"])
        for resource in kustomization["resources"]:
            path = f"{directory}{resource}"
            if f"operator/{path}/kustomization.yaml" in files:
                expand(f"{path}/")
            else:
                loaded[path] = [d for d in yaml.safe_load_all(files[f"operator/{path}"]) if d]

    expand("")
    return loaded


def all_objects(files: dict[str, bytes]) -> list[dict[str, Any]]:
    return [obj for objs in load_operator(files).values() for obj in objs]


def big_text(size: int, *, compressible: bool, seed: int = 7) -> str:
    if compressible:
        line = "the quick brown fox jumps over the lazy dog 0123456789\n"
        return (line * (size // len(line) + 1))[:size]
    rng = random.Random(seed)
    return base64.b64encode(rng.randbytes(size * 3 // 4 + 3)).decode()[:size]


def big_components(ptype: ProviderType, namespace: str, payload: str) -> str:
    document = yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "blob", "namespace": namespace},
            "data": {"blob": payload},
        },
        width=1 << 30,
    )
    return make_components(ptype, namespace, [IMAGE], extra_docs=[document])


def pad_to(text: str, size: int) -> str:
    """``text`` with a trailing comment line making it exactly ``size`` UTF-8 bytes."""
    missing = size - len(text.encode()) - 3
    assert missing >= 0
    return text + "# " + "x" * missing + "\n"


# --- the provider schema itself ------------------------------------------------------


def valid_cr(kind: str = "InfrastructureProvider") -> dict[str, Any]:
    return {
        "apiVersion": "operator.cluster.x-k8s.io/v1alpha2",
        "kind": kind,
        "metadata": {"name": "docker", "namespace": "capd-system"},
        "spec": {
            "version": "v1.9.4",
            "fetchConfig": {"selector": {"matchLabels": {NAME_LABEL: "docker"}}},
        },
    }


@pytest.mark.unit
@pytest.mark.parametrize("kind", PROVIDER_KINDS)
def test_schema_accepts_every_kind(kind: str) -> None:
    validate_provider(valid_cr(kind))


@pytest.mark.unit
def test_schema_accepts_the_documented_optional_fields() -> None:
    cr = valid_cr()
    cr["spec"] |= {
        "fetchConfig": {
            "selector": {
                "matchLabels": {NAME_LABEL: "docker"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}],
            }
        },
        "configSecret": {"name": "vars", "namespace": "capd-system"},
        "manager": {"featureGates": {"MachinePool": True}, "maxConcurrentReconciles": 5},
        "deployment": {
            "replicas": 2,
            "containers": [
                {
                    "name": "manager",
                    "imageUrl": IMAGE,
                    "args": {"--v": "4"},
                    "env": [{"name": "A", "value": "b"}],
                    "resources": {"limits": {"cpu": "1"}},
                }
            ],
        },
        "additionalManifests": {"name": "extra"},
        "manifestPatches": ["apiVersion: v1\nkind: Service\n"],
    }
    validate_provider(cr)
    assert crd_errors(cr) == []  # the operator's own CRD agrees
    for source in ({"url": "https://example.invalid/o/r/releases"}, {"oci": "reg/x:v1"}):
        cr["spec"]["fetchConfig"] = source
        validate_provider(cr)
        assert crd_errors(cr) == []


def _mutated(path: list[str], value: object) -> dict[str, Any]:
    cr = valid_cr()
    target: dict[str, Any] = cr
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return cr


@pytest.mark.unit
@pytest.mark.parametrize(
    ("path", "value"),
    [
        (["spec", "verison"], "v1.9.4"),  # a typo at spec level
        (["spec", "version"], 194),
        (["spec", "fetchConfig"], {}),  # no source
        (["spec", "fetchConfig"], {"url": "https://x.invalid", "oci": "reg/x:v1"}),
        (
            ["spec", "fetchConfig"],
            {"url": "https://x.invalid", "selector": {"matchLabels": {"a": "b"}}},
        ),
        (["spec", "fetchConfig", "github-token"], "t"),
        (["spec", "fetchConfig", "selector"], {"matchLabels": {"a": 1}}),
        (["spec", "fetchConfig", "selector"], {"matchLabels": {"a": "b" * 64}}),
        (["spec", "configSecret"], {"namespace": "x"}),  # name is required
        (["spec", "deployment"], {"containers": [{"imageUrl": "x"}]}),
        (["spec", "manifestPatches"], "not a list"),
        (["kind"], "ClusterProvider"),
        (["apiVersion"], "operator.cluster.x-k8s.io/v1alpha1"),
        (["metadata", "namespace"], KeyError),
        (["metadata", "name"], "Not_A_Name"),
    ],
)
def test_schema_rejects_mistakes(path: list[str], value: object) -> None:
    assert provider_errors(_mutated(path, value)), (path, value)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("path", "value"),
    [
        (["spec", "verison"], "v1.9.4"),  # strict field validation: unknown field
        (["spec", "version"], 194),
        (["spec", "fetchConfig"], {}),  # CEL: exactly one source
        (["spec", "fetchConfig"], {"url": "https://x.invalid", "oci": "reg/x:v1"}),
        (["spec", "fetchConfig", "github-token"], "t"),
        (["spec", "configSecret"], {"namespace": "x"}),  # name is required
        (["spec", "deployment"], {"containers": [{"imageUrl": "x"}]}),
        (["spec", "deployment"], {"containers": [{"name": "m", "image": "x"}]}),
        (["spec", "deployment"], {"replicas": -1}),
        (["spec", "manifestPatches"], "not a list"),
        (["spec", "patches"], [{"patch": "{}"}]),  # CEL: not with manifestPatches
        (["spec", "additionalDeployments"], {"d": {"deployment": {"containers": [{}]}}}),
    ],
)
def test_the_operators_crd_schema_rejects_mistakes(path: list[str], value: object) -> None:
    cr = _mutated(path, value)
    if path[-1] == "patches":
        cr["spec"]["manifestPatches"] = ["{}"]
    assert crd_errors(cr), (path, value)
    assert provider_errors(cr), (path, value)  # our schema agrees


@pytest.mark.unit
def test_the_operators_crd_schema_accepts_image_overrides_and_additional_deployments() -> None:
    cr = _mutated(
        ["spec", "deployment"],
        {"containers": [{"name": "manager", "imageUrl": "r.local/capi/m@sha256:" + "a" * 64}]},
    )
    cr["spec"]["additionalDeployments"] = {
        "other": {"deployment": {"containers": [{"name": "c", "imageUrl": "r.local/x:v1"}]}}
    }
    assert crd_errors(cr) == []
    assert provider_errors(cr) == []


# --- ConfigMaps ------------------------------------------------------------------------


@pytest.mark.unit
def test_small_configmap_carries_metadata_and_components_as_text() -> None:
    p = provider()
    cm = objects.configmap(p)
    validate_kubernetes(cm)
    assert cm["metadata"]["name"] == "infrastructure-docker-v1.9.4"
    assert cm["metadata"]["namespace"] == "capd-system"
    assert cm["metadata"]["labels"] == {
        NAME_LABEL: "docker",
        TYPE_LABEL: "infrastructure",
        VERSION_LABEL: "v1.9.4",
        SELECTOR_LABEL: "infrastructure-docker",
    }
    assert cm["data"] == {"metadata": p.metadata, "components": p.components}
    assert "binaryData" not in cm
    assert COMPRESSED_ANNOTATION not in (cm["metadata"].get("annotations") or {})


@pytest.mark.unit
@pytest.mark.parametrize(
    ("ptype", "name", "expected"),
    [
        (ProviderType.CORE, "cluster-api", "core-cluster-api-v1.9.4"),
        (ProviderType.BOOTSTRAP, "kubeadm", "bootstrap-kubeadm-v1.9.4"),
        (ProviderType.CONTROL_PLANE, "kubeadm", "control-plane-kubeadm-v1.9.4"),
        (ProviderType.INFRASTRUCTURE, "aws", "infrastructure-aws-v1.9.4"),
        (ProviderType.IPAM, "in-cluster", "ipam-in-cluster-v1.9.4"),
        (ProviderType.RUNTIME_EXTENSION, "test", "runtimeextension-test-v1.9.4"),
        (ProviderType.ADDON, "helm", "addon-helm-v1.9.4"),
    ],
)
def test_configmap_names_and_type_labels_follow_the_operator(
    ptype: ProviderType, name: str, expected: str
) -> None:
    cm = objects.configmap(provider(ptype, name, namespace="ns"))
    validate_kubernetes(cm)
    assert cm["metadata"]["name"] == expected
    assert cm["metadata"]["labels"][TYPE_LABEL] == ptype.operator_type


@pytest.mark.unit
def test_exactly_one_mebibyte_stays_uncompressed_one_byte_more_compresses() -> None:
    base = make_components(ProviderType.INFRASTRUCTURE, "capd-system", [IMAGE])
    fits = pad_to(base, CONFIGMAP_LIMIT - len(METADATA.encode()))
    cm = objects.configmap(provider(components=fits))
    assert configmap_size(cm) == CONFIGMAP_LIMIT
    assert "binaryData" not in cm
    validate_kubernetes(cm)

    over = pad_to(base, CONFIGMAP_LIMIT - len(METADATA.encode()) + 1)
    cm = objects.configmap(provider(components=over))
    assert cm["metadata"]["annotations"] == {COMPRESSED_ANNOTATION: "true"}
    assert gzip.decompress(base64.b64decode(cm["binaryData"]["components"])) == over.encode()
    validate_kubernetes(cm)


@pytest.mark.unit
def test_size_counts_utf8_bytes_not_characters() -> None:
    base = make_components(ProviderType.INFRASTRUCTURE, "capd-system", [IMAGE])
    # under 1 MiB in characters, over it in bytes
    text = base + "# " + "é" * (CONFIGMAP_LIMIT // 2) + "\n"
    assert len(METADATA) + len(text) <= CONFIGMAP_LIMIT < len((METADATA + text).encode())
    cm = objects.configmap(provider(components=text))
    assert "components" in cm["binaryData"]
    assert gzip.decompress(base64.b64decode(cm["binaryData"]["components"])) == text.encode()
    validate_kubernetes(cm)


@pytest.mark.unit
def test_big_compressible_components_are_gzipped_into_binary_data() -> None:
    components = big_components(
        ProviderType.INFRASTRUCTURE,
        "capd-system",
        big_text(3 * CONFIGMAP_LIMIT // 2, compressible=True),
    )
    p = provider(components=components)
    cm = objects.configmap(p)
    validate_kubernetes(cm)
    assert cm["metadata"]["annotations"] == {COMPRESSED_ANNOTATION: "true"}
    assert cm["data"] == {"metadata": p.metadata}
    assert set(cm["binaryData"]) == {"components"}
    raw = base64.b64decode(cm["binaryData"]["components"], validate=True)
    assert raw[:2] == b"\x1f\x8b"  # gzip
    assert gzip.decompress(raw) == components.encode()
    assert configmap_size(cm) <= CONFIGMAP_LIMIT
    assert objects.configmap(p) == cm  # deterministic: no gzip timestamp
    # survives the YAML file it is written to
    assert yaml.safe_load(emit.dump(cm)) == cm


@pytest.mark.unit
def test_components_take_level_9_only_when_level_6_does_not_fit() -> None:
    rng = random.Random(3)
    words = ["spec", "status", "type", "object", "string", "description", "properties"]
    lines = (
        f"{' ' * rng.randrange(12)}{rng.choice(words)}{rng.randrange(999)}: x" for _ in range(20000)
    )
    data = "\n".join(lines).encode()  # schema-like text: level 9 finds more than 6
    level6 = gzip.compress(data, compresslevel=6, mtime=0)
    level9 = gzip.compress(data, compresslevel=9, mtime=0)
    assert len(level9) < len(level6)  # the text tells the two levels apart
    assert objects._compressed_to_fit(data, len(level6)) == level6
    assert objects._compressed_to_fit(data, len(level6) - 1) == level9
    assert gzip.decompress(objects._compressed_to_fit(data, 0)) == data  # the caller refuses it


@pytest.mark.unit
def test_incompressible_components_fail_pointing_to_the_oci_source() -> None:
    components = big_components(
        ProviderType.INFRASTRUCTURE,
        "capd-system",
        big_text(3 * CONFIGMAP_LIMIT // 2, compressible=False),
    )
    with pytest.raises(ConfigMapTooLargeError) as info:
        objects.configmap(provider(components=components))
    message = str(info.value)
    assert isinstance(info.value, AirgapError)
    assert info.value.exit_code == EXIT_FAILURE
    assert "\n" not in message
    assert "--provider-source oci" in message
    assert "InfrastructureProvider docker v1.9.4" in message


@pytest.mark.unit
@pytest.mark.parametrize(
    "text",
    [
        "a \nb\n",  # trailing space: not a literal block
        " leading\nx\n",
        "tab\there\n",
        "x\r\ny\r\n",
        "end\n\n\n",
        "no final newline",
        "unicode é ✓\n",
        "# c\n---\nkind: X\n...\n",
        "\n\nstarts blank\n",
        "null",
        "",
    ],
)
def test_components_text_survives_yaml_byte_for_byte(text: str) -> None:
    cm = objects.configmap(provider(components=text))
    assert yaml.safe_load(emit.dump(cm))["data"]["components"] == text


# --- provider CRs ---------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize("ptype", list(ProviderType))
def test_provider_cr_per_type(ptype: ProviderType) -> None:
    name = "cluster-api" if ptype is ProviderType.CORE else "thing"
    p = provider(ptype, name, namespace="thing-system")
    cr = objects.provider_cr(p, secret=None)
    validate_provider(cr)
    assert cr["apiVersion"] == "operator.cluster.x-k8s.io/v1alpha2"
    assert cr["kind"] == ptype.kind
    assert cr["metadata"] == {"name": name, "namespace": "thing-system"}
    assert cr["spec"]["version"] == "v1.9.4"
    assert set(cr["spec"]["fetchConfig"]) == {"selector"}
    assert "configSecret" not in cr["spec"]
    assert selector_matches(
        cr["spec"]["fetchConfig"]["selector"], objects.configmap(p)["metadata"]["labels"]
    )


@pytest.mark.unit
def test_core_cr_is_named_cluster_api_whatever_the_provider_name() -> None:
    cr = objects.provider_cr(provider(ProviderType.CORE, "cluster-api"), secret=None)
    assert cr["metadata"]["name"] == "cluster-api"


@pytest.mark.unit
def test_config_secret_and_oci_source() -> None:
    p = provider()
    cr = objects.provider_cr(p, secret="infrastructure-docker-variables")
    validate_provider(cr)
    assert cr["spec"]["configSecret"] == {
        "name": "infrastructure-docker-variables",
        "namespace": "capd-system",
    }
    cr = objects.provider_cr(p, secret=None, oci="registry.local:5000/capi/x:v1.9.4")
    validate_provider(cr)
    assert cr["spec"]["fetchConfig"] == {"oci": "registry.local:5000/capi/x:v1.9.4"}
    assert "github-token" not in yaml.safe_dump(cr)


@pytest.mark.unit
def test_selectors_pick_exactly_their_own_configmaps() -> None:
    providers = [
        provider(ProviderType.CORE, "cluster-api", namespace="ns"),
        provider(ProviderType.BOOTSTRAP, "kubeadm", namespace="ns"),
        provider(ProviderType.CONTROL_PLANE, "kubeadm", namespace="ns"),
        provider(ProviderType.INFRASTRUCTURE, "docker", "v1.9.3", namespace="ns"),
        provider(ProviderType.INFRASTRUCTURE, "docker", "v1.9.4", namespace="ns"),
        provider(ProviderType.INFRASTRUCTURE, "docker-ext", namespace="ns"),
    ]
    configmaps = [objects.configmap(p) for p in providers]
    # a ConfigMap the operator made itself (or a user, by the documented labels alone)
    foreign = copy.deepcopy(configmaps[4])
    foreign["metadata"]["labels"].pop(SELECTOR_LABEL)
    configmaps.append(foreign)
    for p in providers:
        selector = objects.provider_cr(p, secret=None)["spec"]["fetchConfig"]["selector"]
        picked = [
            cm["metadata"]["name"]
            for cm in configmaps
            if selector_matches(selector, cm["metadata"]["labels"])
        ]
        expected = [
            cm["metadata"]["name"]
            for cm, q in zip(configmaps, providers, strict=False)
            if q.key == p.key
        ]
        assert picked == expected, p.key


# --- namespaces -----------------------------------------------------------------------


@pytest.mark.unit
def test_namespace_comes_from_the_components_namespace_object() -> None:
    text = make_components(ProviderType.INFRASTRUCTURE, "my-own-ns", [IMAGE])
    assert objects.components_namespace(text, "x") == "my-own-ns"
    assert (
        objects.default_namespace(
            ProviderType.INFRASTRUCTURE, "docker", objects.components_namespace(text, "x")
        )
        == "my-own-ns"
    )


@pytest.mark.unit
@pytest.mark.parametrize(
    "text",
    [
        "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n",
        "kind: Namespace\nmetadata: {name: a}\n---\nkind: Namespace\nmetadata: {name: b}\n",
        "kind: Namespace\nmetadata: null\n",
        "kind: Namespace\n",
        "",
    ],
)
def test_namespace_falls_back_to_well_known_defaults(text: str) -> None:
    found = objects.components_namespace(text, "x")
    assert objects.default_namespace(ProviderType.CORE, "cluster-api", found) == "capi-system"
    assert objects.default_namespace(ProviderType.INFRASTRUCTURE, "odd", found) == "odd-system"


# --- Secrets and variables.md ----------------------------------------------------------


@pytest.mark.unit
def test_variables_secret_fills_values_defaults_and_comments_out_unset_required() -> None:
    variables = [
        Variable("PROVIDER_CREDENTIALS", None, True),
        Variable("FILLED_REQUIRED", None, True),
        Variable("LOG_LEVEL", "2", False),
        Variable("ADDRESS", ":8443", False),
        Variable("QUOTED", 'it\'s "q" # not a comment', False),
        Variable("EMPTY", "", False),
        Variable("UNICODE", "é✓", False),
        Variable("Y", "yes", False),  # YAML 1.1 would read an unquoted key Y as a boolean
        Variable("NULL", "null", False),
    ]
    values = {
        "FILLED_REQUIRED": 'line one\nline two: "x" # y',
        "LOG_LEVEL": "5",
        "OCI_PASSWORD": "p@ss: w'rd",  # not a component variable: written too
    }
    data = objects.variables_secret(provider(), variables, values)
    assert isinstance(data, SecretBytes)  # written mode 0600
    assert values["OCI_PASSWORD"] not in repr(data)
    text = data.decode()
    secret = yaml.safe_load(text)
    validate_kubernetes(secret)
    assert secret["metadata"] == {
        "name": "infrastructure-docker-variables",
        "namespace": "capd-system",
    }
    assert secret["type"] == "Opaque"
    expected = {v.name: v.default for v in variables if not v.required} | values
    # the required variable nobody set is not a key: the operator refuses to install
    # instead of substituting an empty string
    assert secret["stringData"] == expected
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in secret["stringData"].items())
    lines = text.splitlines()
    index = next(i for i, line in enumerate(lines) if "PROVIDER_CREDENTIALS" in line)
    assert "required" in lines[index] and lines[index].lstrip().startswith("#")
    assert lines[index + 1].lstrip().startswith('# "PROVIDER_CREDENTIALS":')
    assert "github-token" not in text
    # keys are quoted so that no YAML 1.1 reader (kubectl's) turns them into booleans/null
    assert '"Y": "yes"' in text and '"NULL": "null"' in text


@pytest.mark.unit
def test_secret_with_only_unset_required_variables_has_empty_string_data() -> None:
    data = objects.variables_secret(provider(), [Variable("X", None, True)], {})
    secret = yaml.safe_load(data.decode())
    validate_kubernetes(secret)
    assert secret["stringData"] == {}


@pytest.mark.unit
def test_variables_markdown_table() -> None:
    rows = [
        ("CoreProvider cluster-api", Variable("EXP_MACHINE_POOL", "true", False)),
        ("CoreProvider cluster-api", Variable("PROVIDER_CREDENTIALS", None, True)),
        ("InfrastructureProvider x", Variable("PIPE", "a|b", False)),
    ]
    text = objects.variables_markdown(rows)
    table = [line for line in text.splitlines() if line.startswith("|")]
    assert table[0] == "| variable | provider | required | default |"
    assert table[2] == "| `EXP_MACHINE_POOL` | CoreProvider cluster-api | no | `true` |"
    assert table[3] == "| `PROVIDER_CREDENTIALS` | CoreProvider cluster-api | yes |  |"
    # a pipe inside a default must not split the row into extra cells
    cells = [c for c in table[4].replace("\\|", "").split("|")[1:-1]]
    assert len(cells) == 4, table[4]


# --- emit: the operator/ tree ---------------------------------------------------------


@pytest.mark.unit
def test_operator_tree_order_and_schema() -> None:
    files = emit.operator_files(standard_set()).files
    loaded = load_operator(files)
    resources = list(loaded)
    assert resources[0] == "02-provider-configmaps/namespaces.yaml"
    steps = yaml.safe_load(files["operator/kustomization.yaml"])["resources"]
    assert steps == ["02-provider-configmaps", "03-core-provider", "04-providers"]
    assert [path for path in resources if path.startswith("03-")] == [
        "03-core-provider/00-core-cluster-api.yaml"
    ]
    kinds = [obj["kind"] for objs in loaded.values() for obj in objs]
    # Namespaces, then ConfigMaps and Secrets, then the CoreProvider, then the others
    order = {"Namespace": 0, "ConfigMap": 1, "Secret": 1, "CoreProvider": 2}
    ranks = [order.get(kind, 3) for kind in kinds]
    assert ranks == sorted(ranks), kinds
    assert kinds.count("CoreProvider") == 1
    assert sorted(k for k in kinds if k.endswith("Provider")) == sorted(
        ["CoreProvider", "BootstrapProvider", "ControlPlaneProvider", "InfrastructureProvider"]
    )
    for obj in all_objects(files):
        validate_object(obj)
    for path in files:
        if path.startswith("operator/") and path.endswith(".yaml"):
            assert path.removeprefix("operator/") in resources or path.endswith(
                "kustomization.yaml"
            ), path
    assert "github-token" not in b"".join(files.values()).decode()


@pytest.mark.unit
def test_several_versions_share_one_cr_that_installs_the_first_listed() -> None:
    files = emit.operator_files(standard_set()).files
    objs = all_objects(files)
    configmaps = [o for o in objs if o["kind"] == "ConfigMap"]
    crs = [o for o in objs if o["kind"].endswith("Provider")]
    docker_cms = [cm for cm in configmaps if cm["metadata"]["labels"][NAME_LABEL] == "docker"]
    assert [cm["metadata"]["name"] for cm in docker_cms] == [
        "infrastructure-docker-v1.9.3",
        "infrastructure-docker-v1.9.4",
    ]
    (docker,) = [cr for cr in crs if cr["kind"] == "InfrastructureProvider"]
    assert docker["spec"]["version"] == "v1.9.3"  # first listed, not highest
    for cr in crs:
        selector = cr["spec"]["fetchConfig"]["selector"]
        picked = [cm for cm in configmaps if selector_matches(selector, cm["metadata"]["labels"])]
        assert picked, cr["kind"]
        assert all(cm["metadata"]["namespace"] == cr["metadata"]["namespace"] for cm in picked)
        assert all(
            cm["metadata"]["labels"][TYPE_LABEL] == picked[0]["metadata"]["labels"][TYPE_LABEL]
            for cm in picked
        )
        versions = [cm["metadata"]["labels"][VERSION_LABEL] for cm in picked]
        assert cr["spec"]["version"] in versions
    core = next(cr for cr in crs if cr["kind"] == "CoreProvider")
    assert core["metadata"]["name"] == "cluster-api"


@pytest.mark.unit
def test_versions_of_one_provider_share_the_namespace_of_the_installed_one() -> None:
    # the operator lists ConfigMaps in the provider's namespace only
    providers = [
        rewritten(ProviderType.CORE, "cluster-api", "v1.9.4", "capi-system"),
        rewritten(ProviderType.INFRASTRUCTURE, "moving", "v0.2.0", "moving-system"),
        rewritten(ProviderType.INFRASTRUCTURE, "moving", "v0.1.0", "moving-old-system"),
    ]
    objs = all_objects(emit.operator_files(providers).files)
    cr = next(o for o in objs if o["kind"] == "InfrastructureProvider")
    assert cr["spec"]["version"] == "v0.2.0"
    for cm in (o for o in objs if o["kind"] == "ConfigMap"):
        if cm["metadata"]["labels"][NAME_LABEL] == "moving":
            assert cm["metadata"]["namespace"] == cr["metadata"]["namespace"] == "moving-system"


@pytest.mark.unit
def test_secret_collects_every_variable_of_every_carried_version() -> None:
    extra = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: '${ONLY_IN_NEW:=z}', b: '${NEW_REQUIRED}'}\n"
    providers = [
        rewritten(ProviderType.CORE, "cluster-api", "v1.9.4", "capi-system"),
        rewritten(
            ProviderType.INFRASTRUCTURE,
            "docker",
            "v1.9.3",
            "capd-system",
        ),
        rewritten(
            ProviderType.INFRASTRUCTURE,
            "docker",
            "v1.9.4",
            "capd-system",
            components=make_components(
                ProviderType.INFRASTRUCTURE, "capd-system", [IMAGE], extra_docs=[extra]
            ),
        ),
    ]
    outputs = emit.operator_files(providers)
    files = outputs.files
    secret_path = "operator/02-provider-configmaps/secrets/infrastructure-docker-variables.yaml"
    secret = yaml.safe_load(files[secret_path])
    validate_kubernetes(secret)
    assert secret["stringData"]["ONLY_IN_NEW"] == "z"
    assert "NEW_REQUIRED" not in secret["stringData"]  # unset: commented out
    assert "NEW_REQUIRED" in outputs.missing["InfrastructureProvider docker"]
    cr = yaml.safe_load(files["operator/04-providers/01-infrastructure-docker.yaml"])
    assert cr["spec"]["configSecret"]["name"] == "infrastructure-docker-variables"
    table = files["operator/variables.md"].decode()
    assert "| `NEW_REQUIRED` | InfrastructureProvider docker | yes |  |" in table


@pytest.mark.unit
def test_a_provider_without_variables_gets_no_secret() -> None:
    providers = [
        rewritten(
            ProviderType.CORE,
            "cluster-api",
            "v1.9.4",
            "capi-system",
            components="apiVersion: v1\nkind: Namespace\nmetadata: {name: capi-system}\n",
        )
    ]
    files = emit.operator_files(providers).files
    assert not [p for p in files if "/secrets/" in p]
    cr = yaml.safe_load(files["operator/03-core-provider/00-core-cluster-api.yaml"])
    assert "configSecret" not in cr["spec"]
    validate_provider(cr)


@pytest.mark.unit
def test_namespace_option_puts_every_object_in_it() -> None:
    files = emit.operator_files(standard_set(), namespace="capi-all").files
    objs = all_objects(files)
    assert [o for o in objs if o["kind"] == "Namespace"] == [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "capi-all"}}
    ]
    for obj in objs:
        validate_object(obj)
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == "capi-all", obj["metadata"]
        if obj["kind"].endswith("Provider") and "configSecret" in obj["spec"]:
            assert obj["spec"]["configSecret"]["namespace"] == "capi-all"
    # bootstrap and control-plane kubeadm share a namespace and a name but not a selector
    kubeadm = [
        o for o in objs if o["kind"].endswith("Provider") and o["metadata"]["name"] == "kubeadm"
    ]
    assert len(kubeadm) == 2
    selectors = [o["spec"]["fetchConfig"]["selector"]["matchLabels"] for o in kubeadm]
    assert selectors[0] != selectors[1]


@pytest.mark.unit
def test_oci_references_replace_configmaps() -> None:
    providers = standard_set()
    references = {
        v.configmap_name: f"registry.local:5000/capi/capi-providers/{v.key}:{v.version}"
        for v in emit.provider_versions(providers, None)
    }
    files = emit.operator_files(providers, oci_references=references).files
    objs = all_objects(files)
    assert not [o for o in objs if o["kind"] == "ConfigMap"]
    assert not [p for p in files if "/configmaps/" in p]
    for cr in (o for o in objs if o["kind"].endswith("Provider")):
        validate_provider(cr)
        assert set(cr["spec"]["fetchConfig"]) == {"oci"}
        assert cr["spec"]["fetchConfig"]["oci"].endswith(":" + cr["spec"]["version"])


@pytest.mark.unit
def test_operator_files_are_deterministic() -> None:
    assert emit.operator_files(standard_set()) == emit.operator_files(standard_set())


@pytest.mark.unit
def test_too_large_provider_fails_the_whole_tree() -> None:
    providers = standard_set()
    providers[3] = rewritten(
        ProviderType.INFRASTRUCTURE,
        "docker",
        "v1.9.3",
        "capd-system",
        components=big_components(
            ProviderType.INFRASTRUCTURE,
            "capd-system",
            big_text(3 * CONFIGMAP_LIMIT // 2, compressible=False),
        ),
    )
    with pytest.raises(ConfigMapTooLargeError, match="--provider-source oci"):
        emit.operator_files(providers)
    # the OCI source carries it
    references = {
        v.configmap_name: f"r.local/p/{v.key}:{v.version}"
        for v in emit.provider_versions(providers, None)
    }
    emit.operator_files(providers, oci_references=references)


# --- emit: the clusterctl repository --------------------------------------------------


@pytest.mark.unit
def test_clusterctl_repository_layout(tmp_path: Path) -> None:
    providers = standard_set()
    files = emit.clusterctl_files(providers, tmp_path / "out")
    for p in providers:
        folder = f"clusterctl/{p.record.label}/{p.record.version}"
        assert files[f"{folder}/metadata.yaml"] == p.metadata.encode()
        assert files[f"{folder}/{p.components_name}"] == p.components.encode()
    config = yaml.safe_load(files["clusterctl/clusterctl.yaml"])
    entries = config["providers"]
    assert [(e["name"], e["type"]) for e in entries] == [
        ("cluster-api", "CoreProvider"),
        ("kubeadm", "BootstrapProvider"),
        ("kubeadm", "ControlPlaneProvider"),
        ("docker", "InfrastructureProvider"),
    ]
    docker = entries[3]
    expected = (tmp_path / "out/clusterctl/infrastructure-docker/v1.9.3").absolute()
    assert docker["url"] == (expected / "infrastructure-components.yaml").as_uri()
    for entry in entries:
        assert entry["url"].startswith("file:///")


@pytest.mark.unit
@pytest.mark.parametrize(
    ("name", "version", "oci_helps"),
    [("docker", "v1.0.0+build.5", False), ("n" * 50, "v1.9.4", True)],
)
def test_values_that_cannot_be_labels_fail_clearly(
    name: str, version: str, oci_helps: bool
) -> None:
    p = provider(ProviderType.INFRASTRUCTURE, name, version)
    with pytest.raises(AirgapError, match="cannot be a Kubernetes label value") as info:
        objects.configmap(p)
    assert "\n" not in str(info.value)
    assert info.value.exit_code == EXIT_FAILURE
    # an OCI tag cannot hold a '+' either, so only a long name is pointed there
    assert ("--provider-source oci" in str(info.value)) is oci_helps


@pytest.mark.unit
def test_non_ascii_components_stay_a_readable_literal_block() -> None:
    text = "# “quoted” description — with ✓\nkind: Namespace\nmetadata: {name: x}\n"
    out = emit.dump(objects.configmap(provider(components=text))).decode()
    assert "  components: |\n    # “quoted” description — with ✓\n" in out
    assert yaml.safe_load(out)["data"]["components"] == text


@pytest.mark.e2e
def test_kubectl_reads_the_files_as_python_does(tmp_path: Path) -> None:
    """kubectl (Go, YAML 1.1 rules) must read the same strings PyYAML does."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed")
    awkward = (
        make_components(ProviderType.INFRASTRUCTURE, "capd-system", [IMAGE])
        + "# trailing space \n# tab\there, unicode é ✓\n"
        + "---\nkind: ConfigMap\ndata: {a: '${Y:=yes}', b: '${NULL:=null}', "
        + "c: '${ON:=on}', d: '${QUOTED:=it''s \"q\" # x}', e: '${COLON:=a: b}'}\n\n\n"
    )
    providers = [
        rewritten(ProviderType.CORE, "cluster-api", "v1.9.4", "capi-system"),
        rewritten(
            ProviderType.INFRASTRUCTURE, "docker", "v1.9.4", "capd-system", components=awkward
        ),
    ]
    files = emit.operator_files(providers).files
    for path, data in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(data)
    result = subprocess.run(
        [kubectl, "kustomize", str(tmp_path / "operator")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    built = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(result.stdout)}
    ours = all_objects(files)
    assert len(built) == len(ours)
    for obj in ours:
        twin = built[(obj["kind"], obj["metadata"]["name"])]
        for field in ("data", "stringData", "spec", "binaryData"):
            assert twin.get(field) == obj.get(field), (obj["kind"], field)
    secret = built[("Secret", "infrastructure-docker-variables")]
    assert secret["stringData"]["Y"] == "yes" and secret["stringData"]["NULL"] == "null"
    assert secret["stringData"]["QUOTED"] == "it''s \"q\" # x"  # raw text, as envsubst sees it
    cm = built[("ConfigMap", "infrastructure-docker-v1.9.4")]
    assert cm["data"]["components"] == awkward


@pytest.mark.unit
def test_kustomization_says_to_apply_server_side() -> None:
    text = emit.operator_files(standard_set()).files["operator/kustomization.yaml"].decode()
    assert "kubectl apply --server-side -k" in text
    assert yaml.safe_load(text)["kind"] == "Kustomization"


# --- image overrides --------------------------------------------------------------------

OTHER = "registry.local:5000/capi/other@sha256:" + "b" * 64


def deployment(name: str, containers: list[tuple[str, str]], init: str | None = None) -> str:
    pod: dict[str, Any] = {"containers": [{"name": n, "image": i} for n, i in containers]}
    if init:
        pod["initContainers"] = [{"name": "init", "image": init}]
    return yaml.safe_dump(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": "capx-system"},
            "spec": {"template": {"spec": pod}},
        }
    )


def overrides_of(*docs: str, has_value: Any = lambda _n: False) -> dict[str, Any]:
    documents = [d for doc in docs for d in yaml.safe_load_all(doc)]
    return image_overrides(documents, has_value).spec()


@pytest.mark.unit
def test_every_container_of_the_deployment_is_overridden_in_the_cr() -> None:
    files = emit.operator_files(standard_set()).files
    crs = [o for o in all_objects(files) if o["kind"].endswith("Provider")]
    assert crs
    for cr in crs:
        # make_components: one Deployment, container manager runs IMAGE, no init image
        assert cr["spec"]["deployment"] == {"containers": [{"name": "manager", "imageUrl": IMAGE}]}
        assert "manager" not in cr["spec"]  # spec.manager untouched
        assert "additionalDeployments" not in cr["spec"]
        validate_object(cr)  # our schema and the operator's CRD


@pytest.mark.unit
def test_init_containers_are_not_overridable_and_a_single_deployment_takes_any_name() -> None:
    # the operator only customises .containers; one Deployment gets spec.deployment
    # whatever its name
    spec = overrides_of(deployment("odd-manager", [("manager", IMAGE), ("proxy", OTHER)], IMAGE))
    assert spec == {
        "deployment": {
            "containers": [
                {"name": "manager", "imageUrl": IMAGE},
                {"name": "proxy", "imageUrl": OTHER},
            ]
        }
    }


@pytest.mark.unit
def test_several_deployments_are_routed_as_the_operator_routes_them() -> None:
    spec = overrides_of(
        deployment("capx-controller-manager", [("manager", IMAGE)]),
        "---\n" + deployment("capx-webhook", [("webhook", OTHER)]),
        "---\n" + deployment("capx-empty", []),
    )
    assert spec == {
        "deployment": {"containers": [{"name": "manager", "imageUrl": IMAGE}]},
        "additionalDeployments": {
            "capx-webhook": {"deployment": {"containers": [{"name": "webhook", "imageUrl": OTHER}]}}
        },
    }
    cr = objects.provider_cr(provider(), secret=None, overrides=spec)
    validate_object(cr)


@pytest.mark.unit
def test_two_manager_deployments_disagreeing_on_a_container_leave_it_out() -> None:
    spec = overrides_of(
        deployment("capx-controller-manager", [("manager", IMAGE), ("same", OTHER)]),
        "---\n" + deployment("capy-controller-manager", [("manager", OTHER), ("same", OTHER)]),
    )
    assert spec == {"deployment": {"containers": [{"name": "same", "imageUrl": OTHER}]}}


@pytest.mark.unit
@pytest.mark.parametrize(
    ("image", "has_value", "expected"),
    [
        (f"${{CAPX_IMAGE:={IMAGE}}}", False, IMAGE),  # the default the cluster runs
        (f"${{CAPX_IMAGE:={IMAGE}}}", True, None),  # the user's value rules (not in a CR)
        (f"${{CAPX_IMAGE:-{IMAGE}}}", False, IMAGE),
        ("${CAPX_IMAGE}", False, None),  # required: nothing to write
        ("${CAPX_IMAGE:=}", False, None),
        ("registry.local:5000/capi/${NAME}:v1", False, None),
        ("", False, None),
        (IMAGE, True, IMAGE),
    ],
)
def test_images_written_as_variables(image: str, has_value: bool, expected: str | None) -> None:
    spec = overrides_of(
        deployment("capx-controller-manager", [("manager", image)]),
        has_value=lambda name: has_value and name == "CAPX_IMAGE",
    )
    if expected is None:
        assert spec == {}
    else:
        assert spec == {"deployment": {"containers": [{"name": "manager", "imageUrl": expected}]}}


@pytest.mark.unit
def test_a_filled_image_variable_drops_the_override_from_the_tree() -> None:
    components = make_components(
        ProviderType.INFRASTRUCTURE, "capd-system", [f"${{CAPD_IMAGE:={IMAGE}}}"]
    )
    providers = [
        rewritten(
            ProviderType.INFRASTRUCTURE, "docker", "v1.9.4", "capd-system", components=components
        )
    ]
    plain = all_objects(emit.operator_files(providers).files)
    (cr,) = [o for o in plain if o["kind"] == "InfrastructureProvider"]
    assert cr["spec"]["deployment"]["containers"] == [{"name": "manager", "imageUrl": IMAGE}]
    value = "elsewhere.example/capd:v9"
    filled = emit.operator_files(providers, lookup={"CAPD_IMAGE": value}.get).files
    (cr,) = [o for o in all_objects(filled) if o["kind"] == "InfrastructureProvider"]
    assert "deployment" not in cr["spec"]
    assert not [p for p, data in filled.items() if value.encode() in data and "/secrets/" not in p]
