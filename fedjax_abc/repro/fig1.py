"""Fig. 1 (Section IV-A): FedAvg on problem (25) with oracle (26) for S in {1, 4, 8, 16}.

Paper: n = 16, T = 50000, Q = 5, alpha = 0.001, x0 = 10, R = 100 trials; the gap
f(x_t) - f* falls lower for larger S, the smallest at S = 16 (full participation).
"""

from __future__ import annotations

import numpy as np

from fedjax_abc.repro import common, paper


def run(settings: common.Settings, progress: common.Progress) -> dict:
    """Runs Fig. 1 and returns the document of ``fig1.json``."""
    import fedjax_abc as fa

    R, T, scale = settings.scale(paper.FIG1["R"], paper.FIG1["T"], paper.FIG1_QUICK["R"], paper.FIG1_QUICK["T"])

    P = common.experiment_settings(settings, "fig1")
    problem = fa.problems.softplus_huber(P["n"])
    k = common.record_every(T)
    n, Q = P["n"], P["Q"]
    progress.plan(sum(common.work_units(n, S, Q, T, R) for S in P["S"]))

    mean_gap, ci95_gap, final_gap = {}, {}, {}
    rounds = None
    for S in P["S"]:
        res = common.simulate(problem, num_sampled=S, local_steps=Q, stepsize=P["alpha"],
                              rounds=T, x0=P["x0"], trials=R,
                              key=common.run_key(settings.seed, "fig1", S),
                              precision=settings.precision, record=k, progress=progress,
                              desc=f"S={S}", checkpoint=settings.checkpoint_file("fig1", f"S={S}"))
        summ = res.summary("gap")
        rounds = res.rounds
        mean_gap[str(S)] = summ.mean
        ci95_gap[str(S)] = summ.ci95
        final_gap[str(S)] = common.final_stats(res, "gap")

    config = common.base_config(settings, "fig1", R, T, scale)
    config.update(
        problem="softplus_huber (eq. 25) with oracle (26)", n=n, S=P["S"], Q=Q,
        alpha=P["alpha"], x0=P["x0"], record_every=k,
        f_star=float(problem.f_star), x_star=float(problem.x_star[0]),
        f_star_method="exact 1-D convex minimisation (bisection on f' to adjacent floats)",
        L=1.0, C=1.0, D=0.5, key_tags="(S,)",
        mode="gather for S < n, mask for S = n (same results)",
    )
    return {"experiment": "fig1", "config": config, "S": P["S"], "rounds": rounds,
            "mean_gap": mean_gap, "ci95_gap": ci95_gap, "final_gap": final_gap,
            "diverged": progress.diverged}


def write(doc: dict, out: str) -> list[str]:
    """fig1.json, fig1.csv (final gaps) and fig1.png."""
    import os

    paths = [common.write_json(os.path.join(out, "fig1.json"), doc)]
    rows = [(S, doc["final_gap"][str(S)]["mean"], doc["final_gap"][str(S)]["stderr"])
            for S in doc["S"]]
    paths.append(common.write_csv(os.path.join(out, "fig1.csv"),
                                  ["S", "final_gap_mean", "final_gap_stderr"], rows))
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    rounds = np.asarray(doc["rounds"])
    for S in doc["S"]:
        common.band(ax, rounds, doc["mean_gap"][str(S)], doc["ci95_gap"][str(S)], f"S = {S}")
    cfg = doc["config"]
    ax.set_yscale("log")
    ax.set_xlabel("communication round t")
    ax.set_ylabel(r"$f(x_t) - f^\star$")
    ax.set_title(f"Fig. 1: problem (25), Q = {cfg['Q']}, alpha = {cfg['alpha']:g}, "
                 f"R = {cfg['trials']}", fontsize=9)
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    path = common.save_figure(fig, out, "fig1.png")
    return paths + [path]
