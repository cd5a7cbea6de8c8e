"""Release sources against a real fake-GitHub server on loopback and real directories."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from airgap.core.errors import AirgapError, HTTPStatusError, InputError, NetworkError, NotFoundError
from airgap.net.httpclient import build_client, ssl_context
from airgap.sources.directory import HTTPDirectorySource, LocalRepositorySource
from airgap.sources.forurl import source_for
from airgap.sources.github import GitHubSource
from tests.harness.pki import Pki
from tests.harness.releases import ReleaseServer

TOKEN = "ghp_test-token-value-0123456789"
NO_ENV: dict[str, str] = {}
# the fake GitHub Enterprise is 127.0.0.1: a token goes there only when the user says so
ENTERPRISE_ENV = {"GITHUB_TOKEN": TOKEN, "GITHUB_ENTERPRISE_HOSTS": "127.0.0.1"}


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with build_client(timeout=10) as http_client:
        yield http_client


@pytest.fixture
def tls_client(pki: Pki) -> Iterator[httpx.Client]:
    """A client trusting the test CA, for the HTTPS fake GitHub."""
    with build_client(verify=ssl_context(str(pki.ca_cert)), timeout=10) as http_client:
        yield http_client


def publish(server: ReleaseServer, tags: list[tuple[str, bool, bool]]) -> tuple[str, str]:
    """A fresh repository with ``(tag, prerelease, draft)`` releases, oldest first."""
    owner, repo = server.new_repo()
    for tag, prerelease, draft in tags:
        files = {"metadata.yaml": f"tag {tag}\n".encode(), "core-components.yaml": tag.encode()}
        server.add_release(owner, repo, tag, files, prerelease=prerelease, draft=draft)
    return owner, repo


# --- GitHub ---------------------------------------------------------------------------


@pytest.mark.integration
def test_github_enterprise_url_maps_to_api_v3(
    release_server: ReleaseServer, client: httpx.Client
) -> None:
    owner, repo = publish(release_server, [("v1.0.0", False, False)])
    source = source_for(release_server.repo_url(owner, repo), client, NO_ENV)
    assert isinstance(source, GitHubSource)
    assert source.api_base == release_server.api_url
    assert source.url == release_server.repo_url(owner, repo)
    assert source.pinned_version is None and source.pinned_file is None


@pytest.mark.unit
def test_api_base_for_github_com_and_override(client: httpx.Client) -> None:
    url = "https://github.com/kubernetes-sigs/cluster-api/releases"
    source = source_for(url, client, NO_ENV)
    assert isinstance(source, GitHubSource)
    assert source.api_base == "https://api.github.com"
    source = source_for("https://ghe.corp:8443/acme/capx/releases/", client, NO_ENV)
    assert isinstance(source, GitHubSource)
    assert source.api_base == "https://ghe.corp:8443/api/v3"
    source = source_for(url, client, {"GITHUB_API_URL": "https://proxy.corp/gh-api/"})
    assert isinstance(source, GitHubSource)
    assert source.api_base == "https://proxy.corp/gh-api"


@pytest.mark.integration
def test_latest_skips_drafts_and_prereleases(
    release_server: ReleaseServer, client: httpx.Client
) -> None:
    owner, repo = publish(
        release_server,
        [
            ("v1.9.4", False, False),
            ("v1.9.10", False, False),
            ("v1.10.0", False, True),  # draft
            ("v1.11.0-rc.1", False, False),  # semver pre-release, not flagged
            ("v2.0.0", True, False),  # flagged pre-release
            ("nightly", False, False),  # not semver
            ("v1.8.0", False, False),
        ],
    )
    source = source_for(release_server.repo_url(owner, repo), client, NO_ENV)
    assert source.resolve_version("latest") == "v1.9.10"
    assert source.resolve_version("v1.11.0-rc.1") == "v1.11.0-rc.1"


@pytest.mark.integration
def test_latest_follows_pagination(release_server: ReleaseServer, client: httpx.Client) -> None:
    tags = [(f"v0.{minor}.0", False, False) for minor in range(7)]
    tags.insert(0, ("v9.0.0-beta.0", True, False))
    owner, repo = publish(release_server, tags)  # newest first: v0.6.0 ... v9.0.0-beta.0 last
    release_server.set_page_size(owner, repo, 2)
    release_server.clear_requests()
    source = source_for(release_server.repo_url(owner, repo), client, NO_ENV)
    assert isinstance(source, GitHubSource)
    assert [r["tag_name"] for r in source.list_releases()] == [
        "v0.6.0",
        "v0.5.0",
        "v0.4.0",
        "v0.3.0",
        "v0.2.0",
        "v0.1.0",
        "v0.0.0",
        "v9.0.0-beta.0",
    ]
    assert source.resolve_version("latest") == "v0.6.0"
    listed = release_server.requests(f"/api/v3/repos/{owner}/{repo}/releases")
    assert [r.query for r in listed[:4]] == [
        "per_page=100",
        "per_page=2&page=2",
        "per_page=2&page=3",
        "per_page=2&page=4",
    ]


@pytest.mark.integration
def test_no_stable_release(release_server: ReleaseServer, client: httpx.Client) -> None:
    owner, repo = publish(release_server, [("v1.0.0-rc.0", False, False), ("v1.0.0", False, True)])
    source = source_for(release_server.repo_url(owner, repo), client, NO_ENV)
    with pytest.raises(AirgapError, match="no release is a semantic version"):
        source.resolve_version("latest")


@pytest.mark.integration
def test_fetch_downloads_through_the_asset_api(
    release_server: ReleaseServer, client: httpx.Client, tmp_path: Path
) -> None:
    owner, repo = publish(release_server, [("v1.2.3", False, False)])
    release_server.clear_requests()
    source = source_for(release_server.repo_url(owner, repo), client, NO_ENV)
    dest = tmp_path / "out" / "metadata.yaml"
    source.fetch("v1.2.3", "metadata.yaml", dest)
    assert dest.read_bytes() == b"tag v1.2.3\n"
    assert [p.name for p in dest.parent.iterdir()] == ["metadata.yaml"]  # no temp files left
    paths = [(r.server, r.path) for r in release_server.requests()]
    assert paths[0] == ("api", f"/api/v3/repos/{owner}/{repo}/releases/tags/v1.2.3")
    assert paths[1][1].startswith(f"/api/v3/repos/{owner}/{repo}/releases/assets/")
    assert paths[2] == ("cdn", f"/{owner}/{repo}/releases/download/v1.2.3/metadata.yaml")
    assert release_server.requests()[1].accept == "application/octet-stream"


@pytest.mark.integration
def test_token_goes_to_the_api_host_only(
    tls_release_server: ReleaseServer, tls_client: httpx.Client, tmp_path: Path
) -> None:
    server = tls_release_server
    assert urlsplit(server.cdn_url).netloc != urlsplit(server.url).netloc
    owner, repo = publish(server, [("v1.0.0", False, False), ("v1.1.0", False, False)])
    server.set_page_size(owner, repo, 1)
    server.clear_requests()
    source = source_for(server.repo_url(owner, repo), tls_client, ENTERPRISE_ENV)
    assert source.resolve_version("latest") == "v1.1.0"
    source.fetch("v1.1.0", "core-components.yaml", tmp_path / "c.yaml")
    assert (tmp_path / "c.yaml").read_bytes() == b"v1.1.0"
    api = [r for r in server.requests() if r.server == "api"]
    cdn = [r for r in server.requests() if r.server == "cdn"]
    assert len(api) == 4  # two list pages, the tag, the asset
    assert all(r.authorization == f"Bearer {TOKEN}" for r in api)
    assert len(cdn) == 1
    assert not cdn[0].has_auth


@pytest.mark.integration
def test_no_token_no_authorization(
    release_server: ReleaseServer, client: httpx.Client, tmp_path: Path
) -> None:
    owner, repo = publish(release_server, [("v1.0.0", False, False)])
    release_server.clear_requests()
    source = source_for(release_server.repo_url(owner, repo), client, NO_ENV)
    source.fetch("v1.0.0", "metadata.yaml", tmp_path / "m.yaml")
    assert not any(r.has_auth for r in release_server.requests())


@pytest.mark.integration
def test_token_is_read_from_the_environment(
    tls_release_server: ReleaseServer,
    tls_client: httpx.Client,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITHUB_ENTERPRISE_HOSTS", "ghe.example, 127.0.0.1")
    monkeypatch.delenv("GITHUB_API_URL", raising=False)
    owner, repo = publish(tls_release_server, [("v1.0.0", False, False)])
    tls_release_server.clear_requests()
    source_for(tls_release_server.repo_url(owner, repo), tls_client).resolve_version("latest")
    assert tls_release_server.requests()[0].authorization == f"Bearer {TOKEN}"


@pytest.mark.integration
def test_github_api_url_override(
    tls_release_server: ReleaseServer,
    tls_client: httpx.Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = tls_release_server
    owner, repo = publish(server, [("v3.1.0", False, False), ("v3.2.0", False, False)])
    monkeypatch.setenv("GITHUB_API_URL", server.api_url)  # HTTPS: its host gets the token
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.delenv("GITHUB_ENTERPRISE_HOSTS", raising=False)
    server.clear_requests()
    # a github.com URL, answered by the fake server because the API URL is overridden
    source = source_for(f"https://github.com/{owner}/{repo}/releases", tls_client)
    assert source.url == f"https://github.com/{owner}/{repo}/releases"
    assert source.resolve_version("latest") == "v3.2.0"
    source.fetch("v3.2.0", "metadata.yaml", tmp_path / "m.yaml")
    assert (tmp_path / "m.yaml").read_bytes() == b"tag v3.2.0\n"
    api = [r for r in server.requests() if r.server == "api"]
    assert api and all(r.authorization == f"Bearer {TOKEN}" for r in api)


@pytest.mark.integration
def test_missing_tag_names_url_and_tag(
    release_server: ReleaseServer, client: httpx.Client, tmp_path: Path
) -> None:
    owner, repo = publish(release_server, [("v1.0.0", False, False)])
    source = source_for(release_server.repo_url(owner, repo), client, {"GITHUB_TOKEN": TOKEN})
    with pytest.raises(NotFoundError) as caught:
        source.fetch("v9.9.9", "metadata.yaml", tmp_path / "m.yaml")
    message = str(caught.value)
    assert f"{release_server.api_url}/repos/{owner}/{repo}/releases/tags/v9.9.9" in message
    assert "v9.9.9" in message and "HTTP 404" in message
    assert TOKEN not in message and "\n" not in message
    assert not (tmp_path / "m.yaml").exists()


@pytest.mark.integration
def test_draft_tag_is_not_found(
    release_server: ReleaseServer, client: httpx.Client, tmp_path: Path
) -> None:
    owner, repo = publish(release_server, [("v1.0.0", False, True)])
    source = source_for(release_server.repo_url(owner, repo), client, NO_ENV)
    with pytest.raises(NotFoundError):
        source.fetch("v1.0.0", "metadata.yaml", tmp_path / "m.yaml")


@pytest.mark.integration
def test_missing_asset_names_file_and_lists_assets(
    release_server: ReleaseServer, client: httpx.Client, tmp_path: Path
) -> None:
    owner, repo = publish(release_server, [("v1.0.0", False, False)])
    source = source_for(release_server.repo_url(owner, repo), client, NO_ENV)
    with pytest.raises(NotFoundError) as caught:
        source.fetch("v1.0.0", "infrastructure-components.yaml", tmp_path / "c.yaml")
    message = str(caught.value)
    assert "release v1.0.0 of" in message
    assert release_server.repo_url(owner, repo) in message
    assert "has no file infrastructure-components.yaml" in message
    assert "files: core-components.yaml, metadata.yaml" in message


@pytest.mark.integration
def test_unknown_repository(release_server: ReleaseServer, client: httpx.Client) -> None:
    source = source_for(release_server.repo_url("nobody", "nothing"), client, NO_ENV)
    with pytest.raises(NotFoundError, match=r"/api/v3/repos/nobody/nothing/releases: HTTP 404"):
        source.resolve_version("latest")


@pytest.mark.integration
def test_rate_limit_is_explained(release_server: ReleaseServer, client: httpx.Client) -> None:
    owner, repo = publish(release_server, [("v1.0.0", False, False)])
    release_server.fail_next(
        f"/api/v3/repos/{owner}/{repo}/releases", 403, headers={"X-RateLimit-Remaining": "0"}
    )
    source = source_for(release_server.repo_url(owner, repo), client, {"GITHUB_TOKEN": TOKEN})
    with pytest.raises(HTTPStatusError) as caught:
        source.resolve_version("latest")
    assert caught.value.status == 403
    assert "rate limit" in str(caught.value) and "GITHUB_TOKEN" in str(caught.value)
    assert TOKEN not in str(caught.value)


@pytest.mark.integration
def test_transient_errors_are_retried(
    release_server: ReleaseServer, client: httpx.Client, tmp_path: Path
) -> None:
    owner, repo = publish(release_server, [("v1.0.0", False, False)])
    release_server.fail_next(
        f"/api/v3/repos/{owner}/{repo}/releases", 503, times=1, headers={"Retry-After": "0"}
    )
    # the download is cut off mid-body once: the whole transfer starts again
    release_server.fail_next(f"/{owner}/{repo}/releases/download/", None, times=1)
    release_server.clear_requests()
    source = source_for(release_server.repo_url(owner, repo), client, NO_ENV)
    assert source.resolve_version("latest") == "v1.0.0"
    source.fetch("v1.0.0", "metadata.yaml", tmp_path / "m.yaml")
    assert (tmp_path / "m.yaml").read_bytes() == b"tag v1.0.0\n"
    downloads = release_server.requests(f"/{owner}/{repo}/releases/download/")
    assert len(downloads) == 2


@pytest.mark.integration
def test_broken_download_leaves_nothing_behind(
    release_server: ReleaseServer, client: httpx.Client, tmp_path: Path
) -> None:
    owner, repo = publish(release_server, [("v1.0.0", False, False)])
    release_server.fail_next(f"/{owner}/{repo}/releases/download/", None, times=10)
    source = source_for(release_server.repo_url(owner, repo), client, NO_ENV)
    with pytest.raises(NetworkError, match="metadata.yaml"):
        source.fetch("v1.0.0", "metadata.yaml", tmp_path / "m.yaml")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.unit
@pytest.mark.parametrize(
    ("suffix", "version", "filename"),
    [
        ("latest/core-components.yaml", "latest", "core-components.yaml"),
        ("v1.9.4/core-components.yaml", "v1.9.4", "core-components.yaml"),
        (
            "download/v1.9.4/infrastructure-components-development.yaml",
            "v1.9.4",
            "infrastructure-components-development.yaml",
        ),
    ],
)
def test_clusterctl_style_github_urls(
    client: httpx.Client, suffix: str, version: str, filename: str
) -> None:
    source = source_for(
        f"https://github.com/kubernetes-sigs/cluster-api/releases/{suffix}", client, NO_ENV
    )
    assert (source.pinned_version, source.pinned_file) == (version, filename)
    assert source.url == "https://github.com/kubernetes-sigs/cluster-api/releases"


@pytest.mark.unit
@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/o/r/releases/tag/v1.0.0",
        "ftp://example.com/x",
        "oci://ghcr.io/x",
        "https:///no-host",
    ],
)
def test_unsupported_urls(client: httpx.Client, url: str) -> None:
    with pytest.raises(InputError):
        source_for(url, client, NO_ENV)


@pytest.mark.integration
def test_versions_and_file_names_cannot_escape(
    release_server: ReleaseServer, client: httpx.Client, tmp_path: Path
) -> None:
    source = source_for(release_server.repo_url("o", "r"), client, NO_ENV)
    with pytest.raises(InputError, match="invalid version"):
        source.resolve_version("../../etc")
    with pytest.raises(InputError, match="invalid release file name"):
        source.fetch("v1.0.0", "../metadata.yaml", tmp_path / "x")


# --- plain HTTP directory -------------------------------------------------------------


@pytest.mark.integration
def test_plain_directory(
    release_server: ReleaseServer, client: httpx.Client, tmp_path: Path
) -> None:
    release_server.add_plain("acme/odd/v0.3.1/metadata.yaml", b"plain metadata")
    base = release_server.plain_url("acme/odd")
    source = source_for(base + "/", client, NO_ENV)
    assert isinstance(source, HTTPDirectorySource)
    assert source.url == base
    assert source.resolve_version("v0.3.1") == "v0.3.1"
    source.fetch("v0.3.1", "metadata.yaml", tmp_path / "m.yaml")
    assert (tmp_path / "m.yaml").read_bytes() == b"plain metadata"

    with pytest.raises(InputError, match="GitHub releases or file:// source"):
        source.resolve_version("latest")
    with pytest.raises(NotFoundError) as caught:
        source.fetch("v0.3.1", "infrastructure-components.yaml", tmp_path / "c.yaml")
    assert f"{base}/v0.3.1/infrastructure-components.yaml" in str(caught.value)
    assert "HTTP 404" in str(caught.value)


@pytest.mark.unit
def test_plain_directory_file_url_pins_version_and_file(client: httpx.Client) -> None:
    source = source_for(
        "https://files.corp/capi/odd/v0.3.1/infrastructure-components.yaml", client, NO_ENV
    )
    assert isinstance(source, HTTPDirectorySource)
    assert source.url == "https://files.corp/capi/odd"
    assert (source.pinned_version, source.pinned_file) == (
        "v0.3.1",
        "infrastructure-components.yaml",
    )


# --- file:// local repository ---------------------------------------------------------


@pytest.fixture
def local_repo(tmp_path: Path) -> Path:
    label = tmp_path / "repo" / "infrastructure-odd"
    for version in ("v0.3.0", "v0.3.1", "v0.10.0-rc.0", "not-a-version"):
        (label / version).mkdir(parents=True)
        (label / version / "metadata.yaml").write_text(f"metadata {version}\n")
        (label / version / "infrastructure-components.yaml").write_text(f"components {version}\n")
    (label / "README.md").write_text("a file, not a version")
    return label


@pytest.mark.unit
def test_local_repository(local_repo: Path, client: httpx.Client, tmp_path: Path) -> None:
    source = source_for(local_repo.as_uri(), client, NO_ENV)
    assert isinstance(source, LocalRepositorySource)
    assert source.url == local_repo.as_uri()
    assert source.pinned_version is None
    assert source.resolve_version("latest") == "v0.3.1"
    assert source.resolve_version("v0.10.0-rc.0") == "v0.10.0-rc.0"
    dest = tmp_path / "out" / "components.yaml"
    source.fetch("v0.3.0", "infrastructure-components.yaml", dest)
    assert dest.read_text() == "components v0.3.0\n"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["components.yaml"]


@pytest.mark.unit
def test_local_repository_clusterctl_url(
    local_repo: Path, client: httpx.Client, tmp_path: Path
) -> None:
    url = (local_repo / "v0.3.0" / "infrastructure-components.yaml").as_uri()
    source = source_for(url, client, NO_ENV)
    assert isinstance(source, LocalRepositorySource)
    assert source.url == local_repo.as_uri()
    assert (source.pinned_version, source.pinned_file) == (
        "v0.3.0",
        "infrastructure-components.yaml",
    )
    source.fetch("v0.3.0", "metadata.yaml", tmp_path / "m.yaml")
    assert (tmp_path / "m.yaml").read_text() == "metadata v0.3.0\n"


@pytest.mark.unit
def test_local_repository_errors(local_repo: Path, client: httpx.Client, tmp_path: Path) -> None:
    source = source_for(local_repo.as_uri(), client, NO_ENV)
    with pytest.raises(NotFoundError, match=r"release v0\.3\.1 has no file core-components\.yaml"):
        source.fetch("v0.3.1", "core-components.yaml", tmp_path / "x")
    missing = source_for((tmp_path / "absent").as_uri(), client, NO_ENV)
    with pytest.raises(NotFoundError, match="local repository directory does not exist"):
        missing.resolve_version("latest")
    empty = tmp_path / "empty"
    (empty / "v1.0.0-rc.1").mkdir(parents=True)
    with pytest.raises(AirgapError, match="no version directory"):
        source_for(empty.as_uri(), client, NO_ENV).resolve_version("latest")
    with pytest.raises(InputError, match="ABSOLUTE"):
        source_for("file://relative/path", client, NO_ENV)


@pytest.mark.integration
def test_client_without_redirects_is_refused(release_server: ReleaseServer, tmp_path: Path) -> None:
    owner, repo = publish(release_server, [("v1.0.0", False, False)])
    with build_client(follow_redirects=False) as no_redirects:
        source = source_for(release_server.repo_url(owner, repo), no_redirects, NO_ENV)
        with pytest.raises(AirgapError, match="unexpected redirect"):
            source.fetch("v1.0.0", "metadata.yaml", tmp_path / "m.yaml")
    assert list(tmp_path.iterdir()) == []
