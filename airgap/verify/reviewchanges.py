"""The review page's section on what changed against a base bundle: versions, images
and a bar chart of sizes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airgap.core.textfmt import human_size, plural
from airgap.verify.htmlparts import (
    Markup,
    code_text,
    element,
    joined,
    table_of,
)

_SIGNS = {"added": "+ added", "removed": "- removed", "upgraded": "^ upgraded"}


def _version_rows(changes: Iterable[Mapping[str, Any]]) -> list[Markup]:
    def version(side: Mapping[str, str] | None) -> str:
        if side is None:
            return "-"
        contract = f" ({side['contract']})" if side.get("contract") else ""
        return f"{side['version']}{contract}"

    return [
        element(
            "tr",
            element("td", _SIGNS.get(c["change"], c["change"])),
            element("td", c["kind"]),
            element("td", c["name"]),
            element("td", version(c["old"])),
            element("td", version(c["new"])),
            data_change=c["change"],
        )
        for c in changes
    ]


def _image_change_rows(change: Mapping[str, Any], anchors: Mapping[str, int]) -> list[Markup]:
    rows = []
    for c in change["images"]:
        reference = c["reference"]
        name: object = reference
        if reference in anchors and c["change"] != "removed":
            name = element("a", reference, href=f"#image-{anchors[reference]}")
        replaces = f" (replaces {', '.join(c['replaces'])})" if c.get("replaces") else ""
        rows.append(
            element(
                "tr",
                element("td", _SIGNS.get(c["change"], c["change"])),
                element("td", name, replaces, class_="mono"),
                element("td", code_text(c["oldDigest"] or "-")),
                element("td", code_text(c["newDigest"] or "-")),
                data_change=c["change"],
            )
        )
    return rows


def change_section(change: Mapping[str, Any], anchors: Mapping[str, int]) -> Markup:
    images = change["images"]
    tally = {
        kind: sum(1 for c in images if c["change"] == kind)
        for kind in ("added", "removed", "changed")
    }
    blobs = change["blobs"]
    summary = element(
        "p",
        f"Images: {tally['added']} added, {tally['removed']} removed, {tally['changed']} at "
        f"another digest, {change['unchangedImages']} unchanged. New bytes: ",
        element(
            "strong", human_size(blobs["newBytes"]), id="new-bytes", data_bytes=blobs["newBytes"]
        ),
        f" in {plural(blobs['new'], 'blob')} the base lacks "
        f"({human_size(blobs['newCarriedBytes'])} carried, "
        f"{human_size(blobs['newReliedBytes'])} relied on); "
        f"{plural(blobs['removed'], 'blob')} only in the base, {blobs['common']} in both.",
        " " + change["relation"] + "." if change.get("relation") else "",
        id="change-summary",
    )
    version_headers = ["Change", "Kind", "Name", "Base", "This bundle"]
    return joined(
        [
            summary,
            element("h3", "Providers"),
            table_of("change-providers", version_headers, _version_rows(change["providers"]))
            if change["providers"]
            else element("p", "Providers: unchanged."),
            element("h3", "Content sets and charts"),
            table_of("change-contents", version_headers, _version_rows(change["contents"]))
            if change["contents"]
            else element("p", "Content sets: unchanged."),
            element("h3", "Images"),
            table_of(
                "change-images",
                ["Change", "Image", "Base digest", "This bundle's digest"],
                _image_change_rows(change, anchors),
            )
            if images
            else element("p", "Images: unchanged."),
            element("h3", "Bytes per kind, base beside this bundle"),
            _bar_chart(change["bytesByKind"]["old"], change["bytesByKind"]["new"]),
        ]
    )


def _bar_chart(old: Mapping[str, int], new: Mapping[str, int]) -> Markup:
    """Horizontal bars, two per kind (base grey, this bundle blue), labelled with sizes."""
    kinds = sorted(old.keys() | new.keys(), key=lambda k: (-max(old.get(k, 0), new.get(k, 0)), k))
    top = max([*old.values(), *new.values(), 1])
    label_width, bar_width, row = 120, 420, 40
    height = row * len(kinds) + 30
    shapes: list[Markup] = []
    for n, kind in enumerate(kinds):
        y = 24 + n * row
        shapes.append(element("text", kind, x=0, y=y + 13))
        for offset, sizes, colour, side in (
            (0, old, "var(--old)", "base"),
            (16, new, "var(--new)", "this bundle"),
        ):
            size = sizes.get(kind, 0)
            width = max(round(bar_width * size / top), 1 if size else 0)
            shapes.append(
                element(
                    "rect",
                    element("title", f"{kind}, {side}: {human_size(size)} ({size} bytes)"),
                    x=label_width,
                    y=y + offset,
                    width=width,
                    height=14,
                    fill=colour,
                    data_kind=kind,
                    data_side=side,
                    data_bytes=size,
                )
            )
            shapes.append(
                element("text", human_size(size), x=label_width + width + 6, y=y + offset + 11)
            )
    legend = joined(
        [
            element("rect", x=label_width, y=2, width=12, height=12, fill="var(--old)"),
            element("text", "base", x=label_width + 16, y=12),
            element("rect", x=label_width + 70, y=2, width=12, height=12, fill="var(--new)"),
            element("text", "this bundle", x=label_width + 86, y=12),
        ]
    )
    return element(
        "svg",
        element("title", "Bytes per content kind, base beside this bundle"),
        legend,
        *shapes,
        xmlns="http://www.w3.org/2000/svg",
        width=label_width + bar_width + 90,
        height=height,
        role="img",
        id="bytes-chart",
    )
