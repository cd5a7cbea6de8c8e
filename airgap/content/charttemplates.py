"""What a chart's templates say about its images, read without Helm (pure).

Templates are scanned line by line, with the blocks open at each line tracked (the dot
of a ``with``, whether the default values render the line) and named templates
followed, bounded per chart. From them: the images written literally, the values
strings written whole as an image, the ``image:`` lines airgap cannot resolve (each a
warning), the values images only ``helm test`` hooks use, and hints on how values
images render (``merge`` with global values, ``printf "v%s"`` tags).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from airgap.content.chartvalues import VALUES_PATH, ChartImage, lookup, values_path, values_paths
from airgap.errors import InputError
from airgap.reference import parse_reference

_IMAGE_LINE = re.compile(r"^\s*(?:-\s+)?image:\s*(?P<value>\S.*?)\s*$")
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
                    given = any(lookup(self._values, path) for path in paths)
                    self._push(paths[0], rendered and given, define, given)
                else:
                    self._push(_UNKNOWN_DOT, rendered, define, None)
            elif word == "range":
                over = _WITH_VALUES.match(argument)
                some = bool(lookup(self._values, values_path(over.group(1)))) if over else None
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
        return [values_path(single.group(1))]
    merged = _WITH_MERGE.match(argument)
    return values_paths(merged.group(1)) if merged else []


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
class ValuesHints:
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
    def read(cls, templates: dict[str, str]) -> ValuesHints:
        merged: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
        formats: dict[tuple[str, ...], set[tuple[str, str]]] = {}
        for text in templates.values():
            for merge in _MERGE.finditer(text):
                target, *defaults = values_paths(merge.group(1))
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
        return values_path(piped.group(1))
    if _DEFAULT_BEFORE.search(before):
        given = _TAG_AFTER.match(text, end, end + _TAG_WINDOW)
        if given:
            return values_path(given.group(1))
    return None


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
                values_paths(body),
                [m.group("name") for m in _CALLED.finditer(body)],
                _extends_repository(body),
            )
        return self._read[name]

    def values_read(self, expression: str) -> tuple[list[tuple[str, ...]], bool]:
        """The ``.Values`` paths an expression reads, also through the named templates
        it calls (``{{ template "x.image" . }}``, ``include``), MAX_CALL_DEPTH deep;
        and whether any of them adds to an image's repository (``_extends_repository``)."""
        paths = values_paths(expression)
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
class TemplateFindings:
    """What a chart's templates say about images, beyond its values: the three ways a
    rendered image can differ from reading ``values.yaml`` alone."""

    literal: list[str]  # images templates write literally
    direct: list[ChartImage]  # values strings templates write as a whole image
    test_only: set[tuple[str, ...]]  # values images only ``helm test`` hooks use


def template_images(
    templates: dict[str, str], values: Any, images: list[ChartImage], warnings: list[str]
) -> TemplateFindings:
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
                if dot is not None and _RELATIVE_FIELD.search(VALUES_PATH.sub("", value)):
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
    return TemplateFindings(found, direct, test_only)


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
    path = values_path(whole.group(1))
    text = lookup(values, path)
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
