"""Summarise a py-spy speedscope profile: where the samples are, per thread group.

    .venv/bin/python benchmarks/profile_summary.py PROFILE.speedscope.json [--top 15]

For each thread group (the main thread; the thread-pool workers together) it prints the
share of samples by leaf function (self) and by airgap function anywhere on the stack
(inclusive). With ``py-spy record --idle`` the samples are wall clock (waiting counts);
with ``--gil`` only samples holding the GIL are kept, i.e. Python CPU time that blocks
every other thread.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

_THREAD_RE = re.compile(r'"([^"]*)"')


def _group(profile_name: str) -> str:
    match = _THREAD_RE.search(profile_name)
    name = match.group(1) if match else profile_name
    # py-spy leaves the main thread's name empty
    return re.sub(r"[-_]?\d+(_\d+)?$", "", name) or "MainThread"


def _short(frame: dict[str, Any]) -> str:
    file = str(frame.get("file", ""))
    for marker in ("/airgap/", "/site-packages/", "/lib/python3"):
        if marker in file:
            file = file.split(marker, 1)[1]
            break
    line = frame.get("line")
    where = f"{file}:{line}" if line else file
    return f"{frame.get('name', '?')} ({where})"


def _function(frame: dict[str, Any]) -> str:
    file = str(frame.get("file", ""))
    for marker in ("/airgap/",):
        if marker in file:
            file = "airgap/" + file.split(marker, 1)[1]
    return f"{frame.get('name', '?')} ({file.rsplit('/site-packages/', 1)[-1]})"


def summarise(data: dict[str, Any], top: int = 15) -> str:
    frames = data["shared"]["frames"]
    groups: dict[str, tuple[Counter[str], Counter[str], list[int]]] = {}
    for profile in data["profiles"]:
        group = _group(str(profile.get("name", "")))
        self_counts, inclusive, total = groups.setdefault(group, (Counter(), Counter(), [0]))
        weights = profile.get("weights") or [1] * len(profile["samples"])
        for stack, weight in zip(profile["samples"], weights, strict=False):
            total[0] += weight
            if not stack:
                continue
            self_counts[_short(frames[stack[-1]])] += weight
            seen = {
                _function(frames[i]) for i in stack if "/airgap/" in str(frames[i].get("file", ""))
            }
            for name in seen:
                inclusive[name] += weight
    lines = []
    grand = sum(total[0] for _, _, total in groups.values()) or 1
    for group, (self_counts, inclusive, total) in sorted(
        groups.items(), key=lambda item: -item[1][2][0]
    ):
        count = total[0] or 1
        share = 100 * total[0] / grand
        lines.append(f"== {group}: {total[0]:.1f} thread-seconds sampled ({share:.0f}% of all)")
        lines.append("  self (leaf frame):")
        for name, value in self_counts.most_common(top):
            lines.append(f"    {100 * value / count:5.1f}%  {name}")
        lines.append("  inclusive (airgap functions on the stack):")
        for name, value in inclusive.most_common(top):
            lines.append(f"    {100 * value / count:5.1f}%  {name}")
    return "\n".join(lines) + "\n"


def summarise_file(path: Path, top: int = 15) -> str:
    return summarise(json.loads(path.read_text()), top)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    sys.stdout.write(summarise_file(args.profile, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
