"""Fetch Helm charts without Helm: classic chart repositories and OCI registries.

A classic repository is an ``index.yaml`` listing each chart's versions with the URLs
of their packages (relative to the repository or absolute) and each package's sha256
``digest``; the package is checked against it. The index of a large repository (tens of
megabytes, millions of YAML nodes) is not parsed whole: ``helm repo index`` writes one
layout, ``entries:`` then two-space-indented chart names, so only the chart's own
section is cut out and parsed with the bounded loader (a differently written index is
parsed whole, within the same bounds).

Credentials in the repository URL (``https://user:pass@host/charts``) are sent as basic
auth to that origin only, as Helm does without ``--pass-credentials``: a package URL on
another host gets none. A ``caFile`` is trusted besides the system roots.

An OCI chart is ``oci://HOST/PATH/NAME`` at tag VERSION (``+`` written ``_``, as Helm
pushes it): a manifest whose config has Helm's config media type and one layer of the
chart content media type, fetched through the registry client (credentials, TLS and
mirrors as for images).

Dependencies a chart declares and does not vendor under ``charts/`` are fetched the
same way, into the same record, their constraints resolved as Helm would.
"""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

import httpx

from airgap.content.chart import Chart, read_chart
from airgap.content.constraints import best, satisfies
from airgap.content.kinds import (
    CHART_SUFFIX,
    PROVENANCE_SUFFIX,
    ChartLocation,
    ContentKind,
    chart_file,
)
from airgap.content.openpgp import MAX_KEYRING_BYTES, PublicKey, read_keyring
from airgap.content.provenance import check_provenance
from airgap.core.errors import AirgapError, InputError, NotFoundError, TLSError
from airgap.core.limits import MAX_PROVENANCE_BYTES, MAX_RELEASE_FILE_BYTES
from airgap.core.names import (
    file_name_problem,
    provider_name_problem,
    shown,
    version_problem,
)
from airgap.core.redact import redact_url
from airgap.formats.yamlload import load_single
from airgap.net import httpclient
from airgap.registry.pool import RegistryPool
from airgap.sources.releases import SingleFileSource, download
from airgap.sources.semver import try_parse

HELM_CONFIG = "application/vnd.cncf.helm.config.v1+json"
HELM_CHART = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
HELM_CHART_LEGACY = "application/tar+gzip"  # Helm 3.0-3.7 pushed this layer type
HELM_PROVENANCE = "application/vnd.cncf.helm.chart.provenance.v1.prov"
MAX_CHARTS_PER_ENTRY = 50  # a chart and all the dependencies it pulls in
MAX_DEPENDENCY_DEPTH = 5

PoolFactory = Callable[[], RegistryPool]


@dataclass
class ChartSource(SingleFileSource):
    """Where one spec entry's chart comes from; fits ``ReleaseSource`` so the request
    travels the content path, and holds what fetching needs (client, registries)."""

    location: ChartLocation
    client: httpx.Client
    pools: PoolFactory | None
    own_client: bool = False  # made here for a caFile: closed after fetching
    indexes: dict[str, str] = field(default_factory=dict)  # repository -> index.yaml text
    keys: list[PublicKey] | None = None  # the entry's keyring, read once

    @property
    def url(self) -> str:
        return redact_url(self.location.repo or self.location.oci or "")

    def fetch(self, version: str, filename: str, dest: Path) -> None:
        raise AssertionError("charts are fetched by fetch_chart")


def chart_source(
    location: ChartLocation, client: httpx.Client, pools: PoolFactory | None
) -> ChartSource:
    if location.ca_file and location.repo:
        own = httpclient.build_client(verify=httpclient.ssl_context(location.ca_file), fast=True)
        return ChartSource(location, own, pools, own_client=True)
    return ChartSource(location, client, pools)


@dataclass(frozen=True)
class FetchedChart:
    """The entry's chart and every dependency fetched with it (paths absolute)."""

    chart: Chart
    files: list[Path]
    charts: list[Chart]
    # one line per .prov carried: its digest checked, its signature not (no keyring)
    provenance: list[str] = field(default_factory=list)


def fetch_chart(
    source: ChartSource, name: str, version: str, dest_root: Path
) -> tuple[str, str, FetchedChart]:
    """Fetch the entry's chart and its dependencies into ``charts/NAME/VERSION``; the
    chart's name and version are those of its ``Chart.yaml``."""
    staging = (dest_root / ".charts-download").absolute()
    try:
        location = source.location
        if location.oci:
            package, prov = _oci_package(source, location.oci, version, staging)
        else:
            assert location.repo is not None
            package, prov = _repo_package(source, location.repo, name, version, staging)
        chart = read_chart(
            package.read_bytes(), f"chart {name} {version} from {source.url}", check_values=True
        )
        _check_chart_name(chart, source)
        directory = (dest_root / ContentKind.CHARTS.directory(chart.name, chart.version)).absolute()
        provenance = _provenance(source, prov, package, chart)
        files = [_place(package, directory, _package_name(chart))]
        if prov is not None:
            files.append(_place(prov, directory, _package_name(chart) + PROVENANCE_SUFFIX))
        charts = [chart]
        _dependencies(source, chart, directory, staging, files, charts, provenance, 1)
        return chart.name, chart.version, FetchedChart(chart, files, charts, provenance)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if source.own_client:
            source.client.close()


def _package_name(chart: Chart) -> str:
    name = chart_file(chart.name, chart.version)
    problem = file_name_problem(name)
    if problem:
        raise InputError(f"chart {chart.name} {chart.version}: {problem}")
    return name


def _check_chart_name(chart: Chart, source: ChartSource) -> None:
    problem = provider_name_problem(chart.name)
    if problem:
        raise InputError(f"chart from {source.url}: {problem.replace('provider', 'chart')}")


def _provenance(source: ChartSource, prov: Path | None, package: Path, chart: Chart) -> list[str]:
    """Check a ``.prov`` against its package, and its signature against the entry's
    keyring if it has one (which then wants a ``.prov`` for every chart); the inventory
    line saying what was checked, or nothing without a ``.prov``."""
    name = _package_name(chart)
    where = f"chart {chart.name} {chart.version}: {name}{PROVENANCE_SUFFIX}"
    keys = _keyring(source)
    if prov is None:
        if keys is not None:
            raise AirgapError(f"{where}: missing, and the entry's keyring wants one")
        return []
    with prov.open("rb") as handle:
        data = handle.read(MAX_PROVENANCE_BYTES + 1)
    helm_name = f"{chart.name}-{chart.version}{CHART_SUFFIX}"  # what helm package wrote
    names = tuple(dict.fromkeys((helm_name, name)))
    note = check_provenance(data, names, _sha256(package), where, keys)
    return [f"{name}{PROVENANCE_SUFFIX}: {note}"]


def _keyring(source: ChartSource) -> list[PublicKey] | None:
    path = source.location.keyring
    if path is None:
        return None
    if source.keys is None:
        try:
            with Path(path).open("rb") as handle:
                data = handle.read(MAX_KEYRING_BYTES + 1)
        except OSError as exc:
            raise InputError(f"keyring {path}: {exc.strerror or exc}") from None
        source.keys = read_keyring(data, f"keyring {path}")
    return source.keys


def _place(path: Path, directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / name
    path.replace(target)
    return target


def _dependencies(
    source: ChartSource,
    chart: Chart,
    directory: Path,
    staging: Path,
    files: list[Path],
    charts: list[Chart],
    provenance: list[str],
    depth: int,
) -> None:
    """Every dependency ``chart`` does not vendor, fetched beside it, recursively."""
    for dependency in chart.dependencies:
        if dependency.vendored:
            continue
        who = f"dependency {dependency.name} {shown(dependency.version)} of chart {chart.name}"
        if depth > MAX_DEPENDENCY_DEPTH:
            raise InputError(f"{who}: dependencies nested more than {MAX_DEPENDENCY_DEPTH} deep")
        if len(charts) >= MAX_CHARTS_PER_ENTRY:
            raise InputError(f"chart {charts[0].name}: more than {MAX_CHARTS_PER_ENTRY} charts")
        repository = dependency.repository.strip()
        if repository.startswith("oci://"):
            reference = f"{repository.rstrip('/')}/{dependency.name}"
            package, prov = _oci_package(source, reference, dependency.version, staging)
        elif urlsplit(repository).scheme in ("http", "https"):
            package, prov = _repo_package(
                source, repository, dependency.name, dependency.version, staging
            )
        else:
            raise InputError(
                f"{who}: not vendored under charts/ and its repository "
                f"{redact_url(repository) or '(none)'!r} is neither https:// nor oci:// "
                "(vendor it with 'helm dependency update' before packaging)"
            )
        sub = read_chart(package.read_bytes(), who, check_values=True)
        if sub.name != dependency.name:
            raise InputError(f"{who}: the repository served chart {sub.name}")
        if any((c.name, c.version) == (sub.name, sub.version) for c in charts):
            package.unlink(missing_ok=True)
            continue
        provenance += _provenance(source, prov, package, sub)
        files.append(_place(package, directory, _package_name(sub)))
        if prov is not None:
            files.append(_place(prov, directory, _package_name(sub) + PROVENANCE_SUFFIX))
        charts.append(sub)
        _dependencies(source, sub, directory, staging, files, charts, provenance, depth + 1)


# --- classic chart repositories ------------------------------------------------------------


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port


def _without_userinfo(url: str) -> tuple[str, dict[str, str]]:
    """The URL without user:password@ and the basic-auth header it stood for."""
    parts = urlsplit(url)
    if parts.username is None:
        return url, {}
    netloc = parts.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"
    if parts.port is not None:
        netloc += f":{parts.port}"
    user, password = unquote(parts.username), unquote(parts.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return urlunsplit(parts._replace(netloc=netloc)), {"Authorization": f"Basic {token}"}


def _repo_package(
    source: ChartSource, repo: str, name: str, constraint: str, staging: Path
) -> tuple[Path, Path | None]:
    base, auth = _without_userinfo(repo.strip())
    base = base.rstrip("/") + "/"
    base_shown = redact_url(base)
    entries = _index_entries(source, base, auth, name, staging)
    versions = [str(e.get("version")) for e in entries if e.get("version") is not None]
    chosen = constraint if constraint in versions else best(versions, constraint)
    if chosen is None:
        raise NotFoundError(
            f"chart {name}: no version matching {shown(constraint)} in {base_shown}index.yaml "
            f"(versions: {', '.join(versions[:10]) or 'none'})",
            404,
        )
    entry = next(e for e in entries if str(e.get("version")) == chosen)
    urls = entry.get("urls")
    if not isinstance(urls, list) or not urls or not isinstance(urls[0], str):
        raise InputError(f"chart {name} {chosen} in {base_shown}index.yaml has no urls")
    url = urljoin(base, urls[0].strip())
    if urlsplit(url).scheme not in ("http", "https"):
        raise InputError(f"chart {name} {chosen}: package URL {redact_url(url)!r} is not http(s)")
    headers = auth if _origin(url) == _origin(base) else {}
    package = staging / f"{name}-{chosen}{CHART_SUFFIX}.part"
    what = f"download chart {name} {chosen} from {base_shown}"
    _download(source, url, package, what=what, headers=headers)
    expected = entry.get("digest")
    if isinstance(expected, str) and expected:
        actual = _sha256(package)
        if actual != expected.removeprefix("sha256:").lower():
            package.unlink(missing_ok=True)
            raise AirgapError(
                f"chart {name} {chosen} from {base_shown}: the package's sha256 {actual} is not "
                f"the digest {expected[:80]} index.yaml gives"
            )
    prov = staging / f"{name}-{chosen}{CHART_SUFFIX}{PROVENANCE_SUFFIX}.part"
    try:
        _download(source, url + PROVENANCE_SUFFIX, prov, what=what, headers=headers)
    except NotFoundError:
        return package, None
    return package, prov


def _download(
    source: ChartSource, url: str, dest: Path, *, what: str, headers: dict[str, str]
) -> None:
    """``download``, a TLS failure told in a chart repository's terms: its CA is the
    entry's ``caFile`` (the registry hints, --ca-file and certs.d, do not apply)."""
    try:
        download(source.client, url, dest, what=what, headers=headers)
    except TLSError as exc:
        detail = str(exc).partition("; ")[0]  # the URL and the TLS library's reason
        hint = "; give the chart entry a caFile with the repository's CA"
        raise TLSError(f"{what}: {detail}{hint if 'not trusted' in detail else ''}") from None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _index_entries(
    source: ChartSource, base: str, auth: dict[str, str], name: str, staging: Path
) -> list[dict[str, Any]]:
    text = source.indexes.get(base)
    if text is None:
        path = staging / f"index-{len(source.indexes)}.yaml"
        _download(
            source,
            base + "index.yaml",
            path,
            what=f"chart repository {redact_url(base)}",
            headers=auth,
        )
        try:
            text = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{redact_url(base)}index.yaml is not UTF-8 text") from None
        finally:
            path.unlink(missing_ok=True)
        source.indexes[base] = text
    return index_entries(text, name, redact_url(base))


_ENTRIES_LINE = re.compile(r"^entries:\s*$", re.MULTILINE)


def index_entries(text: str, name: str, where: str) -> list[dict[str, Any]]:
    """The index entries of chart ``name`` (pure): its section of ``entries:`` cut out
    when the index has Helm's layout, otherwise the whole index, parsed bounded."""
    section = _section(text, name)
    if section is None and _helm_layout(text):
        raise NotFoundError(f"chart {name} is not in {where}index.yaml", 404)
    if section is not None:
        parsed = load_single(section, f"{where}index.yaml", pure=True)
        entries = parsed.get(name) if isinstance(parsed, dict) else None
    else:
        parsed = load_single(text, f"{where}index.yaml", pure=True)
        if not isinstance(parsed, dict) or not isinstance(parsed.get("entries"), dict):
            raise InputError(f"{where}index.yaml has no entries")
        entries = parsed["entries"].get(name)
    if entries is None:
        raise NotFoundError(f"chart {name} is not in {where}index.yaml", 404)
    if not isinstance(entries, list):
        raise InputError(f"{where}index.yaml: entries.{name} is not a list")
    return [entry for entry in entries if isinstance(entry, dict)]


def _helm_layout(text: str) -> bool:
    """Whether the index is laid out as ``helm repo index`` writes it."""
    start = _ENTRIES_LINE.search(text)
    return (
        start is not None
        and re.compile(r"^  [a-z0-9][^\s:]*:\s*$", re.MULTILINE).search(text, start.end())
        is not None
    )


def _section(text: str, name: str) -> str | None:
    """``NAME:`` and its indented lines below ``entries:``, or None when the index is
    not laid out as ``helm repo index`` writes it (or the chart is not in it)."""
    start = _ENTRIES_LINE.search(text)
    if start is None:
        return None
    head = re.compile(rf"^  {re.escape(name)}:\s*$", re.MULTILINE)
    found = head.search(text, start.end())
    if found is None:
        return None
    end = re.compile(r"^(?:  [^\s-]|\S)", re.MULTILINE).search(text, found.end() + 1)
    body = text[found.start() : end.start() if end else len(text)]
    return body.replace("\n  ", "\n")[2:]


# --- OCI -------------------------------------------------------------------------------------


def _oci_package(
    source: ChartSource, reference: str, version: str, staging: Path
) -> tuple[Path, Path | None]:
    """The chart package (and provenance) Helm pushed to ``oci://HOST/PATH`` at the tag
    of ``version``, an exact version or a constraint (then read from the tag list)."""
    if source.pools is None:
        raise InputError(f"{reference}: no registry access to fetch an OCI chart")
    parts = urlsplit(reference)
    host, repository = parts.netloc, parts.path.strip("/")
    if not host or not repository or parts.query or parts.fragment:
        raise InputError(f"invalid OCI chart reference {reference[:200]!r}")
    with source.pools() as pool:
        registry = pool.registry(host)
        tag = _oci_tag(registry, reference, repository, version)
        what = f"chart {reference}:{tag.replace('_', '+')}"
        manifest = registry.get_manifest(repository, tag, what=what)
        blobs = manifest.blobs()
        config = manifest.json.get("config")
        config_type = config.get("mediaType") if isinstance(config, dict) else None
        if manifest.is_index or config_type != HELM_CONFIG:
            kind = shown(config_type)
            raise InputError(f"{what}: not a Helm chart (config media type {kind})")
        layers = [b for b in blobs[1:] if b.media_type in (HELM_CHART, HELM_CHART_LEGACY)]
        if len(layers) != 1:
            raise InputError(f"{what}: expected one chart content layer, found {len(layers)}")
        package = staging / f"oci-{len(list(staging.glob('oci-*')))}{CHART_SUFFIX}"
        _blob(registry, repository, layers[0].digest, layers[0].size, package, what)
        provs = [b for b in blobs[1:] if b.media_type == HELM_PROVENANCE]
        prov = None
        if provs:
            prov = package.with_name(package.name + PROVENANCE_SUFFIX)
            _blob(registry, repository, provs[0].digest, provs[0].size, prov, what)
    return package, prov


def _oci_tag(registry: Any, reference: str, repository: str, version: str) -> str:
    """The tag to pull: an exact version's own (``+`` written ``_``, as Helm pushes it,
    OCI tags cannot hold ``+``), else the highest tag meeting the constraint, tags read
    back with ``_`` as ``+``, as Helm's ``GetTagMatchingVersionOrConstraint`` picks."""
    if try_parse(version) is not None and not version_problem(version):
        return version.replace("+", "_")
    satisfies("0.0.0", version)  # an InputError for what is no constraint either
    what = f"chart {reference} {shown(version)}"
    tags: list[str] = registry.list_tags(repository, what=what)
    versions = {tag.replace("_", "+"): tag for tag in tags if try_parse(tag.replace("_", "+"))}
    chosen = best(versions, version)
    if chosen is None:
        listed = ", ".join(sorted(versions)[:10]) or "none"
        raise NotFoundError(f"{what}: no tag matches (versions: {listed})", 404)
    return versions[chosen]


def _blob(registry: Any, repository: str, digest: str, size: int, path: Path, what: str) -> None:
    if size > MAX_RELEASE_FILE_BYTES:
        raise InputError(f"{what}: a {size}-byte layer is larger than a chart may be")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        registry.download_blob(repository, digest, size, handle, what=what)
