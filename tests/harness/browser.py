"""Headless Chromium (Debian's ``chromium``), for pages a person reads.

One run loads a ``file://`` page with networking disabled (in a fresh network namespace,
``unshare -n``, when this machine allows one; else every request is sent to a proxy on a
closed loopback port), lets its scripts run (``--virtual-time-budget``), takes a
screenshot and prints the DOM as it then is. A fresh profile per run: nothing of one run
reaches the next.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

CHROMIUM = "chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
# no namespace: every request goes to a closed port instead (loopback included)
NO_PROXY_FLAGS = ["--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>"]


@dataclass(frozen=True)
class Loaded:
    dom: str  # the document after its scripts ran (``--dump-dom``)
    screenshot: Path
    seconds: float  # the whole browser run: start, load, scripts, screenshot, exit


def available() -> bool:
    return shutil.which(CHROMIUM) is not None


@functools.cache
def _isolated() -> list[str]:
    """``unshare -n`` when it works here (root, or user namespaces), else nothing."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return []
    probe = subprocess.run([unshare, "-n", "true"], capture_output=True, check=False, timeout=30)
    return [unshare, "-n"] if probe.returncode == 0 else []


def load(
    page: Path, screenshot: Path, *, width: int = 1280, height: int = 1800, timeout: float = 120
) -> Loaded:
    """Load ``page`` from its ``file://`` URL offline; its DOM and a screenshot."""
    isolation = _isolated()
    with tempfile.TemporaryDirectory(prefix="airgap-chromium-") as profile:
        command = [
            *isolation,
            CHROMIUM,
            *FLAGS,
            *([] if isolation else NO_PROXY_FLAGS),
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            "--virtual-time-budget=2000",
            f"--screenshot={screenshot}",
            "--dump-dom",
            page.resolve().as_uri(),
        ]
        started = time.monotonic()
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False
        )
        seconds = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-2000:]
    assert screenshot.is_file(), result.stderr[-2000:]
    return Loaded(result.stdout, screenshot, seconds)


class Element:
    """One element of a dumped DOM: its tag, attributes and text (children's included)."""

    def __init__(self, tag: str, attributes: dict[str, str | None]) -> None:
        self.tag = tag
        self.attributes = attributes
        self.children: list[Element] = []
        self.parts: list[str] = []

    def attribute(self, name: str) -> str:
        """An attribute's value ("" when it has none; KeyError when absent)."""
        return self.attributes[name] or ""

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def find_all(self, tag: str | None = None, **attributes: str) -> list[Element]:
        """Descendants of ``tag`` (any: None) whose attributes have these values
        (``class_`` is class, ``data_kind`` is data-kind)."""
        found = []
        for child in self.children:
            if (tag is None or child.tag == tag) and all(
                child.attributes.get(name.rstrip("_").replace("_", "-")) == value
                for name, value in attributes.items()
            ):
                found.append(child)
            found.extend(child.find_all(tag, **attributes))
        return found

    def by_id(self, element_id: str) -> Element:
        (found,) = self.find_all(id=element_id)
        return found


_VOID = {"meta", "input", "br", "img", "link", "hr", "col", "area", "base", "source", "wbr"}


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.open = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, dict(attrs))
        self.open[-1].children.append(element)
        if tag not in _VOID:
            self.open.append(element)

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.open) - 1, 0, -1):
            if self.open[depth].tag == tag:
                del self.open[depth:]
                return

    def handle_data(self, data: str) -> None:
        for element in self.open:
            element.parts.append(data)


def parse(dom: str) -> Element:
    """The dumped DOM as a tree (the standard library's HTML parser)."""
    builder = _Builder()
    builder.feed(dom)
    builder.close()
    return builder.root


def print_pages(page: Path, pdf: Path, *, timeout: float = 120) -> int:
    """Print ``page`` to ``pdf`` as the browser would on paper (the print stylesheet);
    the number of pages."""
    isolation = _isolated()
    with tempfile.TemporaryDirectory(prefix="airgap-chromium-") as profile:
        command = [
            *isolation,
            CHROMIUM,
            *FLAGS,
            *([] if isolation else NO_PROXY_FLAGS),
            f"--user-data-dir={profile}",
            "--no-pdf-header-footer",
            f"--print-to-pdf={pdf}",
            page.resolve().as_uri(),
        ]
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False
        )
    assert result.returncode == 0 and pdf.is_file(), result.stderr[-2000:]
    return len(re.findall(rb"/Type\s*/Page\b(?!s)", pdf.read_bytes()))
