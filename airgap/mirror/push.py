"""Push a verified bundle's images into a registry, straight from the tar.

Blobs first (skip what is there, a cross-repository mount when another target repository
already holds the blob, else a streamed upload read from the tar by offset). An image's
child manifests (and the top one of an image without a tag) go by digest, children
before their index, as soon as its own blobs are in, while other images' blobs still
upload; tags go last, once every blob is in, so that a bundle member the registry
refuses leaves no tag naming anything. A tagged image's top manifest goes only then,
under its tag: one PUT stores and names it (on distribution every request costs the
registry CPU, which an import on a shared machine is short of). Manifests go
as their exact bytes, so every digest in the target equals the source. Re-running
pushes only what is missing.

Requests per blob and repository, on a registry that mounts (distribution): one POST
that mounts or opens the session the bytes then go into (``Registry.mount_or_start``),
plus the PUT of an upload; per manifest one PUT, by digest or under its tag, and one
more per further tag; after each PUT, a HEAD that confirms it; a HEAD
only where its answer can save a request (a hint from the blob index or a delta, which
a mount from elsewhere cannot tell from "already there"), or once the registry has
shown that it ignores mounts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from collections.abc import Mapping as AnyMapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from airgap.bundle.format import blob_member
from airgap.core.errors import AirgapError, DigestMismatchError, HTTPStatusError
from airgap.core.failures import Failure
from airgap.core.parallel import Ahead, run_parallel, run_unlocking
from airgap.core.progress import QUIET, Progress, Task
from airgap.mirror.blobindex import BlobIndex
from airgap.oci.manifest import Descriptor, Manifest
from airgap.registry.client import Registry
from airgap.registry.uploads import UploadSession
from airgap.rewrite.mapping import Mapping
from airgap.verify.bundle import VerifiedBundle

if TYPE_CHECKING:
    from airgap.net.filebody import FileBody

MAX_INDEX_MOUNTS = 2  # remembered repositories to try per blob before uploading it
_SKIPPED = "skipped"  # the repository already holds the blob
_MOUNTED = "mounted"  # the registry linked it from another repository


@dataclass
class PushStats:
    """What the push did. A blob is uploaded (its bytes sent), skipped (the repository
    answered that it holds it: a HEAD, or a mount from itself) or mounted (linked by a
    mount from another repository; distribution's 201 does not say whether the target
    held it already, so an interrupted import's repositories count as mounted there).
    A manifest is pushed (PUT) or skipped (a HEAD found it, asked only where it can)."""

    blobs_uploaded: int = 0
    blobs_skipped: int = 0
    blobs_mounted: int = 0
    manifests_pushed: int = 0
    manifests_skipped: int = 0
    bytes_uploaded: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    @property
    def changed(self) -> bool:
        return bool(self.blobs_uploaded or self.blobs_mounted or self.manifests_pushed)


@dataclass(frozen=True)
class ImageTree:
    """An image's manifests in push order (children before their index) and blobs."""

    mapping: Mapping
    manifests: list[Manifest]
    blobs: list[Descriptor]
    push_tag: bool = True  # False: another image owns this tag (see mapping.tag_owners)

    @property
    def top(self) -> Manifest:
        return self.manifests[-1]

    @property
    def reference(self) -> str:
        """What the top manifest is pushed as: its tag, else its digest."""
        tag = self.mapping.target.tag
        return tag if tag and self.push_tag else self.top.digest


def load_tree(
    bundle: VerifiedBundle,
    mapping: Mapping,
    digest: str,
    media_type: str,
    *,
    push_tag: bool = True,
    relied: AnyMapping[str, Manifest] | None = None,
) -> ImageTree:
    """An image's tree from the bundle; a manifest a delta relies on comes from
    ``relied`` (read from the target by digest, ``mirror.supply``)."""
    manifests: list[Manifest] = []
    blobs: dict[str, Descriptor] = {}

    def visit(child_digest: str, child_type: str) -> None:
        found = relied.get(child_digest) if relied else None
        manifest = found or Manifest.from_bytes(bundle.read(blob_member(child_digest)), child_type)
        for child in manifest.children():
            visit(child.digest, child.media_type)
        for blob in manifest.blobs():
            blobs.setdefault(blob.digest, blob)
        manifests.append(manifest)

    visit(digest, media_type)
    return ImageTree(mapping, manifests, list(blobs.values()), push_tag)


class _Metered:
    """A blob's upload body (sent by ``sendfile``, see ``VerifiedBundle.body``) that
    counts its bytes on the progress bar as they are handed to the connection; a retry
    (the body sent again from an offset, a PATCH after a refused PUT) counts nothing
    twice."""

    def __init__(self, bundle: VerifiedBundle, member: str, progress: Progress, task: Task) -> None:
        self._bundle = bundle
        self._member = member
        self._progress = progress
        self._task = task
        self.reported = 0

    def __call__(self, offset: int = 0) -> FileBody:
        return self._bundle.body(
            self._member, offset, reached=lambda sent: self._reach(offset + sent)
        )

    def _reach(self, position: int) -> None:
        if position > self.reported:
            self._progress.advance(self._task, position - self.reported)
            self.reported = position


class Pusher:
    """Pushes image trees from one verified bundle into one registry."""

    def __init__(
        self,
        registry: Registry,
        bundle: VerifiedBundle,
        *,
        concurrency: int = 8,
        progress: Progress = QUIET,
        blob_index: BlobIndex | None = None,
        relied: AnyMapping[str, str] | None = None,
        keep_going: bool = False,
    ) -> None:
        self._registry = registry
        # --keep-going: an image that fails is recorded here, by its target
        # reference, and the others still push; without it the first failure is raised
        self._keep_going = keep_going
        self.failures: dict[str, Failure] = {}
        # what the HEADs that found trees complete saw resolve, (repository, tag or
        # digest) -> digest: a no-op re-import's closure check need not ask again.
        # Written from the pool's threads, one key per store (atomic under the GIL)
        self.confirmed: dict[tuple[str, str], str] = {}
        self._index = blob_index
        self._relied = relied or {}  # a delta's needs: digest -> a repository holding it
        self._bundle = bundle
        self._concurrency = concurrency
        self._progress = progress
        self.stats = PushStats()
        # set when a mount from a repository this import just put the blob in answered
        # 202: the registry ignores mounts, so a mount can no longer say "already there"
        self._mounts_ignored = False
        self._asked: set[int] = set()  # trees whose reference _complete looked up (id)
        # (repository, digest) of every manifest PUT so far, each with its lock: a
        # manifest several trees share (a child of an index that is also an image of its
        # own, an image under two tags) is stored once, by digest or under its first
        # tag, and PUT one at a time (_put)
        self._manifest_locks: dict[tuple[str, str], threading.Lock] = {}
        self._manifests_put: set[tuple[str, str]] = set()
        self._locks_lock = threading.Lock()

    def find_complete(self, trees: list[ImageTree]) -> list[bool]:
        """Which trees the target holds whole already (one HEAD each, nothing sent).

        A registry accepts a manifest only once everything it references is there, so
        an image whose tag already names the same digest is complete: one HEAD instead
        of one per blob makes re-running a finished import nearly free."""
        return run_parallel([partial(self._complete, t) for t in trees], self._concurrency)

    def push(
        self,
        trees: list[ImageTree],
        complete: list[bool] | None = None,
        *,
        beside_tags: Callable[[], object] | None = None,
    ) -> PushStats:
        """Push what of ``trees`` the target lacks; ``complete``: ``find_complete``'s
        answer for them, if it was asked earlier in this run. ``beside_tags`` runs on a
        thread of its own while the tags are written, once every blob is in: work that
        must not start before the images are whole (the providers' manifests images
        name them) and that would otherwise wait for the tags' round trips."""
        if complete is None:
            complete = self.find_complete(trees)
        todo = [tree for tree, done in zip(trees, complete, strict=True) if not done]
        self._count_complete([t for t, done in zip(trees, complete, strict=True) if done], todo)
        repositories: dict[str, list[str]] = {}
        sizes: dict[str, int] = {}
        for tree in todo:
            for blob in tree.blobs:
                repos = repositories.setdefault(blob.digest, [])
                if tree.mapping.target.repository not in repos:
                    repos.append(tree.mapping.target.repository)
                sizes[blob.digest] = blob.size
        order = sorted(repositories, key=lambda digest: sizes[digest], reverse=True)
        task = self._progress.task("pushing", sum(sizes.values()))
        # each image's manifests go by digest (then are confirmed) as soon as its own
        # blobs are all in its repository, while other blobs still upload; tags wait
        # for every blob, so that a member the registry refuses (a bundle altered since
        # it was verified) leaves no tag naming anything
        waiting = {id(tree): {blob.digest for blob in tree.blobs} for tree in todo}
        trees_of: dict[str, list[ImageTree]] = {}
        for tree in todo:
            for digest in waiting[id(tree)]:
                trees_of.setdefault(digest, []).append(tree)
        finish = self._finish if not self._keep_going else self._finish_or_record
        ready = [partial(finish, tree) for tree in todo if not waiting[id(tree)]]

        def unlocked(index: int) -> list[Callable[[], None]]:
            """The images that the blob job ``index`` was the last one of."""
            if index < len(ready):  # an image's own job: it unlocks nothing
                return []
            digest = order[index - len(ready)]
            finished: list[Callable[[], None]] = []
            for tree in trees_of[digest]:
                waiting[id(tree)].discard(digest)
                if not waiting[id(tree)] and self._failed(tree) is None:
                    finished.append(partial(finish, tree))
            return finished

        blobs = [
            partial(self._blob_job, d, sizes[d], repositories[d], task, trees_of[d]) for d in order
        ]
        run_unlocking([*ready, *blobs], self._concurrency, unlocked)
        self._progress.finish(task)
        tagged = [
            tree
            for tree in todo
            if tree.reference != tree.top.digest and self._failed(tree) is None
        ]
        tag = self._tag if not self._keep_going else self._tag_or_record
        beside = Ahead("beside-tags", beside_tags) if beside_tags is not None else None
        try:
            run_parallel([partial(tag, tree) for tree in tagged], self._concurrency)
        except Exception:
            if beside is not None:  # its own error, if any, is dropped behind this one
                beside.wait()  # not left pushing while the import reports its failure
            raise
        if beside is not None:
            beside.result()
        return self.stats

    def _failed(self, tree: ImageTree) -> Failure | None:
        return self.failures.get(str(tree.mapping.target))

    def _record(self, trees: list[ImageTree], error: AirgapError) -> None:
        """Each of ``trees`` failed with ``error`` (the first error of an image is kept)."""
        for tree in trees:
            target = str(tree.mapping.target)
            failure = Failure.of(str(tree.mapping.source), target, error)
            self.failures.setdefault(target, failure)

    def _blob_job(
        self, digest: str, size: int, repositories: list[str], task: Task, trees: list[ImageTree]
    ) -> None:
        """``_push_blob``; with keep-going, a repository it cannot be put in fails the
        images of that repository that need it (recorded before the job returns:
        ``unlocked`` then skips them)."""

        def failed(repository: str, error: AirgapError) -> None:
            self._record([t for t in trees if t.mapping.target.repository == repository], error)

        self._push_blob(digest, size, repositories, task, failed if self._keep_going else None)

    def _finish_or_record(self, tree: ImageTree) -> None:
        try:
            self._finish(tree)
        except AirgapError as exc:
            self._record([tree], exc)

    def _tag_or_record(self, tree: ImageTree) -> None:
        try:
            self._tag(tree)
        except AirgapError as exc:
            self._record([tree], exc)

    def _finish(self, tree: ImageTree) -> None:
        """An image whose blobs are all in: its manifests by digest, then their
        confirmation. A tagged image's top manifest is not among them: it waits for the
        tags (``_tag``), where one PUT stores it and names it, and one HEAD confirms both."""
        target = tree.mapping.target
        what = f"image {target}"
        # _complete looked the reference up and found the image incomplete: a PUT of a
        # manifest that is there already is idempotent and as small as the HEAD that
        # would skip it, so each is PUT without asking (a delta's image, never looked
        # up, asks first: its manifests may all be there)
        ask = id(tree) not in self._asked
        early = tree.manifests if tree.reference == tree.top.digest else tree.manifests[:-1]
        for manifest in early:
            self._put(target.repository, manifest.digest, manifest, what, ask=ask)
        self._confirm(tree, [(manifest.digest, manifest.digest) for manifest in early])

    def _tag(self, tree: ImageTree) -> None:
        """The image's tag, once every image's blobs are in: its top manifest PUT under
        it, then confirmed (the tag resolving to the top digest: both are there)."""
        target = tree.mapping.target
        what = f"image {target}"
        ask = id(tree) not in self._asked
        self._put(target.repository, tree.reference, tree.top, what, ask=ask)
        self._confirm(tree, [(tree.reference, tree.top.digest)])

    def _confirm(self, tree: ImageTree, wanted: list[tuple[str, str]]) -> None:
        """Trust, but verify: after the push, each (reference, digest) of ``wanted``
        resolves to what was pushed (one HEAD each). A registry that answered 201 and
        stored nothing fails the import here, naming the image, instead of at the first
        pull. (A complete image was confirmed by the HEAD that found it complete.)"""
        target = tree.mapping.target
        what = f"image {target}"
        for reference, digest in wanted:
            found = self._registry.manifest_digest(target.repository, reference, what=what)
            if found != digest:
                state = "does not resolve" if found is None else f"resolves to {found}"
                name = f"{target.repository}{'@' if reference == digest else ':'}{reference}"
                raise AirgapError(
                    f"{what}: registry {self._registry.display_name} accepted the push but "
                    f"{name} {state} (expected {digest})"
                )

    def _complete(self, tree: ImageTree) -> bool:
        target = tree.mapping.target
        what = f"image {target}"
        if self._relied and self._carries_some(tree):
            # a delta carries a blob of an image the target already has by tag only
            # because the far side lacked it (a have-list of a registry that lost it):
            # check every blob rather than trust the tag
            return False
        self._asked.add(id(tree))
        found = self._registry.manifest_digest(target.repository, tree.reference, what=what)
        if found != tree.top.digest:
            return False
        # its reference resolves to the top digest, so that digest resolves there too
        repository = target.repository
        self.confirmed[(repository, tree.reference)] = self.confirmed[(repository, found)] = found
        return True

    def _carries_some(self, tree: ImageTree) -> bool:
        return any(blob_member(blob.digest) in self._bundle.members for blob in tree.blobs)

    def _count_complete(self, complete: list[ImageTree], todo: list[ImageTree]) -> None:
        pending = {blob.digest for tree in todo for blob in tree.blobs}
        skipped = {blob.digest for tree in complete for blob in tree.blobs} - pending
        manifests = sum(len(tree.manifests) for tree in complete)
        self.stats.add(blobs_skipped=len(skipped), manifests_skipped=manifests)
        if self._index is not None:  # a complete image's repository holds all its blobs
            for tree in complete:
                for blob in tree.blobs:
                    self._index.learn(blob.digest, tree.mapping.target.repository)

    def _push_blob(
        self,
        digest: str,
        size: int,
        repositories: list[str],
        task: Task,
        failed: Callable[[str, AirgapError], None] | None = None,
    ) -> None:
        """The blob into each of ``repositories``; with ``failed`` (--keep-going), a
        repository it cannot be put in is handed there and the others still get it."""
        holder: str | None = None
        body = _Metered(self._bundle, blob_member(digest), self._progress, task)
        for repository in repositories:
            try:
                self._push_blob_into(repository, digest, size, holder, body)
            except DigestMismatchError:
                raise  # a bundle member that does not hash: the bundle is not to be trusted
            except AirgapError as exc:
                if failed is None:
                    raise
                failed(repository, exc)
                continue
            holder = holder or repository
            if self._index is not None:
                self._index.learn(digest, repository)

    def _push_blob_into(
        self, repository: str, digest: str, size: int, holder: str | None, body: _Metered
    ) -> None:
        member = blob_member(digest)
        what = f"blob {digest}"
        placed = self._place(repository, digest, holder, what)
        if placed == _SKIPPED:
            self.stats.add(blobs_skipped=1)
        elif placed == _MOUNTED:
            self.stats.add(blobs_mounted=1)
        elif member not in self._bundle.members:
            assert isinstance(placed, UploadSession)
            self._registry.cancel_upload(placed)
            raise AirgapError(
                f"{what}: the bundle relies on the target for it (a delta), and "
                f"registry {self._registry.display_name} neither holds it in "
                f"{repository} nor mounts it there"
            )
        else:
            assert isinstance(placed, UploadSession)
            self._upload(repository, digest, size, body, placed, what)
            self.stats.add(blobs_uploaded=1, bytes_uploaded=size)

    def _upload(
        self,
        repository: str,
        digest: str,
        size: int,
        body: _Metered,
        session: UploadSession,
        what: str,
    ) -> None:
        """Upload a blob unhashed here (the registry checks its digest); when the bytes
        are refused, the member is hashed against the signed manifest, so that a
        bundle changed since it was verified is named as such rather than as whatever
        the registry said about the bytes it refused."""
        try:
            self._registry.upload_blob(repository, digest, size, body, what=what, session=session)
        except (DigestMismatchError, HTTPStatusError):
            self._bundle.confirm(blob_member(digest))
            raise

    def _place(
        self, repository: str, digest: str, holder: str | None, what: str
    ) -> str | UploadSession:
        """Whether ``repository`` holds the blob (``_SKIPPED``), got it by a mount
        (``_MOUNTED``), or else the open session to upload it into.

        No HEAD where its answer cannot change what is sent. From ``holder``, the
        repository this import just put the blob in, a mount-or-start either links it or
        opens the session the bytes go into anyway: a HEAD first would only tell a blob
        already there from one just linked (both count as mounted here). Without any
        source, ``Registry.find_or_start`` asks "is it there?" and opens the session in
        one request (a mount from the repository itself, HEAD + POST where the registry
        refuses that). With hints (a delta's holder, the blob index), the HEAD stays: a
        mount from elsewhere would link a blob that is already there and count it as
        mounted, and a failed hint costs a session to cancel."""
        if holder and not self._mounts_ignored:
            session = self._registry.mount_or_start(repository, digest, holder, what=what)
            if session is None:
                return _MOUNTED
            # holder has it (this import put it there): the registry ignores mounts, and
            # a mount can no longer answer "already there" for anything
            self._mounts_ignored = True
            return session
        hints = [holder] if holder else self._hints(repository, digest)
        if not hints and not self._mounts_ignored:
            session = self._registry.find_or_start(repository, digest, what=what)
            return _SKIPPED if session is None else session
        if self._registry.blob_size(repository, digest, what=what) is not None:
            return _SKIPPED
        return self._mount_from(repository, digest, hints, trusted=bool(holder), what=what)

    def _hints(self, repository: str, digest: str) -> list[str]:
        """Repositories said to hold the blob: a delta's (the far side's have-list), else
        the blob index's (an earlier import's), at most ``MAX_INDEX_MOUNTS``."""
        relied = self._relied.get(digest)
        if relied:
            return [relied]
        if self._index is None:
            return []
        return self._index.holders(digest, exclude=repository)[:MAX_INDEX_MOUNTS]

    def _mount_from(
        self, repository: str, digest: str, sources: list[str], *, trusted: bool, what: str
    ) -> str | UploadSession:
        """Mount from the first source that has the blob, else upload into the session
        the first failed mount opened (the later ones' are cancelled). An index hint is
        only a hint: a mount the registry refuses, for whatever reason (e.g. no pull
        access to that repository any more), costs an upload and is forgotten."""
        session: UploadSession | None = None
        for source in sources:
            try:
                opened = self._registry.mount_or_start(repository, digest, source, what=what)
            except AirgapError:
                if trusted or self._index is None or source == self._relied.get(digest):
                    raise
                self._index.forget(digest, source)
                continue
            if opened is None:
                if session is not None:
                    self._registry.cancel_upload(session)
                return _MOUNTED
            if not trusted and self._index is not None and source != self._relied.get(digest):
                self._index.forget(digest, source)
            if session is None:
                session = opened
            else:
                self._registry.cancel_upload(opened)
        return session or self._registry.start_upload(repository, what=what)

    def _put(
        self, repository: str, reference: str, manifest: Manifest, what: str, *, ask: bool
    ) -> None:
        """PUT ``manifest`` as ``reference`` (its digest, or a tag). Its first PUT in a
        repository counts it; after that, one by digest is skipped and one under another
        tag only adds the name. Two PUTs of the same manifest at once race in
        distribution (while the second rewrites it, an index PUT naming it finds it
        unknown: MANIFEST_BLOB_UNKNOWN, DIGEST_INVALID), so they go one at a time."""
        key = (repository, manifest.digest)
        with self._locks_lock:
            lock = self._manifest_locks.setdefault(key, threading.Lock())
        with lock:
            first = key not in self._manifests_put
            if not first and reference == manifest.digest:  # another tree put it
                self.stats.add(manifests_skipped=1)
                return
            self._put_now(repository, reference, manifest, what, ask=ask, counted=first)
            self._manifests_put.add(key)

    def _put_now(
        self,
        repository: str,
        reference: str,
        manifest: Manifest,
        what: str,
        *,
        ask: bool,
        counted: bool = True,
    ) -> None:
        """PUT ``manifest`` as ``reference``, first asking whether it is there when
        ``ask``; ``counted``: this is the manifest's first PUT here (not another tag)."""
        if ask and self._registry.manifest_digest(repository, reference, what=what) == (
            manifest.digest
        ):
            if counted:
                self.stats.add(manifests_skipped=1)
            return
        self._registry.put_manifest(repository, reference, manifest, what=what)
        if counted:
            self.stats.add(manifests_pushed=1)
