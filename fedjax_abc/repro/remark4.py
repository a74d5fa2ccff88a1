"""Remark 4 / Table I on problem (27): the paper's sampling term against [10]'s, as Q grows.

``fedjax-abc reproduce remark4`` (computation only, no simulation): for each Dmax of
Section IV-B, problem (27) with the paper's offsets, x0 = x* + 10, L = C = 1, D = 0, S = 4 of
n = 40 and T = 100000 (Fig. 3's), over Fig. 3's Q values:

- the paper's sampling term of (24), L (Delta_f + sqrt(Delta_f sigma_f*)) sqrt(I_S / (S T))
  (``theory.theorem2_leading_terms(...).sampling``), and
- [10]'s, I_S zeta^2 sqrt(Q / (S T)) (``theory.yang2021_sampling_term``), with zeta^2 the
  (zeta^2, 0)-BGD constant sup_x (1/n) sum_i |f_i'(x) - f'(x)|^2 (``theory.bgd_sum``).

Both without numerical constants (Table I's convention). Their ratio grows as sqrt(Q);
[10]'s term passes the paper's at Q_x = (L (Delta_f + sqrt(Delta_f sigma_f*)) / (sqrt(I_S)
zeta^2))^2, whatever S and T. (Problem (27)'s oracle has variance f_i(x) - f_i*, unbounded
in x, so [10]'s bounded-variance assumption holds only on a bounded region: their noise
term is left out; the comparison is of the sampling terms, which is Remark 4's point.)
"""

from __future__ import annotations

import math
import os

import numpy as np

from fedjax_abc.repro import common, paper, table2
from fedjax_abc.repro import offsets as offs


def crossover_q(L, delta_f, sigma_f_star, I_S, zeta_sq) -> float:
    """The Q at which [10]'s sampling term equals the paper's (constants dropped).

    Example:
      >>> crossover_q(1.0, 1.0, 0.0, 0.25, 1.0)  # (1 * 1 / (0.5 * 1))^2
      4.0
    """
    return (L * (delta_f + math.sqrt(delta_f * sigma_f_star)) / (math.sqrt(I_S) * zeta_sq)) ** 2


def run(settings: common.Settings, progress: common.Progress) -> dict:
    import fedjax_abc as fa
    import fedjax_abc.theory as theory

    n, S, T = paper.TABLE2["n"], paper.REMARK4["S"], paper.FIG3["T"]
    Q_list = paper.FIG3["Q"]
    L, C, D = 1.0, 1.0, 0.0
    progress.plan(1.0)
    progress.task("Remark 4", 1.0)
    rows = []
    for d_max in paper.TABLE2["d_max"]:
        d = offs.paper_offsets(d_max, n)
        problem = fa.problems.huber_offsets(offsets=d)
        x0 = np.asarray(problem.x_star) + paper.TABLE2["x0_offset"]
        delta = float(problem.gap(x0))
        sigma = float(problem.sigma_f_star)
        bgd = theory.bgd_sum(problem, domain=table2.bgd_domain(d),
                             num_points=paper.REMARK4_QUICK_BGD_POINTS if settings.quick else paper.BGD_POINTS)
        zeta_sq = float(bgd.max_dissimilarity)
        ours = [theory.theorem2_leading_terms(L, C, D, sigma, delta, n, S, Q, T).sampling for Q in Q_list]
        yang = [theory.yang2021_sampling_term(zeta_sq, n, S, Q, T) for Q in Q_list]
        rows.append({"d_max": d_max, "sigma_f_star": sigma, "delta_f": delta, "zeta_sq": zeta_sq,
                     "bgd_sum": float(bgd.total), "ours": ours, "yang2021": yang,
                     "ratio": [y / o for y, o in zip(yang, ours)],
                     "crossover_Q": crossover_q(L, delta, sigma, theory.sampling_factor(n, S), zeta_sq),
                     "rate_abc": [theory.table1_rate_abc(C, D, sigma, n, S, Q, T) for Q in Q_list]})
    progress.finish_task()
    config = common.base_config(settings, "remark4", None, T, "quick" if settings.quick else "paper")
    config.update(problem="huber_offsets (eq. 27), the paper's offsets", n=n, S=S, T=T, L=L, C=C,
                  D=D, Q=Q_list, x0=f"x* + {paper.TABLE2['x0_offset']:g}",
                  ours="L (Delta_f + sqrt(Delta_f sigma_f*)) sqrt(I_S / (S T)) (24)",
                  yang2021="I_S zeta^2 sqrt(Q / (S T)) ([10], Remark 4, Table I)",
                  zeta_sq="sup_x (1/n) sum_i |f_i'(x) - f'(x)|^2 on [min d - 5, max d + 5] "
                          "(theory.bgd_sum max_dissimilarity)",
                  functions=["fedjax_abc.theory.theorem2_leading_terms",
                             "fedjax_abc.theory.yang2021_sampling_term",
                             "fedjax_abc.theory.table1_rate_abc"])
    return {"experiment": "remark4", "config": config, "Q": Q_list, "I_S": theory.sampling_factor(n, S),
            "rows": rows}


def write(doc: dict, out: str) -> list[str]:
    paths = [common.write_json(os.path.join(out, "remark4.json"), doc)]
    header, lines = ["Q"], []
    for r in doc["rows"]:
        header += [f"ours_Dmax{r['d_max']:g}", f"yang2021_Dmax{r['d_max']:g}"]
    for j, q in enumerate(doc["Q"]):
        line = [q]
        for r in doc["rows"]:
            line += [r["ours"][j], r["yang2021"][j]]
        lines.append(line)
    paths.append(common.write_csv(os.path.join(out, "remark4.csv"), header, lines))
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    Q = np.asarray(doc["Q"], float)
    groups = {}  # [10]'s term is the same for Dmax with the same zeta^2: one line for them
    for r in doc["rows"]:
        line, = ax.plot(Q, r["ours"], "-", label=f"(24), Dmax = {r['d_max']:g}")
        key = tuple(np.round(np.log(np.asarray(r["yang2021"], float)), 9))
        groups.setdefault(key, (line.get_color(), r["yang2021"], []))[2].append(f"{r['d_max']:g}")
    for color, values, d_maxes in groups.values():
        same = " (same zeta^2)" if len(d_maxes) > 1 else ""
        ax.plot(Q, values, "--", color=color, label=f"[10], Dmax = {', '.join(d_maxes)}{same}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("local updates Q")
    ax.set_ylabel("sampling-induced term (no constants)")
    ax.set_title(f"Remark 4: (24) against [10], S = {doc['config']['S']}, T = {doc['config']['T']}",
                 fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    return paths + [common.save_figure(fig, out, "remark4.png")]
