"""Theorems 1-3 against computation (``fedjax-abc reproduce thm1|thm2|thm3``).

- thm1: Theorem 1's counterexample: L = 9/4 against max |f_i''|, sigma_f* <= 1/2, and the
  BGD left-hand side at x_k = sqrt((2 k pi)^4 - 1) against its lower bound (k pi)^2 / 8.
- thm2: Theorem 2's bound (21) at the stepsize (22) against min_t E||grad f(x_t)||^2 from
  simulation, on problem (25)-(26) (L = 1, C = 1, D = 1/2), problem (27) with Dmax = 20
  (L = 1, C = 1, D = 0) and a d = 10 quadratic (L = 1, C = 1, D = 0.1), at the
  participation levels, Q and x0 of Section IV; then its shape: Q and T sweeps at S = 4
  (``paper.THM2_SWEEP``) with log-log slopes of (21), (24) and the observed minimum
  (:func:`theorem2_sweeps`). The paper runs no such experiment; by default T = 10000
  rounds and R = 100 trials (50 in the sweeps).
- thm3: Theorem 3 where it can be seen (``paper.THM3``): from x* + 1, a burn-in at
  alpha_0 = 1/(8 Q (L + C)), then alpha_0 (t0/t)^p (p = 0.6, 1) or
  alpha_0 t0 log(t0+2) / (t log(t+2)), against the constant alpha_0 and alpha_0 / 10 (the
  latter after the same burn-in);
  per-path statistics (:func:`path_statistics`: max over paths, fractions below
  thresholds, late slopes).

The checks themselves are ``fedjax_abc.theory.theorem{1_values,2_check,3_check}``.
"""

from __future__ import annotations

import math
import os

import numpy as np

from fedjax_abc.repro import common, paper
from fedjax_abc.repro import offsets as offs


def cases():
    """(label, problem, L, C, D, Q, S list, x0) for the two problems of Section IV."""
    import fedjax_abc as fa

    import jax

    p25 = fa.problems.softplus_huber(16)
    d = offs.paper_offsets(20.0, 40)
    p27 = fa.problems.huber_offsets(offsets=d)
    q = paper.QUAD
    pq = fa.problems.quadratics(jax.random.key(q["seed"]), n=q["n"], d=q["d"], C=q["C"], D=q["D"])
    return [
        ("problem (25)-(26), n = 16", p25, 1.0, 1.0, 0.5, 5, [1, 4, 8, 16], np.array([10.0])),
        ("problem (27), Dmax = 20, n = 40", p27, 1.0, 1.0, 0.0, 10, [4, 20, 40],
         np.asarray(p27.x_star) + 10.0),
        (f"quadratics, d = {q['d']}, n = {q['n']}", pq, 1.0, q["C"], q["D"], q["Q"], q["S"],
         np.asarray(pq.x_star) + q["x0_offset"]),
    ]


# ---------------------------------------------------------------------------------- thm1


def run_thm1(settings: common.Settings, progress: common.Progress) -> dict:
    import fedjax_abc.theory as theory

    progress.plan(1.0)
    progress.task("Theorem 1", 1.0)
    v = theory.theorem1_values(ks=paper.THM1["ks"], domain=paper.THM1["domain"], num_points=paper.THM1["num_points"])
    progress.finish_task()
    config = common.base_config(settings, "thm1", None, None, "paper")
    config.update(problem="bgd_counterexample (Theorem 1): f_1,2 = r +/- (r/2) sin(sqrt r), "
                          "r = sqrt(1 + x^2)", ks=list(paper.THM1["ks"]), domain=list(paper.THM1["domain"]),
                  num_points=paper.THM1["num_points"], function="fedjax_abc.theory.theorem1_values")
    return {
        "experiment": "thm1", "config": config,
        "L_bound": v.L_bound, "max_abs_second_derivative": v.max_abs_second_derivative,
        "argmax_second_derivative": v.argmax_second_derivative,
        "sigma_f_star": v.sigma_f_star, "f1_star": v.f1_star, "f2_star": v.f2_star,
        "ks": list(v.ks), "x_k": v.x_k, "bgd_lhs": v.bgd_lhs,
        "bgd_lhs_closed_form": v.bgd_lhs_closed_form, "lower_bound": v.lower_bound,
    }


def write_thm1(doc: dict, out: str) -> list[str]:
    paths = [common.write_json(os.path.join(out, "thm1.json"), doc)]
    rows = list(zip(doc["ks"], doc["x_k"], doc["bgd_lhs"], doc["lower_bound"]))
    paths.append(common.write_csv(os.path.join(out, "thm1.csv"),
                                  ["k", "x_k", "bgd_lhs", "lower_bound"], rows))
    return paths + [common.save_figure(thm1_figure(doc), out, "thm1.png")]


def thm1_figure(doc: dict):
    """thm1.png's figure from thm1.json's document: the BGD left-hand side at x_k against
    the proof's lower bound (k pi)^2 / 8."""
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.2))
    ks = np.asarray(doc["ks"], float)
    ax.plot(ks, doc["bgd_lhs"], "o-", label=r"$\frac{1}{2}\sum_i |f_i'(x_k) - f'(x_k)|^2$")
    ax.plot(ks, doc["lower_bound"], "s--", label=r"$(k\pi)^2/8$ (proof)")
    ax.set_yscale("log")
    ax.set_xlabel("k  (x_k = sqrt((2 k pi)^4 - 1))")
    ax.set_ylabel("BGD left-hand side of (3) at x_k (log scale)")
    ax.set_title(f"Theorem 1: the BGD left-hand side grows without bound\n"
                 f"while max|f''| = {doc['max_abs_second_derivative']:.3f} <= L = {doc['L_bound']:g}",
                 fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return fig


# ---------------------------------------------------------------------------------- thm2


def _run_checks(progress: common.Progress, problems, T: int, R: int, check,
                extra_work: float = 0.0) -> list[dict]:
    """Runs ``check`` for every (problem, S) with a progress task each; labels the results."""
    progress.plan(extra_work + sum(common.work_units(p.num_clients, S, Q, T, R)
                                   for _, p, _, _, _, Q, Ss, _ in problems for S in Ss))
    checks = []
    for j, (label, problem, L, C, D, Q, Ss, x0) in enumerate(problems):
        for S in Ss:
            callback = progress.task(f"{label.split(',')[0]} S={S}",
                                     common.work_units(problem.num_clients, S, Q, T, R))
            res = check(j, label, problem, L, C, D, Q, S, x0, callback)
            progress.finish_task()
            progress.note_diverged(f"{label.split(',')[0]} S={S}", res["diverged_trials"], R,
                                   res["diverged_from_round"])
            res["label"] = label
            checks.append(res)
    return checks


def run_thm2(settings: common.Settings, progress: common.Progress) -> dict:
    import fedjax_abc.theory as theory

    R, T, scale = settings.scale(paper.THEOREMS["R"], paper.THEOREMS["T"], paper.THEOREMS["quick_R"],
                                 paper.THEOREMS["quick_T"])
    k = common.record_every(T, 500)
    problems = cases()

    def check(j, label, problem, L, C, D, Q, S, x0, callback):
        return theory.theorem2_check(
            problem, L=L, C=C, D=D, num_sampled=S, local_steps=Q, rounds=T, trials=R,
            key=common.run_key(settings.seed, "thm2", j, S), x0=x0, record_every=k,
            mode="gather" if S < problem.num_clients else "mask",
            dtype=settings.precision, progress=callback,
            checkpoint=settings.checkpoint_file("thm2", f"{label.split(',')[0]} S={S}"))

    sweep_R = settings.trials or (paper.THM2_SWEEP["quick_R"] if settings.quick else paper.THM2_SWEEP["R"])
    Qs = paper.THM2_SWEEP["quick_Q"] if settings.quick else paper.THM2_SWEEP["Q"]
    Ts = paper.THM2_SWEEP["quick_T"] if settings.quick else paper.THM2_SWEEP["T"]
    S_sw = paper.THM2_SWEEP["S"]
    # --quick: the Q and T sweeps on the d > 1 problem only (compilation dominates there)
    swept = [len(problems) - 1] if settings.quick else range(len(problems))
    plan = [(j, "Q", v) for j in swept for v in Qs] + [(j, "T", v) for j in swept for v in Ts]
    extra = sum(common.work_units(problems[j][1].num_clients, S_sw,
                                  v if var == "Q" else problems[j][5], v if var == "T" else T, sweep_R)
                for j, var, v in plan)
    checks = _run_checks(progress, problems, T, R, check, extra_work=extra)
    sweep_runs = []
    for j, var, v in plan:
        label, problem, L, C, D, Q, _, x0 = problems[j]
        Qv, Tv = (v, T) if var == "Q" else (Q, v)
        desc = f"{label.split(',')[0]} S={S_sw} {var}={v}"
        callback = progress.task(desc, common.work_units(problem.num_clients, S_sw, Qv, Tv, sweep_R))
        res = theory.theorem2_check(
            problem, L=L, C=C, D=D, num_sampled=S_sw, local_steps=Qv, rounds=Tv, trials=sweep_R,
            key=common.run_key(settings.seed, "thm2", 100 + j, 1 if var == "Q" else 2, v), x0=x0,
            record_every=common.record_every(Tv, 500), mode="gather", dtype=settings.precision,
            progress=callback, checkpoint=settings.checkpoint_file("thm2", desc))
        progress.finish_task()
        progress.note_diverged(desc, res["diverged_trials"], sweep_R, res["diverged_from_round"])
        res["label"] = label
        sweep_runs.append((j, var, res))
    sweeps = theorem2_sweeps(problems, checks, sweep_runs, S_sw)
    config = common.base_config(settings, "thm2", R, T, scale)
    config.update(problems=[dict(label=lb, L=L, C=C, D=D, Q=Q, S=Ss, x0=x0.tolist())
                            for lb, _, L, C, D, Q, Ss, x0 in problems],
                  stepsize="Theorem 2's (22)", record_every=k, key_tags="(problem index, S)",
                  function="fedjax_abc.theory.theorem2_check",
                  offsets_draw={"convention": offs.PAPER_DRAW.convention,
                                "seed": offs.PAPER_DRAW.seed})
    config.update(sweep={"S": S_sw, "Q": Qs, "T": Ts, "trials": sweep_R,
                         "key_tags": "(100 + problem index, 1 for Q / 2 for T, value)"})
    return {"experiment": "thm2", "config": config, "checks": checks, "sweeps": sweeps,
            "all_hold": all(c["holds"] for c in checks), "diverged": progress.diverged}


# Leading-order exponents of (24) (Remark 3): both leading terms scale as 1/sqrt(S T); in Q the
# noise term goes as Q^(-1/2) and the sampling term as Q^0.
LEADING_EXPONENT = {"S": "-1/2 (S < n; the sampling term also has I_S)", "Q": "-1/2 (noise) to 0 (sampling)",
                    "T": "-1/2"}


def _slope(x, y):
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = (x > 0) & (y > 0)
    return float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0]) if ok.sum() >= 2 else None


def _bound_at(L, C, D, r, S, Q, T) -> float:
    """The bound (21) at the stepsize (22) for run r's problem at (S, Q, T)."""
    import fedjax_abc.theory as theory

    a = theory.theorem2_stepsize(L, C, D, r["sigma_f_star"], r["delta_f"], r["n"], S, Q, T)
    return float(theory.theorem2_bound(a, L, C, D, r["sigma_f_star"], r["delta_f"], r["n"], S, Q, T))


def _past_transient(r: dict) -> bool:
    """A run has left its transient when its late slope in t is not significantly below
    -PLATEAU (``theory.theorem2_check``'s late windows)."""
    from fedjax_abc.repro import checks as chk

    s, se = r.get("late_slope"), r.get("late_slope_stderr")
    return s is not None and se is not None and s + chk.Z95 * se >= -PLATEAU


def theorem2_sweeps(problems, checks, sweep_runs, S_sweep) -> list[dict]:
    """Per problem and variable (S, Q, T): the bound (21) at (22), the leading terms of (24)
    and the observed min_t E||grad f||^2, with log-log slopes (observed: weighted, with its
    standard error) and whether each run's stepsize satisfies (20).

    Where the runs are still in their transient, the minimum falls at the last rounds and
    its slope measures how fast the transient goes, which only the bound's initial-gap term
    12 Delta_f / (alpha Q T) speaks to; so each run also records where its minimum falls
    (t / T), the initial-gap term's share of (21) and whether it has left the transient
    (:func:`_past_transient`). Over the runs past the transient the late level
    E||grad f||^2 on [T/2, T) is fitted against the variable, beside the slope of (21)
    without its initial-gap term (what the stationary level can test). For T, the bound's
    slope at 100x to 10000x the largest T shows where it heads.
    """
    import fedjax_abc.theory as theory
    from fedjax_abc.repro import checks as chk

    out = []
    for j, (label, problem, L, C, D, Q, Ss, x0) in enumerate(problems):
        groups = {"S": [c for c in checks if c["label"] == label and c["num_sampled"] < problem.num_clients],
                  "Q": [r for jj, var, r in sweep_runs if jj == j and var == "Q"],
                  "T": [r for jj, var, r in sweep_runs if jj == j and var == "T"]}
        for var, runs in groups.items():
            if len(runs) < 2:
                continue
            key = {"S": "num_sampled", "Q": "local_steps", "T": "rounds"}[var]
            x = [r[key] for r in runs]
            lead = [theory.theorem2_leading_terms(L, C, D, r["sigma_f_star"], r["delta_f"], r["n"],
                                                  r["num_sampled"], r["local_steps"], r["rounds"]).total
                    for r in runs]
            obs = [r["observed"] for r in runs]
            se = [r["observed_stderr"] or 0.0 for r in runs]
            sl = chk.log_slope(x, obs, [max(v, 1e-300) for v in se])
            past = [_past_transient(r) for r in runs]
            xs = [v for v, ok in zip(x, past) if ok]
            late = [r["late_mean"] for r, ok in zip(runs, past) if ok]
            late_se = [r["late_stderr"] or 0.0 for r, ok in zip(runs, past) if ok]
            rest = [r["bound"] - r["bound_terms"]["initial_gap"] for r, ok in zip(runs, past) if ok]
            sl_late = chk.log_slope(xs, late, [max(v, 1e-300) for v in late_se]) if len(xs) >= 2 else None
            far = None
            if var == "T":
                r0 = runs[-1]
                Tf = [100 * x[-1], 10_000 * x[-1]]
                far = _slope(Tf, [_bound_at(L, C, D, r0, r0["num_sampled"], r0["local_steps"], t)
                                  for t in Tf])
            out.append({"label": label, "variable": var, "values": x,
                        "fixed": {k: v for k, v in (("S", runs[0]["num_sampled"]),
                                                    ("Q", runs[0]["local_steps"]),
                                                    ("T", runs[0]["rounds"])) if k != var},
                        "bound": [r["bound"] for r in runs], "leading": lead, "observed": obs,
                        "observed_stderr": se, "stepsize": [r["stepsize"] for r in runs],
                        "within_20": [r["stepsize"] <= r["stepsize_limit"] * (1 + 1e-12) for r in runs],
                        "slope_bound": _slope(x, [r["bound"] for r in runs]),
                        "slope_leading": _slope(x, lead),
                        "slope_observed": sl.slope if np.isfinite(sl.slope) else _slope(x, obs),
                        "slope_observed_stderr": sl.stderr if np.isfinite(sl.stderr) else None,
                        "leading_exponent": LEADING_EXPONENT[var],
                        "argmin_fraction": [r["argmin_round"] / r["rounds"] for r in runs],
                        "initial_gap_share": [r["bound_terms"]["initial_gap"] / r["bound"] for r in runs],
                        "late_slope": [r.get("late_slope") for r in runs], "past_transient": past,
                        "slope_late_observed": None if sl_late is None else
                        sl_late.slope if np.isfinite(sl_late.slope) else _slope(xs, late),
                        "slope_late_observed_stderr": None if sl_late is None or not np.isfinite(sl_late.stderr)
                        else sl_late.stderr,
                        "slope_bound_without_initial_gap": _slope(xs, rest) if len(xs) >= 2 else None,
                        "slope_bound_far": far})
    return out


def write_thm2(doc: dict, out: str) -> list[str]:
    paths = [common.write_json(os.path.join(out, "thm2.json"), doc)]
    keys = ["label", "num_sampled", "local_steps", "stepsize", "bound", "observed",
            "observed_stderr", "ratio", "holds"]
    paths.append(common.write_csv(os.path.join(out, "thm2.csv"), keys,
                                  [[c.get(k) for k in keys] for c in doc["checks"]]))
    return paths + [common.save_figure(thm2_figure(doc), out, "thm2.png")]


def thm2_figure(doc: dict):
    """thm2.png's figure from thm2.json's document: bound (21) at the stepsize (22) against
    the observed min_t E||grad f(x_t)||^2 with its 95% interval, per problem and S."""
    plt = common.pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    short = {"quadratics": "quad."}
    labels = []
    for c in doc["checks"]:
        name = c["label"].split(",")[0].replace("problem ", "").split("-")[0]
        labels.append(f"{short.get(name, name)}\nS={c['num_sampled']}")
    x = np.arange(len(labels))
    ax.plot(x, [c["bound"] for c in doc["checks"]], "v", ms=8, label="bound (21)")
    obs = np.array([c["observed"] for c in doc["checks"]])
    se = np.array([c["observed_stderr"] or 0.0 for c in doc["checks"]])
    ax.errorbar(x, obs, yerr=common.Z95 * se, fmt="o", capsize=3,
                label=r"$\min_t E\|\nabla f(x_t)\|^2$ (simulation)")
    ax.set_yscale("log")
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_xlabel("problem and number of sampled clients S", fontsize=8)
    ax.set_ylabel(r"$\min_t E\|\nabla f(x_t)\|^2$ and bound (21) (log scale)", fontsize=8)
    ax.set_title("Theorem 2 at the stepsize (22): bound (21) against simulation\n"
                 "(25): problem (25)-(26); (27): problem (27), Dmax = 20; quad.: quadratics",
                 fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return fig


# ---------------------------------------------------------------------------------- thm3


def thm3_schedules(alpha0: float, ps, t0: int) -> list[tuple[str, object, bool]]:
    """(name, t -> alpha_t, a Theorem 3 schedule?) for the thm3 experiment: alpha_0 for
    t < t0, then a decay (a burn-in changes none of Theorem 3's conditions). The constant
    controls have the same burn-in: alpha_0 throughout, and alpha_0 until t0, then
    alpha_0 / 10, so that every run starts its late phase from the same state. The schedules
    are functions of t, so that ``check_theorem3_schedule`` judges their tails far beyond T."""
    import jax.numpy as jnp

    def late(t):
        return jnp.maximum(jnp.asarray(t, jnp.float64), float(t0))

    def power(p):
        return lambda t: alpha0 * (t0 / late(t)) ** p

    out = [(f"alpha_0 (t0/t)^{p:g}", power(p), True) for p in ps]
    out.append(("alpha_0 t0 log(t0+2) / (t log(t+2))",
                lambda t: alpha0 * t0 * math.log(t0 + 2.0) / (late(t) * jnp.log(late(t) + 2.0)), True))
    out.append(("constant alpha_0", lambda t: alpha0 + 0.0 * late(t), False))
    out.append(("constant alpha_0 / 10",
                lambda t: jnp.where(jnp.asarray(t, jnp.float64) < t0, alpha0, alpha0 / 10.0)
                + 0.0 * late(t), False))
    return out


# Which runs of thm3 have the burn-in (recorded in the config; results without the entry
# ran the control alpha_0 / 10 from t = 0, without it).
BURN_IN = "every schedule and both constant controls"


PLATEAU = 0.1  # a late log-log slope above -PLATEAU counts as levelling off
TAIL_BLOCKS = 8  # log-spaced blocks of the tail t >= T/10 for the per-path slopes
BOOTSTRAP = 400  # resamples of the paths for the slope of the mean


def path_slopes(norms: np.ndarray, rounds: np.ndarray, tail_from: float,
                blocks: int = TAIL_BLOCKS) -> np.ndarray:
    """Each path's late log-log slope: log of its block means of ||grad f(x_t)|| against
    log t, over ``blocks`` log-spaced blocks of the records with t >= tail_from.

    A single record of ||grad f(x_t)|| is noisy (in one dimension it crosses zero); a path's
    block means are not, and one slope per path makes the paths, not the records, the
    independent units of the spread and its standard error.
    """
    tail = (rounds >= tail_from) & (rounds > 0)
    t = rounds[tail]
    edges = np.geomspace(t[0], t[-1] * (1 + 1e-9), blocks + 1)
    which = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, blocks - 1)
    used = [b for b in range(blocks) if np.any(which == b)]
    if len(used) < 2:
        return np.full(norms.shape[0], np.nan)
    centres = np.log([np.exp(np.log(t[which == b]).mean()) for b in used])
    means = np.stack([norms[:, tail][:, which == b].mean(1) for b in used], 1)
    return np.polyfit(centres, np.log(np.maximum(means, 1e-300)).T, 1)[0]


def path_statistics(norms: np.ndarray, rounds: np.ndarray, thresholds, tail_from: float,
                    seed: int = 0) -> dict:
    """Per-path statistics of ||grad f(x_t)|| (trials x records, diverged trials removed).

    Returns the mean, its standard error, the max and median over paths at every record,
    the fraction of paths below each threshold at every record; the log-log slopes of the
    mean and of the maximum over paths over t >= tail_from, each with a standard error from
    ``BOOTSTRAP`` resamples of the paths (records along one path are correlated, paths are
    not); and each path's late slope
    (:func:`path_slopes`) with their mean, standard error, quantiles and the fraction of
    paths whose slope is below -``PLATEAU``.
    """
    import fedjax_abc as fa

    m = norms.shape[0]
    summ = fa.summarize(norms)
    mean, se = summ.mean, summ.stderr
    mx = norms.max(0)
    tail = (rounds >= tail_from) & (rounds > 0)
    lt = np.log(rounds[tail])

    def slope(curve):
        return float(np.polyfit(lt, np.log(np.maximum(curve[tail], 1e-300)), 1)[0]) \
            if tail.sum() >= 2 else math.nan

    rng = np.random.default_rng(seed)
    boot = [slope(norms[rng.integers(0, m, m)].mean(0)) for _ in range(BOOTSTRAP)] if m > 1 else []
    boot_max = [slope(norms[rng.integers(0, m, m)].max(0)) for _ in range(BOOTSTRAP)] if m > 1 else []
    own = path_slopes(norms, rounds, tail_from)
    falling = own < -PLATEAU
    return {"mean": mean, "stderr": se, "max": mx, "median": np.median(norms, 0),
            "fraction_below": {f"{th:g}": (norms < th).mean(0) for th in thresholds},
            "slope_mean": slope(mean),
            "slope_mean_stderr": float(np.std(boot, ddof=1)) if len(boot) > 1 else None,
            "slope_max": slope(mx),
            "slope_max_stderr": float(np.std(boot_max, ddof=1)) if len(boot_max) > 1 else None,
            "path_slopes": own,
            "path_slope_mean": float(np.mean(own)),
            "path_slope_stderr": float(np.std(own, ddof=1) / math.sqrt(m)) if m > 1 else None,
            "path_slope_quantiles": {f"{q:g}": float(np.quantile(own, q)) for q in (0.1, 0.5, 0.9)},
            "fraction_paths_falling": float(falling.mean()),
            "fraction_paths_falling_stderr": float(math.sqrt(falling.mean() * (1 - falling.mean()) / m))}


def run_thm3(settings: common.Settings, progress: common.Progress) -> dict:
    """Theorem 3 where it can be seen: the schedules of Theorem 3 and constant controls."""
    import fedjax_abc as fa
    import fedjax_abc.theory as theory

    H = paper.THM3
    P = common.experiment_settings(settings, "thm3")
    R, T, scale = settings.scale(H["R"], H["T"], H["quick_R"], H["quick_T"])
    k = common.record_every(T, 500)
    S = H["S"]
    ps = [P["p"]] if "p" in common.applied_overrides(settings, "thm3") else list(H["p"])
    t0 = max(1, T // H["burn_in_div"])
    probs = cases()
    progress.plan(sum(common.work_units(p.num_clients, S, Q, T, R) for _, p, *_, Q, _, _ in
                      [(lb, pr, L, C, D, Q, Ss, x0) for lb, pr, L, C, D, Q, Ss, x0 in probs])
                  * (len(ps) + 3))
    checks = []
    for j, (label, problem, L, C, D, Q, _, _) in enumerate(probs):
        x0 = np.asarray(problem.x_star) + H["x0_offset"]
        alpha0 = theory.theorem3_stepsize_limit(L, C, Q)
        for i, (name, schedule, theorem) in enumerate(thm3_schedules(alpha0, ps, t0)):
            sched = theory.check_theorem3_schedule(schedule, L, C, Q, T)
            alphas = fa.stepsize_array(schedule, T)
            desc = f"{label.split(',')[0]} {name}"
            res = common.simulate(problem, num_sampled=S, local_steps=Q, stepsize=alphas,
                                  rounds=T, x0=x0, trials=R,
                                  key=common.run_key(settings.seed, "thm3", j, i),
                                  precision=settings.precision, record=k, progress=progress,
                                  desc=desc, checkpoint=settings.checkpoint_file("thm3", desc))
            norms = np.sqrt(np.maximum(res.grad_norm_sq[~res.diverged], 0.0))
            stats = path_statistics(norms, np.asarray(res.rounds, float), H["thresholds"], T / 10,
                                    seed=1000 * j + i)
            checks.append({"label": label, "schedule": name, "theorem3_schedule": theorem,
                           "num_sampled": S, "local_steps": Q, "alpha0": alpha0, "L": L, "C": C,
                           "x0": x0.tolist(), "schedule_check": sched._asdict(),
                           "recorded_rounds": res.rounds, "trials": int(norms.shape[0]),
                           "diverged_trials": res.num_diverged, **stats})
    config = common.base_config(settings, "thm3", R, T, scale)
    config.update(problems=[lb for lb, *_ in probs], S=S, x0=f"x* + {H['x0_offset']:g} per coordinate",
                  alpha0="1/(8 Q (L + C))", p=ps, thresholds=H["thresholds"], record_every=k,
                  schedules=[n for n, _, _ in thm3_schedules(1.0, ps, 1)], t0=t0,
                  burn_in=BURN_IN,
                  key_tags="(problem index, schedule index)", tail="slopes over t >= T/10",
                  tail_blocks=TAIL_BLOCKS, bootstrap=BOOTSTRAP,
                  function="fedjax_abc.theory.check_theorem3_schedule")
    return {"experiment": "thm3", "config": config, "checks": checks, "diverged": progress.diverged}


def write_thm3(doc: dict, out: str) -> list[str]:
    paths = [common.write_json(os.path.join(out, "thm3.json"), doc)]
    keys = ["label", "schedule", "theorem3_schedule", "num_sampled", "local_steps", "alpha0",
            "slope_mean", "slope_mean_stderr", "slope_max", "slope_max_stderr"]
    rows = []
    for c in doc["checks"]:
        rows.append([c.get(k) for k in keys] + [c["mean"][-1], c["max"][-1]]
                    + [c["fraction_below"][th][-1] for th in sorted(c["fraction_below"], key=float, reverse=True)])
    ths = sorted(doc["checks"][0]["fraction_below"], key=float, reverse=True) if doc["checks"] else []
    paths.append(common.write_csv(os.path.join(out, "thm3.csv"),
                                  keys + ["mean_at_T", "max_at_T"] + [f"fraction_below_{t}_at_T" for t in ths],
                                  rows))
    return paths + [thm3_figure(doc, out)]


def thm3_figure(doc: dict, out: str) -> str:
    """thm3.png: per problem, the mean and the maximum over the paths of ||grad f(x_t)||
    (top) and the late log-log slope of that maximum per stepsize, the statistic of the
    almost-sure verdict, with its 95% interval where the results carry one (bottom); the
    legend sits right of the panels, off the data."""
    plt = common.pyplot()
    labels = list(dict.fromkeys(c["label"] for c in doc["checks"]))
    fig, axes = plt.subplots(2, len(labels), figsize=(4.6 * len(labels), 7.2), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 2]})
    handles = {}
    for col, label in enumerate(labels):
        ax, bx = axes[0, col], axes[1, col]
        runs = [c for c in doc["checks"] if c["label"] == label]
        for y, c in enumerate(runs):
            t = np.asarray(c["recorded_rounds"], float)
            line, = ax.plot(t[1:], np.asarray(c["mean"], float)[1:],
                            "-" if c["theorem3_schedule"] else "--")
            ax.plot(t[1:], np.asarray(c["max"], float)[1:], ":", color=line.get_color(), lw=0.8)
            handles.setdefault(c["schedule"], line)
            se = c.get("slope_max_stderr")
            bx.errorbar([c["slope_max"]], [y], xerr=None if se is None else [[1.96 * se]],
                        marker="o" if c["theorem3_schedule"] else "s", capsize=3,
                        color=line.get_color(), mfc=line.get_color() if c["theorem3_schedule"] else "none")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("communication round t")
        ax.set_title(label, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        bx.axvline(-PLATEAU, color="0.5", lw=0.8, ls="--")
        bx.set_yticks(range(len(runs)))
        bx.set_yticklabels(["" for _ in runs])
        bx.set_ylim(-0.7, len(runs) - 0.3)
        bx.invert_yaxis()
        bx.set_xlabel(f"late slope of the max over paths (t >= T/10); dashed: -{PLATEAU:g}",
                      fontsize=8)
        bx.grid(True, axis="x", alpha=0.3)
    axes[0, 0].set_ylabel(r"$\|\nabla f(x_t)\|$: mean (solid/dashed), max over paths (dotted)",
                          fontsize=8)
    axes[1, 0].set_ylabel("stepsize (filled: Theorem 3,\nhollow: constant control)", fontsize=8)
    axes[0, -1].legend(list(handles.values()), list(handles.keys()), loc="upper left",
                       bbox_to_anchor=(1.02, 1.0), fontsize=7, frameon=False)
    fig.suptitle(f"Theorem 3: S = {doc['config']['S']}, x0 = {doc['config']['x0']}, "
                 f"R = {doc['config']['trials']} (dashed: constant stepsizes, outside Theorem 3)",
                 fontsize=10)
    return common.save_figure(fig, out, "thm3.png")
