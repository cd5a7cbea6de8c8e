"""``airgap verify --policy``: each rule passes and fails on the real CAPI bundle.

The bundle holds five tag-referenced images from one loopback registry: ``test/app:v1``,
``test/sidecar:v2``, ``test/dockerv2:v1`` (single-arch) and ``test/multi:v1``,
``test/dockerlist:v1`` (linux/amd64 + linux/arm64/v8), and five providers (core,
bootstrap, control-plane and two infrastructure).
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from airgap.bundle.manifest import BundleManifest
from airgap.bundle.signing import fingerprint, load_public_key
from airgap.oci.reference import parse_reference
from airgap.verify.policy import Policy, evaluate, load_policy
from tests.harness import tamper
from tests.harness.bundle_fixtures import CollectedBundle, SigningKey
from tests.harness.capi import write_spec
from tests.harness.cli import assert_clean_failure, run_airgap
from tests.harness.images import TestImage

RULES = [
    "allowedRegistries",
    "requireDigests",
    "forbiddenTags",
    "requiredPlatforms",
    "maxAge",
    "requiredProviderTypes",
]


@pytest.fixture(scope="module")
def refs(capi_bundle: CollectedBundle) -> dict[str, str]:
    """Short name (app, sidecar, multi, dockerv2, dockerlist) -> full reference; and host."""
    names = {
        parse_reference(i.reference).repository.rsplit("/", 1)[1]: i.reference
        for i in capi_bundle.manifest.images
    }
    names["host"] = parse_reference(names["app"]).registry
    return names


def write_policy(path: Path, policy: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(policy, sort_keys=False))
    return path


def verify(bundle: Path, key: Path, policy: Path) -> tuple[int, dict[str, Any]]:
    result = run_airgap("verify", bundle, "--key", key, "--policy", policy, "--format", "json")
    assert "Traceback" not in result.stderr, result.stderr
    # the report is on stdout; a failure also puts one verdict line on stderr
    assert result.stderr.count("\n") == (0 if result.returncode == 0 else 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def rule(report: dict[str, Any], name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [r for r in report["policy"] if r["rule"] == name]
    assert len(found) == 1, report["policy"]
    return found[0]


# Each case: policy (with {host} for the registry), the rule, and the references (by short
# name) it must find offending; an empty list means the rule passes.
CASES: dict[str, tuple[dict[str, Any], str, list[str]]] = {
    "registry-host-glob": ({"allowedRegistries": ["{host}"]}, "allowedRegistries", []),
    "registry-port-glob": ({"allowedRegistries": ["127.0.0.1:*"]}, "allowedRegistries", []),
    "registry-path-glob": (
        {"allowedRegistries": ["registry.k8s.io", "{host}/test/*"]},
        "allowedRegistries",
        [],
    ),
    "registry-some-outside": (
        {"allowedRegistries": ["{host}/test/app", "{host}/test/docker*"]},
        "allowedRegistries",
        ["sidecar", "multi"],
    ),
    "registry-all-outside": (
        {"allowedRegistries": ["registry.k8s.io", "quay.io/jetstack/*", "127.0.0.2:*"]},
        "allowedRegistries",
        ["app", "sidecar", "multi", "dockerv2", "dockerlist"],
    ),
    "registry-none-allowed": (
        {"allowedRegistries": []},
        "allowedRegistries",
        ["app", "sidecar", "multi", "dockerv2", "dockerlist"],
    ),
    "digests-required": (
        {"requireDigests": True},
        "requireDigests",
        ["app", "sidecar", "multi", "dockerv2", "dockerlist"],
    ),
    "tags-allowed": ({"forbiddenTags": ["latest", "dev", "v3"]}, "forbiddenTags", []),
    "tags-forbidden": (
        {"forbiddenTags": ["latest", "v1"]},
        "forbiddenTags",
        ["app", "multi", "dockerv2", "dockerlist"],
    ),
    "tags-forbidden-glob": (
        {"forbiddenTags": ["v*"]},
        "forbiddenTags",
        ["app", "sidecar", "multi", "dockerv2", "dockerlist"],
    ),
    "platforms-present": (
        {"requiredPlatforms": ["linux/amd64", "linux/arm64"]},
        "requiredPlatforms",
        [],
    ),
    "platforms-variant-present": (
        {"requiredPlatforms": ["linux/arm64/v8"]},
        "requiredPlatforms",
        [],
    ),
    "platforms-variant-missing": (
        {"requiredPlatforms": ["linux/arm64/v7"]},
        "requiredPlatforms",
        ["multi", "dockerlist"],
    ),
    "platforms-missing": (
        {"requiredPlatforms": ["linux/amd64", "linux/s390x"]},
        "requiredPlatforms",
        ["multi", "dockerlist"],
    ),
    "age-young-enough": ({"maxAge": "1d"}, "maxAge", []),
    "provider-types-present": (
        {"requiredProviderTypes": ["CoreProvider", "infrastructure", "control-plane"]},
        "requiredProviderTypes",
        [],
    ),
    "provider-types-missing": (
        {"requiredProviderTypes": ["CoreProvider", "AddonProvider", "ipam"]},
        "requiredProviderTypes",
        [],  # offending are types, checked below
    ),
}


@pytest.mark.e2e
@pytest.mark.parametrize("name", list(CASES))
def test_policy_rule(
    name: str, capi_bundle: CollectedBundle, refs: dict[str, str], tmp_path: Path
) -> None:
    policy, rule_name, offending = CASES[name]
    text = json.dumps(policy).replace("{host}", refs["host"])
    path = write_policy(tmp_path / "policy.yaml", json.loads(text))
    code, report = verify(capi_bundle.path, capi_bundle.key.public, path)
    result = rule(report, rule_name)
    if name == "provider-types-missing":
        offending_text = ["AddonProvider", "IPAMProvider"]
    else:
        offending_text = [refs[short] for short in offending]
    assert [r["rule"] for r in report["policy"]] == [rule_name]
    if not offending_text:
        assert code == 0, report["failures"]
        assert result == {"rule": rule_name, "passed": True, "offending": [], "message": ""}
        assert report["verified"] is True and report["policyPassed"] is True
        return
    assert code == 1
    assert report["verified"] is False and report["policyPassed"] is False
    assert result["passed"] is False and result["message"]
    assert len(result["offending"]) == len(offending_text), result
    for needle in offending_text:
        assert any(entry.startswith(needle) for entry in result["offending"]), (needle, result)
    # the bundle itself is fine: the only failure is this rule, naming its offenders
    (failure,) = report["failures"]
    assert failure["kind"] == "policy" and failure["subject"] == rule_name
    for needle in offending_text:
        assert needle in failure["message"]
    if rule_name == "requiredPlatforms":
        missing = policy["requiredPlatforms"][-1]
        assert all(f"(missing {missing})" in entry for entry in result["offending"])


@pytest.mark.e2e
def test_all_rules_pass_together(
    capi_bundle: CollectedBundle, refs: dict[str, str], tmp_path: Path
) -> None:
    policy = write_policy(
        tmp_path / "policy.yaml",
        {
            "allowedRegistries": ["registry.k8s.io", f"{refs['host']}/test/*"],
            "requireDigests": False,
            "forbiddenTags": ["latest"],
            "requiredPlatforms": ["linux/amd64", "linux/arm64"],
            "maxAge": "30d",
            "requiredProviderTypes": ["CoreProvider", "InfrastructureProvider"],
        },
    )
    code, report = verify(capi_bundle.path, capi_bundle.key.public, policy)
    assert code == 0, report["failures"]
    assert report["verified"] is True and report["policyPassed"] is True
    # requireDigests: false disables the rule; every other rule reports a pass
    assert [r["rule"] for r in report["policy"]] == [r for r in RULES if r != "requireDigests"]
    assert all(r["passed"] for r in report["policy"])
    text = run_airgap(
        "verify", capi_bundle.path, "--key", capi_bundle.key.public, "--policy", policy
    )
    assert text.returncode == 0
    assert text.stdout.startswith("Bundle verified: signed by SHA256:")
    assert "POLICY RULE" in text.stdout
    for name in report["policy"]:
        assert any(line.split() == [name["rule"], "pass"] for line in text.stdout.splitlines())


@pytest.mark.e2e
def test_failing_rules_are_reported_each_with_offenders(
    capi_bundle: CollectedBundle, refs: dict[str, str], tmp_path: Path
) -> None:
    policy = write_policy(
        tmp_path / "policy.yaml",
        {
            "allowedRegistries": ["registry.k8s.io"],
            "forbiddenTags": ["v2"],
            "requiredPlatforms": ["linux/arm64"],
            "requiredProviderTypes": ["AddonProvider"],
        },
    )
    args = ("verify", capi_bundle.path, "--key", capi_bundle.key.public, "--policy", policy)
    text = run_airgap(*args)
    assert text.returncode == 1 and text.stderr.startswith("airgap: error: bundle NOT verified")
    lines = text.stdout.splitlines()
    signer = fingerprint(load_public_key(capi_bundle.key.public))
    assert lines[0] == (
        "Bundle NOT verified: policy failed (allowedRegistries, forbiddenTags, "
        f"requiredProviderTypes); contents intact and signed by {signer}"
    )
    assert any(line.split() == ["requiredPlatforms", "pass"] for line in lines)
    assert any(line.split() == ["forbiddenTags", "FAIL"] for line in lines)
    failures = lines[lines.index("Failures:") + 1 :]
    assert len(failures) == 3
    assert failures[0].startswith("  policy: allowedRegistries: ") and refs["app"] in failures[0]
    assert failures[1] == f"  policy: forbiddenTags: images tagged v2: {refs['sidecar']}"
    assert failures[2].startswith("  policy: requiredProviderTypes: ")
    assert "AddonProvider" in failures[2]


@pytest.mark.e2e
def test_policy_and_integrity_failures_together(
    capi_bundle: CollectedBundle, tmp_path: Path
) -> None:
    app_manifest = next(i for i in capi_bundle.manifest.images if "/test/app:" in i.reference)
    bundle = tamper.flip_byte(
        capi_bundle.path, tmp_path / "x.tar", f"images/blobs/sha256/{app_manifest.digest[7:]}"
    )
    policy = write_policy(tmp_path / "policy.yaml", {"forbiddenTags": ["v1"]})
    code, report = verify(bundle, capi_bundle.key.public, policy)
    assert code == 1 and report["verified"] is False
    kinds = [f["kind"] for f in report["failures"]]
    assert "member" in kinds and "image" in kinds and kinds[-1] == "policy"


# -- maxAge on a bundle signed long ago -------------------------------------------------


@pytest.fixture(scope="module")
def old_bundle(capi_bundle: CollectedBundle, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CAPI bundle as if collected on 2020-01-01, signed by the trusted key."""
    out = tmp_path_factory.mktemp("old") / "old.tar"

    def edit(manifest: BundleManifest) -> BundleManifest:
        return dataclasses.replace(manifest, created="2020-01-01T00:00:00Z")

    return tamper.resign(capi_bundle.path, out, capi_bundle.key.private, edit=edit)


@pytest.mark.e2e
def test_max_age_fails_on_an_old_bundle(
    old_bundle: Path, signing_key: SigningKey, tmp_path: Path
) -> None:
    policy = write_policy(tmp_path / "policy.yaml", {"maxAge": "30d"})
    code, report = verify(old_bundle, signing_key.public, policy)
    assert code == 1
    assert rule(report, "maxAge") == {
        "rule": "maxAge",
        "passed": False,
        "offending": ["created 2020-01-01T00:00:00Z"],
        "message": "bundle older than 30d",
    }
    assert report["failures"] == [
        {
            "kind": "policy",
            "subject": "maxAge",
            "message": "bundle older than 30d: created 2020-01-01T00:00:00Z",
        }
    ]
    # the signature and contents are fine; only the age is wrong
    assert report["signature"] == fingerprint(load_public_key(signing_key.public))


@pytest.mark.e2e
def test_max_age_passes_when_long_enough(
    old_bundle: Path, signing_key: SigningKey, tmp_path: Path
) -> None:
    policy = write_policy(tmp_path / "policy.yaml", {"maxAge": "1000w"})
    code, report = verify(old_bundle, signing_key.public, policy)
    assert code == 0
    assert rule(report, "maxAge")["passed"] is True


@pytest.mark.integration
def test_max_age_boundary_and_units(capi_bundle: CollectedBundle, tmp_path: Path) -> None:
    manifest = dataclasses.replace(capi_bundle.manifest, created="2024-05-01T12:00:00Z")
    created = datetime(2024, 5, 1, 12, tzinfo=UTC)
    for text, age in [("90s", 90), ("15m", 900), ("12h", 43200), ("2d", 172800), ("1w", 604800)]:
        policy = load_policy(write_policy(tmp_path / "p.yaml", {"maxAge": text}))
        assert policy.max_age == timedelta(seconds=age)
        (at_limit,) = evaluate(policy, manifest, now=created + timedelta(seconds=age))
        (over,) = evaluate(policy, manifest, now=created + timedelta(seconds=age + 1))
        assert at_limit.passed and not over.passed
        assert over.message == f"bundle older than {text}"


@pytest.mark.integration
def test_max_age_near_miss_is_said(capi_bundle: CollectedBundle) -> None:
    """A bundle that passes today with a quarter of its allowed age or less left: the
    review report's warnings name it (it may fail at the site)."""
    manifest = dataclasses.replace(capi_bundle.manifest, created="2024-05-01T12:00:00Z")
    created = datetime(2024, 5, 1, 12, tzinfo=UTC)
    policy = Policy(max_age=timedelta(days=30))
    (early,) = evaluate(policy, manifest, now=created + timedelta(days=20))
    (late,) = evaluate(policy, manifest, now=created + timedelta(days=25, hours=1))
    (over,) = evaluate(policy, manifest, now=created + timedelta(days=31))
    assert early.passed and early.near_miss == "" and "nearMiss" not in early.to_json()
    assert late.passed
    assert late.near_miss == "created 2024-05-01T12:00:00Z: within 4d of maxAge 30d"
    assert late.to_json()["nearMiss"] == late.near_miss
    assert not over.passed and over.near_miss == ""


@pytest.mark.integration
def test_unparseable_creation_time_fails_max_age(capi_bundle: CollectedBundle) -> None:
    manifest = dataclasses.replace(capi_bundle.manifest, created="yesterday")
    (result,) = evaluate(Policy(max_age=timedelta(days=1)), manifest)
    assert not result.passed and "not a timestamp" in result.message


# -- requireDigests on a digest-pinned bundle -------------------------------------------


@pytest.fixture(scope="module")
def pinned_bundle(
    tmp_path_factory: pytest.TempPathFactory,
    source_images: dict[str, TestImage],
    signing_key: SigningKey,
) -> Path:
    directory = tmp_path_factory.mktemp("pinned")
    spec = write_spec(
        directory / "spec.yaml",
        {"images": [source_images["app"].digest_reference, source_images["multiarch"].reference]},
    )
    out = directory / "pinned.tar"
    result = run_airgap("collect", spec, "--sign-key", signing_key.private, "-o", out, "-q")
    assert result.returncode == 0, result.stderr
    return out


@pytest.mark.e2e
def test_require_digests_passes_and_fails_per_image(
    pinned_bundle: Path,
    signing_key: SigningKey,
    source_images: dict[str, TestImage],
    tmp_path: Path,
) -> None:
    policy = write_policy(tmp_path / "p.yaml", {"requireDigests": True, "forbiddenTags": ["v1"]})
    code, report = verify(pinned_bundle, signing_key.public, policy)
    assert code == 1
    pinned = source_images["app"].digest_reference
    tagged = source_images["multiarch"].reference
    assert {i["reference"] for i in report["images"]} == {pinned, tagged}
    assert rule(report, "requireDigests")["offending"] == [tagged]
    assert rule(report, "forbiddenTags")["offending"] == [tagged]
    only_pinned = write_policy(tmp_path / "q.yaml", {"requireDigests": True})
    single = tamper.resign(
        pinned_bundle,
        tmp_path / "single.tar",
        signing_key.private,
        edit=lambda m: dataclasses.replace(
            m, images=[i for i in m.images if i.reference == pinned]
        ),
    )
    # the layout still names the dropped image, so verification fails, but the rule passes
    code, report = verify(single, signing_key.public, only_pinned)
    assert code == 1
    assert any(f["kind"] == "layout" and tagged in f["message"] for f in report["failures"])
    assert rule(report, "requireDigests") == {
        "rule": "requireDigests",
        "passed": True,
        "offending": [],
        "message": "",
    }


# -- policy files that are wrong --------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("content", "needles"),
    [
        ("allowedRegistry: [registry.k8s.io]\n", ["unknown key", "'allowedRegistry'"]),
        (
            "forbiddenTags: [latest]\nmaxAge: 1d\nrequiredTypes: [CoreProvider]\n",
            ["'requiredTypes'"],
        ),
        ("forbiddenTags: latest\n", ["forbiddenTags", "list of strings"]),
        ("allowedRegistries: [1, 2]\n", ["allowedRegistries"]),
        ("requireDigests: yes please\n", ["requireDigests", "true or false"]),
        ("maxAge: 30 days\n", ["maxAge", "30 days"]),
        ("maxAge: 30\n", ["maxAge"]),
        ("requiredProviderTypes: [Nope]\n", ["requiredProviderTypes", "Nope"]),
        ("requiredPlatforms: [amd64]\n", ["requiredPlatforms", "amd64"]),
        ("allowedRegistries: [\n", ["malformed YAML"]),
        ("- a\n- b\n", ["mapping"]),
    ],
)
def test_bad_policy_is_a_usage_error(
    content: str, needles: list[str], capi_bundle: CollectedBundle, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(content)
    result = run_airgap(
        "verify", capi_bundle.path, "--key", capi_bundle.key.public, "--policy", policy
    )
    assert_clean_failure(result, 2, str(policy), *needles)
    assert result.stdout == ""


@pytest.mark.e2e
def test_unreadable_policy_is_a_usage_error(capi_bundle: CollectedBundle, tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    result = run_airgap(
        "verify", capi_bundle.path, "--key", capi_bundle.key.public, "--policy", missing
    )
    assert_clean_failure(result, 2, str(missing))
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    result = run_airgap(
        "verify", capi_bundle.path, "--key", capi_bundle.key.public, "--policy", binary
    )
    assert_clean_failure(result, 2, str(binary))


@pytest.mark.e2e
def test_empty_policy_checks_nothing(capi_bundle: CollectedBundle, tmp_path: Path) -> None:
    policy = tmp_path / "empty.yaml"
    policy.write_text("# no rules\n")
    code, report = verify(capi_bundle.path, capi_bundle.key.public, policy)
    assert code == 0 and report["policy"] == []
