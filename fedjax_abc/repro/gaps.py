"""Table II's 12 printed gaps against ours, at the stated alpha and at the reading alpha.

Per cell (Dmax, S): the paper's last-iterate gap, ours at the stated alpha and at the reading
alpha = 1e-3 (last iterate and the mean over the late window t >= LATE_WINDOW T), each with its
standard error and z = (ours - paper) / se; and the chi^2 of a column over all cells
(:func:`cell_fit`), the statistic by which a reading is judged rather than by single cells.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import numpy as np

from fedjax_abc.repro import checks as chk
from fedjax_abc.repro import paper
from fedjax_abc.repro.table2 import LATE_WINDOW


def sci(v, digits: int = 3) -> str:
    """``v`` in scientific notation with ``digits`` significant digits; "n/a" for None or a
    non-finite value (the report's format of a measured number)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    return f"{v:.{digits - 1}e}"


def num(v, digits: int = 3) -> str:
    """``v`` with ``digits`` decimals; "n/a" for None."""
    return "n/a" if v is None else f"{v:.{digits}f}"


class CellFit(NamedTuple):
    """The paper's printed cells against ours: chi^2 = sum of z^2, its dof and p-value, max |z|."""

    chi2: float
    dof: int
    p_value: float
    max_abs_z: float


def cell_fit(zs) -> Optional[CellFit]:
    """chi^2 over the cells with a z (None where none has one)."""
    from scipy import stats

    z = np.asarray([v for v in zs if v is not None and math.isfinite(v)], float)
    if not z.size:
        return None
    chi2 = float(np.sum(z ** 2))
    return CellFit(chi2, int(z.size), float(stats.chi2.sf(chi2, z.size)), float(np.abs(z).max()))


def late_window_of(traj: dict, late: Optional[dict], dm: str, S: int,
                   fraction: float = LATE_WINDOW) -> tuple[float, Optional[float], bool]:
    """(mean, s.e., exact) of the gap over the records t >= fraction T: from the run's own
    per-trial window means where the results carry them (``late``, exact s.e.), else from the
    mean trajectory, with the mean of the records' standard errors, an upper bound on the
    window mean's (the s.d. of an average is at most the average of the s.d.)."""
    if late and dm in late and str(S) in late[dm]:
        w = late[dm][str(S)]
        return w["mean"], w["stderr"], True
    rounds = np.asarray(traj["rounds"], float)
    window = rounds >= fraction * rounds[-1]
    m = np.asarray(traj["mean_gap"][dm][str(S)], float)[window]
    se = np.asarray(traj["ci95_gap"][dm][str(S)], float)[window] / chk.Z95
    return float(m.mean()), float(se.mean()), False


def gap_cells(doc: dict) -> list[dict]:
    """Table II's 12 cells: the paper's gap, ours at the stated alpha and at the reading
    alpha (last iterate and late window), each with its s.e. and z = (ours - paper) / s.e."""
    c, alt = doc["config"], doc.get("reading")
    trajectories = dict(doc.get("trajectories") or {})
    out = []
    for r in doc["rows"]:
        d = float(r["d_max"])
        dm = str(int(d))
        for S in c["S"]:
            p = paper.TABLE2_GAP.get(d, {}).get(S)
            g = r["gap"][str(S)]
            cell = {"d_max": d, "S": S, "paper": p, "stated": g,
                    "stated_z": _z(g["mean"], g["stderr"], p), "reading": None, "reading_z": None,
                    "late": None, "late_z": None, "late_exact": False}
            if alt:
                a = alt["gap"][dm][str(S)]
                cell.update(reading=a, reading_z=_z(a["mean"], a["stderr"], p))
                lm, lse, exact = late_window_of(dict(alt, rounds=trajectories.get("rounds")),
                                                alt.get("late_window"), dm, S)
                cell.update(late={"mean": lm, "stderr": lse}, late_z=_z(lm, lse, p),
                            late_exact=exact)
            out.append(cell)
    return out


def _z(mean, se, printed) -> Optional[float]:
    return (mean - printed) / se if printed is not None and se else None


def gap_table_lines(doc: dict, cells: list[dict]) -> list[str]:
    """Table II in numbers: the 12 printed gaps beside ours at both alphas, and the chi^2
    of each column over all cells."""
    alt = doc.get("reading")
    if not alt:
        return []
    a0, a1 = doc["config"]["alpha"], alt["alpha"]
    exact = all(x["late_exact"] for x in cells)
    lines = [f"**Table II in numbers.** The 12 printed gaps beside ours at the stated alpha = "
             f"{a0:g} and at the reading alpha = {a1:g} (R and keys of its own), last iterate "
             f"and the mean over the late window t >= {LATE_WINDOW:g} T, which smooths a single "
             "round's spike; z = (ours - paper) / our s.e. "
             + ("The late window's s.e. is over the trials' own window means." if exact else
                "This result file has no per-trial window means, so the late window's s.e. "
                "is the mean of its records' standard errors, an upper bound: its |z| and "
                "chi^2 are lower bounds, they can show a disagreement but not prove "
                "agreement (a rerun of `fedjax-abc reproduce table2` records the exact s.e.).")
             + f" At the stated alpha the iterate is still travelling at T (below), so a "
             "window mean there would only add its drift; it is left out.", "",
             f"| Dmax | S | paper | alpha = {a0:g}: ours (se) | z | alpha = {a1:g}: ours (se) | "
             f"z | alpha = {a1:g}, t >= {LATE_WINDOW:g} T: mean (se{'' if exact else ' bound'}) | z |",
             "|---|---|---|---|---|---|---|---|---|"]
    for x in cells:
        lines.append(
            f"| {x['d_max']:g} | {x['S']} | {sci(x['paper'])} | {sci(x['stated']['mean'])} "
            f"({sci(x['stated']['stderr'], 2)}) | {num(x['stated_z'], 0)} | "
            f"{sci(x['reading']['mean'])} ({sci(x['reading']['stderr'], 2)}) | "
            f"{num(x['reading_z'], 2)} | {sci(x['late']['mean'])} "
            f"({sci(x['late']['stderr'], 2)}) | {num(x['late_z'], 2)} |")
    fits = [(f"alpha = {a0:g}, last iterate", cell_fit([x["stated_z"] for x in cells])),
            (f"alpha = {a1:g}, last iterate", cell_fit([x["reading_z"] for x in cells])),
            (f"alpha = {a1:g}, late window" + ("" if exact else " (a lower bound)"),
             cell_fit([x["late_z"] for x in cells]))]
    lines += ["", "chi^2 over all 12 cells: " + "; ".join(
        f"{name}: {f.chi2:.3g} on {f.dof} dof (p = {f.p_value:.2g}, max |z| = {f.max_abs_z:.3g})"
        for name, f in fits if f is not None) + ".", ""]
    return lines
