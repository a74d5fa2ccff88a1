"""Five federated algorithms on problem (27), and client drift without noise.

``fedjax-abc compare --fixed`` runs this module.

The paper runs FedAvg only; it cites SCAFFOLD [11] and FedProx [24] as modifications
against data heterogeneity and [10] for a server stepsize. This experiment runs them through
``fa.simulate(..., algorithm=...)`` on the problem of Section IV-B.

**Stochastic comparison.** Problem (27) with the paper's offsets (Table II's draw,
``offsets.paper_offsets``) and its sign oracle (C = 1, D = 0); Dmax in {20, 200}; S in
{4, 40} (S = n = 40: full participation); Q = 10 and x0 = x* + 10 as in Section IV-B;
R = 200 trials per configuration; each (Dmax, S) gives every algorithm the same key, so
trial r of two algorithms shares its client samples and signs and their difference is
estimated from paired trials (``fa.stats``: each algorithm against FedAvg with a 95%
interval and Holm-adjusted p-values, the trials a 1% difference would need at 80% power,
and the ranking with the bootstrap probability of each rank). Algorithms:

- FedAvg: Algorithm 1.
- FedAvg with server stepsize eta_g = 2 [10]: the mean local update doubled.
- FedProx with mu = 1 = L, the largest value of Li et al.'s grid {0.001, 0.01, 0.1, 1} and
  the smoothness constant of every f_i (its proximal subproblem is then 1-strongly convex
  with condition number 2). Its pull mu (y - x_t) shortens a local run by about
  mu alpha Q / 2 = 0.5% here: FedProx changes something only when local runs move far
  from x_t, and at alpha Q = 0.01 they do not. The table tests whether it differs at all.
- SCAFFOLD (option II of [11]), eta_g = 1.
- FedAdam (``FedOpt(optax.adam(lr))``, b1 = 0.9, b2 = 0.999, eps = 1e-8) with
  lr = alpha Q = 0.01: Adam's normalised step moves about lr per round while the
  pseudo-gradient keeps its sign, and alpha Q is the most FedAvg moves in a round
  (|f_i'| <= 1): the same top speed, with Adam's normalisation the only difference.

alpha = 1e-3 (10x the paper's) and T = 50000 (the paper's): far from x* a local step moves
about alpha |f'|, and at x0 = x* + 10 |f'| is 0.77 for Dmax = 20 but 0.05 for Dmax = 200,
where the clients on the two sides of x0 nearly balance. Noise-free FedAvg then needs about
10 / (alpha Q |f'(x0)|) = 20000 rounds to reach x* at Dmax = 200, and 10x more at the
paper's alpha = 1e-4. With alpha = 1e-3 every run reaches its stationary level within T, so
the final table compares stationary levels while the bands show the transients; the 20 runs
take about two minutes on 2 CPU cores. (The output recomputes these numbers.)

**Client drift, deterministic.** Exact gradients (``fa.ExactOracle()``), full
participation, x0 = x* + 10, alpha = gamma / Q: Q in {1, 2, 5, 10, 20, 50} at gamma =
alpha Q = 1, and gamma from 0.1 to 15 at Q = 10 (alpha <= 1.5 < 2 / L, so every local
step is stable; beyond 2 / L local runs diverge on the quadratic zone and neither algorithm
converges). FedAvg's fixed point is x* exactly when the mean local update from x* is zero.
On problem (27) f_i' = clip(x - d_i, -1, 1): a client outside its quadratic zone
|x - d_i| < 1 moves alpha per step whatever Q, as gradient descent does; one inside moves
toward d_i geometrically, less than gradient descent would. With the paper's offsets x*
sits midway between the two middle offsets: 19 clients outside on each side, 2 inside,
symmetric about x*. The local runs from x* then cancel unless a client outside enters its
quadratic zone within the Q - 1 steps whose gradient is used: FedAvg is biased iff Q > 1
and alpha (Q - 1) > clearance := min over outside clients of |x* - d_i| - 1 (0.23 at
Dmax = 20, 11.3 at Dmax = 200: it scales with the offsets' spread). Q = 1 is gradient
descent and never biased. SCAFFOLD's fixed point is x* whenever it converges: there the
control variates equal the local gradients and cancel the drift. The output checks the
rule against every run and reports any run that did not converge.

Reference: Section IV-B of the paper (problem 27), [10], [11], [24]; Reddi et al.,
"Adaptive Federated Optimization" (ICLR 2021) for FedOpt/FedAdam.
"""

from __future__ import annotations

import math
import os

import numpy as np

from fedjax_abc.repro import common, paper
from fedjax_abc.repro import offsets as offs

ORDER = ("fedavg", "fedavg_eta", "fedprox", "scaffold", "fedadam")
DRIFT_ALGORITHMS = ("fedavg", "scaffold")
TARGET = 0.05  # "rounds to target": first record with mean gap <= TARGET x the gap at t = 0
DETECT = 0.01  # "trials needed": to detect a difference of DETECT x FedAvg's mean final gap


def _dm(d_max) -> str:
    return str(int(d_max))


def algorithms(alpha: float, local_steps: int, eta_g: float, mu: float) -> dict:
    """{id: (label, algorithm)} of the comparison (one FedOpt object: one compilation)."""
    import optax

    import fedjax_abc as fa

    A = fa.algorithms
    lr = alpha * local_steps
    return {
        "fedavg": ("FedAvg", A.FedAvg()),
        "fedavg_eta": (f"FedAvg, eta_g = {eta_g:g}", A.FedAvg(server_stepsize=eta_g)),
        "fedprox": (f"FedProx, mu = {mu:g}", A.FedProx(mu=mu)),
        "scaffold": ("SCAFFOLD", A.Scaffold()),
        "fedadam": (f"FedAdam, lr = {lr:g}", A.FedOpt(optax.adam(lr))),
    }


def huber_geometry(d: np.ndarray, x_star: float) -> dict:
    """Where x* sits among the offsets of problem (27).

    Clients with |x* - d_i| < 1 are inside their quadratic zone ("near"); the others are
    outside, left (d_i < x* - 1) or right of x*. ``clearance`` = min over outside clients of
    |x* - d_i| - 1: how far such a client's local run from x* can go before its gradient
    stops being +/-1.
    """
    z = float(x_star) - np.asarray(d, dtype=float)
    near = np.abs(z) < 1.0
    far = ~near
    return {"near": int(near.sum()), "far_left": int((far & (z > 0)).sum()),
            "far_right": int((far & (z < 0)).sum()), "near_sum": float(z[near].sum()),
            "clearance": float(np.min(np.abs(z[far])) - 1.0) if far.any() else math.inf}


def predicted_bias(geometry: dict, local_steps: int, gamma: float) -> bool:
    """The rule of the module docstring: FedAvg (exact gradients, full participation,
    alpha = gamma / Q) has a fixed point other than x* iff Q > 1 and either the outside
    clients do not balance or alpha (Q - 1) > clearance."""
    if local_steps == 1:
        return False
    balanced = geometry["far_left"] == geometry["far_right"]
    return (not balanced) or gamma * (local_steps - 1) / local_steps > geometry["clearance"]


def drift_settings(settings: common.Settings) -> dict:
    """The drift part's Q list, gamma list and horizon (quick or full; --rounds does not
    apply: the runs need their horizon to converge)."""
    cfg = dict(paper.DRIFT)
    if settings.quick:
        cfg.update(paper.DRIFT_QUICK)
    return cfg


def _drift_runs(cfg: dict) -> list[tuple[int, float]]:
    """The distinct (Q, gamma) of the two sweeps."""
    runs = [(Q, cfg["gamma"]) for Q in cfg["Q"]]
    runs += [(cfg["gamma_Q"], g) for g in cfg["gammas"] if (cfg["gamma_Q"], g) not in runs]
    return runs


def _drift_work(cfg: dict, n: int, num_problems: int) -> float:
    return num_problems * len(DRIFT_ALGORITHMS) * sum(
        common.work_units(n, n, Q, cfg["T"], 8) for Q, _ in _drift_runs(cfg))


# ----------------------------------------------------------------------------------- run


def run(settings: common.Settings, progress: common.Progress | None = None) -> dict:
    """Runs both parts and returns the document of ``compare.json`` (progress: None for none)."""
    import fedjax_abc as fa

    progress = common.Progress("compare", enabled=False) if progress is None else progress
    P = paper.COMPARE
    R, T, scale = settings.scale(P["R"], P["T"], paper.COMPARE_QUICK["R"], paper.COMPARE_QUICK["T"])
    scale = "full" if scale == "paper" else scale
    n, Q, alpha = P["n"], P["Q"], P["alpha"]
    k = common.record_every(T, 250)
    algs = algorithms(alpha, Q, P["eta_g"], P["mu"])
    dcfg = drift_settings(settings)
    stochastic = sum(common.work_units(n, S, Q, T, R) for S in P["S"])
    progress.plan(len(algs) * len(P["d_max"]) * stochastic + _drift_work(dcfg, n, len(P["d_max"])))

    problems, curves, table, statistics, rounds = {}, {}, [], [], None
    for d_max in P["d_max"]:
        dm = _dm(d_max)
        d = offs.paper_offsets(d_max, n)
        problem = fa.problems.huber_offsets(offsets=d)
        x0 = np.asarray(problem.x_star) + P["x0_offset"]
        problems[dm] = describe_problem(problem, d, x0, alpha, Q)
        curves[dm] = {}
        for S in P["S"]:
            key = common.run_key(settings.seed, "compare", int(d_max), S)
            curves[dm][str(S)], results = {}, {}
            for name, (label, alg) in algs.items():
                res = common.simulate(problem, num_sampled=S, local_steps=Q, stepsize=alpha,
                                      rounds=T, x0=x0, trials=R, key=key,
                                      precision=settings.precision, record=k, progress=progress,
                                      desc=f"Dmax={d_max:g} S={S} {label}", algorithm=alg)
                rounds = res.rounds
                gap, gns = res.summary("gap"), res.summary("grad_norm_sq")
                curves[dm][str(S)][name] = {
                    "gap": {"mean": gap.mean, "ci95": gap.ci95},
                    "grad_norm_sq": {"mean": gns.mean, "ci95": gns.ci95}}
                results[name] = res
                table.append({"d_max": d_max, "S": S, "algorithm": name, "label": label,
                              "gap": common.mean_se(res.gap[:, -1]),
                              "grad_norm_sq": common.mean_se(res.grad_norm_sq[:, -1]),
                              "rounds_to_target": rounds_to_target(res.rounds, gap.mean)})
            group = paired_statistics(results, np.random.default_rng([settings.seed,
                                                                      int(d_max), S]))
            for row in table[-len(algs):]:
                row["gap_vs_fedavg"] = group["vs_fedavg"].get(row["algorithm"])
            statistics.append({"d_max": d_max, "S": S, "ranking": group["ranking"]})

    drift_doc = drift(settings, progress, dcfg, P["d_max"], n)
    config = common.base_config(settings, "compare", R, T, scale)
    config.update(
        problem="huber_offsets (eq. 27) with the sign oracle of Section IV-B", n=n,
        d_max=P["d_max"], S=P["S"], Q=Q, alpha=alpha, x0=f"x* + {P['x0_offset']:g}",
        record_every=k, L=1.0, C=1.0, D=0.0,
        algorithms={name: {"label": label, "class": type(alg).__name__}
                    for name, (label, alg) in algs.items()},
        hyperparameters={"eta_g": P["eta_g"], "mu": P["mu"], "adam_lr": alpha * Q,
                         "adam": "optax.adam defaults: b1 = 0.9, b2 = 0.999, eps = 1e-8"},
        offsets_draw={"convention": offs.PAPER_DRAW.convention, "seed": offs.PAPER_DRAW.seed,
                      "code": offs.PAPER_DRAW.description},
        key_tags="(Dmax, S), the same key for every algorithm: paired trials",
        mode="gather for S < n, mask for S = n (same results)",
        bands="mean +- 1.96 stderr over trials (SimResult.summary)",
        comparison="paired (fedjax_abc.stats.pairwise): mean, stderr and normal 95% interval "
                   "over trials of gap_alg(x_T) - gap_FedAvg(x_T), z = mean / stderr, p-values "
                   "Holm-adjusted over the comparisons of one (Dmax, S); trials no algorithm "
                   "lost; trials_needed: to detect a difference of "
                   f"{DETECT:g} x FedAvg's mean final gap at 95% with 80% power (t test, the "
                   "run as pilot); ranking: P(rank) from 1000 paired bootstrap resamples",
        rounds_to_target=f"first recorded round with mean gap <= {TARGET:g} x the gap at t = 0",
        why=why(problems, alpha, Q, T, P),
        drift=drift_doc.pop("config"),
    )
    doc = {"experiment": "compare", "config": config, "problems": problems, "rounds": rounds,
           "curves": curves, "table": table, "statistics": statistics, "drift": drift_doc}
    doc["verdicts"] = {"stochastic": stochastic_verdicts(doc), "drift": drift_verdicts(doc)}
    return doc


def describe_problem(problem, d, x0, alpha, local_steps) -> dict:
    """sigma_f*, x*, f(x0) - f*, |f'(x0)|, the noise-free crossing time and the geometry."""
    f0, g0 = problem.value_and_grad(np.asarray(x0))
    slope = float(abs(np.asarray(g0).reshape(-1)[0]))
    x_star = float(problem.x_star[0])
    return {"offsets": d, "x_star": x_star, "f_star": float(problem.f_star),
            "sigma_f_star": float(problem.sigma_f_star), "delta_f": float(problem.gap(x0)),
            "grad_at_x0": slope,
            "crossing_rounds": float(abs(float(np.asarray(x0).reshape(-1)[0]) - x_star)
                                     / (alpha * local_steps * slope)),
            "geometry": huber_geometry(d, x_star)}


def rounds_to_target(rounds, mean_gap) -> int | None:
    """First recorded round whose mean gap is <= TARGET x the mean gap at t = 0."""
    mean_gap = np.asarray(mean_gap)
    hit = np.nonzero(mean_gap <= TARGET * mean_gap[0])[0]
    return int(rounds[hit[0]]) if hit.size else None


def paired_difference(values, base) -> dict:
    """Mean, stderr and 95% interval over trials of values - base
    (``fa.stats.mean_interval``), z = mean / stderr, and mean / mean(base)."""
    import fedjax_abc as fa

    iv = fa.stats.mean_interval(np.asarray(values, float) - np.asarray(base, float))
    return _difference(iv.mean, iv.stderr, iv.ci_low, iv.ci_high, float(np.mean(base)))


def _difference(m: float, se: float, low: float, high: float, base_mean: float) -> dict:
    z = m / se if se > 0 else (0.0 if m == 0 else math.copysign(math.inf, m))
    return {"diff": m, "stderr": se, "z": z, "relative": m / base_mean, "ci_low": low,
            "ci_high": high}


def paired_statistics(results: dict, rng: np.random.Generator) -> dict:
    """Each algorithm's final gap against FedAvg's on the same trials (``fa.stats.pairwise``:
    interval, p-value and its Holm adjustment), the trials needed to detect a difference of
    DETECT x FedAvg's mean final gap at 95% with 80% power (this run as the pilot), and the
    ranking with its bootstrap probabilities (``fa.stats.rank``)."""
    import fedjax_abc as fa

    table = fa.stats.pairwise(results, baseline="fedavg")
    base = fa.stats.trial_values(results["fedavg"])
    base_mean = float(np.mean(base[np.isfinite(base)]))
    vs = {}
    for row in table.rows:
        d = row.difference
        vs[row.first] = dict(_difference(d.mean, d.stderr, d.ci_low, d.ci_high, base_mean),
                             p_value=d.p_value, p_holm=row.p_holm, trials_needed=None)
        pilot = fa.stats.paired_values(results[row.first], results["fedavg"])
        pilot = pilot[np.isfinite(pilot)]
        if base_mean != 0 and pilot.size >= 2:
            vs[row.first]["trials_needed"] = fa.stats.trials_needed(
                pilot, DETECT * base_mean).trials
    r = fa.stats.rank(results, rng=rng, draws=1000)
    ranking = {"order": list(r.names), "mean": r.means, "expected_rank": r.expected,
               "probabilities": r.probabilities, "trials": r.trials}
    return {"vs_fedavg": vs, "ranking": ranking}


def why(problems: dict, alpha: float, local_steps: int, T: int, P: dict) -> dict:
    """The reasons for alpha, T, mu and lr, with the numbers that back them."""
    cross = {dm: p["crossing_rounds"] for dm, p in problems.items()}
    slopes = ", ".join(f"{p['grad_at_x0']:.2f} (Dmax = {dm})" for dm, p in problems.items())
    shrink = P["mu"] * alpha * local_steps / 2
    return {
        "alpha_T": (f"alpha = {alpha:g} (the paper: 1e-4): |f'(x0)| = {slopes}; noise-free "
                    "FedAvg needs about |x0 - x*| / (alpha Q |f'(x0)|) = "
                    + ", ".join(f"{c:.0f}" for c in cross.values())
                    + f" rounds to reach x* (Dmax = {', '.join(cross)}), 10x more at the paper's "
                    f"alpha. T = {T} is {T / max(cross.values()):.1f} x the longest of these "
                    f"(the full scale, T = {P['T']}, lets every run settle at its stationary "
                    "level, so that the final table compares stationary levels)"),
        "mu": (f"mu = {P['mu']:g} = L, the largest value of Li et al.'s grid; the proximal pull "
               f"shortens a local run by about mu alpha Q / 2 = {shrink:.3g}"),
        "lr": (f"lr = alpha Q = {alpha * local_steps:g}: the most FedAvg moves in a round "
               "(|f_i'| <= 1), about what Adam's normalised step moves while the "
               "pseudo-gradient keeps its sign"),
        "eta_g": f"eta_g = {P['eta_g']:g}: the server step of [10], twice the mean local update",
    }


# --------------------------------------------------------------------------- drift part


def drift(settings: common.Settings, progress: common.Progress, cfg: dict, d_maxes, n: int) -> dict:
    """FedAvg and SCAFFOLD with exact gradients and full participation (see the docstring)."""
    import fedjax_abc as fa

    T, tol = cfg["T"], cfg["tol"]
    k = T // 100 if T % 100 == 0 else common.record_every(T, 100)
    algs = {"fedavg": fa.algorithms.FedAvg(), "scaffold": fa.algorithms.Scaffold()}
    key = common.run_key(settings.seed, "compare", 0)  # unused by ExactOracle, required
    runs, geometry = {}, {}
    for d_max in d_maxes:
        dm = _dm(d_max)
        problem = fa.problems.huber_offsets(offsets=offs.paper_offsets(d_max, n))
        x_star = float(problem.x_star[0])
        x0 = np.asarray(problem.x_star) + paper.COMPARE["x0_offset"]
        geometry[dm] = huber_geometry(offs.paper_offsets(d_max, n), x_star)
        for Q, gamma in _drift_runs(cfg):
            for name, alg in algs.items():
                callback = progress.task(f"drift Dmax={d_max:g} {name} Q={Q} alpha Q={gamma:g}",
                                         common.work_units(n, n, Q, T, 8))
                res = fa.simulate(problem, local_steps=Q, stepsize=gamma / Q, rounds=T, x0=x0,
                                  trials=1, key=key, record_every=k, mode="mask",
                                  oracle=fa.ExactOracle(), algorithm=alg, dtype="float64",
                                  record_x=True, progress=callback)
                progress.finish_task()
                x = res.x[0, :, 0] - x_star
                tail = x[-max(2, len(x) // 10):]
                settled = float(np.ptp(tail))
                converged = bool(np.isfinite(settled) and settled <= tol)
                runs[(dm, name, Q, gamma)] = {
                    "x_minus_x_star": float(x[-1]), "grad_norm_sq": float(res.grad_norm_sq[0, -1]),
                    "tail_range": settled, "converged": converged,
                    "biased": bool(converged and abs(x[-1]) > tol)}

    def sweep(pairs):
        out = {}
        for d_max in d_maxes:
            dm = _dm(d_max)
            out[dm] = {}
            for name in algs:
                rows = [runs[(dm, name, Q, g)] for Q, g in pairs]
                out[dm][name] = {field: [r[field] for r in rows] for field in rows[0]}
            out[dm]["predicted_bias"] = [predicted_bias(geometry[dm], Q, g) for Q, g in pairs]
        return out

    q_pairs = [(Q, cfg["gamma"]) for Q in cfg["Q"]]
    g_pairs = [(cfg["gamma_Q"], g) for g in cfg["gammas"]]
    config = {"oracle": "ExactOracle", "participation": "full (S = n)", "rounds": T,
              "record_every": k, "tol": tol, "x0": f"x* + {paper.COMPARE['x0_offset']:g}",
              "stepsize": "alpha = gamma / Q",
              "converged": "range of x_t over the last 10% of records <= tol",
              "biased": "converged and |x_T - x*| > tol",
              "rule": "biased iff Q > 1 and (outside clients unbalanced or alpha (Q - 1) > "
                      "clearance)"}
    return {"config": config, "geometry": geometry,
            "q_sweep": {"gamma": cfg["gamma"], "Q": cfg["Q"], "runs": sweep(q_pairs)},
            "gamma_sweep": {"Q": cfg["gamma_Q"], "gamma": cfg["gammas"], "runs": sweep(g_pairs)}}


# ----------------------------------------------------------------------------- verdicts


def _list(values) -> str:
    return ", ".join(f"{v:g}" for v in values)


def _percent(ratio: float) -> str:
    """A relative difference with two significant digits: +98%, -0.41%, +0.0012%."""
    pct = 100 * ratio
    return "0%" if not pct else (f"{pct:+.0f}%" if abs(pct) >= 10 else f"{pct:+.2g}%")


def stochastic_verdicts(doc: dict) -> list[str]:
    """One line per (Dmax, S): each algorithm's final gap against FedAvg's, in stderrs."""
    labels = {name: a["label"] for name, a in doc["config"]["algorithms"].items()}
    lines = []
    for d_max in doc["config"]["d_max"]:
        for S in doc["config"]["S"]:
            rows = {r["algorithm"]: r for r in doc["table"] if r["d_max"] == d_max and r["S"] == S}
            base = rows["fedavg"]["gap"]
            parts = []
            for name in ORDER[1:]:
                c = rows[name]["gap_vs_fedavg"]
                z = c["z"]
                if z is None or not math.isfinite(z):
                    word = "no stderr (identical trials?)"
                elif abs(z) > common.Z95:
                    word = "lower" if z < 0 else "higher"
                else:
                    word = "no difference at 95%"
                parts.append(f"{labels[name]}: {_percent(c['relative'])} (z = {z:+.1f}, {word})")
            lines.append(f"Dmax = {d_max:g}, S = {S}: final gap of FedAvg {base['mean']:.2e} +- "
                         f"{base['stderr']:.1e}; " + "; ".join(parts))
            reach = [f"{labels[n]}: " + ("not within T" if rows[n]["rounds_to_target"] is None
                                         else str(rows[n]["rounds_to_target"])) for n in ORDER]
            lines.append(f"Dmax = {d_max:g}, S = {S}: rounds to {TARGET:g} x the initial gap: "
                         + ", ".join(reach))
    alpha, Q = doc["config"]["alpha"], doc["config"]["Q"]
    clear = {dm: p["geometry"]["clearance"] for dm, p in doc["problems"].items()}
    if all(alpha * (Q - 1) <= c for c in clear.values()):
        lines.append(f"In these runs alpha (Q - 1) = {alpha * (Q - 1):g} is below the clearance ("
                     + ", ".join(f"{c:.3g} at Dmax = {dm}" for dm, c in clear.items())
                     + "), so noise-free FedAvg would converge to x* itself (drift part): "
                     "SCAFFOLD and FedProx have no drift bias to remove here, and what separates "
                     "the algorithms is how they handle the oracle noise and the client sampling.")
    else:
        lines.append(f"In these runs alpha (Q - 1) = {alpha * (Q - 1):g} exceeds the clearance at "
                     + ", ".join(f"Dmax = {dm}" for dm, c in clear.items() if alpha * (Q - 1) > c)
                     + ": noise-free FedAvg is biased there (drift part).")
    return lines


def drift_verdicts(doc: dict) -> list[str]:
    """When FedAvg's fixed point is biased and when not, whether SCAFFOLD reached x*, and how
    often the clearance rule predicts the runs."""
    dr = doc["drift"]
    tol = doc["config"]["drift"]["tol"]
    lines = []
    qs, gamma = dr["q_sweep"]["Q"], dr["q_sweep"]["gamma"]
    for dm, runs in dr["q_sweep"]["runs"].items():
        fa_, sc = runs["fedavg"], runs["scaffold"]
        dist = np.abs(fa_["x_minus_x_star"])
        biased = [Q for Q, b in zip(qs, fa_["biased"]) if b]
        clean = [Q for Q, b, c in zip(qs, fa_["biased"], fa_["converged"]) if c and not b]
        text = f"Dmax = {dm}, alpha Q = {gamma:g}: FedAvg's fixed point "
        if biased:
            sel = dist[[qs.index(Q) for Q in biased]]
            gns = np.array(fa_["grad_norm_sq"])[[qs.index(Q) for Q in biased]]
            text += (f"is biased at Q = {_list(biased)} (|x_T - x*| from {sel.min():.2e} to "
                     f"{sel.max():.2e}, ||grad f(x_T)||^2 up to {gns.max():.2e})")
            if len(biased) > 1:
                grows = bool(np.all(np.diff(sel) > 0))
                text += f", {'growing' if grows else 'not monotone'} in Q"
        if clean:
            sel = dist[[qs.index(Q) for Q in clean]]
            text += ("; x* " if biased else "is x* ") + (
                f"{'at every Q' if len(clean) == len(qs) else 'at Q = ' + _list(clean)} "
                f"(|x_T - x*| <= {sel.max():.1e}: rounding"
                + ("; Q = 1 is gradient descent" if 1 in clean else "") + ")")
        stuck = [Q for Q, c in zip(qs, fa_["converged"]) if not c]
        if stuck:
            text += (f"; not converged within {doc['config']['drift']['rounds']} rounds at "
                     f"Q = {_list(stuck)}")
        text += ". " + _scaffold_text(sc, qs, "Q", tol)
        lines.append(text)

    gq, gammas = dr["gamma_sweep"]["Q"], dr["gamma_sweep"]["gamma"]
    for dm, runs in dr["gamma_sweep"]["runs"].items():
        fa_ = runs["fedavg"]
        biased = [g for g, b in zip(gammas, fa_["biased"]) if b]
        clean = [g for g, b, c in zip(gammas, fa_["biased"], fa_["converged"]) if c and not b]
        geo = dr["geometry"][dm]
        text = f"Dmax = {dm}, Q = {gq}: FedAvg "
        text += (f"biased at alpha Q = {_list(biased)}" if biased else "not biased at any alpha Q")
        text += f", unbiased at alpha Q = {_list(clean)}" if clean else ""
        text += (f"; clearance {geo['clearance']:.3f}, so the rule puts the onset at alpha Q > "
                 f"{geo['clearance'] * gq / (gq - 1):.3f}. " if gq > 1 else ". ")
        text += _scaffold_text(runs["scaffold"], gammas, "alpha Q", tol)
        lines.append(text)

    for dm, geo in dr["geometry"].items():
        balanced = geo["far_left"] == geo["far_right"]
        lines.append(
            f"Dmax = {dm}: {geo['far_left']} clients left of x* and {geo['far_right']} right of it "
            f"outside their quadratic zones, {geo['near']} inside (sum of x* - d_i over them: "
            f"{geo['near_sum']:.1e}); the local runs from x* cancel "
            + ("unless a client outside reaches its quadratic zone within Q - 1 steps: "
               f"alpha (Q - 1) > clearance = {geo['clearance']:.3f}" if balanced else
               "for no Q > 1, since the outside clients do not balance"))
    agree = total = 0
    for part in ("q_sweep", "gamma_sweep"):
        for runs in dr[part]["runs"].values():
            for b, c, p in zip(runs["fedavg"]["biased"], runs["fedavg"]["converged"],
                               runs["predicted_bias"]):
                if c:
                    total += 1
                    agree += int(b == p)
    lines.append(f"The rule predicts FedAvg's bias in {agree} of {total} converged runs.")
    return lines


def _scaffold_text(sc: dict, values, name: str, tol: float) -> str:
    dist = np.abs(sc["x_minus_x_star"])
    ok = [v for v, c, d in zip(values, sc["converged"], dist) if c and d <= tol]
    bad = [v for v in values if v not in ok]
    if not bad:
        return f"SCAFFOLD converged to x* at every {name} (|x_T - x*| <= {dist.max():.1e})."
    return (f"SCAFFOLD reached x* at {name} = {_list(ok) or 'none'}, but not at {name} = "
            f"{_list(bad)} (|x_T - x*| = "
            + ", ".join(f"{dist[values.index(v)]:.1e}" for v in bad) + ", converged: "
            + ", ".join(str(sc["converged"][values.index(v)]) for v in bad) + ").")


def table_text(doc: dict) -> str:
    """The final table as plain text: mean +- stderr at t = T, z against FedAvg."""
    labels = {name: a["label"] for name, a in doc["config"]["algorithms"].items()}
    cfg = doc["config"]
    out = [f"problem (27), n = {cfg['n']}, Q = {cfg['Q']}, alpha = {cfg['alpha']:g}, "
           f"T = {cfg['rounds']}, R = {cfg['trials']} trials; final values at t = T (mean +- "
           "stderr), z = paired difference from FedAvg in its stderrs",
           f"{'Dmax':>5} {'S':>3}  {'algorithm':<22} {'f(x_T) - f*':>22} {'||grad f(x_T)||^2':>22} "
           f"{'z':>6}"]
    for r in doc["table"]:
        z = r["gap_vs_fedavg"]["z"] if r["gap_vs_fedavg"] else None
        out.append(f"{r['d_max']:5g} {r['S']:3d}  {labels[r['algorithm']]:<22} "
                   f"{r['gap']['mean']:11.3e} +- {r['gap']['stderr']:7.1e} "
                   f"{r['grad_norm_sq']['mean']:11.3e} +- {r['grad_norm_sq']['stderr']:7.1e} "
                   + (f"{z:+6.1f}" if z is not None and math.isfinite(z) else f"{'':>6}"))
    return "\n".join(out)


def statistics_text(doc: dict) -> str:
    """Per (Dmax, S): each algorithm's paired difference from FedAvg with its 95% interval,
    Holm-adjusted p-value and the trials needed for a DETECT difference; the ranking with the
    bootstrap probability of each algorithm's rank."""
    labels = {name: a["label"] for name, a in doc["config"]["algorithms"].items()}
    width = max(len(v) for v in labels.values())
    out = []
    for group in doc.get("statistics", []):
        d_max, S = group["d_max"], group["S"]
        rows = {r["algorithm"]: r for r in doc["table"] if r["d_max"] == d_max and r["S"] == S}
        out.append(f"Dmax = {d_max:g}, S = {S}: final gap minus FedAvg's, paired over "
                   f"{group['ranking']['trials']} trials (95% interval; p Holm-adjusted over "
                   f"{len(rows) - 1} comparisons; trials to detect {DETECT:.0%} of FedAvg's gap "
                   "at 95% with 80% power)")
        for name in ORDER[1:]:
            c = rows[name]["gap_vs_fedavg"]
            if c is None:
                continue
            low, high = (f"{v:+.2e}" if v is not None else "nan"
                         for v in (c["ci_low"], c["ci_high"]))
            p = ("nan" if c.get("p_holm") is None else "<1e-15" if c["p_holm"] < 1e-15
                 else f"{c['p_holm']:.2g}")
            need = "-" if c.get("trials_needed") is None else str(c["trials_needed"])
            out.append(f"  {labels[name]:<{width}} {c['diff']:+.3e} [{low}, {high}]  "
                       f"p (Holm) {p:>7}  trials for {DETECT:.0%}: {need}")
        rk = group["ranking"]
        out.append("  ranking (P(own rank) over 1000 paired bootstrap resamples): " + ", ".join(
            f"{i + 1}. {labels[n]} ({rk['probabilities'][i][i]:.2f})"
            for i, n in enumerate(rk["order"])))
    return "\n".join(out)


def summary_text(doc: dict) -> str:
    """The table and the verdicts as plain text (what ``fedjax-abc compare --fixed`` prints)."""
    out = [table_text(doc), ""]
    if doc.get("statistics"):
        out += [statistics_text(doc), ""]
    out += doc["verdicts"]["stochastic"]
    out.append("")
    out.append("client drift (exact gradients, full participation, "
               f"{doc['config']['drift']['rounds']} rounds):")
    out += doc["verdicts"]["drift"]
    return "\n".join(out)


# ------------------------------------------------------------------------------- output


def figure(doc: dict):
    """Gap and ||grad f||^2 against rounds with 95% bands: one column per (Dmax, S)."""
    from matplotlib.figure import Figure

    cfg = doc["config"]
    pairs = [(d, S) for d in cfg["d_max"] for S in cfg["S"]]
    labels = {name: a["label"] for name, a in cfg["algorithms"].items()}
    rounds = np.asarray(doc["rounds"])
    fig = Figure(figsize=(3.6 * len(pairs), 6.4))
    axes = fig.subplots(2, len(pairs), sharex=True, squeeze=False)
    colors = dict(zip(ORDER, ("k", "C1", "C2", "C3", "C4")))
    for j, (d_max, S) in enumerate(pairs):
        runs = doc["curves"][_dm(d_max)][str(S)]
        for i, field in enumerate(("gap", "grad_norm_sq")):
            ax = axes[i, j]
            for name in ORDER[1:] + ORDER[:1]:  # FedAvg last, on top of those that match it
                common.band(ax, rounds, runs[name][field]["mean"], runs[name][field]["ci95"],
                            labels[name], color=colors[name])
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            if i == 0:
                ax.set_title(f"Dmax = {d_max:g}, S = {S}" + (" (full)" if S == cfg["n"] else ""),
                             fontsize=10)
            else:
                ax.set_xlabel("communication round t")
        axes[0, 0].set_ylabel(r"$f(x_t) - f^\star$")
        axes[1, 0].set_ylabel(r"$\|\nabla f(x_t)\|^2$")
    handles, names = axes[0, 0].get_legend_handles_labels()
    order = [names.index(labels[name]) for name in ORDER]
    axes[0, 0].legend([handles[i] for i in order], [names[i] for i in order], fontsize=7)
    fig.suptitle(f"Problem (27), n = {cfg['n']}, Q = {cfg['Q']}, alpha = {cfg['alpha']:g}, "
                 f"R = {cfg['trials']}: mean and 95% band", fontsize=10)
    fig.tight_layout()
    return fig


def drift_figure(doc: dict):
    """|x_T - x*| and ||grad f(x_T)||^2 against Q at fixed alpha Q, and |x_T - x*| against
    alpha Q at fixed Q, for FedAvg and SCAFFOLD with exact gradients."""
    from matplotlib.figure import Figure

    dr = doc["drift"]
    floor_x, floor_g = 1e-16, 1e-32
    fig = Figure(figsize=(13.5, 3.9))
    ax1, ax2, ax3 = fig.subplots(1, 3)
    styles = {"fedavg": ("o-", "FedAvg"), "scaffold": ("s--", "SCAFFOLD")}
    colors = {dm: f"C{j}" for j, dm in enumerate(dr["geometry"])}
    qs = dr["q_sweep"]["Q"]
    for dm, runs in dr["q_sweep"]["runs"].items():
        for name, (style, label) in styles.items():
            r = runs[name]
            kw = dict(ms=4, color=colors[dm], label=f"{label}, Dmax = {dm}")
            ax1.plot(qs, np.maximum(np.abs(r["x_minus_x_star"]), floor_x), style, **kw)
            ax2.plot(qs, np.maximum(r["grad_norm_sq"], floor_g), style, **kw)
    gammas, gq = dr["gamma_sweep"]["gamma"], dr["gamma_sweep"]["Q"]
    for dm, runs in dr["gamma_sweep"]["runs"].items():
        for name, (style, label) in styles.items():
            ax3.plot(gammas, np.maximum(np.abs(runs[name]["x_minus_x_star"]), floor_x), style,
                     ms=4, color=colors[dm], label=f"{label}, Dmax = {dm}")
        if gq > 1:  # the rule's onset: alpha (Q - 1) = clearance
            onset = dr["geometry"][dm]["clearance"] * gq / (gq - 1)
            ax3.axvline(onset, color=colors[dm], ls=":", lw=1)
            ax3.text(onset, 0.5, f" rule's onset, Dmax = {dm}", rotation=90, fontsize=7,
                     va="center", color=colors[dm], transform=ax3.get_xaxis_transform())
    tol = doc["config"]["drift"]["tol"]
    for ax in (ax1, ax3):
        ax.axhline(tol, color="k", lw=0.8, ls=":")
        ax.set_ylabel(r"$|x_T - x^\star|$")
    ax1.set(xscale="log", yscale="log", xlabel="Q",
            title=f"alpha Q = {dr['q_sweep']['gamma']:g}: distance to x*")
    ax2.set(xscale="log", yscale="log", xlabel="Q", ylabel=r"$\|\nabla f(x_T)\|^2$",
            title=f"alpha Q = {dr['q_sweep']['gamma']:g}: stationarity")
    ax3.set(xscale="log", yscale="log", xlabel="alpha Q", title=f"Q = {gq}: distance to x*")
    for ax in (ax1, ax2, ax3):
        ax.grid(True, which="both", alpha=0.3)
    ax1.legend(fontsize=7)
    fig.suptitle("Client drift on problem (27): exact gradients, full participation "
                 f"(values at the bottom are 0 to rounding; dotted: tol = {tol:g})", fontsize=10)
    fig.tight_layout()
    return fig


def table_rows(doc: dict) -> tuple[list[str], list[list]]:
    """Header and rows of ``compare.csv``."""
    header = ["d_max", "S", "algorithm", "gap_mean", "gap_stderr", "grad_norm_sq_mean",
              "grad_norm_sq_stderr", "gap_diff_vs_fedavg", "gap_diff_stderr", "gap_z_vs_fedavg",
              "gap_relative_vs_fedavg", "rounds_to_target", "gap_diff_ci_low",
              "gap_diff_ci_high", "gap_p_holm", "trials_for_detect"]
    rows = []
    for r in doc["table"]:
        c = r["gap_vs_fedavg"] or {}
        rows.append([r["d_max"], r["S"], r["label"], r["gap"]["mean"], r["gap"]["stderr"],
                     r["grad_norm_sq"]["mean"], r["grad_norm_sq"]["stderr"], c.get("diff"),
                     c.get("stderr"), c.get("z"), c.get("relative"), r["rounds_to_target"],
                     c.get("ci_low"), c.get("ci_high"), c.get("p_holm"), c.get("trials_needed")])
    return header, rows


def write(doc: dict, out: str) -> list[str]:
    """compare.json, compare.csv, compare.png and compare_drift.png."""
    paths = [common.write_json(os.path.join(out, "compare.json"), doc)]
    header, rows = table_rows(doc)
    paths.append(common.write_csv(os.path.join(out, "compare.csv"), header, rows))
    paths.append(common.save_figure(figure(doc), out, "compare.png"))
    paths.append(common.save_figure(drift_figure(doc), out, "compare_drift.png"))
    return paths
