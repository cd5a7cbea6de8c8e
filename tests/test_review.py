"""``airgap verify --report``: the review page, read in a real browser.

Headless Chromium loads each report from its ``file://`` URL with networking disabled,
takes a screenshot and dumps the DOM after the page's script ran; the test reads the
verdict, the counts and the change table there, and that a bundle carrying markup and
script in its names showed them as text and ran none of it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from airgap.bundle.format import ContentRecord
from airgap.bundle.manifest import BundleManifest
from tests.harness import browser, tamper
from tests.harness.cli import assert_clean_failure, run_airgap
from tests.harness.delta_fixtures import DeltaBundles

pytestmark = pytest.mark.e2e

needs_chromium = pytest.mark.skipif(not browser.available(), reason="needs Debian's chromium")

MARK = "data-pwned"
# what a hostile bundle names things: each would mark the page if the browser ran it
HOSTILE_SCRIPT = f"<script>document.title='PWNED';document.documentElement.setAttribute('{MARK}','script')</script>"
HOSTILE_IMG = f"<img src=x onerror=\"document.documentElement.setAttribute('{MARK}','img')\">"
PNG = b"\x89PNG\r\n\x1a\n"
SPOOF = "\u202eexe.txt"  # a right-to-left override: would read as "txt.exe"


def verify_with_report(bundle: Path, key: Path, report: Path, *extra: str | Path) -> Any:
    result = run_airgap(
        "verify", bundle, "--key", key, "--report", report, "--format", "json", *extra
    )
    assert "Traceback" not in result.stderr, result.stderr
    document = json.loads(result.stdout)
    assert result.returncode == (0 if document["verified"] else 1), result.stderr
    assert report.is_file()
    return document


def rows(table: browser.Element) -> list[browser.Element]:
    (body,) = table.find_all("tbody")
    return body.find_all("tr")


@needs_chromium
def test_report_against_a_base_in_chromium(delta_bundles: DeltaBundles, tmp_path: Path) -> None:
    report = tmp_path / "review.html"
    document = verify_with_report(
        delta_bundles.new, delta_bundles.key.public, report, "--base", delta_bundles.old
    )
    page = report.read_text()
    # self-contained: nothing to fetch, from anywhere
    for needle in ("src=", 'http-equiv="refresh"', "@import", "url("):
        assert needle not in page, needle
    assert 'href="http' not in page and 'href="//' not in page
    loaded = browser.load(report, tmp_path / "review.png")
    assert loaded.screenshot.read_bytes().startswith(PNG)
    dom = browser.parse(loaded.dom)
    (html,) = dom.find_all("html")
    assert html.attributes.get("data-script") == "ready"  # the inline script ran
    verdict = dom.by_id("verdict")
    assert verdict.attributes["data-verdict"] == "verified" and verdict.text == "VERIFIED"
    assert dom.by_id("verdict-line").text == document["verdict"]
    assert document["signature"] in dom.by_id("verdict").text or document["signature"] in loaded.dom
    assert document["manifestDigest"] in loaded.dom
    assert dom.by_id("policy-result").text == "none given"
    counts = {
        key: int(dom.by_id(f"count-{key}").text) for key in ("providers", "images", "failures")
    }
    assert counts == {
        "providers": len(document["providers"]),
        "images": len(document["images"]),
        "failures": 0,
    }
    assert len(rows(dom.by_id("images-table"))) == len(document["images"])
    # the change: the core provider upgraded, delta/gone removed, delta/extra added
    change = document["change"]
    providers = {
        (r.attributes["data-change"], r.find_all("td")[2].text)
        for r in rows(dom.by_id("change-providers"))
    }
    assert providers == {("upgraded", "cluster-api")}
    shown = {
        (r.attributes["data-change"], r.find_all("td")[1].text)
        for r in rows(dom.by_id("change-images"))
    }
    assert shown == {(c["change"], c["reference"]) for c in change["images"]}
    assert {kind for kind, _ in shown} == {"added", "removed", "changed"}  # delta/app: v2
    assert any("delta/extra" in ref for kind, ref in shown if kind == "added")
    assert any("delta/gone" in ref for kind, ref in shown if kind == "removed")
    new_bytes = dom.by_id("new-bytes")
    assert int(new_bytes.attribute("data-bytes")) == change["blobs"]["newBytes"] > 0
    # on paper: the verdict, the table of contents and the counts on page one, then
    # each section from a page of its own
    sections = dom.find_all("section")
    assert [s.attribute("id") for s in sections] == [
        "providers",
        "contents",
        "images",
        "change",
        "warnings",
    ]
    assert browser.print_pages(report, tmp_path / "review.pdf") >= 1 + len(sections)
    assert "No policy (--policy)" in " ".join(document["notChecked"])
    bars = dom.by_id("bytes-chart").find_all("rect", data_kind="images")
    assert {(b.attributes["data-side"], int(b.attribute("data-bytes"))) for b in bars} == {
        ("base", change["bytesByKind"]["old"]["images"]),
        ("this bundle", change["bytesByKind"]["new"]["images"]),
    }


# what a reviewer does with the tables: sort images by size both ways, then filter them
# (run after the page's own script, in a copy whose policy lets a second script run)
DRIVE = """<script>
var table = document.getElementById("images-table"), size = table.tHead.rows[0].cells[3];
var column = function () {
  return Array.prototype.map.call(table.tBodies[0].rows, function (row) {
    return row.cells[3].getAttribute("data-sort");
  }).join(",");
};
size.click(); document.body.setAttribute("data-up", column());
size.click(); document.body.setAttribute("data-down", column());
var box = document.querySelector("input[data-filter=images-table]");
box.value = "EXTRA"; box.dispatchEvent(new Event("input"));
var shown = Array.prototype.filter.call(table.tBodies[0].rows, function (r) { return !r.hidden; });
document.body.setAttribute("data-shown", shown.length + ":" + box.hidden);
</script>"""


@needs_chromium
def test_sorting_and_filtering_in_chromium(delta_bundles: DeltaBundles, tmp_path: Path) -> None:
    report = tmp_path / "review.html"
    document = verify_with_report(delta_bundles.new, delta_bundles.key.public, report)
    page = report.read_text()
    policy = re.search(r'<meta http-equiv="Content-Security-Policy"[^>]*>', page)
    assert policy is not None
    driven = tmp_path / "driven.html"
    driven.write_text(page.replace(policy.group(0), "").replace("</body>", DRIVE + "</body>"))
    (body,) = browser.parse(browser.load(driven, tmp_path / "driven.png").dom).find_all("body")
    sizes = sorted(i["size"] for i in document["images"])
    assert body.attribute("data-up") == ",".join(map(str, sizes))
    assert body.attribute("data-down") == ",".join(map(str, reversed(sizes)))
    assert body.attribute("data-shown") == "1:false"  # delta/extra:v1 alone; the box shown


def _hostile(manifest: BundleManifest) -> BundleManifest:
    """Markup and script in an image name, a provider's label and source, and a chart's
    name, source and warning (the manifest records no chart description: these are the
    chart's strings it does record)."""
    image = dataclasses.replace(manifest.images[0], reference=f"example.com/a{HOSTILE_SCRIPT}:v1")
    provider = dataclasses.replace(
        manifest.providers[0],
        label=HOSTILE_IMG,
        source=f"https://x/{HOSTILE_SCRIPT}/{SPOOF}",
    )
    chart = ContentRecord(
        kind="charts",
        name=f"chart{HOSTILE_IMG}",
        version="1.0.0",
        source=HOSTILE_SCRIPT,
        files=[],
        warnings=[f"description: {HOSTILE_SCRIPT}{HOSTILE_IMG}"],
        render=json.dumps(
            {
                "values": {"note": HOSTILE_SCRIPT},
                "namespace": "default",
                "kubeVersion": "v1.34.1",
                "releaseName": f"r{HOSTILE_IMG}",
            },
            sort_keys=True,
            separators=(",", ":"),
        ),
    )
    return dataclasses.replace(
        manifest,
        images=[image, *manifest.images[1:]],
        providers=[provider, *manifest.providers[1:]],
        contents=[*manifest.contents, chart],
    )


@needs_chromium
def test_hostile_names_are_shown_as_text_in_chromium(
    delta_bundles: DeltaBundles, tmp_path: Path
) -> None:
    bundle = tamper.resign(
        delta_bundles.new, tmp_path / "hostile.tar", delta_bundles.key.private, edit=_hostile
    )
    report = tmp_path / "hostile.html"
    document = verify_with_report(bundle, delta_bundles.key.public, report)
    assert document["verified"] is False  # names the layout does not hold: FAILED, yet written
    loaded = browser.load(report, tmp_path / "hostile.png")
    dom = browser.parse(loaded.dom)
    (html,) = dom.find_all("html")
    assert MARK not in html.attributes and html.attributes.get("data-script") == "ready"
    (title,) = dom.find_all("title")
    assert title.text.startswith("airgap review: NOT VERIFIED") and "PWNED" not in title.text
    assert dom.find_all("img") == [] and len(dom.find_all("script")) == 1
    assert dom.by_id("verdict").attributes["data-verdict"] == "failed"
    assert int(dom.by_id("count-failures").text) == len(document["failures"]) > 0
    # shown, as text, where the bundle put them
    assert HOSTILE_SCRIPT in dom.by_id("image-0").text
    assert HOSTILE_SCRIPT in dom.by_id("provider-0").text
    assert "\u202e" not in loaded.dom and "\\u202eexe.txt" in dom.by_id("provider-0").text
    chart = dom.find_all("tr", id=f"content-{len(document['contents']) - 1}")[0]
    assert HOSTILE_IMG in chart.text
    # the chart's values and render settings, as signed: their digest, release, version
    digest = document["contents"][-1]["valuesDigest"]
    assert digest.startswith("sha256:") and f"values {digest}" in chart.text
    assert f"release r{HOSTILE_IMG}" in chart.text and "Kubernetes v1.34.1" in chart.text
    warnings = dom.by_id("warnings-table").text
    assert HOSTILE_SCRIPT in warnings and HOSTILE_IMG in warnings


def test_report_and_base_on_the_command_line(delta_bundles: DeltaBundles, tmp_path: Path) -> None:
    new, old, key = delta_bundles.new, delta_bundles.old, delta_bundles.key.public
    # the text report says what changed too
    result = run_airgap("verify", new, "--key", key, "--base", old)
    assert result.returncode == 0, result.stderr
    assert "\nChange against the base bundle:\n" in result.stdout
    assert "delta/extra:v1" in result.stdout.split("Change against the base bundle:")[1]
    # the SBOM replaces the report: neither a report nor a base beside it
    report = tmp_path / "review.html"
    result = run_airgap("verify", new, "--key", key, "--sbom", "spdx", "--report", report)
    assert_clean_failure(result, 2, "--sbom")
    # a report into a missing directory is refused before anything is hashed
    result = run_airgap("verify", new, "--key", key, "--report", tmp_path / "gone" / "r.html")
    assert_clean_failure(result, 2, "does not exist")
    # a base signed by another key: one line, exit 1, no report
    private, _ = tamper.new_key(tmp_path)
    other = tamper.resign_as_is(old, tmp_path / "other.tar", private)
    result = run_airgap("verify", new, "--key", key, "--base", other, "--report", report)
    assert_clean_failure(result, 1, "base bundle", "signature")
    assert not report.exists()
    # --no-signature: intact, but nobody vouches for it, and the page says so first
    result = run_airgap("verify", new, "--no-signature", "--report", report)
    assert result.returncode == 0, result.stderr
    page = browser.parse(report.read_text())
    verdict = page.by_id("verdict")
    assert verdict.attribute("data-verdict") == "unsigned"
    assert verdict.text == "NOT VERIFIED: SIGNATURE NOT CHECKED"
    assert "--no-signature" in page.by_id("not-checked").text
    # not a bundle at all: nothing to list, and a report that says NOT VERIFIED
    junk = tmp_path / "junk.tar"
    junk.write_bytes(bytes(range(256)) * 40)
    result = run_airgap("verify", junk, "--key", key, "--report", report, "--base", old)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    page = browser.parse(report.read_text())
    assert page.by_id("verdict").attribute("data-verdict") == "failed"
    assert int(page.by_id("count-failures").text) > 0 and page.by_id("count-images").text == "0"
    assert page.find_all(id="change") == []  # no manifest: nothing to compare
