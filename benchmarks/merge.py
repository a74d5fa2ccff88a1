"""Merges a partial run of ``benchmarks/run.py`` into the full results file.

Usage (from the repository root)::

    python benchmarks/run.py --only table2 --num-sampled 4 --json partial.json
    python benchmarks/merge.py partial.json --why "the Table II rows after the new sampler"
    python benchmarks/report.py benchmarks/results/latest.json -o docs/performance.md

Each row of the partial run replaces the row of the same case (the fields that
:func:`benchmarks.workloads.cases` sets) or is added after the others. Every row carries
the number of the run that measured it (``run``: 0 for the full run, k for the k-th entry
of ``machine["reruns"]``), so that a ratio between rows of different runs is visible as
such; the rows get new ids (each id names one row); the ratios, the targets and each row's
status are evaluated again. A partial run from another machine, or one at ``--quick``
sizes into full ones (or back), is refused.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import run as runner  # noqa: E402
from benchmarks.workloads import cases  # noqa: E402

LATEST = os.path.join(runner.REPO, "benchmarks", "results", "latest.json")
# what must agree for two runs' rows to share one table
SAME_MACHINE = ("cpu_model", "cpu_count", "device")


def case_fields() -> tuple:
    """Every field that defines a case (at full and at quick sizes)."""
    return tuple(sorted({k for quick in (False, True) for c in cases(quick=quick)
                         for k in c}))


def case_key(row: dict, fields: tuple) -> tuple:
    return tuple(row.get(k) for k in fields)


def merge(full: dict, partial: dict, why: str) -> dict:
    """The full results with the partial run's rows in place of those of the same cases.

    Raises:
      ValueError: ``why`` is empty, the runs come from different machines, or one is at
        ``--quick`` sizes and the other not.
    """
    if not why.strip():
        raise ValueError("say why the rows were rerun (--why)")
    a, b = full["machine"], partial["machine"]
    differ = [k for k in SAME_MACHINE if a.get(k) != b.get(k)]
    if differ:
        raise ValueError("the partial run comes from another machine ("
                         + ", ".join(f"{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in differ)
                         + "); run the whole benchmark there instead")
    if bool(full.get("quick")) != bool(partial.get("quick")):
        raise ValueError("one run is at --quick sizes and the other is not")
    out = copy.deepcopy(full)
    machine = out["machine"]
    reruns = machine.setdefault("reruns", [])
    number = len(reruns) + 1
    reruns.append({"git": b.get("git"), "date": b.get("date"), "cases": len(partial["results"]),
                   "total_s": b.get("total_s"), "why": why.strip(), "run": number})
    fields = case_fields()
    new = {}
    for r in partial["results"]:
        new[case_key(r, fields)] = dict(r, run=number)
    rows = []
    for r in out["results"]:
        rows.append(new.pop(case_key(r, fields), None) or dict(r, run=r.get("run", 0)))
    rows += new.values()
    for i, r in enumerate(rows):
        r["id"] = i  # the ratios, statuses and compile_ok are all written again below
    targets, mem = runner.evaluate(rows, quick=bool(out.get("quick")))
    out["results"], out["targets"] = rows, targets
    if mem.get("passed") is not None:
        out["memory"] = mem
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("partial", help="the JSON file of the partial run (run.py --json)")
    ap.add_argument("--why", required=True, help="why these rows were rerun (kept in the file)")
    ap.add_argument("--into", default=LATEST, help=f"the full results (default {LATEST})")
    args = ap.parse_args(argv)
    with open(args.into) as f:
        full = json.load(f)
    with open(args.partial) as f:
        partial = json.load(f)
    try:
        doc = merge(full, partial, args.why)
    except ValueError as e:
        ap.error(str(e))
    runner.write_json(args.into, doc)
    added = len(doc["results"]) - len(full["results"])
    print(f"{args.into}: {len(partial['results']) - added} rows replaced, {added} added "
          f"(run {doc['machine']['reruns'][-1]['run']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
