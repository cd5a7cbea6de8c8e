"""``airgap verify --report FILE``: the review report, one self-contained HTML page.

A compliance officer approves a transfer and attaches the evidence to a ticket; this
page is that evidence. It is rendered from the very document ``verify --format json``
prints (``Report.to_json``), nothing else, so the page and the machine form cannot
disagree. The page needs nothing outside itself: styles, the bar chart (SVG) and a few
lines of script (sorting and filtering, which the page works without) are inline, and
its Content-Security-Policy forbids every fetch and every script but that one.

Everything shown comes from a bundle, which may be hostile: every string passes through
``escaped`` on its way in (the ``element`` builder escapes every child and attribute that is
not markup it built itself), so a ``<script>`` in an image name is shown as text.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from airgap.core.textfmt import human_size, plural
from airgap.verify.htmlparts import (
    Markup,
    code_text,
    element,
    escaped,
    joined,
    link_list,
    size_text,
    table_of,
    void_element,
)
from airgap.verify.reviewchanges import change_section

SCRIPT = """(function () {
  var root = document.documentElement;
  document.querySelectorAll("input[data-filter]").forEach(function (box) {
    var body = document.getElementById(box.getAttribute("data-filter")).tBodies[0];
    box.hidden = false;
    box.addEventListener("input", function () {
      var q = box.value.toLowerCase();
      Array.prototype.forEach.call(body.rows, function (row) {
        row.hidden = q !== "" && row.textContent.toLowerCase().indexOf(q) < 0;
      });
    });
  });
  document.querySelectorAll("table.sortable th").forEach(function (th) {
    th.tabIndex = 0;
    th.addEventListener("click", function () {
      var body = th.closest("table").tBodies[0], column = th.cellIndex;
      var up = th.getAttribute("aria-sort") !== "ascending";
      th.closest("tr").querySelectorAll("th").forEach(function (other) {
        other.removeAttribute("aria-sort");
      });
      th.setAttribute("aria-sort", up ? "ascending" : "descending");
      var key = function (row) {
        var cell = row.cells[column];
        return cell ? (cell.getAttribute("data-sort") || cell.textContent) : "";
      };
      var rows = Array.prototype.slice.call(body.rows).sort(function (a, b) {
        var x = key(a), y = key(b), nx = parseFloat(x), ny = parseFloat(y);
        var order = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
        return up ? order : -order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
  root.setAttribute("data-script", "ready");
})();"""

_SCRIPT_HASH = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
# no fetch of any kind, no script but the one above: a string that escaped escaping
# still could not run, nor reach the network
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    f"script-src 'sha256-{_SCRIPT_HASH}'; base-uri 'none'; form-action 'none'"
)

STYLE = """
:root { --ok: #116329; --bad: #b3261e; --ink: #1f2328; --muted: #59636e; --line: #d1d9e0;
  --old: #8c959f; --new: #0969da; font-family: system-ui, -apple-system, "Segoe UI",
  "DejaVu Sans", sans-serif; color: var(--ink); }
body { margin: 0 auto; max-width: 72rem; padding: 1rem 1.5rem 3rem; line-height: 1.4; }
h1 { font-size: 1.9rem; margin: 0 0 .3rem; } h2 { font-size: 1.3rem; margin: 2rem 0 .6rem;
  border-bottom: 1px solid var(--line); padding-bottom: .2rem; } h3 { font-size: 1.05rem; }
.verdict { border: 3px solid var(--ok); border-radius: 8px; padding: 1rem 1.2rem; }
.verdict.failed { border-color: var(--bad); background: #fff0ee; }
.verdict h1 { color: var(--ok); } .verdict.failed h1 { color: var(--bad); }
.verdict .line { font-size: 1.05rem; font-weight: 600; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: .25rem 1rem;
  margin: .8rem 0; }
dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; overflow-wrap: anywhere; }
code, .mono { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: .86em;
  overflow-wrap: anywhere; }
ul.files { list-style: none; padding: 0; margin: 0; } ul.files code { white-space: nowrap; }
ul.files .digest { display: block; color: var(--muted); font-size: .75rem;
  font-family: ui-monospace, "DejaVu Sans Mono", monospace; overflow-wrap: anywhere; }
.notchecked li, .failures li { margin: .2rem 0; } .failures { color: var(--bad); }
nav.toc ol { columns: 2; margin: .3rem 0; } .counts { display: flex; flex-wrap: wrap; gap: .6rem; }
.counts div { border: 1px solid var(--line); border-radius: 6px; padding: .4rem .8rem; }
.counts b { font-size: 1.3rem; display: block; }
table { border-collapse: collapse; width: 100%; font-size: .9rem; margin: .4rem 0 1rem; }
th, td { border-bottom: 1px solid var(--line); padding: .3rem .45rem; text-align: left;
  vertical-align: top; } th { background: #f6f8fa; }
table.sortable th { cursor: pointer; } th[aria-sort=ascending]::after { content: " \\25B2"; }
th[aria-sort=descending]::after { content: " \\25BC"; }
td.num { text-align: right; white-space: nowrap; } tr:target { background: #fff8c5; }
.tag { display: inline-block; border-radius: 4px; padding: 0 .35rem; font-size: .8rem;
  border: 1px solid var(--line); white-space: nowrap; }
.tag.good { color: var(--ok); border-color: var(--ok); }
.tag.bad { color: var(--bad); border-color: var(--bad); }
tr[data-change] td:first-child { white-space: nowrap; }
tr[data-change=added] td:first-child { color: var(--ok); }
tr[data-change=removed] td:first-child { color: var(--bad); }
input[data-filter] { margin: .2rem 0; padding: .25rem .4rem; width: 18rem; }
.muted { color: var(--muted); } footer { margin-top: 2rem; color: var(--muted); }
svg text { font-family: inherit; font-size: 12px; fill: var(--ink); }
@media print {
  body { max-width: none; padding: 0; font-size: 10pt; }
  input[data-filter] { display: none; }
  section.part { break-before: page; }
  thead { display: table-header-group; } tr { break-inside: avoid; }
  .verdict, .tag, svg { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  a { color: inherit; text-decoration: none; }
}
"""


# --- the verdict --------------------------------------------------------------------------


def _policy_fact(document: Mapping[str, Any]) -> str:
    rules = document["policy"]
    if not document.get("policyGiven"):
        return "none given"
    failed = [r["rule"] for r in rules if not r["passed"]]
    if failed:
        return f"FAILED: {', '.join(failed)} ({len(failed)} of {plural(len(rules), 'rule')})"
    return f"passed ({plural(len(rules), 'rule')})"


_HEADINGS = {
    "verified": ("VERIFIED", ""),
    "unsigned": (
        "NOT VERIFIED: SIGNATURE NOT CHECKED",
        "the bundle's signature was not checked (--no-signature), so who made it, and "
        "whether it changed since, is unknown; its contents match its own manifest.",
    ),
    "failed": (
        "NOT VERIFIED",
        "the bundle failed verification. What follows is what the bundle claims, not "
        "what was proven.",
    ),
}


def _state(document: Mapping[str, Any]) -> str:
    """verified; unsigned (intact, but --no-signature: nobody vouches for it); failed."""
    if not document["verified"]:
        return "failed"
    return "verified" if document["signatureChecked"] else "unsigned"


def _verdict(document: Mapping[str, Any], generated: str, tool: str) -> Markup:
    signer = document["signature"] or (
        "NOT CHECKED (--no-signature)" if not document["signatureChecked"] else "none"
    )
    facts: list[tuple[str, object]] = [
        ("Bundle", code_text(document["bundle"])),
        ("Signed by (key fingerprint)", code_text(signer)),
        ("Bundle digest (signed manifest)", code_text(document.get("manifestDigest") or "unknown")),
        ("Size on disk", f"{human_size(document['bundleSize'])} ({document['bundleSize']} bytes)"),
    ]
    if "created" in document:
        facts += [
            ("Created", document["created"]),
            (
                "Created by",
                f"airgap {document['toolVersion']} (format {document['formatVersion']})",
            ),
        ]
    facts.append(("Policy", element("span", _policy_fact(document), id="policy-result")))
    change = document.get("change")
    if change is not None:
        old = change["old"]
        facts.append(
            ("Compared with", joined([code_text(old["bundle"]), " ", code_text(old["manifest"])]))
        )
    facts.append(("Report", f"generated {generated} by airgap {tool}"))
    dl = element(
        "dl", *(joined([element("dt", k), element("dd", v)]) for k, v in facts), class_="facts"
    )
    state = _state(document)
    title, warning = _HEADINGS[state]
    heading = element("h1", title, id="verdict", data_verdict=state)
    loud = (
        element(
            "p",
            element("strong", "Do not approve this transfer on the strength of this report:"),
            f" {warning}",
        )
        if warning
        else ""
    )
    missing = element(
        "ul", *(element("li", item) for item in document["notChecked"]), id="not-checked"
    )
    return element(
        "header",
        heading,
        element("p", document["verdict"], class_="line", id="verdict-line"),
        loud,
        dl,
        element("h3", "Not checked"),
        missing,
        class_="verdict" if state == "verified" else "verdict failed",
    )


# --- contents -------------------------------------------------------------------------------


def _anchors(document: Mapping[str, Any]) -> dict[str, int]:
    return {image["reference"]: n for n, image in enumerate(document["images"])}


def _image_links(references: Iterable[str], anchors: Mapping[str, int]) -> Markup:
    linked = [(f"image-{anchors[r]}", r) for r in references if r in anchors]
    loose = [r for r in references if r not in anchors]
    parts = [link_list(linked)] if linked else []
    parts += (
        [escaped(f"{', ' if parts else ''}{', '.join(loose)} (not in the bundle)")] if loose else []
    )
    return joined(parts) if parts else Markup("-")


def _providers(document: Mapping[str, Any], anchors: Mapping[str, int]) -> Markup:
    rows = [
        element(
            "tr",
            element("td", p["name"]),
            element("td", p["type"]),
            element("td", p["version"]),
            element("td", p["contract"]),
            element("td", code_text(p["source"])),
            element("td", _image_links(p["images"], anchors)),
            id=f"provider-{n}",
        )
        for n, p in enumerate(document["providers"])
    ]
    headers = ["Provider", "Type", "Version", "Contract", "Source", "Images"]
    return table_of("providers-table", headers, rows)


def _contents(document: Mapping[str, Any], anchors: Mapping[str, int]) -> Markup:
    rows = []
    for n, c in enumerate(document["contents"]):
        digests = c.get("fileDigests", {})
        files = element(
            "ul",
            *(
                element(
                    "li",
                    code_text(f.rsplit("/", 1)[-1]),
                    " ",
                    element("span", digests.get(f, ""), class_="digest"),
                    title=f,
                )
                for f in c["files"]
            ),
            *_render_items(c),
            class_="files",
        )
        rows.append(
            element(
                "tr",
                element("td", c["kind"]),
                element("td", c["name"]),
                element("td", c["version"]),
                element("td", code_text(c["source"])),
                element("td", files),
                element("td", _image_links(c["images"], anchors)),
                id=f"content-{n}",
            )
        )
    headers = ["Kind", "Name", "Version", "Source", "Files", "Images"]
    return table_of("contents-table", headers, rows)


def _render_items(content: Mapping[str, Any]) -> list[Markup]:
    """A chart's values and render settings, as signed: their digest, and what Helm
    was told the release and the cluster are."""
    render = content.get("render")
    if not isinstance(render, dict):
        return []
    settings = ", ".join(
        f"{label} {render[key]}"
        for key, label in (
            ("releaseName", "release"),
            ("namespace", "namespace"),
            ("kubeVersion", "Kubernetes"),
        )
        if isinstance(render.get(key), str)
    )
    return [
        element(
            "li",
            "values ",
            element("span", str(content.get("valuesDigest", "")), class_="digest"),
            f" ({settings})" if settings else "",
            class_="values",
        )
    ]


def _signature_checks(document: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """requireSignatures' findings by image (its lines are ``REFERENCE: what``): who
    signed it, and why it did not verify."""
    references = {i["reference"] for i in document["images"]}
    signed: dict[str, str] = {}
    refused: dict[str, str] = {}
    for rule in document["policy"]:
        if rule["rule"] != "requireSignatures":
            continue
        for into, lines in ((signed, rule.get("details", [])), (refused, rule["offending"])):
            for line in lines:
                at = line.find(": ")
                while at >= 0 and line[:at] not in references:
                    at = line.find(": ", at + 1)
                if at >= 0:
                    into[line[:at]] = line[at + 2 :]
    return signed, refused


def _attached_cell(
    image: Mapping[str, Any], signed: dict[str, str], refused: dict[str, str]
) -> Markup:
    kinds: dict[str, int] = {}
    for artifact in image.get("attached", []):
        kinds[artifact["kind"]] = kinds.get(artifact["kind"], 0) + 1
    carried = ", ".join(plural(count, kind) for kind, count in sorted(kinds.items())) or "none"
    reference = image["reference"]
    if reference in signed:
        state = element("span", "signature verified", class_="tag good", title=signed[reference])
    elif reference in refused:
        state = element(
            "span", "signature NOT verified", class_="tag bad", title=refused[reference]
        )
    elif kinds.get("signature"):
        state = element("span", "signature not checked", class_="tag")
    else:
        state = Markup("")
    return element("td", carried, " ", state)


def _images(document: Mapping[str, Any]) -> Markup:
    named_by: dict[str, list[tuple[str, str]]] = {}
    for n, p in enumerate(document["providers"]):
        for reference in p["images"]:
            named_by.setdefault(reference, []).append((f"provider-{n}", p["name"]))
    for n, c in enumerate(document["contents"]):
        for reference in c["images"]:
            named_by.setdefault(reference, []).append((f"content-{n}", c["name"]))
    signed, refused = _signature_checks(document)
    rows = [
        element(
            "tr",
            element("td", element("a", i["reference"], href=f"#image-{n}", class_="mono")),
            element("td", code_text(i["digest"])),
            element("td", ", ".join(i["platforms"]) or "-"),
            size_text(i["size"]),
            _attached_cell(i, signed, refused),
            element("td", link_list(named_by.get(i["reference"], [])) or "-"),
            id=f"image-{n}",
        )
        for n, i in enumerate(document["images"])
    ]
    headers = ["Image", "Digest", "Platforms", "Size", "Signatures and attestations", "Named by"]
    return table_of("images-table", headers, rows, filter_label="Filter images")


def _counts(document: Mapping[str, Any]) -> Markup:
    attached = [a["kind"] for i in document["images"] for a in i.get("attached", [])]
    counts = [
        ("providers", "Providers", len(document["providers"])),
        ("contents", "Content sets", len(document["contents"])),
        ("images", "Images", len(document["images"])),
        ("signatures", "Signatures", attached.count("signature")),
        ("attestations", "Attestations", attached.count("attestation")),
        ("failures", "Failures", len(document["failures"])),
        ("warnings", "Warnings", len(document["warnings"])),
    ]
    return element(
        "div",
        *(
            element("div", element("b", count, id=f"count-{key}"), label)
            for key, label, count in counts
        ),
        class_="counts",
    )


def _failures(document: Mapping[str, Any]) -> Markup:
    items = [
        element(
            "li", element("strong", f["kind"]), ": ", code_text(f["subject"]), ": ", f["message"]
        )
        for f in document["failures"]
    ]
    return element("ul", *items, class_="failures", id="failures-list")


def _policy(document: Mapping[str, Any]) -> Markup:
    rows = []
    for r in document["policy"]:
        result = (
            element("span", "pass", class_="tag good")
            if r["passed"]
            else element("span", "FAIL", class_="tag bad")
        )
        notes = [r["message"]] if r["message"] else []
        notes += r["offending"] + r.get("details", [])
        notes += [f"near-miss: {r['nearMiss']}"] if r.get("nearMiss") else []
        rows.append(
            element(
                "tr",
                element("td", code_text(r["rule"])),
                element("td", result),
                element(
                    "td", element("ul", *(element("li", note) for note in notes)) if notes else "-"
                ),
                data_passed=str(r["passed"]).lower(),
            )
        )
    return table_of("policy-table", ["Rule", "Result", "Details"], rows)


def _warnings(document: Mapping[str, Any]) -> Markup:
    rows = [
        element(
            "tr",
            element("td", w["kind"]),
            element("td", code_text(w["subject"])),
            element("td", w["message"]),
        )
        for w in document["warnings"]
    ]
    return table_of("warnings-table", ["Warning", "About", "Details"], rows)


# --- the change against --base ----------------------------------------------------------------


# --- the page -------------------------------------------------------------------------------------


def render(document: Mapping[str, Any], *, generated: str, tool: str) -> str:
    """The review page of one ``verify --format json`` document (``Report.to_json``);
    ``generated`` (a timestamp) and ``tool`` (airgap's version) say when and by what."""
    anchors = _anchors(document)
    sections: list[tuple[str, str, Markup]] = []
    if document["failures"]:
        sections.append(("failures", "Failures", _failures(document)))
    sections.append(("providers", "Providers", _providers(document, anchors)))
    sections.append(("contents", "Content sets", _contents(document, anchors)))
    sections.append(("images", "Images", _images(document)))
    if document["policy"]:
        sections.append(("policy", "Policy", _policy(document)))
    if document.get("change") is not None:
        sections.append(
            (
                "change",
                "Change against the base bundle",
                change_section(document["change"], anchors),
            )
        )
    sections.append(("warnings", "Warnings", _warnings(document)))
    toc = element(
        "nav",
        element("h2", "Contents of this report"),
        element(
            "ol",
            *(element("li", element("a", title, href=f"#{key}")) for key, title, _ in sections),
        ),
        class_="toc",
    )
    body = joined(
        [
            _verdict(document, generated, tool),
            toc,
            _counts(document),
            *(
                element("section", element("h2", title), content, id=key, class_="part")
                for key, title, content in sections
            ),
            element("footer", _provenance_note(document)),
        ]
    )
    verdict = _HEADINGS[_state(document)][0]
    head = joined(
        [
            Markup('<meta charset="utf-8">'),
            void_element("meta", http_equiv="Content-Security-Policy", content=CSP),
            Markup('<meta name="viewport" content="width=device-width, initial-scale=1">'),
            element("title", f"airgap review: {verdict}: {document['bundle']}"),
            element("style", Markup(STYLE)),
        ]
    )
    script = element("script", Markup(SCRIPT))
    page = f"<head>{head}</head>\n<body>{body}{script}</body>"
    return f'<!DOCTYPE html>\n<html lang="en">\n{page}\n</html>\n'


def _provenance_note(document: Mapping[str, Any]) -> str:
    state = _state(document)
    if state == "verified":
        return (
            "This report was generated from a verified bundle: its signature, every member's "
            "digest, the tar's safety and the providers were checked (see Not checked above)."
        )
    if state == "unsigned":
        return (
            "This report was generated from a bundle whose signature was NOT checked: its "
            "members match its own manifest, which nobody vouches for."
        )
    return (
        "This report was generated from a bundle that FAILED verification: nothing in it is "
        "vouched for."
    )
