"""A run's results beside the reference results shipped with the repository (docs/results).

``fedjax-abc report --results DIR`` adds this section when DIR is not the reference folder:
for every experiment in both, whether the settings agree and how many of the recorded
numbers are the same bit for bit, the same to rounding, or different (the largest relative
difference and where it is). With the same settings and seed the simulator draws the same
numbers, so anything beyond rounding is a change in the code, the settings or the machine's
arithmetic, and this section points at it.
"""

from __future__ import annotations

import math
import os
from typing import Iterator, Optional

# Settings of a result's config that make its numbers comparable with another's.
SETTINGS = ("scale", "trials", "rounds", "seed", "precision", "overrides")
ROUNDING = 1e-9  # relative: float64 rounding through a run's sums, not a change of draws
# Keys of measured durations in the results (a check's seconds): the machine's, not the draws'.
TIMINGS = ("seconds", "wall_seconds")


def reference_folder() -> Optional[str]:
    """The repository's docs/results beside the package (an editable install, a clone), or
    None where the package was installed without it."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    folder = os.path.join(root, "docs", "results")
    return folder if os.path.isfile(os.path.join(folder, "table2.json")) else None


def _numbers(value, path: str = "") -> Iterator[tuple[str, float]]:
    """(path, number) of every number in a JSON value, the config and durations left out."""
    if isinstance(value, dict):
        for key, item in value.items():
            if (not path and key == "config") or key in TIMINGS:
                continue
            yield from _numbers(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _numbers(item, f"{path}[{i}]")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield path, float(value)


def compare_documents(ours: dict, theirs: dict) -> dict:
    """How the numbers of two result documents of one experiment compare.

    Returns a dict: ``settings`` (names of SETTINGS that differ), ``compared``, ``same``
    (bit for bit), ``rounding`` (within ROUNDING, relative), ``different``, ``missing``
    (numbers of one document the other lacks), ``largest`` (the largest relative
    difference) and ``where`` (its path), None when nothing differs beyond rounding.
    """
    settings = [k for k in SETTINGS
                if ours["config"].get(k) != theirs["config"].get(k)]
    a, b = dict(_numbers(ours)), dict(_numbers(theirs))
    out = dict(settings=settings, compared=0, same=0, rounding=0, different=0,
               missing=len(set(a) ^ set(b)), largest=0.0, where=None)
    for path in sorted(set(a) & set(b)):
        x, y = a[path], b[path]
        out["compared"] += 1
        if x == y or (math.isnan(x) and math.isnan(y)):
            out["same"] += 1
            continue
        scale = max(abs(x), abs(y))
        rel = abs(x - y) / scale if math.isfinite(scale) and scale > 0 else math.inf
        if rel <= ROUNDING:
            out["rounding"] += 1
            continue
        out["different"] += 1
        if rel > out["largest"]:
            out["largest"], out["where"] = rel, path
    return out


def section(docs: dict, reference_docs: dict, reference: str) -> list[str]:
    """The report's section: one row per experiment present in both folders."""
    lines = ["## Against the shipped results", "",
             "Every number of each result (durations left out) beside the same experiment's "
             f"in `{reference}` (same settings and seed: the same draws, so the numbers agree "
             f"bit for bit or to rounding, relative {ROUNDING:g}). Where a setting differs, the "
             "two are different runs and their differences are no finding.", "",
             "| experiment | settings that differ | numbers | bit for bit | to rounding | "
             "different | largest relative difference (where) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    shared = [name for name in docs if name in reference_docs]
    for name in shared:
        c = compare_documents(docs[name], reference_docs[name])
        where = (f"{c['largest']:.2e} ({c['where']})" if c["where"] is not None else "—")
        lines.append(f"| {name} | {', '.join(c['settings']) or 'none'} | {c['compared']} | "
                     f"{c['same']} | {c['rounding']} | {c['different']} | {where} |")
    if not shared:
        lines.append("| (no experiment in both folders) | | | | | | |")
    return lines + [""]
