"""The bounded one-pass YAML loader, on realistic components (issue 12 point 2).

libyaml (``FastLoader``) and the pure-Python fallback (``PureLoader``) must give the
same documents as PyYAML's own ``safe_load_all`` on provider releases shaped like the
real ones, and the same one-line errors on hostile input; ConfigMaps dumped with
libyaml's emitter must be the bytes PyYAML's pure emitter writes. And the outputs of a
command are built from one parse of each components file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from airgap.configmaps import emit, objects
from airgap.core.errors import InputError
from airgap.core.limits import MAX_COMPONENTS_DEPTH, MAX_YAML_DEPTH
from airgap.formats import yamlcomposer, yamlload, yamlsafe, yamlskim
from airgap.providers import components
from airgap.providers.components import parse_components
from airgap.providers.types import ProviderType
from tests.harness.realistic import (
    REALISTIC_PROVIDERS,
    realistic_components,
    realistic_metadata,
)

pytestmark = pytest.mark.unit

IMAGES = ["registry.example/capi/manager:v1.10.0", "registry.example/capi/sidecar:v0.1"]


@pytest.fixture(scope="module")
def realistic() -> dict[str, str]:
    return {f"{p.type.kind}-{p.name}": realistic_components(p, IMAGES) for p in REALISTIC_PROVIDERS}


def test_realistic_components_are_sized_like_the_real_ones(realistic: dict[str, str]) -> None:
    sizes = {name: len(text.encode()) for name, text in realistic.items()}
    assert 1_100_000 < sizes["CoreProvider-cluster-api"] < 1_300_000
    assert 500_000 < sizes["BootstrapProvider-kubeadm"] < 700_000
    assert 600_000 < sizes["ControlPlaneProvider-kubeadm"] < 800_000
    assert 140_000 < sizes["InfrastructureProvider-docker"] < 200_000
    core = realistic["CoreProvider-cluster-api"]
    assert core.count("kind: CustomResourceDefinition") >= 13
    for kind in ("MutatingWebhookConfiguration", "Certificate", "Issuer", "ClusterRole"):
        assert f"kind: {kind}\n" in core
    assert "${EXP_MACHINE_POOL:=true}" in core
    assert realistic_components(REALISTIC_PROVIDERS[0], IMAGES) == core  # deterministic


@pytest.mark.skipif(not yamlload.HAVE_LIBYAML, reason="PyYAML built without libyaml")
def test_libyaml_and_pure_python_loaders_agree_on_realistic_components(
    realistic: dict[str, str],
) -> None:
    for name, text in realistic.items():
        # PyYAML's own libyaml loader as the reference; the pure-Python scanner (~10x
        # slower) on the largest file and the smallest, to keep the test short
        reference = [doc for doc in yaml.load_all(text, Loader=yaml.CSafeLoader) if doc]
        fast = yamlload.load_documents(text, name)
        assert fast == reference, name
        assert len(fast) > 10
        if name in ("CoreProvider-cluster-api", "InfrastructureProvider-docker"):
            assert yamlload.load_documents(text, name, pure=True) == reference, name


def test_parse_components_finds_what_the_outputs_need(realistic: dict[str, str]) -> None:
    core = parse_components(realistic["CoreProvider-cluster-api"], "core-components.yaml")
    assert core.images == IMAGES
    assert core.namespace == "capi-system"
    assert [(c.kind, c.name, c.container) for c in core.containers] == [
        ("Deployment", "capi-controller-manager", "manager"),
        ("Deployment", "capi-controller-manager", "sidecar-1"),
    ]
    assert [name for name, _ in core.deployments] == ["capi-controller-manager"]
    assert {v.name for v in core.variables} >= {"EXP_MACHINE_POOL", "CLUSTER_TOPOLOGY"}
    assert all(not v.required for v in core.variables)


@pytest.mark.skipif(not yamlload.HAVE_LIBYAML, reason="PyYAML built without libyaml")
def test_libyaml_emitter_writes_the_pure_emitters_bytes(realistic: dict[str, str]) -> None:
    class PureDumper(yaml.SafeDumper):
        pass

    PureDumper.add_representer(str, emit._str_representer)
    for provider in REALISTIC_PROVIDERS[:2]:  # core (gzip'ed, binaryData), bootstrap (text)
        name = f"{provider.type.kind}-{provider.name}"
        text = realistic[name]
        version = objects.ProviderVersion(
            provider.name, provider.type, provider.version, "a: b\n", text, provider.namespace
        )
        document = objects.configmap(version)  # gzip'ed into binaryData above 1 MiB
        pure = yaml.dump(
            document, Dumper=PureDumper, sort_keys=False, width=1 << 16, allow_unicode=True
        ).encode()
        assert emit.dump(document) == pure, name


def _bomb() -> str:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for level in "bcdefghi":
        lines.append(f"{level}: &{level} [{', '.join([f'*{chr(ord(level) - 1)}'] * 10)}]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("pure", [False, True], ids=["libyaml", "pure"])
@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ("- " * 5_000 + "x", ":1:201:", "nested deeper than 100 levels"),
        (_bomb(), ":5:", "aliases expand to more than 100000 nodes"),
        ("a: &a {b: *a}\n", ":1:11:", "alias *a refers to its own ancestor"),
        ("a: *nowhere\n", ":1:4:", "found undefined alias 'nowhere'"),
        ("a: &x 1\nb: &x 2\n", ":2:4:", "found duplicate anchor 'x'"),
        ("x: " + "1:" * 100 + "1\n", ":1:4:", "integer longer than 128 characters"),
        ("x: 1" + "0" * 200 + ".5\n", ":1:4:", "float longer than 128 characters"),
        ("x: 2020-13-45\n", ": malformed", "month must be in 1..12"),
        ("a: b\n c: d: e\n", ":2:", "mapping values are not allowed"),
    ],
)
def test_bounds_and_errors_are_one_line_naming_file_line_and_column(
    pure: bool, text: str, where: str, message: str
) -> None:
    with pytest.raises(InputError) as caught:
        yamlload.load_documents(text, "comp.yaml", pure=pure)
    line = str(caught.value)
    assert line.startswith("comp.yaml"), line
    assert where in line and message in line, line
    assert "\n" not in line


def _libyaml_limits_nesting() -> bool:
    """libyaml 0.2.6 (PyYAML 6.0.4's wheels) stops at 1,000 levels of its own."""
    return yamlload.HAVE_LIBYAML and yaml._yaml.get_version() >= (0, 2, 6)


@pytest.mark.parametrize("pure", [False, True], ids=["libyaml", "pure"])
def test_deep_flow_nesting_is_the_bound_whichever_scanner_stops_it(pure: bool) -> None:
    """``[`` 50,000 deep: the composer refuses level 101 (the 100th ``[``, column 103).
    libyaml 0.2.6's scanner looks ahead up to 1,024 characters for a simple key and meets
    its own 1,000-level limit first; that is reported as the same bound, where libyaml
    stopped (one line, file, line and column), never as libyaml's own words."""
    text = "x: " + "[" * 50_000
    with pytest.raises(InputError) as caught:
        yamlload.load_documents(text, "comp.yaml", pure=pure)
    line = str(caught.value)
    found = re.fullmatch(r"comp\.yaml:1:(\d+): malformed YAML: nested deeper than 100 levels", line)
    assert found is not None, line
    stops_first = not pure and _libyaml_limits_nesting()
    assert int(found.group(1)) == (1003 if stops_first else 103), line


def test_libyamls_own_limit_is_above_every_bound() -> None:
    """The translation of libyaml's limit into airgap's bound is true only while every
    bound is below it."""
    deepest = max(MAX_COMPONENTS_DEPTH, MAX_YAML_DEPTH)
    assert deepest < yamlcomposer.LIBYAML_NESTING_LIMIT
    if _libyaml_limits_nesting():  # and libyaml's limit is the one airgap assumes
        list(yaml.parse("[" * 999 + "]" * 999, Loader=yaml.CSafeLoader))
        with pytest.raises(yaml.MarkedYAMLError) as caught:
            list(yaml.parse("[" * 1001, Loader=yaml.CSafeLoader))
        assert yamlcomposer.nested_deeper_than(caught.value, deepest)
    assert not yamlcomposer.nested_deeper_than(yaml.MarkedYAMLError(problem="other"), deepest)


def test_built_nodes_are_bounded_and_skipped_documents_build_none() -> None:
    """The composer is the same for both scanners: libyaml only, to keep this short."""
    items = "- 1\n" * 250_000  # with the mapping, its key and the list: 250,003 nodes
    with pytest.raises(InputError) as caught:
        yamlload.load_documents("x:\n" + items, "f")
    assert str(caught.value) == "f:249999:3: malformed YAML: more than 250000 nodes to build"
    skipped = "kind: CustomResourceDefinition\nx:\n" + items
    assert list(yamlload.iter_documents(skipped, "f", kinds=frozenset({"Deployment"}))) == []


def test_aliases_within_the_budget_load_as_pyyaml_loads_them() -> None:
    text = "base: &b {x: 1, y: [1, 2]}\nuse: *b\nmerged:\n  <<: *b\n  z: 3\n"
    assert yamlload.load_documents(text, "f") == [yaml.safe_load(text)]
    assert yamlload.load_documents(text, "f", pure=True) == [yaml.safe_load(text)]


def test_documents_stream_one_at_a_time() -> None:
    text = "a: 1\n---\n---\nb: 2\n"
    assert list(yamlload.iter_documents(text, "f")) == [{"a": 1}, None, {"b": 2}]
    assert yamlload.load_single("a: 1\n", "f") == {"a": 1}
    with pytest.raises(InputError, match="expected one YAML document, found 2"):
        yamlload.load_single("a: 1\n---\nb: 2\n", "f")


def test_variables_and_images_scan_linearly_on_unclosed_defaults() -> None:
    """The inputs that made VARIABLE_RE quadratic end quickly (a few ms each); a nested
    ``${INNER}`` stays inside its default."""
    assert components.find_variables("# " + "${A:=" * 200_000) == []
    assert components.find_variables("${A:=" + "x" * 1_000_000) == []
    found = components.find_variables("a: ${Z:=${W}}\nb: ${Y:-a$b}\n")
    assert [(v.name, v.default) for v in found] == [("Z", "${W}"), ("Y", "a$b")]


def test_each_components_file_is_parsed_once_per_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, realistic: dict[str, str]
) -> None:
    """Everything the configmaps outputs need (namespace, ConfigMaps, Secrets, CR image
    overrides, clusterctl repository) comes from the parse rewrite_providers makes."""
    from airgap.bundle.format import ProviderRecord
    from airgap.rewrite.providers import RewrittenProvider

    parsed: list[str] = []
    real = yamlload.iter_documents

    def counting(text: str, source: str, *, pure: bool = False) -> Any:
        parsed.append(source)
        return real(text, source, pure=pure)

    providers = []
    for provider in REALISTIC_PROVIDERS:
        text = realistic[f"{provider.type.kind}-{provider.name}"]
        label = provider.type.label(provider.name)
        member = f"providers/{label}/{provider.version}/{provider.components_file}"
        record = ProviderRecord(
            name=provider.name,
            type=provider.type.kind,
            version=provider.version,
            contract="v1beta1",
            label=label,
            source="test",
            metadata=f"providers/{label}/{provider.version}/metadata.yaml",
            components=member,
            images=IMAGES,
        )
        rewritten = parse_components(text, member)
        providers.append(
            RewrittenProvider(record, provider.components_file, text, "a: b\n", rewritten)
        )
    monkeypatch.setattr(components, "iter_documents", counting)
    files = emit.operator_files(providers).files
    files.update(emit.clusterctl_files(providers, tmp_path))
    assert parsed == []  # nothing parsed a components file again
    core_step = f"/{emit.CORE_STEP}/"
    crs = [yaml.safe_load(data) for path, data in files.items() if core_step in path]
    core = next(cr for cr in crs if cr and cr["kind"] == ProviderType.CORE.kind)
    assert core["spec"]["deployment"]["containers"][0]["imageUrl"] == IMAGES[0]


# --- skipping documents of other kinds ---------------------------------------------

KINDS = frozenset({"Deployment", "Namespace"})
ODD_DOCUMENTS = [
    "kind: CustomResourceDefinition\nspec: {a: [1, 2, {b: c}]}\n",
    "spec: {a: 1}\nkind: Deployment\nmetadata: {name: late-kind}\n",
    "kind: Service\nspec: {x: 1}\nkind: Deployment\nmetadata: {name: last-kind-wins}\n",
    "&k kind: Service\nspec: {}\n*k : Deployment\n",
    '"kind": Deployment\nmetadata: {name: quoted}\n',
    "!!str kind: Namespace\nmetadata: {name: tagged}\n",
    "kind: 5\nspec: {}\n",
    "kind: !!null ''\n",  # a kind that is no string (!!binary: a foreign tag)
    "<<: {kind: Deployment, a: 1}\nkind: Service\n",
    "<<: {kind: Deployment, metadata: {name: merged}}\nb: 2\n",
    "kind: Service\nspec: &s {a: [1, 2]}\nother: [*s, *s]\n",
    "- just\n- a list\n",
    "",
    "plain scalar",
    "kind: Namespace\nmetadata: {name: after-restart}\n",
]


@pytest.mark.parametrize("pure", [False, True], ids=["libyaml", "pure"])
def test_skipping_other_kinds_keeps_exactly_the_wanted_documents(pure: bool) -> None:
    text = "\n---\n".join(doc.rstrip("\n") for doc in ODD_DOCUMENTS) + "\n"
    expected = [
        doc
        for doc in yaml.safe_load_all(text)
        if isinstance(doc, dict) and doc.get("kind") in KINDS
    ]
    got = list(yamlload.iter_documents(text, "f", pure=pure, kinds=KINDS))
    assert got == expected
    assert [d.get("metadata", {}).get("name") for d in got] == [
        "late-kind",
        "last-kind-wins",
        None,
        "quoted",
        "tagged",
        "merged",
        "after-restart",
    ]


# documents whose text says one kind and whose YAML may say another: each must come out
# as PyYAML reads it, whether or not the skim (airgap.formats.yamlskim) sets any aside
MISLEADING_DOCUMENTS = [
    'x: "\nkind: CustomResourceDefinition\n"\n"kind": Deployment\nmetadata: {name: q}\n',
    "x: 'a\nkind: Service'\nkind: Deployment\nmetadata: {name: two-lines}\n",
    "kind: Service\n<<: {kind: Deployment}\nmetadata: {name: merge-loses}\n",
    "kind: Service # kind: Deployment\nmetadata: {name: comment}\n",
    "kind: Service#Deployment\nmetadata: {name: hash}\n",
    "kind:\n  Deployment\nmetadata: {name: next-line}\n",
    "kind: Service\nspec:\n  template: &t {kind: Deployment}\n  again: *t\n",
    "? kind\n: Deployment\nmetadata: {name: explicit}\n",
    "kind: Service\r\nkind: Deployment\r\nmetadata: {name: crlf}\r\n",
    "kind: Service\u2028kind: Deployment\nmetadata: {name: line-separator}\n",
    "{kind: Deployment,\nmetadata: {name: flow}}\n",
    "kind: Namespace\nmetadata: {name: wanted}\n",
    "kind: ConfigMap\ndata:\n  a: |\n    ---\n    kind: Deployment\n",
]


@pytest.mark.skipif(not yamlload.HAVE_LIBYAML, reason="PyYAML built without libyaml")
@pytest.mark.parametrize("document", MISLEADING_DOCUMENTS)
def test_documents_whose_text_misleads_come_out_as_pyyaml_reads_them(document: str) -> None:
    crd = "kind: CustomResourceDefinition\nspec:\n  names: {kind: Thing}\n"
    text = f"{crd}---\n{document}---\n{crd}"
    expected = [
        doc
        for doc in yaml.safe_load_all(text)
        if isinstance(doc, dict) and doc.get("kind") in KINDS
    ]
    assert list(yamlload.iter_documents(text, "f", kinds=KINDS)) == expected


def test_documents_set_aside_unread_are_most_of_realistic_components(
    realistic: dict[str, str],
) -> None:
    """The skim sets aside the CRDs and the rest nobody reads (most of the bytes), and
    keeps every workload and Namespace for the composer."""
    wanted = components._KINDS
    for name, text in realistic.items():
        skimmed = yamlskim.skim(text, wanted)
        assert skimmed is not None, name
        aside = sum(len(document) for _, document in skimmed.set_aside())
        assert aside > 0.6 * len(text), name
        assert text.count("\n") == skimmed.text.count("\n")
        for line, document in skimmed.set_aside():
            assert yaml.safe_load(document)["kind"] not in wanted
            assert text.splitlines()[line] == document.splitlines()[0]


def test_the_skim_blanks_only_what_it_can_tell_and_keeps_every_line() -> None:
    crd = "kind: CustomResourceDefinition\nspec:\n  a: 1\n"
    deployment = "kind: Deployment\nmetadata: {name: d}\n"
    text = f"---\n{crd}---   \n{deployment}---\n{crd}"
    skimmed = yamlskim.skim(text, KINDS)
    assert skimmed is not None
    assert skimmed.text.splitlines() == [
        *("---", "", "", "", "---   "),
        *deployment.splitlines(),
        *("---", "", "", ""),
    ]
    assert [(line, document) for line, document in skimmed.set_aside()] == [(1, crd), (8, crd)]
    for odd in ("%YAML 1.1\n---\n", "--- !!map\n", "...\n", "a: 1\n...\n---\n"):
        assert yamlskim.skim(odd + crd, KINDS) is None, odd
    assert yamlskim.skim(deployment, KINDS) is None  # nothing to set aside
    # what the skim holds is bounded: a stream of more documents, or a document of more
    # lines at column 0, than real components have is left to the composer
    many = "---\n".join([crd] * (yamlskim.MAX_DOCUMENTS + 2))
    assert yamlskim.skim(many, KINDS) is None
    wide = crd + "".join(f"k{n}: v\n" for n in range(yamlskim.MAX_TOP_LINES))
    assert yamlskim.skim(f"{deployment}---\n{wide}", KINDS) is None
    assert list(yamlload.iter_documents(f"{deployment}---\n{wide}", "f", kinds=KINDS)) == [
        yaml.safe_load(deployment)
    ]


@pytest.mark.skipif(not yamlload.HAVE_LIBYAML, reason="PyYAML built without libyaml")
@pytest.mark.parametrize(
    "broken",
    [
        "spec:\n  a: [1, 2\n  b: c\n",
        "spec:\n  a: b\n   c: d\n",
        "spec:\n  a: 'open\n",
        "spec:\n  x:\t[1\n",
    ],
)
def test_a_document_set_aside_reports_its_error_where_it_is_in_the_file(broken: str) -> None:
    """A syntax error in a document the composer never sees is reported by libyaml's
    parser at the same file line and column as when it is composed."""
    head = "kind: Deployment\nmetadata: {name: a}\n---\n# a comment\n"
    text = f"{head}kind: CustomResourceDefinition\n{broken}"
    assert yamlskim.skim(text, KINDS) is not None
    with pytest.raises(InputError) as skimmed:
        list(yamlload.iter_documents(text, "f", kinds=KINDS))
    with pytest.raises(InputError) as composed:
        list(yamlload.iter_documents(text, "f"))
    assert str(skimmed.value) == str(composed.value)


@pytest.mark.parametrize(
    ("hostile", "message"),
    [
        ("x: " + "[" * 50_000, "nested deeper than 100 levels"),
        ("x:\n" + "- " * 5_000 + "x", "nested deeper than 100 levels"),
        ("\n".join(_bomb().splitlines()), "aliases expand to more than 100000 nodes"),
        ("a: &a {b: *a}", "alias *a refers to its own ancestor"),
        ("a: *nowhere", "found undefined alias 'nowhere'"),
        ("a: &x 1\nb: &x 2", "found duplicate anchor 'x'"),
    ],
)
def test_documents_being_skipped_keep_every_bound(hostile: str, message: str) -> None:
    text = "kind: CustomResourceDefinition\n" + hostile + "\n"
    with pytest.raises(InputError) as caught:
        list(yamlload.iter_documents(text, "f", kinds=KINDS))
    assert message in str(caught.value)


def test_skipping_gives_parse_components_the_same_answers(realistic: dict[str, str]) -> None:
    for name, text in realistic.items():
        wanted = components._KINDS
        built = [d for d in yamlload.iter_documents(text, name) if isinstance(d, dict)]
        assert list(yamlload.iter_documents(text, name, kinds=wanted)) == [
            d for d in built if d.get("kind") in wanted
        ]


@pytest.mark.skipif(not yamlload.HAVE_LIBYAML, reason="PyYAML built without libyaml")
def test_bounded_safe_load_gives_what_the_pure_python_loader_gives() -> None:
    """``yamlsafe.safe_load`` (specs, policies, metadata.yaml) parses with libyaml; the
    values are those of PyYAML's pure-Python ``safe_load``."""
    documents = [realistic_metadata(p) for p in REALISTIC_PROVIDERS] + [
        "a: &x {b: [1, 2.5, true, null, ~, 0x1f, 2001-12-14]}\nc: *x\nd: |\n  two\n  lines\n",
        "providers:\n  - {name: 'odd', type: \"Infrastructure\\u0050rovider\", version: v1}\n",
        "",
    ]
    for text in documents:
        assert yamlsafe.safe_load(text, "doc", max_bytes=1 << 20) == yaml.safe_load(text), text


def test_skipping_classifies_events_of_subclasses_as_their_base() -> None:
    """The skip loop dispatches on the event's exact class for speed; an event of any
    other class (a subclass from another parser) takes the ``isinstance`` path."""
    from yaml import events

    class Scalar(events.ScalarEvent):
        pass

    class Start(events.SequenceStartEvent):
        pass

    class Alias(events.AliasEvent):
        pass

    class End(events.MappingEndEvent):
        pass

    kinds = [
        yamlcomposer._SKIP_KIND.get(cls) or yamlcomposer._skip_kind(cls.__new__(cls))
        for cls in (Scalar, Start, Alias, End)
    ]
    assert kinds == [
        yamlcomposer._SCALAR,
        yamlcomposer._START,
        yamlcomposer._ALIAS,
        yamlcomposer._END,
    ]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("9" * 5000, "integer longer than 128 characters"),
        ("1.5e+" + "9" * 200, "float longer than 128 characters"),
        ("2020-13-45", "invalid timestamp: month must be in 1..12"),
    ],
)
def test_small_documents_refuse_values_yaml_cannot_build_at_their_line(
    value: str, problem: str
) -> None:
    text = f"kind: Metadata\nseries:\n  - major: {value}\n"
    with pytest.raises(yaml.constructor.ConstructorError) as caught:
        yamlsafe.safe_load(text, "m.yaml", max_bytes=1 << 20)
    assert caught.value.problem == problem
    assert caught.value.problem_mark is not None
    assert (caught.value.problem_mark.line, caught.value.problem_mark.column) == (2, 11)
    root = yamlsafe.compose(text, "m.yaml", max_bytes=1 << 20)
    assert root is not None
    with pytest.raises(yaml.constructor.ConstructorError, match=re.escape(problem)):
        yamlsafe.construct(root)


def test_small_documents_build_what_pyyaml_builds() -> None:
    text = "a: 1\nb: [2.5, 0x1f, 1:30]\nc: 2024-02-29\nd: ~\ne: {f: yes}\n"
    assert yamlsafe.safe_load(text, "x", max_bytes=1 << 20) == yaml.safe_load(text)
    assert yamlsafe.safe_load("", "x", max_bytes=1) is None
