"""Small HTML pieces for the review page, every value escaped: text from a bundle is
hostile and is shown as text, never as markup.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence

from airgap.core.textfmt import human_size, printable


class Markup(str):
    """HTML this module built: inserted as is; any other string is escaped."""


def escaped(value: object) -> Markup:
    """Text as HTML shows it: markup characters escaped, and control and format
    characters (a right-to-left override that makes one name read as another, a
    surrogate that is not UTF-8) shown as backslash escapes, as the terminal shows them."""
    return Markup(html.escape(printable(str(value)), quote=True))


def joined(children: Iterable[object]) -> Markup:
    return Markup("".join(c if isinstance(c, Markup) else escaped(c) for c in children))


def attributes_text(attributes: Mapping[str, object]) -> str:
    return "".join(
        f' {name.rstrip("_").replace("_", "-")}="{escaped(value)}"'
        for name, value in attributes.items()
        if value is not None and value is not False
    )


def void_element(tag: str, **attributes: object) -> Markup:
    """An element without content or end tag (``<meta …>``, ``<input …>``)."""
    return Markup(f"<{tag}{attributes_text(attributes)}>")


def element(tag: str, *children: object, **attributes: object) -> Markup:
    """``<tag attributes>children</tag>``: every child and attribute value escaped unless
    it is markup built here. Attribute names are this module's (``class_`` -> class,
    ``data_x`` -> data-x); None and False leave one out."""
    return Markup(f"<{tag}{attributes_text(attributes)}>{joined(children)}</{tag}>")


def table_of(
    table_id: str,
    headers: Sequence[str],
    rows: Iterable[Markup],
    *,
    filter_label: str | None = None,
) -> Markup:
    """A sortable table; with ``filter_label``, a filter box the script reveals. A table
    of no rows is a line saying so."""
    rows = list(rows)
    if not rows:
        return element("p", "None.", id=table_id, class_="muted")
    head = element("thead", element("tr", *(element("th", h, scope="col") for h in headers)))
    table = element("table", head, element("tbody", *rows), id=table_id, class_="sortable")
    if filter_label is None:
        return table
    box = void_element(
        "input",
        type="search",
        data_filter=table_id,
        hidden=True,
        placeholder=filter_label,
        aria_label=filter_label,
    )
    return joined([box, table])


def size_text(size: int) -> Markup:
    return element("td", human_size(size), class_="num", data_sort=size, title=f"{size} bytes")


def code_text(value: object) -> Markup:
    return element("code", value)


def link_list(targets: Iterable[tuple[str, str]]) -> Markup:
    return joined(
        joined([Markup(", ") if n else "", element("a", label, href=f"#{anchor}")])
        for n, (anchor, label) in enumerate(targets)
    )
