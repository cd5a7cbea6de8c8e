"""Semver parsing and precedence: "latest" must be v1.10.0, not v1.9.9, and never an rc."""

from __future__ import annotations

import random

import pytest

from airgap.core.errors import InputError
from airgap.sources.semver import highest, is_prerelease, parse_version, try_parse

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        ("v1.9.4", (1, 9, 4, (), "")),
        ("1.2.3", (1, 2, 3, (), "")),
        ("v1.10.0-rc.1", (1, 10, 0, ("rc", "1"), "")),
        ("1.2.3+build", (1, 2, 3, (), "build")),
        ("v0.0.0-alpha.beta-1+exp.sha.5114f85", (0, 0, 0, ("alpha", "beta-1"), "exp.sha.5114f85")),
    ],
)
def test_parse(text: str, fields: tuple[object, ...]) -> None:
    version = parse_version(text)
    assert (
        version.major,
        version.minor,
        version.patch,
        version.prerelease,
        version.build,
    ) == fields
    assert str(version) == text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "latest",
        "v1.9",
        "1",
        "v01.2.3",
        "1.02.3",
        "1.2.3-",
        "1.2.3-01",
        "1.2.3+",
        "vv1.2.3",
        "1.2.3.4",
        "main",
        # past 64 digits: int() refuses 4,300, and a release listing's tag once ended
        # collect in a traceback
        f"v{'9' * 5000}.0.0",
        "v1.\u0661.0",
    ],
)
def test_rejects_non_semver(text: str) -> None:
    assert try_parse(text) is None
    with pytest.raises(InputError, match="not a semantic version"):
        parse_version(text)


def test_a_huge_numeric_pre_release_identifier_sorts_without_int() -> None:
    huge = f"v1.0.0-{'9' * 5000}"  # past 64 digits: compared as text, never converted
    assert highest([huge, "v1.0.0-1"], include_prerelease=True) == huge
    assert highest([huge, "v1.0.0"], include_prerelease=True) == "v1.0.0"


def test_precedence_follows_the_semver_spec() -> None:
    ordered = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
        "v1.9.4",
        "v1.9.10",
        "v1.10.0-rc.1",
        "v1.10.0",
        "2.0.0",
    ]
    shuffled = ordered[:]
    random.Random(7).shuffle(shuffled)
    assert [str(v) for v in sorted(parse_version(t) for t in shuffled)] == ordered


def test_build_metadata_and_v_prefix_do_not_change_precedence() -> None:
    assert parse_version("v1.2.3") == parse_version("1.2.3+build.7")
    assert hash(parse_version("v1.2.3")) == hash(parse_version("1.2.3"))
    assert not parse_version("1.2.3") < parse_version("v1.2.3+x")


def test_is_prerelease() -> None:
    assert is_prerelease("v1.10.0-rc.1")
    assert is_prerelease("1.0.0-alpha")
    assert not is_prerelease("v1.9.4")
    assert not is_prerelease("1.2.3+build")
    assert not is_prerelease("not-a-version")


def test_series() -> None:
    assert parse_version("v1.9.4").series == (1, 9)


def test_highest_skips_prereleases_unless_asked() -> None:
    tags = ["v1.9.4", "v1.10.0-rc.1", "v1.9.10", "nightly", "v1.8.0"]
    assert highest(tags) == "v1.9.10"
    assert highest(tags, include_prerelease=True) == "v1.10.0-rc.1"


def test_highest_returns_the_text_as_given_and_none_when_empty() -> None:
    assert highest(["1.2.3", "v1.2.4"]) == "v1.2.4"
    assert highest([]) is None
    assert highest(["v2.0.0-beta.1", "junk"]) is None
    assert highest(["v2.0.0-beta.1", "junk"], include_prerelease=True) == "v2.0.0-beta.1"
