"""How long each experiment takes at the paper's scale, from a run's measured rates."""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from fedjax_abc.repro import common, paper, theorems


# Seconds each experiment of ``reproduce all`` took, by scale, in the reference run of
# docs/results (2 CPU cores, float64; ``wall_seconds`` of each result's config) and in a
# ``--quick`` run on the same kind of machine: the pace ``common.Overall`` scales. thm3 and
# faults (its scan over 5 seeds) were run again for docs/results on 2 cores of an Intel
# Xeon, which ran thm3 about 1.3x faster than the AMD EPYC of the others.
MEASURED_SECONDS = {
    "paper": {"fig1": 11.8, "table2": 43.6, "table2_hypotheses": 191.6, "fig3": 375.5,
              "remark4": 1.6, "lemmas": 41.8, "thm1": 3.7, "thm2": 118.7, "thm3": 215.6,
              "faults": 804.8},
    "quick": {"fig1": 10.1, "table2": 18.2, "table2_hypotheses": 14.0, "fig3": 14.8,
              "remark4": 0.5, "lemmas": 40.3, "thm1": 11.4, "thm2": 88.8, "thm3": 27.0,
              "faults": 42.7},
}


def paper_runs(experiment: str) -> list[tuple[str, float]]:
    """(run name, client-steps) of every run of an experiment at the paper's scale."""
    if experiment == "fig1":
        P = paper.FIG1
        return [(f"S={S}", common.work_units(P["n"], S, P["Q"], P["T"], P["R"])) for S in P["S"]]
    if experiment == "table2":
        P = paper.TABLE2
        runs = []
        for d in P["d_max"]:
            runs += [(f"Dmax={d:g} S={S}", common.work_units(P["n"], S, P["Q"], P["T"], P["R"]))
                     for S in P["S"]]
            runs.append((f"Dmax={d:g} noise-free",
                         common.work_units(P["n"], P["n"], P["Q"], paper.NOISE_FREE_HORIZON * P["T"], 1)))
            runs += [(f"alpha={paper.TABLE2_READING_ALPHA:g} Dmax={d:g} S={S}",
                      common.work_units(P["n"], S, P["Q"], P["T"], P["R"])) for S in P["S"]]
        return runs
    if experiment == "fig3":
        P = paper.FIG3
        return [(f"S={S} Q={Q}", common.work_units(P["n"], S, Q, P["T"], P["R"]))
                for Q in P["Q"] for S in P["S"]]
    if experiment == "thm2":
        T, R = paper.THEOREMS["T"], paper.THEOREMS["R"]
        sw = paper.THM2_SWEEP
        runs = []
        for label, p, _, _, _, Q, Ss, _ in theorems.cases():
            name = label.split(',')[0]
            runs += [(f"{name} S={S}", common.work_units(p.num_clients, S, Q, T, R)) for S in Ss]
            runs += [(f"{name} S={sw['S']} Q={q}", common.work_units(p.num_clients, sw["S"], q, T, sw["R"]))
                     for q in sw["Q"]]
            runs += [(f"{name} S={sw['S']} T={t}", common.work_units(p.num_clients, sw["S"], Q, t, sw["R"]))
                     for t in sw["T"]]
        return runs
    if experiment == "thm3":
        H = paper.THM3
        runs = []
        for label, p, _, _, _, Q, _, _ in theorems.cases():
            for name, _, _ in theorems.thm3_schedules(1.0, H["p"], 1):
                runs.append((f"{label.split(',')[0]} {name}",
                             common.work_units(p.num_clients, H["S"], Q, H["T"], H["R"])))
        return runs
    return []


def _q_of(name: str) -> Optional[int]:
    for part in name.split():
        if part.startswith("Q="):
            return int(part[2:])
    return None


def _alias(name: str) -> list[tuple[str, str]]:
    """Runs of other experiments with the same shapes (thm2/thm3 report no steady rate)."""
    if name.startswith("problem (25)-(26) S="):
        return [("fig1", name.split()[-1])]
    if name.startswith("problem (27) S="):
        return [("table2", "Dmax=20 " + name.split()[-1])]
    return []


def estimate_paper_seconds(experiment: str, timings: Sequence[dict],
                           others: Optional[dict] = None) -> Optional[float]:
    """Seconds the experiment would take at the paper's scale, from a run's measured rates.

    Each paper run takes its work over the steady rate (after compilation) of the measured
    run of the same name (fig3: same S, nearest Q; thm2/thm3: the fig1/table2 run of the
    same shapes in ``others``, {experiment: timings}, when they measured no steady rate),
    plus the mean compilation overhead seen.
    """
    if not timings:
        return None
    others = others or {}
    rates, overhead = {}, []
    for t in timings:
        rate = t.get("steady_rate")
        for exp, run in ([] if rate else _alias(t["run"])):
            rate = rate or next((o.get("steady_rate") for o in others.get(exp, [])
                                 if o["run"] == run), None)
        rate = rate or (t["work"] / t["seconds"] if t["seconds"] > 0 else None)
        if rate:
            rates[t["run"]] = rate
            overhead.append(max(0.0, t["seconds"] - t["work"] / rate))
    if not rates:
        return None
    fallback = float(np.median(list(rates.values())))
    total = 0.0
    for name, work in paper_runs(experiment):
        rate = rates.get(name)
        if rate is None and _q_of(name) is not None:
            prefix = name.split(" Q=")[0]
            cands = [(abs(math.log(_q_of(k) / _q_of(name))), r) for k, r in rates.items()
                     if k.startswith(prefix + " Q=")]
            rate = min(cands)[1] if cands else None
        total += work / (rate or fallback) + (float(np.mean(overhead)) if overhead else 0.0)
    return total
