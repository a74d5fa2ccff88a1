"""Fig. 3 (Section IV-C): does the sampling error grow with Q when alpha Q is fixed?

Paper: problem (27) with Dmax = 200 (n = 40), S in {4, 40}, Q in {3, 5, ..., 200},
alpha = gamma / Q with gamma = 1e-2, T = 100000, R = 100 trials (x0 = x* + 10 as in
Section IV-B). (a) R_S(Q) := E||grad f(x_T)||^2; (b) the scaled residual of eq. (28),

    D_Q = (sqrt(S) R_S(Q) - sqrt(n) R_n(Q)) sqrt(T) / (L (Delta_f + sqrt(Delta_f sigma_f*)) sqrt(I_S)),

(the extracted text lost the square roots; this reading makes sqrt(S) R_S - sqrt(n) R_n
cancel the noise term O(1/sqrt(SQT)) of (24) and turns its sampling term
O(L (Delta_f + sqrt(Delta_f sigma_f*)) sqrt(I_S / (S T))) into a constant), with
Delta_f = f(x0) - f*, I_S = (n - S) / (n - 1). D_Q is linear in the two independent means,
so its standard error sqrt(c^2 (S se_S^2 + n se_n^2)) (the delta method) is exact.
"""

from __future__ import annotations

import math
import os

import numpy as np

from fedjax_abc.repro import checks
from fedjax_abc.repro import common, paper
from fedjax_abc.repro import offsets as offs


def scaled_residual(S, n, T, L, delta_f, sigma, r_s, se_s, r_n, se_n):
    """D_Q of eq. (28) and its standard error (exact for a linear function of two means)."""
    i_s = (n - S) / (n - 1)
    c = math.sqrt(T) / (L * (delta_f + math.sqrt(delta_f * sigma)) * math.sqrt(i_s))
    r_s, se_s, r_n, se_n = map(np.asarray, (r_s, se_s, r_n, se_n))
    d = c * (math.sqrt(S) * r_s - math.sqrt(n) * r_n)
    se = c * np.sqrt(S * se_s ** 2 + n * se_n ** 2)
    return d, se, c


def n_full_missing(P: dict) -> bool:
    """Whether the S list lacks S = n (eq. 28 needs R_n) or has no S < n."""
    return P["n"] not in P["S"] or min(P["S"]) >= P["n"]


def run(settings: common.Settings, progress: common.Progress) -> dict:
    """Runs Fig. 3 and returns the document of ``fig3.json``."""
    import fedjax_abc as fa

    R, T, scale = settings.scale(paper.FIG3["R"], paper.FIG3["T"], paper.FIG3_QUICK["R"], paper.FIG3_QUICK["T"])

    P = common.experiment_settings(settings, "fig3")
    Q_list = paper.FIG3_QUICK["Q"] if settings.quick and "Q" not in common.applied_overrides(settings, "fig3") else P["Q"]
    if n_full_missing(P):
        raise ValueError(f"--set S: fig3 needs full participation S = n = {P['n']} among its S "
                         f"(for R_n in eq. 28), got {P['S']}")
    n, gamma, L = P["n"], P["gamma"], P["L"]
    d = offs.paper_offsets(P["d_max"], n)
    problem = fa.problems.huber_offsets(offsets=d)
    x0 = np.asarray(problem.x_star) + P["x0_offset"]
    delta_f = float(problem.gap(x0))
    sigma = float(problem.sigma_f_star)
    k = common.record_every(T, 100)
    progress.plan(sum(common.work_units(n, S, Q, T, R) for S in P["S"] for Q in Q_list))

    residual = {str(S): {"mean": [], "stderr": [], "ci95": []} for S in P["S"]}
    final_gap = {str(S): {"mean": [], "stderr": []} for S in P["S"]}
    for Q in Q_list:
        for S in P["S"]:
            res = common.simulate(problem, num_sampled=S, local_steps=Q, stepsize=gamma / Q,
                                  rounds=T, x0=x0, trials=R,
                                  key=common.run_key(settings.seed, "fig3", S, Q),
                                  precision=settings.precision, record=k, progress=progress,
                                  desc=f"S={S} Q={Q}",
                                  checkpoint=settings.checkpoint_file("fig3", f"S={S} Q={Q}"))
            ms = common.final_stats(res, "grad_norm_sq")
            residual[str(S)]["mean"].append(ms["mean"])
            residual[str(S)]["stderr"].append(ms["stderr"])
            residual[str(S)]["ci95"].append(common.Z95 * ms["stderr"])
            g = common.final_stats(res, "gap")
            final_gap[str(S)]["mean"].append(g["mean"])
            final_gap[str(S)]["stderr"].append(g["stderr"])

    S_part = min(P["S"])
    dq, dq_se, c = scaled_residual(S_part, n, T, L, delta_f, sigma,
                                   residual[str(S_part)]["mean"], residual[str(S_part)]["stderr"],
                                   residual[str(n)]["mean"], residual[str(n)]["stderr"])
    config = common.base_config(settings, "fig3", R, T, scale)
    config.update(
        problem="huber_offsets (eq. 27) with the sign oracle of Section IV-B", n=n,
        d_max=P["d_max"], S=P["S"], Q=Q_list, gamma=gamma, alpha="gamma / Q",
        x0=f"x* + {P['x0_offset']:g} (as in Section IV-B; Section IV-C does not restate it)",
        record_every=k, L=L, C=1.0, D=0.0,
        offsets_draw={"convention": offs.PAPER_DRAW.convention, "seed": offs.PAPER_DRAW.seed,
                      "code": offs.PAPER_DRAW.description},
        D_Q_formula="(sqrt(S) R_S - sqrt(n) R_n) sqrt(T) / (L (Delta_f + sqrt(Delta_f sigma_f*)) sqrt(I_S))",
        key_tags="(S, Q)", mode="gather for S < n, mask for S = n (same results)",
    )
    return {
        "experiment": "fig3", "config": config, "Q": Q_list, "residual": residual,
        "D_Q": {"mean": dq, "ci95": common.Z95 * dq_se, "stderr": dq_se},
        "final_gap": final_gap, "diverged": progress.diverged,
        "constants": {"delta_f": delta_f, "sigma_f_star": sigma, "L": L, "n": n, "S": S_part,
                      "I_S": (n - S_part) / (n - 1), "scale_factor": c,
                      "offsets": d, "x_star": float(problem.x_star[0])},
    }


def write(doc: dict, out: str) -> list[str]:
    """fig3.json, fig3.csv and fig3.png ((a) R_S(Q), (b) D_Q with the best Q^0, Q^(1/2) and
    a + b/Q fits)."""
    paths = [common.write_json(os.path.join(out, "fig3.json"), doc)]
    Q = np.asarray(doc["Q"], dtype=float)
    S_list = doc["config"]["S"]
    header = ["Q"]
    for S in S_list:
        header += [f"R_S{S}_mean", f"R_S{S}_ci95"]
    header += ["D_Q_mean", "D_Q_ci95"]
    rows = []
    for j, q in enumerate(doc["Q"]):
        line = [q]
        for S in S_list:
            line += [doc["residual"][str(S)]["mean"][j], doc["residual"][str(S)]["ci95"][j]]
        line += [doc["D_Q"]["mean"][j], doc["D_Q"]["ci95"][j]]
        rows.append(line)
    paths.append(common.write_csv(os.path.join(out, "fig3.csv"), header, rows))

    plt = common.pyplot()
    fig, (ax_a, ax_b) = plt.subplots(1, 2, figsize=(10, 4))
    for S in S_list:
        r = doc["residual"][str(S)]
        ax_a.errorbar(Q, r["mean"], yerr=r["ci95"], marker="o", ms=3, capsize=2,
                      label=f"S = {S}" + (" (full)" if S == doc["constants"]["n"] else ""))
    ax_a.set_xscale("log")
    ax_a.set_yscale("log")
    ax_a.set_xlabel("local updates Q")
    ax_a.set_ylabel(r"$R_S(Q) = E\|\nabla f(x_T)\|^2$")
    ax_a.set_title("(a) terminal residual", fontsize=10)
    ax_a.legend()
    ax_a.grid(True, which="both", alpha=0.3)

    dq = np.asarray(doc["D_Q"]["mean"], dtype=float)
    ci = np.asarray(doc["D_Q"]["ci95"], dtype=float)
    ax_b.errorbar(Q, dq, yerr=ci, marker="o", ms=3, capsize=2, color="k", label=r"$D_Q$")
    se = np.asarray(doc["D_Q"]["stderr"], dtype=float)
    qq = np.geomspace(Q.min(), Q.max(), 100)
    for exponent, style, label in ((0.0, "--", r"best $c\,Q^0$"), (0.5, ":", r"best $c\,Q^{1/2}$")):
        fit = checks.trend_fit(Q, dq, se, exponent)
        if np.isfinite(fit.amplitude):
            ax_b.plot(qq, fit.amplitude * qq ** exponent, style, label=label)
    ab = checks.linear_fit([np.ones_like(Q), 1.0 / Q], dq, se)
    if ab.dof >= 1:
        ax_b.plot(qq, ab.coef[0] + ab.coef[1] / qq, "-", color="tab:red",
                  label=rf"best $a + b/Q$ ($\chi^2$ = {ab.chi2:.1f} on {ab.dof} dof)")
    ax_b.set_xscale("log")
    if np.all(dq - ci > 0):
        ax_b.set_yscale("log")
    ax_b.set_xlabel("local updates Q")
    ax_b.set_ylabel(r"$D_Q$ (eq. 28)")
    ax_b.set_title(f"(b) scaled residual, S = {doc['constants']['S']} vs n = {doc['constants']['n']}",
                   fontsize=10)
    ax_b.legend()
    ax_b.grid(True, which="both", alpha=0.3)
    cfg = doc["config"]
    fig.suptitle(f"Fig. 3: problem (27), Dmax = {cfg['d_max']:g}, alpha Q = {cfg['gamma']:g}, "
                 f"T = {cfg['rounds']}, R = {cfg['trials']}", fontsize=10)
    path = common.save_figure(fig, out, "fig3.png")
    return paths + [path]
