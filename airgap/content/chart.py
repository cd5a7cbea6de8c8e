"""Helm chart packages: what they are and which images they run, without Helm (pure).

A chart package (``NAME-VERSION.tgz``) travels byte for byte; what airgap needs from
it is ``Chart.yaml`` (name, version, appVersion) and the images its ``values.yaml``
names, so that they travel too and the chart can be pointed at the mirror with a
values file instead of an edited package. Images are read from ``values.yaml`` in the
shape most charts use, and the Cluster API operator's chart does:

    image:
      manager:
        registry: ""           # optional
        repository: registry.k8s.io/capi-operator/cluster-api-operator
        tag: v0.24.0           # default: the chart's appVersion
        digest: ""             # optional; some templates honour it

(a mapping with a ``repository`` under a key that says ``image``), or a plain
``image: REPOSITORY:TAG`` string. The package is unpacked in memory within Helm's own
bounds (100 MiB unpacked, 5 MiB per file); only the chart's own files are read, never a
subchart's.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from airgap.bundle.tarread import TarFormatError, TarReader, TarTruncated
from airgap.errors import InputError
from airgap.limits import MAX_CHART_FILE_BYTES, MAX_CHART_MEMBERS, MAX_CHART_UNPACKED_BYTES
from airgap.reference import Reference, parse_reference
from airgap.yamlload import load_first, load_single

CHART_FILE = "Chart.yaml"
ARTIFACTHUB_IMAGES = "artifacthub.io/images"
MAX_SUBCHART_DEPTH = 3
VALUES_FILE = "values.yaml"
_TEMPLATE_SUFFIXES = (".yaml", ".yml", ".tpl")


@dataclass(frozen=True)
class ChartImage:
    """One image a chart's values name, and where."""

    path: tuple[str, ...]  # keys from the top of values.yaml to the image's mapping/value
    reference: str  # normalised
    # "mapping" (repository/tag/...), "string" (image: repo:tag), or "sibling" (image:
    # repo next to tag: or version:, as Calico's tigera-operator and ingress-nginx's
    # charts write it, with registry: and digest: too)
    style: str
    has_registry: bool = False  # the mapping splits registry from repository
    tag_key: str = "tag"  # a sibling image's tag key: tag or version


@dataclass(frozen=True)
class Dependency:
    """A dependency ``Chart.yaml`` declares; ``vendored`` when the package carries it
    under ``charts/`` (as ``helm dependency update`` leaves it), so nothing is fetched."""

    name: str
    version: str  # a Helm version constraint
    repository: str  # https://..., oci://..., or empty/file://... (vendored only)
    vendored: bool


@dataclass(frozen=True)
class Chart:
    """What airgap reads from a chart package."""

    name: str
    version: str
    app_version: str | None
    images: tuple[ChartImage, ...]
    honours_digest: bool  # a template reads an image ``digest`` value
    warnings: tuple[str, ...] = field(default=())
    dependencies: tuple[Dependency, ...] = field(default=())
    # images named literally in templates or in the artifacthub.io/images annotation,
    # carried but not overridable by values; and those of vendored subcharts' own
    # templates and annotations
    literal_images: tuple[str, ...] = field(default=())
    global_registry: bool = False  # values.yaml sets global.imageRegistry
    # Chart.yaml as parsed: what Helm's OCI config is made from
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def image_references(self) -> list[str]:
        found = [image.reference for image in self.images] + list(self.literal_images)
        return list(dict.fromkeys(found))


def read_chart(package: bytes, source: str, *, depth: int = 0) -> Chart:
    """Parse a chart package; InputError (naming ``source``) when it is not one.

    Vendored subcharts (``charts/NAME/`` directories and ``charts/*.tgz`` packages, at
    most ``MAX_SUBCHART_DEPTH`` deep) are read too, with the values Helm gives them (the
    parent's under their name, and its ``global``, over their own): their images are
    found under their name in the parent's values, as Helm passes them down."""
    files, packages = _chart_files(_unpack(package, source), source)
    return _parse(files, packages, source, depth)


def _metadata(files: dict[str, str], source: str) -> dict[Any, Any]:
    metadata = _yaml(files, CHART_FILE, source)
    if not isinstance(metadata, dict):
        raise InputError(f"{source}: {CHART_FILE} is not a mapping")
    name, version = metadata.get("name"), metadata.get("version")
    if not isinstance(name, str) or not name or not isinstance(version, (str, int, float)):
        raise InputError(f"{source}: {CHART_FILE} has no name and version")
    return metadata


def _parse(
    files: dict[str, str],
    packages: dict[str, bytes],
    source: str,
    depth: int,
    given: Any = None,
) -> Chart:
    metadata = _metadata(files, source)
    name, version = metadata["name"], metadata["version"]
    app_version = metadata.get("appVersion")
    values = _yaml(files, VALUES_FILE, source) if VALUES_FILE in files else None
    values = _coalesced(values, given)
    warnings: list[str] = []
    app = str(app_version) if app_version is not None else None
    global_registry = _global_registry(values)
    templates = {
        path: text
        for path, text in files.items()
        if path.startswith("templates/") and path.endswith(_TEMPLATE_SUFFIXES)
    }
    hints = _ValuesHints.read(templates)
    enabled = _dependency_keys(metadata, values)
    aliases = _aliases(metadata)
    subcharts = _subcharts(files, packages, source, depth, values, aliases)
    # what Helm gives a vendored subchart is read with it, not here (its own defaults
    # and appVersion apply there): its key is read here as a dependency switched off
    read_here = enabled | {aliases.get(sub.name, sub.name): False for sub in subcharts}
    images = list(_images(values, app, warnings, global_registry, hints, read_here))
    found = _template_images(templates, values, images, warnings)
    images = [image for image in images + found.direct if image.path not in found.test_only]
    literal = found.literal
    literal += _annotation_images(metadata, source, warnings)
    vendored = {sub.name for sub in subcharts}
    dependencies = tuple(_dependencies(metadata, vendored, source))
    for sub in subcharts:
        key = aliases.get(sub.name, sub.name)
        if enabled.get(key) is False:  # its condition is off: Helm renders none of it
            continue
        images += [replace(image, path=(key, *image.path)) for image in sub.images]
        literal += list(sub.literal_images)
        warnings += [f"subchart {sub.name}: {warning}" for warning in sub.warnings]
    return Chart(
        name=name,
        version=str(version),
        app_version=app,
        images=tuple(images),
        honours_digest=any(".digest" in text for text in templates.values())
        or any(sub.honours_digest for sub in subcharts),
        warnings=tuple(warnings),
        dependencies=dependencies,
        literal_images=tuple(dict.fromkeys(literal)),
        global_registry=global_registry is not None,
        metadata={str(key): value for key, value in metadata.items()},
    )


def _global_registry(values: Any) -> str | None:
    """``global.imageRegistry``, which charts built on Bitnami's common library put in
    front of every image (and prefer to each image's own ``registry``)."""
    if isinstance(values, dict) and isinstance(values.get("global"), dict):
        registry = values["global"].get("imageRegistry")
        if isinstance(registry, str) and registry.strip():
            return registry.strip().rstrip("/")
    return None


_IMAGE_LINE = re.compile(r"^\s*(?:-\s+)?image:\s*(?P<value>\S.*?)\s*$")
_VALUES_PATH = re.compile(r"\.Values((?:\.[A-Za-z0-9_]+)+)")
# a block action: what opens one (with its argument), ``else`` or ``end``
_BLOCK = re.compile(
    r"\{\{-?\s*(?P<word>if|with|range|define|block|else|end)\b(?P<argument>[^{}]*+)\}\}"
)
_WITH_VALUES = re.compile(r"\s*\$?\.Values((?:\.[A-Za-z0-9_]+)+)\s*-?\s*$")
# Sprig's ``merge DST SRC…`` over values paths only: SRC fills what DST leaves unset
_MERGE_ARGUMENTS = r"((?:\s++\$?\.Values(?:\.[A-Za-z0-9_]+)++){2,})"
_MERGE = re.compile(r"\bmerge" + _MERGE_ARGUMENTS)
_WITH_MERGE = re.compile(r"\s*\(\s*merge" + _MERGE_ARGUMENTS + r"\s*\)\s*-?\s*$")
_RELATIVE_FIELD = re.compile(r"(?<![\w$).\]])\.[A-Za-z_]\w*")
_UNKNOWN_DOT: tuple[str, ...] = ()  # a block that makes the dot something not in values


@dataclass(frozen=True)
class _Block:
    """One open block: what holds inside it, and what held around it (for ``else``)."""

    dot: tuple[str, ...]  # the values path the dot stands for, _UNKNOWN_DOT if none
    rendered: bool  # whether the default values render it
    define: str | None  # the named template it is in
    outer: tuple[tuple[str, ...], bool]  # the dot and rendering around the block
    taken: bool | None  # whether its condition holds with the default values, if known


class _Blocks:
    """The template blocks open at a line, enough to know what ``.`` is there, whether
    the default values render the line at all, and which named template it is in.

    Why: charts often write an image inside ``{{- with .Values.image.manager }}`` as
    ``{{ .repository }}:{{ .tag }}`` (the Cluster API operator's chart does), reading
    values through the dot rather than by a ``.Values`` path; and a ``with`` or
    ``range`` over a value the chart leaves empty renders nothing but its ``else``, as
    Go templates define it."""

    def __init__(self, values: Any) -> None:
        self._values = values
        # each entry is derived from the one below, so a question is answered from the
        # top alone, however deep
        self._open: list[_Block] = []

    def _top(self) -> tuple[tuple[str, ...], bool, str | None]:
        if not self._open:
            return _UNKNOWN_DOT, True, None
        top = self._open[-1]
        return top.dot, top.rendered, top.define

    def dot(self) -> tuple[str, ...] | None:
        """The values path ``.`` stands for, or None when it is not one."""
        return self._top()[0] or None

    def rendered(self) -> bool:
        """False inside a ``with`` or ``range`` over a value the chart leaves empty (or
        in the ``else`` of one over a value it sets)."""
        return self._top()[1]

    def define(self) -> str | None:
        """The named template the line is in, if any."""
        return self._top()[2]

    def follow(self, line: str) -> list[tuple[str, bool, str | None]]:
        """Open and close the blocks of ``line``; the named templates it calls, each
        with whether it is rendered there and the named template it is in (a call
        after ``{{ define "x" }}`` on the same line is x's)."""
        calls: list[tuple[str, bool, str | None]] = []
        position = 0
        for action in _BLOCK.finditer(line):
            word, argument = action.group("word"), action.group("argument")
            dot, rendered, define = self._top()
            for call in _CALLED.finditer(line, position, action.end()):
                calls.append((call.group("name"), rendered, define))
            position = action.end()
            if word == "end":
                if self._open:
                    self._open.pop()
            elif word == "else":
                self._else()
            elif word == "with":
                paths = _with_paths(argument)
                if paths:  # the dot is the first (the rest only fill in what it lacks)
                    given = any(_lookup(self._values, path) for path in paths)
                    self._push(paths[0], rendered and given, define, given)
                else:
                    self._push(_UNKNOWN_DOT, rendered, define, None)
            elif word == "range":
                over = _WITH_VALUES.match(argument)
                some = bool(_lookup(self._values, _values_path(over.group(1)))) if over else None
                self._push(_UNKNOWN_DOT, rendered and some is not False, define, some)
            elif word in ("define", "block"):
                named = _DEFINE_NAME.match(argument)
                inner = define or (named.group("name") if named and word == "define" else None)
                self._push(_UNKNOWN_DOT, rendered, inner, None)
            else:  # if: the dot stays what it was; its condition is not evaluated
                self._push(dot, rendered, define, None)
        _dot, rendered, define = self._top()
        calls += [
            (call.group("name"), rendered, define) for call in _CALLED.finditer(line, position)
        ]
        return calls

    def _push(
        self, dot: tuple[str, ...], rendered: bool, define: str | None, taken: bool | None
    ) -> None:
        outer = self._top()
        self._open.append(_Block(dot, rendered, define, (outer[0], outer[1]), taken))

    def _else(self) -> None:
        """``else`` (or ``else if …``): the outer dot again, rendered unless the
        condition before it is known to hold; what follows an ``else if`` is unknown."""
        if not self._open:
            return
        block = self._open[-1]
        dot, rendered = block.outer
        taken = None if block.taken is False else block.taken
        self._open[-1] = replace(
            block, dot=dot, rendered=rendered and block.taken is not True, taken=taken
        )


def _with_paths(argument: str) -> list[tuple[str, ...]]:
    """The values paths a ``with`` is over: ``.Values.a.b``, or ``(merge .Values.a
    .Values.g)`` as ingress-nginx writes its images; empty for anything else."""
    single = _WITH_VALUES.match(argument)
    if single:
        return [_values_path(single.group(1))]
    merged = _WITH_MERGE.match(argument)
    return _values_paths(merged.group(1)) if merged else []


# ``default (printf "v%s" .Chart.AppVersion) .Values.image.tag`` and its piped form
# ``.Values.image.tag | default (printf "v%s" .Chart.AppVersion)``: found by the printf
# (rare), then the tag's path looked for in a bounded window beside it, which keeps the
# search linear in any text (a pattern starting at every ``.Values`` would not be)
_APP_VERSION = re.compile(
    r"\(\s*printf\s+\"(?P<format>[^\"%]{0,32}%s[^\"%]{0,32})\"\s+\$?\.Chart\.AppVersion\s*\)"
)
_TAG_WINDOW = 256  # characters looked at on either side of the printf
_TAG_AFTER = re.compile(r"\s+\(?\s*\$?\.Values((?:\.[A-Za-z0-9_]+){1,16}?)\.tag\b")
_TAG_BEFORE = re.compile(r"\$?\.Values((?:\.[A-Za-z0-9_]+){1,16}?)\.tag\s*\|\s*default\s+\Z")
_DEFAULT_BEFORE = re.compile(r"\bdefault\s+\Z")
_TAG_FORMAT = re.compile(r":?(?P<prefix>[\w.-]*)%s(?P<suffix>[\w.-]*)")


@dataclass(frozen=True)
class _ValuesHints:
    """What the templates say about how values images render, beyond the values.

    ``merged``: for a values path a template merges others into (``merge .Values.A
    .Values.G``), those others: Helm renders A with what G sets and A leaves unset, as
    ingress-nginx gives every image ``global.image.registry``. ``tag_formats``: for an
    image whose tag defaults to appVersion through ``printf "v%s"`` (metrics-server's and
    the AWS EBS CSI driver's charts: appVersion 0.8.1 renders tag v0.8.1), the text
    around it."""

    merged: dict[tuple[str, ...], list[tuple[str, ...]]]
    tag_formats: dict[tuple[str, ...], tuple[str, str]]

    @classmethod
    def read(cls, templates: dict[str, str]) -> _ValuesHints:
        merged: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
        formats: dict[tuple[str, ...], set[tuple[str, str]]] = {}
        for text in templates.values():
            for merge in _MERGE.finditer(text):
                target, *defaults = _values_paths(merge.group(1))
                known = merged.setdefault(target, [])
                known += [path for path in defaults if path not in known and path != target]
            for printf in _APP_VERSION.finditer(text):
                form = _TAG_FORMAT.fullmatch(printf.group("format"))
                path = _defaulted_tag(text, printf.start(), printf.end())
                if form and path:  # ":%s" (cert-manager's default reference) is plain
                    formats.setdefault(path, set()).add((form["prefix"], form["suffix"]))
        # an image whose templates disagree keeps the plain appVersion
        tags = {path: next(iter(found)) for path, found in formats.items() if len(found) == 1}
        return cls(merged, tags)

    def default_tag(self, path: tuple[str, ...], app_version: str | None) -> str:
        if not app_version:
            return ""
        prefix, suffix = self.tag_formats.get(path, ("", ""))
        return f"{prefix}{app_version}{suffix}"


def _defaulted_tag(text: str, start: int, end: int) -> tuple[str, ...] | None:
    """The image path whose ``tag`` the printf at ``text[start:end]`` is the default of."""
    before = text[max(0, start - _TAG_WINDOW) : start]
    piped = _TAG_BEFORE.search(before)
    if piped:
        return _values_path(piped.group(1))
    if _DEFAULT_BEFORE.search(before):
        given = _TAG_AFTER.match(text, end, end + _TAG_WINDOW)
        if given:
            return _values_path(given.group(1))
    return None


def _values_path(dotted: str) -> tuple[str, ...]:
    """``.image.manager`` (what follows ``.Values``) as keys: ``("image", "manager")``."""
    return tuple(dotted[1:].split("."))


def _values_paths(text: str) -> list[tuple[str, ...]]:
    """Every ``.Values.…`` path ``text`` reads, as keys."""
    return [_values_path(m.group(1)) for m in _VALUES_PATH.finditer(text)]


def _lookup(values: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(values, dict):
            return None
        values = values.get(key)
    return values


_CALLED = re.compile(r"\b(?:template|include)\s++\"(?P<name>[^\"{}]{1,256})\"")
_DEFINE_NAME = re.compile(r"\s*\"(?P<name>[^\"{}]{1,256})\"")
MAX_CALL_DEPTH = 8  # named templates followed through include/template, then given up
MAX_FOLLOWS = 100_000  # paths and calls looked at through named templates, per chart


class _NamedTemplates:
    """The chart's ``{{ define "NAME" }}`` bodies, and what values each reads.

    Go templates allow ``define`` only at the top level, so bodies never overlap and
    reading each once is linear in the chart; following them from image lines is
    bounded per chart (MAX_FOLLOWS), past which an image is left unresolved."""

    def __init__(self, templates: dict[str, str]) -> None:
        self._bodies: dict[str, str] = {}
        for text in templates.values():
            depth, start, name = 0, 0, ""
            for action in _BLOCK.finditer(text):
                if action.group("word") == "else":  # within the block it continues
                    continue
                if action.group("word") == "end":
                    depth = max(depth - 1, 0)
                    if depth == 0 and name:
                        self._bodies.setdefault(name, text[start : action.start()])
                        name = ""
                    continue
                named = _DEFINE_NAME.match(action.group("argument"))
                if depth == 0 and action.group("word") == "define" and named:
                    start, name = action.end(), named.group("name")
                depth += 1
        self._read: dict[str, tuple[list[tuple[str, ...]], list[str], bool]] = {}
        self._budget = MAX_FOLLOWS

    def _reads(self, name: str) -> tuple[list[tuple[str, ...]], list[str], bool]:
        if name not in self._read:
            body = self._bodies[name]
            self._read[name] = (
                _values_paths(body),
                [m.group("name") for m in _CALLED.finditer(body)],
                _extends_repository(body),
            )
        return self._read[name]

    def values_read(self, expression: str) -> tuple[list[tuple[str, ...]], bool]:
        """The ``.Values`` paths an expression reads, also through the named templates
        it calls (``{{ template "x.image" . }}``, ``include``), MAX_CALL_DEPTH deep;
        and whether any of them adds to an image's repository (``_extends_repository``)."""
        paths = _values_paths(expression)
        extends = _extends_repository(expression)
        calls = [(m.group("name"), 1) for m in _CALLED.finditer(expression)]
        seen: set[str] = set()
        while calls and self._budget > 0:
            name, depth = calls.pop()
            if name in seen or name not in self._bodies or depth > MAX_CALL_DEPTH:
                continue
            seen.add(name)
            read, called, adds = self._reads(name)
            self._budget -= 1 + len(read) + len(called)
            paths += read
            extends = extends or adds
            calls += [(inner, depth + 1) for inner in called]
        return paths, extends


# ``printf "%s-%s%s:%s" .Values.operator.image.repository …`` (Cilium's operator image
# is REPOSITORY-generic) or ``{{ .Values.x.repository }}-generic``: text right after
# the repository makes another repository than the values name
_PRINTF = re.compile(r"\bprintf\s+\"(?P<format>[^\"\n]{0,200})\"(?P<args>(?:\s+[$.\w]+){1,12})")
_EXTENDED = re.compile(r"\.repository\s*-?\}\}[-\w./]")


def _extends_repository(text: str) -> bool:
    """Whether ``text`` writes something right after an image's ``.repository``."""
    if _EXTENDED.search(text):
        return True
    for printf in _PRINTF.finditer(text):
        after = printf.group("format").split("%s")[1:]
        for argument, following in zip(printf.group("args").split(), after, strict=False):
            if argument.endswith(".repository") and following[:1] not in ("", ":", "@"):
                return True
    return False


@dataclass(frozen=True)
class _TemplateFindings:
    literal: list[str]  # images templates write literally
    direct: list[ChartImage]  # values strings templates write as a whole image
    test_only: set[tuple[str, ...]]  # values images only ``helm test`` hooks use


def _template_images(
    templates: dict[str, str], values: Any, images: list[ChartImage], warnings: list[str]
) -> _TemplateFindings:
    """Images templates write literally (``image: quay.io/x/y:v1``), and the values
    strings they write as a whole image (``image: {{ .Values.proxyImageWindows }}``,
    whatever the key: cloud-provider-azure's chart has one); an ``image:`` made by a
    template expression that reads none of the values images found (by a ``.Values``
    path, in a named template it calls, or through the dot of an enclosing ``with``)
    is a warning naming the file and line: airgap cannot know what it renders to.

    Lines the default values do not render are neither: inside a ``with`` or ``range``
    over an empty value, or in a named template that is called only from such lines
    (one never called here may be called by a chart that uses this one). Nor are the
    documents of ``helm test`` hooks, which an install never runs (as Zarf and
    Pulumi leave them out): the values images only they use are in ``test_only``
    (the AWS EBS CSI driver's chart tests with kubekins-e2e, gigabytes)."""
    found: list[str] = []
    direct: list[ChartImage] = []
    known = _KnownPaths(image.path for image in images)
    uses: tuple[set[tuple[str, ...]], set[tuple[str, ...]]] = (set(), set())  # other, test
    named = _NamedTemplates(templates)
    lines = {path: list(_followed(templates[path], values)) for path in sorted(templates)}
    unrendered = _unrendered_defines(lines.values())
    for path, followed in lines.items():
        testing = _test_hook_lines(templates[path])
        for number, line, dot, rendered, define, _calls in followed:
            match = _IMAGE_LINE.match(line)
            if not match or not rendered or define in unrendered:
                continue
            test = number in testing
            value = match.group("value").strip("'\"")
            whole = _direct_image(value, values)
            if whole is not None and whole.path not in known:
                direct.append(whole)
                known.add(whole.path)
            if "{{" in value:
                used, extends = named.values_read(value)
                if dot is not None and _RELATIVE_FIELD.search(_VALUES_PATH.sub("", value)):
                    used.append(dot)
                uses[test].update(used)
                if test:
                    continue
                if not any(known.related(use) for use in used):
                    warnings.append(
                        f"{path}:{number}: image from a template expression airgap cannot "
                        f"resolve: {value[:120]}"
                    )
                elif extends:
                    warnings.append(
                        f"{path}:{number}: the template adds to an image's repository, so it "
                        "renders an image other than its values name; list that image in "
                        f"the entry's images: {value[:120]}"
                    )
                continue
            if not value or value.startswith(("#", "|", ">")) or test:
                continue
            try:
                found.append(str(parse_reference(value)))
            except InputError:
                warnings.append(f"{path}:{number}: {value[:80]!r} is not an image")
    test_only = known.marked(uses[True]) - known.marked(uses[False])
    return _TemplateFindings(found, direct, test_only)


class _KnownPaths:
    """The values paths of the images found, and which of them a ``.Values`` path a
    template reads is related to (one is a prefix of the other): answered through an
    index of every prefix, so a chart's work stays linear in its paths' depths."""

    def __init__(self, paths: Iterable[tuple[str, ...]]) -> None:
        self._paths: set[tuple[str, ...]] = set()
        self._under: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
        self._depth = 0  # of the deepest path: no longer prefix of a use can be one
        for path in paths:
            self.add(path)

    def __contains__(self, path: tuple[str, ...]) -> bool:
        return path in self._paths

    def add(self, path: tuple[str, ...]) -> None:
        if path and path not in self._paths:
            self._paths.add(path)
            self._depth = max(self._depth, len(path))
            for length in range(1, len(path) + 1):
                self._under.setdefault(path[:length], []).append(path)

    def _prefixes(self, use: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
        """The proper prefixes of ``use`` that are paths (a template can read a path
        far deeper than any values path: only as many prefixes as those are deep)."""
        for length in range(1, min(len(use), self._depth + 1)):
            if use[:length] in self._paths:
                yield use[:length]

    def related(self, use: tuple[str, ...]) -> bool:
        return use in self._under or next(self._prefixes(use), None) is not None

    def marked(self, uses: set[tuple[str, ...]]) -> set[tuple[str, ...]]:
        """The paths related to any of ``uses``."""
        marked: set[tuple[str, ...]] = set()
        for use in uses:
            marked.update(self._prefixes(use))
            marked.update(self._under.get(use, ()))
        return marked


_HOOK = re.compile(r"""^\s*["']?helm\.sh/hook["']?\s*:\s*["']?(?P<hooks>[\w ,-]{0,200})""")
_TEST_HOOKS = frozenset({"test", "test-success", "test-failure"})


def _test_hook_lines(text: str) -> set[int]:
    """The line numbers of the YAML documents in ``text`` that are ``helm test`` hooks
    (``helm.sh/hook: test``), which a ``---`` line separates from the rest."""
    lines: set[int] = set()
    document: list[int] = []
    test = False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("---"):
            if test:
                lines.update(document)
            document, test = [], False
        document.append(number)
        hook = _HOOK.match(line)
        if hook and _TEST_HOOKS & {h.strip() for h in hook.group("hooks").split(",")}:
            test = True
    if test:
        lines.update(document)
    return lines


_WHOLE_VALUE = re.compile(r"\{\{-?\s*\$?\.Values((?:\.[A-Za-z0-9_]+)++)\s*(?:\|\s*quote\s*)?-?\}\}")


def _direct_image(value: str, values: Any) -> ChartImage | None:
    """The values string an ``image:`` line is made of alone, when it is an image."""
    whole = _WHOLE_VALUE.fullmatch(value)
    if whole is None:
        return None
    path = _values_path(whole.group(1))
    text = _lookup(values, path)
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        return ChartImage(path, str(parse_reference(text.strip())), "string")
    except InputError:
        return None


_Call = tuple[str, bool, "str | None"]  # a named template called, rendered there, called in
_Followed = tuple[int, str, "tuple[str, ...] | None", bool, "str | None", list[_Call]]


def _followed(text: str, values: Any) -> Iterator[_Followed]:
    """Each line of a template with the blocks open at its start (the dot, whether it
    is rendered, the named template it is in) and the named templates it calls."""
    blocks = _Blocks(values)
    for number, line in enumerate(text.splitlines(), start=1):
        dot, rendered, define = blocks.dot(), blocks.rendered(), blocks.define()
        yield number, line, dot, rendered, define, blocks.follow(line)


def _unrendered_defines(templates: Iterable[list[_Followed]]) -> set[str]:
    """Named templates that are called, but only from lines the default values do not
    render (ingress-nginx's ``extraModules``, included for each of an empty list), or
    from named templates that are themselves only so called."""
    called: set[str] = set()
    roots: set[str] = set()
    calls: dict[str, set[str]] = {}
    for followed in templates:
        for *_line, line_calls in followed:
            for name, rendered, define in line_calls:
                called.add(name)
                if define is not None:
                    calls.setdefault(define, set()).add(name)
                elif rendered:
                    roots.add(name)
    reached, pending = set(roots), list(roots)
    while pending:
        for name in calls.get(pending.pop(), ()):
            if name not in reached:
                reached.add(name)
                pending.append(name)
    return called - reached


def _annotation_images(metadata: dict[Any, Any], source: str, warnings: list[str]) -> list[str]:
    """``artifacthub.io/images``: a YAML list of ``{name, image}`` in Chart.yaml's
    annotations, which many charts keep to list what they run."""
    annotations = metadata.get("annotations")
    if not isinstance(annotations, dict):
        return []
    text = annotations.get(ARTIFACTHUB_IMAGES)
    if not isinstance(text, str):
        return []
    try:
        entries = load_single(text, f"{source}: {CHART_FILE} {ARTIFACTHUB_IMAGES}")
    except InputError as exc:
        warnings.append(str(exc))
        return []
    found: list[str] = []
    for entry in entries if isinstance(entries, list) else []:
        image = entry.get("image") if isinstance(entry, dict) else None
        if not isinstance(image, str):
            continue
        try:
            found.append(str(parse_reference(image.strip())))
        except InputError:
            warnings.append(f"{ARTIFACTHUB_IMAGES}: {image[:80]!r} is not an image")
    return found


def _dependencies(
    metadata: dict[Any, Any], vendored: set[str], source: str
) -> Iterator[Dependency]:
    entries = metadata.get("dependencies")
    if entries is None:
        return
    if not isinstance(entries, list):
        raise InputError(f"{source}: {CHART_FILE} dependencies is not a list")
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise InputError(f"{source}: {CHART_FILE} has a dependency without a name")
        version = entry.get("version")
        repository = entry.get("repository")
        yield Dependency(
            name=entry["name"],
            version=str(version) if version is not None else "",
            repository=repository if isinstance(repository, str) else "",
            vendored=entry["name"] in vendored,
        )


def _dependency_keys(metadata: dict[Any, Any], values: Any) -> dict[str, bool]:
    """Each dependency's values key (its alias, else its name) and whether the default
    values enable it, as Helm decides: its ``tags`` (any true enables, all false
    disable), then its ``condition``, whose first path holding a boolean wins."""
    entries = metadata.get("dependencies")
    keys: dict[str, bool] = {}
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        alias = entry.get("alias")
        key = alias if isinstance(alias, str) and alias else entry["name"]
        keys[key] = _enabled(entry, values)
    return keys


def _enabled(entry: dict[Any, Any], values: Any) -> bool:
    enabled = True
    tags = entry.get("tags")
    given = _lookup(values, ("tags",))
    if isinstance(tags, list) and isinstance(given, dict):
        states = [given.get(tag) for tag in tags if isinstance(tag, str)]
        if any(state is True for state in states):
            enabled = True
        elif any(state is False for state in states):
            enabled = False
    condition = entry.get("condition")
    for text in condition.split(",") if isinstance(condition, str) else []:
        state = _lookup(values, tuple(text.strip().split("."))) if text.strip() else None
        if isinstance(state, bool):
            return state
    return enabled


def _aliases(metadata: dict[Any, Any]) -> dict[str, str]:
    entries = metadata.get("dependencies")
    aliases: dict[str, str] = {}
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("alias"), str):
            aliases[str(entry.get("name"))] = entry["alias"]
    return aliases


def _subcharts(
    files: dict[str, str],
    packages: dict[str, bytes],
    source: str,
    depth: int,
    values: Any,
    aliases: dict[str, str],
) -> list[Chart]:
    """The charts vendored under ``charts/``: directories and packages, each read with
    the values the parent's ``values`` give it."""
    if depth >= MAX_SUBCHART_DEPTH:
        if packages or any(path.startswith("charts/") for path in files):
            raise InputError(f"{source}: subcharts nested more than {MAX_SUBCHART_DEPTH} deep")
        return []
    found: list[Chart] = []
    directories = sorted(
        {
            path.split("/")[1]
            for path in files
            if path.startswith("charts/") and path.count("/") >= 2
        }
    )
    for directory in directories:
        prefix = f"charts/{directory}/"
        inner = {
            path[len(prefix) :]: text for path, text in files.items() if path.startswith(prefix)
        }
        inner_packages = {
            path[len(prefix) :]: data for path, data in packages.items() if path.startswith(prefix)
        }
        if CHART_FILE in inner:
            found.append(
                _subchart(inner, inner_packages, f"{source}: {prefix}", depth, values, aliases)
            )
    for path in sorted(packages):
        if path.count("/") == 1:  # charts/NAME-VERSION.tgz
            where = f"{source}: {path}"
            inner, inner_packages = _chart_files(_unpack(packages[path], where), where)
            found.append(_subchart(inner, inner_packages, where, depth, values, aliases))
    return found


def _subchart(
    files: dict[str, str],
    packages: dict[str, bytes],
    source: str,
    depth: int,
    values: Any,
    aliases: dict[str, str],
) -> Chart:
    """A vendored subchart with what Helm gives it: the parent's values under its key
    (its alias, else its name) and the parent's ``global``, over its own defaults."""
    name = _metadata(files, source)["name"]
    parent = values if isinstance(values, dict) else {}
    given = parent.get(aliases.get(name, name))
    given = dict(given) if isinstance(given, dict) else {}
    if isinstance(parent.get("global"), dict):
        given["global"] = _coalesced(given.get("global"), parent["global"])
    return _parse(files, packages, source, depth + 1, given)


def _coalesced(defaults: Any, given: Any) -> Any:
    """``given`` over ``defaults``, as Helm coalesces a subchart's values: mappings
    merge key by key, anything else given wins, and a null given removes the key."""
    if not isinstance(given, dict) or not given:
        return defaults
    if not isinstance(defaults, dict):
        return {key: value for key, value in given.items() if value is not None}
    merged = dict(defaults)
    for key, value in given.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _coalesced(merged[key], value)
        else:
            merged[key] = value
    return merged


def _unpack(package: bytes, source: str) -> bytes:
    """The tar inside the gzip, refusing more than Helm would unpack."""
    decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = decompressor.decompress(package, MAX_CHART_UNPACKED_BYTES + 1)
    except zlib.error as exc:
        raise InputError(f"{source}: not a gzip-compressed chart package ({exc})") from None
    if len(data) > MAX_CHART_UNPACKED_BYTES or decompressor.unconsumed_tail:
        raise InputError(
            f"{source}: unpacks to more than {MAX_CHART_UNPACKED_BYTES >> 20} MiB "
            "(Helm refuses such a chart too)"
        )
    return data


class _Memory:
    """Bytes readable by offset, for ``TarReader``."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    @property
    def size(self) -> int:
        return len(self._data)

    def pread(self, length: int, offset: int) -> bytes:
        return self._data[offset : offset + length]


def _chart_files(data: bytes, source: str) -> tuple[dict[str, str], dict[str, bytes]]:
    """``path below the chart directory -> text`` for the YAML files airgap reads (the
    chart's own and its vendored subcharts'), and ``path -> bytes`` of the subchart
    packages under ``charts/``. Headers are walked by airgap's bounded tar reader (as
    bundles are: never CPython's tarfile), in memory: nothing is written to disk, so no
    member name ever becomes a path."""
    files: dict[str, str] = {}
    packages: dict[str, bytes] = {}
    top: str | None = None
    reader = TarReader(_Memory(data))
    empty = not data.strip(b"\0")  # an archive of no members: end blocks only
    try:
        for count in range(0 if empty else MAX_CHART_MEMBERS + 1):
            entry = reader.next()
            if entry is None:
                break
            if count >= MAX_CHART_MEMBERS:
                raise InputError(f"{source}: more than {MAX_CHART_MEMBERS} files")
            head, _, rest = entry.name.lstrip("./").partition("/")
            top = top or head
            if head != top or not entry.isreg() or ".." in rest.split("/"):
                continue
            wanted = _wanted(rest)
            if not wanted:
                continue
            if entry.size > MAX_CHART_FILE_BYTES:
                raise InputError(
                    f"{source}: {entry.name[:200]} is larger than "
                    f"{MAX_CHART_FILE_BYTES >> 20} MiB (Helm refuses such a file too)"
                )
            content = reader.pread(entry.size, entry.offset_data)
            if wanted == "package":
                packages[rest] = content
                continue
            try:
                files[rest] = content.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError(f"{source}: {entry.name[:200]} is not UTF-8 text") from None
    except (TarFormatError, TarTruncated) as exc:
        raise InputError(f"{source}: not a chart package ({exc})") from None
    if CHART_FILE not in files:
        raise InputError(f"{source}: no {CHART_FILE} in the chart's directory")
    return files, packages


def _wanted(path: str) -> str | None:
    """``text`` for a file read as YAML, ``package`` for a vendored chart package."""
    parts = path.split("/")
    while len(parts) > 2 and parts[0] == "charts":  # a vendored subchart directory
        parts = parts[2:]
    if len(parts) == 2 and parts[0] == "charts" and parts[1].endswith(".tgz"):
        return "package"
    if parts in ([CHART_FILE], [VALUES_FILE]):
        return "text"
    if parts[0] == "templates" and parts[-1].endswith(_TEMPLATE_SUFFIXES):
        return "text"
    return None


def _yaml(files: dict[str, str], name: str, source: str) -> Any:
    return load_first(files[name], f"{source}: {name}")  # as Helm reads them


def _images(
    values: Any,
    app_version: str | None,
    warnings: list[str],
    global_registry: str | None = None,
    hints: _ValuesHints | None = None,
    dependencies: dict[str, bool] | None = None,
) -> Iterator[ChartImage]:
    """The images ``values`` names. Under a dependency's key, nothing when the dependency
    is off, and no tag defaulted from this chart's appVersion when it is on: there the
    dependency's own defaults apply, which are not in these values."""
    read: set[tuple[str, ...]] = set()  # an image: string read with its siblings
    naming = _chart_naming(values)
    dependencies = dependencies or {}
    for path, node in _walk(values, ()):
        owner = dependencies.get(path[0]) if path else None
        if owner is False:
            continue
        if hints and path in hints.merged and isinstance(node, dict):
            node = _filled(node, [_lookup(values, default) for default in hints.merged[path]])
        imagey = any("image" in key.lower() for key in path)
        sibling = _sibling_image(node, global_registry) if isinstance(node, dict) else None
        if isinstance(node, dict) and imagey and isinstance(node.get("repository"), str):
            tag = hints.default_tag(path, app_version) if hints else app_version or ""
            if owner is not None:  # the dependency's default tag, not in these values
                tag = ""
            placeholder = not (str(node["repository"]).strip() or node.get("name"))
            if not (_tag_of(node) or tag or _digest_of(node)):
                # no tag to name: the template gives one (a Kubernetes version, another
                # chart's default) or renders none; a guess (latest) could name nothing
                if not placeholder:
                    why = (
                        f"its tag is the {path[0]} chart's default, not in these values"
                        if owner is not None
                        else "no tag, and no appVersion to default to"
                    )
                    warnings.append(
                        f"values {'.'.join(path)}: {why}: list the image in the entry's images"
                    )
                continue
            found = _mapping_image(node, tag, global_registry, naming)
            if found is None:
                if not placeholder:
                    warnings.append(f"values {'.'.join(path)}: not a resolvable image")
                continue  # an empty repository: the templates give the default
            has_registry = isinstance(node.get("registry"), str)
            yield ChartImage(path, found, "mapping", has_registry=has_registry)
        elif sibling is not None:
            found, tag_key = sibling
            read.add((*path, "image"))
            yield ChartImage(path, found, "sibling", isinstance(node.get("registry"), str), tag_key)
        elif path in read:
            continue
        elif isinstance(node, str) and path and path[-1].lower().endswith("image") and node.strip():
            try:
                yield ChartImage(path, str(parse_reference(node.strip())), "string")
            except InputError:
                warnings.append(f"values {'.'.join(path)}: {node[:80]!r} is not an image")


def values_images(values: Any) -> list[str]:
    """The images a values document names (a chart's values.yaml, or a values file
    airgap wrote), read the way chart discovery reads them; a mapping without a tag
    and no appVersion to default to names no image."""
    return list(dict.fromkeys(image.reference for image in _images(values, None, [])))


def _filled(node: dict[str, Any], defaults: list[Any]) -> dict[str, Any]:
    """``node`` with the keys it leaves unset (absent or null) taken from ``defaults``,
    the first that sets each: Sprig's ``merge``, one level deep (image keys)."""
    filled = dict(node)
    for default in defaults:
        if isinstance(default, dict):
            for key, value in default.items():
                if filled.get(key) is None:
                    filled[key] = value
    return filled


def _walk(node: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every mapping and scalar below ``node`` with its key path; the YAML loader's
    depth bound keeps this finite. Lists are not looked into: image values in lists
    have no common shape."""
    yield path, node
    if isinstance(node, dict):
        for key, child in node.items():
            if isinstance(key, str):
                yield from _walk(child, (*path, key))


def _sibling_image(node: dict[str, Any], global_registry: str | None) -> tuple[str, str] | None:
    """``{image: REPO, tag: T}`` or ``{image: REPO, version: T, registry: R}`` (Calico's
    tigera-operator chart has both): the image and the key its tag is under, or None.

    Read as a plain string, ``image: tigera/operator`` named docker.io/tigera/
    operator:latest, which the chart never renders (it renders quay.io/tigera/
    operator:v1.38.6); an image string with its own tag or digest is read as it is."""
    image = node.get("image")
    if not isinstance(image, str) or not image.strip():
        return None
    text = image.strip()
    if "@" in text or ":" in text.rsplit("/", 1)[-1]:
        return None
    for tag_key in ("tag", "version"):
        tag = node.get(tag_key)
        if isinstance(tag, (str, int, float)) and not isinstance(tag, bool) and str(tag).strip():
            break
    else:
        return None
    registry = global_registry or node.get("registry")
    if isinstance(registry, str) and registry.strip():
        text = f"{registry.strip().rstrip('/')}/{text}"
    text += f":{str(tag).strip()}"
    digest = node.get("digest")
    if isinstance(digest, str) and digest.strip():  # ingress-nginx renders tag@digest
        text += f"@{digest.strip()}"
    try:
        return str(parse_reference(text)), tag_key
    except InputError:
        return None


def _chart_naming(values: Any) -> tuple[str, ...] | None:
    """The top-level ``imageRegistry`` and ``imageNamespace`` (those set, in that order)
    that a chart composes an image's repository from when the image gives only its
    ``name``, as cert-manager's chart does from v1.20; None when it sets neither."""
    if not isinstance(values, dict) or not ({"imageRegistry", "imageNamespace"} & values.keys()):
        return None
    parts = (values.get("imageRegistry"), values.get("imageNamespace"))
    return tuple(p.strip(" /") for p in parts if isinstance(p, str) and p.strip(" /"))


def _digest_of(node: dict[str, Any]) -> str:
    digest = node.get("digest")
    return digest.strip() if isinstance(digest, str) else ""


def _tag_of(node: dict[str, Any]) -> str:
    tag = node.get("tag")
    return str(tag).strip() if tag is not None and not isinstance(tag, bool) else ""


def _mapping_image(
    node: dict[str, Any],
    default_tag: str,
    global_registry: str | None = None,
    naming: tuple[str, ...] | None = None,
) -> str | None:
    """``repository`` (and ``registry``, ``tag``, ``digest``) of an image mapping as a
    reference. An empty ``repository`` beside a ``name``, in a chart that sets
    ``imageRegistry`` or ``imageNamespace``, is ``REGISTRY/NAMESPACE/NAME`` (cert-manager's
    ``cert-manager.image``: a repository, when given, wins)."""
    repository = str(node["repository"]).strip()
    name = node.get("name")
    if not repository and naming is not None and isinstance(name, str) and name.strip():
        repository = "/".join((*naming, name.strip()))
    registry = global_registry or node.get("registry")
    if isinstance(registry, str) and registry.strip():
        repository = f"{registry.strip().rstrip('/')}/{repository}"
    tag_text = _tag_of(node) or default_tag
    digest = _digest_of(node)
    text = repository
    if tag_text:
        text += f":{tag_text}"
    if digest:
        text += f"@{digest}"
    if not repository:
        return None
    try:
        return str(parse_reference(text))
    except InputError:
        return None


# --- pointing a chart at the mirror ------------------------------------------------------


def values_overrides(
    chart: Chart, target: Callable[[str], tuple[Reference, str | None] | None]
) -> dict[str, Any]:
    """A values file that points every image of ``chart`` at the mirror.

    ``target(reference)`` gives the target reference of a bundle image and the digest
    to pin it by (None: do not pin). A mapping gets ``repository`` and ``tag``, a
    sibling image ``image`` and its tag key (both with ``registry`` when the chart
    splits it out, also through a ``merge`` with global values, and ``digest`` when a
    template honours one); a string value gets the whole reference."""
    overrides: dict[str, Any] = {}
    for image in chart.images:
        found = target(image.reference)
        if found is None:
            continue
        reference, digest = found
        if chart.global_registry:  # it wins over each image's registry: the mirror's
            overrides.setdefault("global", {})["imageRegistry"] = reference.registry
        if image.style == "string":
            pinned = reference.with_digest(digest) if digest else reference
            _set(overrides, image.path, str(pinned))
            continue
        if image.style == "sibling":
            split = image.has_registry or chart.global_registry
            sibling = {"image": reference.repository if split else reference.name}
            if split:
                sibling["registry"] = reference.registry
            if reference.tag:
                sibling[image.tag_key] = reference.tag
            if digest and chart.honours_digest:
                sibling["digest"] = digest
            _set(overrides, image.path, sibling)
            continue
        value: dict[str, Any] = {}
        if image.has_registry or chart.global_registry:
            value["registry"] = reference.registry
            value["repository"] = reference.repository
        else:
            value["repository"] = reference.name
        if reference.tag:
            value["tag"] = reference.tag
        if digest and chart.honours_digest:
            value["digest"] = digest
        _set(overrides, image.path, value)
    return overrides


def _set(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    """Merge ``value`` in at ``path``; the empty path is the top of the values (a chart
    whose values.yaml is ``image: REPO`` beside ``tag: T``)."""
    if not path:
        tree.update(value)
        return
    node = tree
    for key in path[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise InputError(f"values {'.'.join(path)}: inside another image's value")
    if isinstance(value, dict):
        into = node.setdefault(path[-1], {})
        if not isinstance(into, dict):
            raise InputError(f"values {'.'.join(path)}: inside another image's value")
        into.update(value)
    else:
        node[path[-1]] = value
