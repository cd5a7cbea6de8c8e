"""Closure: every image the output references resolves, by digest, in the target.

An import is only as good as the references it leaves behind: a manifest, a template,
a chart's values or a provider CR that names an image the target registry cannot serve
is an install that stalls on the far side with ImagePullBackOff. So at the end of an
import every reference in the files it wrote is collected (``references``, pure: the
same discovery as collect, over the very bytes that were written, including the
components inside provider ConfigMaps) and asked of the target registry (``check``):
a reference pinned by digest must resolve to that digest, a tag must resolve to the
digest the bundle holds for it. What does not is a dangling reference, named with the
file that holds it.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from airgap.core.errors import AirgapError, InputError
from airgap.core.limits import MAX_COMPONENTS_BYTES
from airgap.core.parallel import run_parallel
from airgap.oci.reference import parse_reference
from airgap.providers.types import ProviderType
from airgap.registry.client import Registry

# Output files that hold manifests (others: node mirror configs, mapping.txt, reports).
MANIFEST_DIRS = ("components/", "clusterctl/", "operator/")
VALUES_SUFFIX = "values-airgap.yaml"
# the documents _embedded reads: ConfigMaps (and Secrets) holding components, and the
# operator's provider CRs; the rest (CRDs: most of the bytes) are parsed, not built
_EMBEDDING_KINDS = frozenset({"ConfigMap", "Secret", *(t.kind for t in ProviderType)})


@dataclass(frozen=True)
class Dangling:
    """A reference an output names that the target cannot resolve: the install would
    fail to pull it."""

    reference: str
    where: str  # the first output file naming it
    why: str

    def __str__(self) -> str:
        return f"{self.reference} (in {self.where}): {self.why}"


@dataclass
class Closure:
    """What the check saw: every distinct reference and the dangling ones."""

    references: dict[str, str] = field(default_factory=dict)  # reference -> first file
    dangling: list[Dangling] = field(default_factory=list)

    @property
    def closed(self) -> bool:
        return not self.dangling


def references(files: Mapping[str, bytes]) -> dict[str, str]:
    """Every image reference the output's manifests, templates, chart values and
    provider CRs name -> the first file (in path order) that names it. Files with the
    same bytes are read once (components sit in components/, clusterctl/ and a
    ConfigMap alike)."""
    return ReferenceScan().add(files)


class ReferenceScan:
    """``references`` of outputs given in steps, each distinct text parsed once across
    all of them: import scans what it built before the push while it pushes, then the
    files written after it (the clusterctl repository's copies of the components among
    them, which are not parsed again). Combine the steps' answers with ``merged``."""

    def __init__(self) -> None:
        self._seen: set[str] = set()  # sha256 of every text read, files and embedded ones
        self._named: dict[str, list[str]] = {}  # a file's sha256 -> the references it names

    def add(self, files: Mapping[str, bytes]) -> dict[str, str]:
        """The references of ``files``, each -> the first of them in path order naming it."""
        found: dict[str, str] = {}
        for path in sorted(files):
            if not path.startswith(MANIFEST_DIRS) or not path.endswith((".yaml", ".yml")):
                continue
            digest = hashlib.sha256(files[path]).hexdigest()
            named = self._named.get(digest)
            if named is None:
                # a text read before inside a ConfigMap names nothing of its own here
                named = [] if digest in self._seen else self._read(path, files[path], digest)
                self._named[digest] = named
            for reference in named:
                found.setdefault(reference, path)
        return found

    def _read(self, path: str, data: bytes, digest: str) -> list[str]:
        self._seen.add(digest)
        return list(dict.fromkeys(_file_references(path, data, self._seen)))


def merged(*parts: Mapping[str, str]) -> dict[str, str]:
    """``references`` of several sets of files as one: each reference -> the first file
    in path order among those naming it (what ``references`` of their union gives)."""
    found: dict[str, str] = {}
    for part in parts:
        for reference, path in part.items():
            if reference not in found or path < found[reference]:
                found[reference] = path
    return found


def _file_references(path: str, data: bytes, seen: set[str]) -> Iterator[str]:
    # the readers (YAML, chart values) load when files are read: a re-import whose
    # outputs are recorded whole only checks references (importing.outputcache)
    from airgap.content.chartvalues import values_images
    from airgap.formats.yamlload import iter_documents
    from airgap.providers.components import lenient_scan

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    if path.endswith(VALUES_SUFFIX):
        for document in iter_documents(text, path):
            yield from values_images(document)
        return
    # the workloads' images and the objects that embed components, from one parse
    embedding = "components" in text or "imageUrl" in text
    scan = lenient_scan(text, path, _EMBEDDING_KINDS if embedding else frozenset())
    yield from scan.images
    for document in scan.documents:
        yield from _embedded(document, path, seen)


def _embedded(document: Any, path: str, seen: set[str]) -> Iterator[str]:
    """Images inside objects: a provider ConfigMap's components (plain or gzip in
    binaryData) and a provider CR's image overrides. Components whose bytes were read
    already (the same file in components/) are not parsed again."""
    from airgap.providers.components import lenient_images  # see _file_references

    if not isinstance(document, dict):
        return
    for key in ("data", "binaryData"):
        section = document.get(key)
        value = section.get("components") if isinstance(section, dict) else None
        if not isinstance(value, str):
            continue
        text = value if key == "data" else _gunzip(value, path)
        if text is None:
            continue
        digest = hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()
        if digest not in seen:
            seen.add(digest)
            yield from lenient_images(text, f"{path}: {key}.components")[0]
    spec = document.get("spec")
    if isinstance(spec, dict) and str(document.get("apiVersion", "")).startswith(
        "operator.cluster.x-k8s.io/"
    ):
        yield from _overrides(spec)


def _gunzip(value: str, path: str) -> str | None:
    try:
        raw = gzip.decompress(base64.b64decode(value, validate=True))
    except (ValueError, OSError, EOFError):
        raise InputError(f"{path}: binaryData.components is not base64 gzip") from None
    if len(raw) > MAX_COMPONENTS_BYTES:
        raise InputError(f"{path}: binaryData.components unpacks beyond the components limit")
    return raw.decode("utf-8", errors="replace")


def _overrides(spec: dict[str, Any]) -> Iterator[str]:
    deployments = [spec.get("deployment")]
    additional = spec.get("additionalDeployments")
    if isinstance(additional, dict):
        deployments += [
            entry.get("deployment") for entry in additional.values() if isinstance(entry, dict)
        ]
    for deployment in deployments:
        containers = deployment.get("containers") if isinstance(deployment, dict) else None
        for container in containers if isinstance(containers, list) else []:
            url = container.get("imageUrl") if isinstance(container, dict) else None
            if isinstance(url, str) and url.strip():
                try:
                    yield str(parse_reference(url.strip()))
                except InputError:
                    yield url.strip()  # unparsable: the check names it


def check(
    registry: Registry,
    target_host: str,
    found: Mapping[str, str],
    expected: Mapping[str, str],
    *,
    concurrency: int = 8,
    answered: Mapping[tuple[str, str], str] | None = None,
) -> Closure:
    """Ask the target for every reference in ``found`` (reference -> file).

    ``expected`` maps each target reference without digest (``repo:tag``) to the
    digest the bundle holds for it: a tag must still name that digest. ``answered``:
    what the target already said in this run, ``(repository, tag or digest)`` -> the
    digest it resolved to (a re-import's tag HEADs); those are not asked again, which
    halves a no-op re-import's requests."""
    closure = Closure(dict(found))
    known = answered or {}
    references = sorted(found)
    # only the references not answered already go to the pool (its threads cost more
    # than settling the others here)
    asked = [ref for ref in references if not _answered(ref, known)]
    checks = [partial(_check_one, registry, target_host, ref, expected, known) for ref in asked]
    whys = dict(zip(asked, run_parallel(checks, concurrency), strict=True))
    for reference in references:
        if reference in whys:
            why = whys[reference]
        else:
            why = _check_one(registry, target_host, reference, expected, known)
        if why:
            closure.dangling.append(Dangling(reference, found[reference], why))
    return closure


def _answered(text: str, known: Mapping[tuple[str, str], str]) -> bool:
    try:
        ref = parse_reference(text)
    except InputError:
        return False
    return (ref.repository, ref.identifier) in known


def _check_one(
    registry: Registry,
    target_host: str,
    text: str,
    expected: Mapping[str, str],
    known: Mapping[tuple[str, str], str],
) -> str | None:
    """Why ``text`` does not resolve by digest in the target, or None."""
    try:
        ref = parse_reference(text)
    except InputError:
        return "not a valid image reference"
    if ref.registry != target_host:
        return f"names registry {ref.registry}, not the target {target_host}"
    served = known.get((ref.repository, ref.identifier))
    if served is None:
        what = f"closure check of {text}"
        try:
            served = registry.manifest_digest(ref.repository, ref.identifier, what=what)
        except AirgapError as exc:
            return f"cannot be checked: {exc}"
    if served is None:
        return "not found in the target"
    wanted = ref.digest or expected.get(str(ref))
    if wanted and served != wanted:
        return f"resolves to {served}, not {wanted}"
    return None


def describe_failure(closure: Closure, target: str) -> str:
    """One line for the error: every dangling reference, with its file."""
    listed = "; ".join(str(item) for item in closure.dangling)
    return (
        f"closure check failed: {len(closure.dangling)} image reference(s) in the output "
        f"do not resolve by digest in {target}: {listed}"
    )
