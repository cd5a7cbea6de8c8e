"""How many requests ``airgap import`` sends, counted from its ``--debug`` lines.

Against the real registry (distribution): per blob and repository one POST that mounts
it or opens the session its bytes go into, one PUT per distinct blob, no HEAD of a blob
and no cancelled session; per manifest one PUT (a child by digest, an image's top one
under its tag, which stores and names it at once), no HEAD before it. A repository that
already holds every blob (an interrupted import) is asked and answered in the same POST
and gets no byte again; a registry that refuses the combined form still gets everything.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.harness import skopeo
from tests.harness.bundle_fixtures import CollectedBundle
from tests.harness.cli import run_airgap
from tests.harness.faultproxy import FaultProxyFactory
from tests.harness.registry import RegistryFactory, RegistryServer

pytestmark = pytest.mark.e2e

PREFIX = "req"
_LINE = re.compile(r"^airgap: debug: (\S+) (\S+) (\d{3})\b")


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # below the host, query included
    status: int

    @property
    def repository(self) -> str:
        return self.path.removeprefix("/v2/").split("/blobs/")[0].split("/manifests/")[0]

    @property
    def kind(self) -> str:
        if "/blobs/uploads/" in self.path:
            if self.method == "POST":
                return "mount" if "mount=" in self.path else "start"
            return "session"
        return "blob" if "/blobs/" in self.path else "manifest"


def _requests(stderr: str, repositories: set[str] | None) -> list[Request]:
    """The debug log's requests to the bundle's image repositories (None: to every
    repository), in order."""
    found = []
    for line in stderr.splitlines():
        match = _LINE.match(line)
        if match:
            method, url, status = match.groups()
            request = Request(method, re.sub(r"^https?://[^/]+", "", url), int(status))
            if repositories is None or request.repository in repositories:
                found.append(request)
    return found


def _import(
    bundle: CollectedBundle, host: str, tmp_path: Path, *extra: str
) -> tuple[dict[str, int], str]:
    result = run_airgap(
        *bundle.import_args(f"{host}/{PREFIX}"),
        *extra,
        "--plain-http",
        "--debug",
        "-q",
        "--format",
        "json",
        env={"AIRGAP_CACHE_DIR": str(tmp_path / "cache")},  # no blob index hints
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout), result.stderr


@dataclass(frozen=True)
class Shape:
    """What the bundle's images need in the target: (repository, blob) pairs, distinct
    blobs, manifests, tags."""

    repositories: set[str]
    pairs: set[tuple[str, str]]
    blobs: set[str]
    manifests: int
    images: int


def _shape(bundle: CollectedBundle) -> Shape:
    images = list(bundle.providers.images.values())
    pairs = {(f"{PREFIX}/{i.repository}", blob) for i in images for blob in i.blob_digests}
    return Shape(
        repositories={repository for repository, _ in pairs},
        pairs=pairs,
        blobs={blob for _, blob in pairs},
        manifests=sum(1 + len(i.child_digests) for i in images),
        images=len(images),
    )


def _count(requests: list[Request], method: str, kind: str, status: int | None = None) -> int:
    return sum(
        1 for r in requests if r.method == method and r.kind == kind and status in (None, r.status)
    )


def test_a_fresh_import_sends_one_post_per_blob_and_repository_and_no_blob_head(
    capi_bundle: CollectedBundle, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    registry = registry_factory("plain")
    shape = _shape(capi_bundle)
    assert len(shape.pairs) > len(shape.blobs)  # layers shared across repositories
    report, stderr = _import(capi_bundle, registry.host, tmp_path)
    requests = _requests(stderr, shape.repositories)
    mounted = len(shape.pairs) - len(shape.blobs)
    assert (report["blobs_uploaded"], report["blobs_mounted"], report["blobs_skipped"]) == (
        len(shape.blobs),
        mounted,
        0,
    )
    assert (report["manifests_pushed"], report["manifests_skipped"]) == (shape.manifests, 0)
    # blobs: each repository's first ask is the mount-or-start; nothing else
    assert _count(requests, "HEAD", "blob") == 0
    assert _count(requests, "POST", "start") == 0
    assert _count(requests, "DELETE", "session") == 0
    assert _count(requests, "POST", "mount", 201) == mounted
    assert _count(requests, "POST", "mount", 202) == len(shape.blobs)
    assert _count(requests, "POST", "mount") == len(shape.pairs)
    assert _count(requests, "PUT", "session") == len(shape.blobs)
    assert _count(requests, "PATCH", "session") == 0
    # manifests: the completeness HEAD per image before any blob; then one PUT per
    # child manifest by digest, which no HEAD asks about first (each image's go once its
    # own blobs are in, while others' still upload), and one PUT per image under its tag
    # once every blob is in, which stores its top manifest too: none goes by digest as
    # well (each request costs the registry CPU). The post-push check (issue 11) HEADs
    # each one after its PUT
    first_blob = next(i for i, r in enumerate(requests) if r.kind != "manifest")
    assert _count(requests[:first_blob], "HEAD", "manifest") == shape.images
    later = requests[first_blob:]
    puts = [i for i, r in enumerate(later) if r.method == "PUT" and r.kind == "manifest"]
    by_tag = [i for i in puts if "/manifests/sha256:" not in later[i].path]
    assert (len(puts) - len(by_tag), len(by_tag)) == (shape.manifests - shape.images, shape.images)
    last_blob = max(i for i, r in enumerate(later) if r.kind != "manifest")
    assert min(by_tag) > last_blob
    for put in puts:
        heads = [i for i, r in enumerate(later) if (r.method, r.path) == ("HEAD", later[put].path)]
        assert heads and min(heads) > put
    assert _count(later, "HEAD", "manifest") >= shape.manifests


def test_manifests_images_are_pushed_once_every_image_blob_is_in_beside_the_tags(
    capi_bundle: CollectedBundle, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    """A manifests image names the images its components run: its blobs go only once
    every image blob is in (while the images' tags are written), its tag only once every
    image is whole, tag and all. What its version tag names is asked before anything is
    pushed (one HEAD each), and its layer and config go side by side."""
    registry = registry_factory("plain")
    shape = _shape(capi_bundle)
    _, stderr = _import(capi_bundle, registry.host, tmp_path)
    requests = _requests(stderr, None)
    images = [i for i, r in enumerate(requests) if r.repository in shape.repositories]
    published = [
        i for i, r in enumerate(requests) if r.repository.startswith(f"{PREFIX}/capi-manifests/")
    ]
    assert published, "no manifests image was published"
    # each blob asked for and its session opened in one POST, as the images' are
    assert _count([requests[i] for i in published], "HEAD", "blob") == 0
    last_image_blob = max(i for i in images if requests[i].kind != "manifest")
    staged = [i for i in published if requests[i].kind != "manifest"]
    assert staged and min(staged) > last_image_blob
    # before them, one HEAD of each version tag and nothing else
    ahead = [requests[i] for i in published if i < min(staged)]
    assert [(r.method, r.kind) for r in ahead] == [("HEAD", "manifest")] * len(ahead)
    repositories = {requests[i].repository for i in published}
    assert sorted(r.repository for r in ahead) == sorted(repositories)
    for repository in repositories:  # one POST (find or start) and one PUT per blob
        mine = sorted(requests[i].method for i in staged if requests[i].repository == repository)
        assert mine == ["POST", "POST", "PUT", "PUT"], repository
    tags = [
        i
        for i in images
        if (requests[i].method, requests[i].kind) == ("PUT", "manifest")
        and "/manifests/sha256:" not in requests[i].path
    ]
    assert len(tags) == shape.images
    # and each is tagged only once every image it names is whole, tag and all
    named = [i for i in published if (requests[i].method, requests[i].kind) == ("PUT", "manifest")]
    assert named and min(named) > max(tags)
    for repository in {requests[i].repository for i in published}:  # each one tagged
        listing = httpx.get(f"{registry.url}/v2/{repository}/tags/list").json()
        assert listing["tags"], repository


def test_a_repository_holding_every_blob_is_asked_in_the_same_post_and_sent_nothing(
    capi_bundle: CollectedBundle, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    """Every image's blobs and manifests are already in its target repository, under
    another tag (as an import interrupted before its tags leaves them): the import
    uploads no byte, and finds that out without a HEAD per blob."""
    registry = registry_factory("plain")
    shape = _shape(capi_bundle)
    for image in capi_bundle.providers.images.values():
        assert image.layout_ref is not None
        skopeo.copy(
            image.layout_ref,
            f"docker://{registry.host}/{PREFIX}/{image.repository}:elsewhere",
            dest_registry=registry,
            preserve_digests=True,
        )
    report, stderr = _import(capi_bundle, registry.host, tmp_path)
    requests = _requests(stderr, shape.repositories)
    assert (report["blobs_uploaded"], report["bytes_uploaded"]) == (0, 0)
    # a blob's first repository answers "already there" (counted skipped); the others
    # are linked from it (counted mounted: a 201 does not tell the two apart)
    assert report["blobs_skipped"] == len(shape.blobs)
    assert report["blobs_mounted"] == len(shape.pairs) - len(shape.blobs)
    assert _count(requests, "POST", "mount", 201) == len(shape.pairs)
    assert [r for r in requests if r.kind in ("blob", "start", "session")] == []
    _assert_every_image_landed(capi_bundle, registry)


def test_a_registry_refusing_the_combined_form_gets_every_image_with_one_refusal(
    capi_bundle: CollectedBundle,
    registry_factory: RegistryFactory,
    fault_proxy_factory: FaultProxyFactory,
    tmp_path: Path,
) -> None:
    """A registry answering 400 to a mount whose source is the target repository
    itself: that is asked once, then HEAD + POST + PUT; mounts from other repositories
    (which it takes) still link shared layers."""
    registry: RegistryServer = registry_factory("plain")
    proxy = fault_proxy_factory(registry)
    shape = _shape(capi_bundle)
    for repository in shape.repositories:
        source = re.escape(repository).replace("/", "(/|%2F)")
        pattern = rf"mount=[^&]+&from={source}(&|$)"
        proxy.inject(
            "POST",
            rf"^/v2/{re.escape(repository)}/blobs/uploads/$",
            query_regex=pattern,
            status=400,
            times=1000,
        )
    # one push at a time: the refusal is remembered before the next blob is asked
    report, _ = _import(capi_bundle, proxy.host, tmp_path, "--concurrency", "1")
    assert report["blobs_uploaded"] == len(shape.blobs)
    assert report["blobs_mounted"] == len(shape.pairs) - len(shape.blobs)
    refused = [r for r in proxy.requests if r.status == 400]
    assert len(refused) == 1, refused
    _assert_every_image_landed(capi_bundle, registry)


def test_a_registry_ignoring_mounts_is_asked_with_head_once_it_shows_it(
    capi_bundle: CollectedBundle,
    registry_factory: RegistryFactory,
    fault_proxy_factory: FaultProxyFactory,
    tmp_path: Path,
) -> None:
    """A registry that ignores ``mount``/``from`` answers 202 to every mount. The first
    from a repository this import just filled shows it; from then on every blob is
    asked for with a HEAD first (a mount can no longer say "already there"), and every
    image still lands whole."""
    registry: RegistryServer = registry_factory("plain")
    proxy = fault_proxy_factory(registry)
    shape = _shape(capi_bundle)
    proxy.inject("POST", r"/blobs/uploads/$", query_regex="mount=", strip_query=True, times=10**6)
    report, stderr = _import(capi_bundle, proxy.host, tmp_path, "--concurrency", "1")
    assert (report["blobs_uploaded"], report["blobs_mounted"]) == (len(shape.pairs), 0)
    requests = _requests(stderr, shape.repositories)
    blob_work = [r for r in requests if r.kind != "manifest"]
    # the first blob of a second repository: a mount from the first, answered 202
    seen: dict[str, str] = {}
    flip = None
    for index, request in enumerate(blob_work):
        if request.kind == "mount":
            digest = request.path.split("mount=")[1].split("&")[0]
            if seen.setdefault(digest, request.repository) != request.repository:
                flip = index
                break
    assert flip is not None and blob_work[flip].status == 202
    assert _count(blob_work[:flip], "HEAD", "blob") == 0
    # the session that mount opened takes the bytes; after it, every blob is asked first
    assert (blob_work[flip + 1].method, blob_work[flip + 1].kind) == ("PUT", "session")
    after = blob_work[flip + 2 :]
    heads = _count(after, "HEAD", "blob")
    assert heads > 0 and heads == _count(after, "PUT", "session")
    _assert_every_image_landed(capi_bundle, registry)


def test_a_no_op_reimport_asks_each_image_once_and_a_lost_image_is_pushed_again(
    capi_bundle: CollectedBundle, registry_factory: RegistryFactory, tmp_path: Path
) -> None:
    """Re-importing into a registry that holds everything sends one manifest HEAD per
    image (its tag) and nothing else there: the closure check reuses those answers
    instead of asking for each image by digest again. A registry that lost an image
    fails that image's HEAD: it is pushed again, and the closure asks for itself."""
    registry = registry_factory("plain")
    shape = _shape(capi_bundle)
    _import(capi_bundle, registry.host, tmp_path)
    report, stderr = _import(capi_bundle, registry.host, tmp_path)
    assert report["changed"] is False
    requests = _requests(stderr, shape.repositories)
    assert [(r.method, r.kind) for r in requests] == [("HEAD", "manifest")] * shape.images
    assert len({r.path for r in requests}) == shape.images

    source, image = next(iter(capi_bundle.providers.images.items()))
    repository = f"{PREFIX}/{source.split('/', 1)[1].split(':')[0].split('@')[0]}"
    url = f"{registry.url}/v2/{repository}/manifests/{image.digest}"
    assert httpx.delete(url).status_code == 202
    report, stderr = _import(capi_bundle, registry.host, tmp_path)
    assert report["changed"] is True and report["manifests_pushed"] >= 1
    requests = _requests(stderr, shape.repositories)
    # the image goes again under its tag, and the post-push check asks for that tag
    puts = [i for i, r in enumerate(requests) if (r.method, r.kind) == ("PUT", "manifest")]
    assert [requests[i].repository for i in puts] == [repository]
    assert any((r.method, r.path) == ("HEAD", requests[puts[0]].path) for r in requests[puts[0] :])
    # and the closure check asks for the digest the outputs pin on its own
    closure = [r for r in requests if r.method == "HEAD" and r.path.endswith(image.digest)]
    assert len(closure) >= 1
    _assert_every_image_landed(capi_bundle, registry)


def _assert_every_image_landed(bundle: CollectedBundle, registry: RegistryServer) -> None:
    """skopeo reads every image of the bundle from the target at the bundle's digest."""
    for source, image in bundle.providers.images.items():
        target = f"{registry.host}/{PREFIX}/{source.split('/', 1)[1]}"
        assert skopeo.digest_of(skopeo.raw_manifest(target, registry=registry)) == image.digest
