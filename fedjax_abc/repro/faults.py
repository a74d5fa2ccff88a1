"""Checks that catch a faulty implementation: the report's checks run on faulty simulators.

A check earns trust by failing where it should. The negative controls
(:mod:`~fedjax_abc.repro.controls`) give the theory checks wrong constants; here the
simulator itself is wrong: each fault of :mod:`~fedjax_abc.repro.faulty` (a biased sampler,
an unweighted mean where weights apply, an oracle with the wrong variance, a stepsize applied
twice, a missing server step) is scanned over the size of its mistake, and at every size the
checks the report relies on are run on it, at a small scale of problem (27):

- ``eq9``: eq. (9), every client in S_t with probability S/n (chi^2 of the inclusion
  counts of ``DRAWS`` rounds, flagged at p < ``P_FLAG``); for the paper's sampler only.
- ``lemma2``: Lemma 2 / eq. (13), E_t[x_{t+1}] under the sampler equals E_t[x_{t+1}] under
  full participation (one round from x* + 2, ``ROUND_TRIALS`` trials each; |z| > ``Z_FLAG``).
- ``noise_free``: the noise-free run of Table II (exact gradients, full participation) against
  the same recursion written out in NumPy (relative error above ``EXACT``).
- ``reference``: the mean x_T and gap f(x_T) - f* against an independent NumPy
  implementation of Algorithm 1 (``TRIALS`` trials each; |z| > ``Z_FLAG``), as the report's
  agreement of every number with a float64 reimplementation.
- ``abc``: Assumption 2, the oracle's Monte Carlo variance against the stated
  C (f_i - f_i*) + D (C = 1, D = 0 for (27)) at a few points (z > ``Z_FLAG``).
- ``theorem2``: bound (21) at the stepsize (22) against the observed min_t E||grad f||^2
  (fails where the bound is below the upper end of the 95% interval).

A fault's *detection threshold* for a check is the smallest factor of the scan from which the
check flags it at every larger factor; "-" where it flags none. The neutral factor (the
correct component) must pass every check. Every random draw comes from fixed keys.

Reference: Algorithm 1, Assumptions 2-3, eq. (9), Lemma 2, Theorem 2, Table II.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np

from fedjax_abc.repro import common, faulty
from fedjax_abc.repro import offsets as offs

# Flags: about 200 tests run in a scan (6 checks x 30 sizes), so each flags at a two-sided
# tail probability near 1e-4 or below, which keeps a false alarm anywhere in it near 1%.
Z_FLAG = 4.0
P_FLAG = 1e-4
EXACT = 1e-9
SETTING = dict(d_max=20.0, n=40, S=4, Q=10, T=300, x0_offset=2.0, trials=1000,
               round_trials=200_000, draws=20000, abc_samples=4000)
CHECKS = ("eq9", "lemma2", "noise_free", "reference", "abc", "theorem2")
CHECK_NAMES = {
    "eq9": "eq. (9): inclusion frequencies",
    "lemma2": "Lemma 2: E[x_{t+1}] against full participation",
    "noise_free": "Table II's noise-free run against its recursion",
    "reference": "agreement with an independent implementation",
    "abc": "Assumption 2: oracle variance against C (f_i - f_i*) + D",
    "theorem2": "bound (21) at the stepsize (22)",
}


class Fault(NamedTuple):
    """A faulty simulator: how to build its parts at a factor, the scan, the neutral factor,
    and the checks the report should catch it with (``expected``)."""

    name: str
    what: str
    factor_name: str
    factors: tuple
    neutral: float
    expected: tuple
    parts: Callable  # (problem, factor) -> dict(sampler=..., oracle=..., algorithm=...)
    paper_sampler: bool = True  # whether the paper's uniform sampler is what it replaces


def _uniform(problem, S):
    import fedjax_abc as fa

    return fa.UniformWithoutReplacement(S)


def _importance_probs(n: int, spread: float) -> np.ndarray:
    """Probabilities p_i proportional to spread^(i / (n - 1)): p_max / p_min = spread."""
    p = spread ** (np.arange(n) / (n - 1))
    return p / p.sum()


def faults(S: int = SETTING["S"]) -> tuple[Fault, ...]:
    """The five faults and their scans."""
    import fedjax_abc as fa

    return (
        Fault("biased sampler", "client i drawn with weight exp(tilt (i/(n-1) - 1/2))",
              "weight ratio exp(tilt)", (1.0, 1.5, 2.0, 3.0, 5.0, 10.0), 1.0,
              ("eq9", "lemma2", "reference"),
              lambda p, f: dict(sampler=faulty.TiltedSampler(S, math.log(f)))),
        Fault("unweighted mean", "importance sampling whose weights 1/(S n p_i) are dropped",
              "spread p_max / p_min", (1.0, 1.5, 2.0, 3.0, 5.0, 10.0), 1.0,
              ("lemma2", "reference"),
              lambda p, f: dict(sampler=faulty.DropsWeights(
                  fa.ImportanceSampler(_importance_probs(p.num_clients, f), S))),
              paper_sampler=False),
        Fault("oracle variance", "the oracle's noise scaled by sqrt(factor)",
              "variance ratio", (1.0, 1.1, 1.25, 1.5, 2.0, 4.0), 1.0, ("abc",),
              lambda p, f: dict(oracle=faulty.ScaledNoise(p.oracle, math.sqrt(f)))),
        Fault("stepsize applied twice", "each local step y - factor alpha g",
              "stepsize factor", (1.0, 1.001, 1.01, 1.1, 1.5, 2.0), 1.0,
              ("noise_free", "reference"),
              lambda p, f: dict(algorithm=faulty.ScaledLocalStep(f))),
        Fault("missing server step", "the server keeps x_t in every k-th round",
              "share of rounds skipped 1/k", (0.0, 0.01, 0.02, 0.05, 0.1, 0.5), 0.0,
              ("noise_free", "reference"),
              lambda p, f: dict(algorithm=faulty.SkipsServerSteps(int(round(1 / f)) if f else 0))),
    )


class Case(NamedTuple):
    """The small problem the checks run on."""

    problem: object
    offsets: np.ndarray
    x0: float
    alpha: float
    bound: float


def case(setting: dict = SETTING) -> Case:
    """Problem (27) with the paper's offsets at ``setting``; alpha: the stepsize (22)."""
    import fedjax_abc as fa
    import fedjax_abc.theory as theory

    d = offs.paper_offsets(setting["d_max"], setting["n"])
    problem = fa.problems.huber_offsets(offsets=d)
    x0 = float(problem.x_star[0]) + setting["x0_offset"]
    n, S, Q, T = setting["n"], setting["S"], setting["Q"], setting["T"]
    sigma, delta = float(problem.sigma_f_star), float(problem.gap(np.array([x0])))
    alpha = theory.theorem2_stepsize(1.0, 1.0, 0.0, sigma, delta, n, S, Q, T)
    bound = theory.theorem2_bound(alpha, 1.0, 1.0, 0.0, sigma, delta, n, S, Q, T)
    return Case(problem, d, x0, float(alpha), float(bound))


def _huber(u):
    a = np.abs(u)
    return np.where(a <= 1.0, 0.5 * u * u, a - 0.5)


def reference_run(d: np.ndarray, x0: float, S: int, Q: int, alpha: float, T: int, trials: int,
                  seed: int, probs=None, exact: bool = False, full: bool = False) -> np.ndarray:
    """x_T of Algorithm 1 on problem (27), written out in NumPy, one value per trial.

    Clients: S uniformly without replacement (argsort of uniforms), all n (``full``), or S
    independent draws from ``probs`` with the server's update sum_j (y_j - x) / (S n p_j);
    Q local steps y - alpha (clip(y - d_i, -1, 1) + eps sqrt(Huber(y - d_i))), eps = +/-1
    (none with ``exact``).
    """
    rng = np.random.default_rng(seed)
    n = d.size
    x = np.full(trials, float(x0))
    for _ in range(T):
        if full:
            idx = np.broadcast_to(np.arange(n), (trials, n))
        elif probs is None:
            idx = np.argsort(rng.random((trials, n)), axis=1)[:, :S]
        else:
            idx = rng.choice(n, size=(trials, S), p=probs)
        y = np.repeat(x[:, None], idx.shape[1], axis=1)
        c = d[idx]
        for _ in range(Q):
            u = y - c
            g = np.clip(u, -1.0, 1.0)
            if not exact:
                g = g + rng.choice([-1.0, 1.0], size=u.shape) * np.sqrt(_huber(u))
            y = y - alpha * g
        if probs is None:
            x = y.mean(axis=1)
        else:
            x = x + np.sum((y - x[:, None]) / (S * n * probs[idx]), axis=1)
    return x


def _z(a: np.ndarray, b: np.ndarray) -> float:
    se = math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
    return float((a.mean() - b.mean()) / se) if se > 0 else (0.0 if a.mean() == b.mean() else math.inf)


def _simulate(c: Case, setting: dict, parts: dict, key, rounds: int, trials: int, x0=None,
              record: int = None):
    import warnings

    import fedjax_abc as fa

    kw = dict(parts)
    if "sampler" not in kw:
        kw["num_sampled"] = setting["S"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fa.simulate(c.problem, local_steps=setting["Q"], stepsize=c.alpha, rounds=rounds,
                           x0=c.x0 if x0 is None else x0, trials=trials, key=key,
                           record_every=record or rounds, mode="gather", **kw)


def check_eq9(parts: dict, setting: dict, key) -> dict:
    """eq. (9): chi^2 of the inclusion counts over ``draws`` rounds against S/n each."""
    import jax
    from scipy import stats

    sampler = parts.get("sampler")
    n, S, m = setting["n"], setting["S"], setting["draws"]
    if sampler is None:
        import fedjax_abc as fa

        sampler = fa.UniformWithoutReplacement(S)
    idx, w = jax.vmap(lambda k: sampler(k, n))(jax.random.split(key, m))
    counts = np.bincount(np.asarray(idx)[np.asarray(w) > 0].ravel(), minlength=n)
    e, p = m * S / n, S / n
    chi2 = float(np.sum((counts - e) ** 2 / (e * (1 - p))))
    pv = float(stats.chi2.sf(chi2, n - 1))
    return {"flag": pv < P_FLAG, "statistic": chi2, "p_value": pv}


def check_lemma2(c: Case, parts: dict, setting: dict, key) -> dict:
    """Lemma 2: E[x_1] from x* + 2 under the sampler against full participation."""
    import jax

    import fedjax_abc as fa

    x1 = c.x0
    R = setting["round_trials"]
    a = _simulate(c, setting, parts, jax.random.fold_in(key, 0), 1, R).x_final[:, 0]
    full = dict(parts, sampler=fa.FullParticipation())
    b = _simulate(c, setting, full, jax.random.fold_in(key, 1), 1, R).x_final[:, 0]
    z = _z(a, b)
    return {"flag": abs(z) > Z_FLAG, "statistic": z, "x0": x1}


def check_noise_free(c: Case, parts: dict, setting: dict, key) -> dict:
    """The noise-free run (exact gradients, full participation) against the NumPy recursion."""
    import fedjax_abc as fa

    run = dict(parts, sampler=fa.FullParticipation(), oracle=fa.ExactOracle())
    got = float(_simulate(c, setting, run, key, setting["T"], 1).x_final[0, 0])
    want = float(reference_run(c.offsets, c.x0, setting["n"], setting["Q"], c.alpha, setting["T"],
                               1, 0, exact=True, full=True)[0])
    err = abs(got - want) / (1.0 + abs(want))
    return {"flag": err > EXACT, "statistic": err}


def check_reference(c: Case, parts: dict, setting: dict, key, probs=None) -> tuple[dict, dict]:
    """x_T and f(x_T) - f* against the NumPy implementation; bound (21) against the
    observed min_t E||grad f(x_t)||^2 of the same run (both results)."""
    R, T = setting["trials"], setting["T"]
    res = _simulate(c, setting, parts, key, T, R, record=common.record_every(T, 30))
    ref = reference_run(c.offsets, c.x0, setting["S"], setting["Q"], c.alpha, T, R, 12345,
                        probs=probs)
    f_star = float(c.problem.f_star)
    gap_ref = np.mean(_huber(ref[:, None] - c.offsets[None, :]), axis=1) - f_star
    zx = _z(res.x_final[:, 0], ref)
    zg = _z(res.gap[:, -1], gap_ref)
    g = res.grad_norm_sq[:, :-1]
    means = g.mean(axis=0)
    j = int(np.argmin(means))
    upper = means[j] + common.Z95 * g[:, j].std(ddof=1) / math.sqrt(R)
    return ({"flag": max(abs(zx), abs(zg)) > Z_FLAG, "statistic": max(zx, zg, key=abs),
             "z_x": zx, "z_gap": zg},
            {"flag": bool(c.bound < upper), "statistic": float(c.bound / means[j])})


def check_abc(c: Case, parts: dict, setting: dict, key) -> dict:
    """Assumption 2: Monte Carlo variance of the oracle against f_i(x) - f_i* (C = 1, D = 0)."""
    import fedjax_abc.theory as theory

    oracle = parts.get("oracle", c.problem.oracle)
    points = np.array([[c.x0], [float(c.problem.x_star[0])], [c.x0 - 4.0]])
    v = theory.oracle_variance(c.problem, oracle, domain=points, method="monte_carlo", key=key,
                               num_samples=setting["abc_samples"])
    values = np.asarray([[float(c.problem.local_value(c.problem.client(i), np.asarray(x)))
                          for i in range(setting["n"])] for x in points])
    # a noise whose squared deviation is the same in every draw (the sign oracle of (27))
    # has a zero Monte Carlo error: rounding then sets the scale
    se = np.maximum(np.asarray(v.stderr), EXACT * np.abs(values) + 1e-300)
    z = float(np.max((np.asarray(v.variance) - values) / se))
    return {"flag": z > Z_FLAG, "statistic": z}


def run_fault(fault: Fault, factor: float, c: Case, setting: dict, key) -> dict:
    """Every check on ``fault`` at ``factor``: check name -> result (None: not applicable)."""
    import jax

    parts = fault.parts(c.problem, factor)
    probs = None
    if fault.name == "unweighted mean":
        probs = _importance_probs(setting["n"], factor)
    ref, thm2 = check_reference(c, parts, setting, jax.random.fold_in(key, 3), probs)
    return {"eq9": check_eq9(parts, setting, jax.random.fold_in(key, 0)) if fault.paper_sampler
            else None,
            "lemma2": check_lemma2(c, parts, setting, jax.random.fold_in(key, 1)),
            "noise_free": check_noise_free(c, parts, setting, jax.random.fold_in(key, 2)),
            "reference": ref, "theorem2": thm2,
            "abc": check_abc(c, parts, setting, jax.random.fold_in(key, 4))}


def detection_threshold(factors, flags, neutral) -> float | None:
    """The smallest factor (other than the neutral one) from which every larger factor of
    the scan is flagged; None where the largest is not flagged."""
    order = sorted((abs(f - neutral), f, fl) for f, fl in zip(factors, flags) if f != neutral)
    best = None
    for _, f, fl in reversed(order):
        if not fl:
            break
        best = f
    return best


def scan(setting: dict = SETTING, seed: int = 0, which=None, progress=None) -> list[dict]:
    """Every fault (or those named in ``which``) at every factor of its scan; fault k at
    factor j uses ``common.run_key(seed, "faults", k, j)``; ``progress(done, total, seconds)``
    is told after each factor."""
    c = case(setting)
    chosen = [(k, f) for k, f in enumerate(faults(setting["S"])) if which is None or f.name in which]
    total, done = sum(len(f.factors) for _, f in chosen), 0
    out = []
    for k, fault in chosen:
        rows = []
        for j, f in enumerate(fault.factors):
            rows.append({"factor": f, "checks": run_fault(
                fault, f, c, setting, common.run_key(seed, "faults", k, j))})
            done += 1
            if progress is not None:
                progress(done, total, 0.0)
        thresholds = {}
        for name in CHECKS:
            if rows[0]["checks"][name] is None:
                thresholds[name] = "n/a"
                continue
            t = detection_threshold([r["factor"] for r in rows],
                                    [r["checks"][name]["flag"] for r in rows], fault.neutral)
            thresholds[name] = t
        neutral = next(r for r in rows if r["factor"] == fault.neutral)
        out.append({"fault": fault.name, "what": fault.what, "factor_name": fault.factor_name,
                    "neutral": fault.neutral, "expected": list(fault.expected), "scan": rows,
                    "thresholds": thresholds,
                    "neutral_passes": all(v is None or not v["flag"]
                                          for v in neutral["checks"].values()),
                    "expected_catch": all(isinstance(thresholds[e], float) for e in fault.expected)})
    return out


def threshold_text(t, fault: dict) -> str:
    """A detection threshold as the report prints it: "<= f" where the smallest factor of
    the scan is already flagged (the true threshold may lie below), "f" otherwise, "-"
    where nothing in the scan is flagged, "n/a" where the check does not apply."""
    if t == "n/a":
        return "n/a"
    if t is None:
        return "-"
    steps = sorted((abs(r["factor"] - fault["neutral"]), r["factor"]) for r in fault["scan"]
                   if r["factor"] != fault["neutral"])
    return f"<= {t:g}" if t == steps[0][1] else f"{t:g}"


def run(settings: common.Settings, progress: common.Progress) -> dict:
    """The scan of every fault; returns the document of ``faults.json``."""
    setting = dict(SETTING)
    if settings.quick:
        setting.update(trials=200, round_trials=20_000, draws=5000, abc_samples=1000)
    if settings.trials:
        setting["trials"] = settings.trials
    if settings.rounds:
        setting["T"] = settings.rounds
    total = sum(len(f.factors) for f in faults(setting["S"]))
    progress.plan(float(total))
    callback = progress.task("faults", float(total), unit="sizes", work_unit="sizes")
    results = scan(setting, settings.seed, progress=callback)
    progress.finish_task()
    c = case(setting)
    config = common.base_config(settings, "faults", setting["trials"], setting["T"],
                                "quick" if settings.quick else "paper")
    config.update(precision="float64", problem="huber_offsets (eq. 27), paper offsets", setting=setting,
                  alpha=c.alpha, alpha_rule="the stepsize (22) of Theorem 2", bound=c.bound,
                  x0=f"x* + {setting['x0_offset']:g}", z_flag=Z_FLAG, p_flag=P_FLAG,
                  exact=EXACT, checks=CHECK_NAMES,
                  key_tags="(fault index, factor index)")
    return {"experiment": "faults", "config": config, "faults": results,
            "catch_nothing": [k for k in CHECKS if all(
                f["thresholds"][k] in (None, "n/a") for f in results)]}


def write(doc: dict, out: str) -> list[str]:
    """faults.json and faults.csv (one row per fault and factor, one column per check)."""
    import os

    paths = [common.write_json(os.path.join(out, "faults.json"), doc)]
    rows = []
    for f in doc["faults"]:
        for r in f["scan"]:
            rows.append([f["fault"], r["factor"]] + [
                "" if r["checks"][k] is None else int(bool(r["checks"][k]["flag"])) for k in CHECKS])
    paths.append(common.write_csv(os.path.join(out, "faults.csv"),
                                  ["fault", "factor"] + [f"flagged_{k}" for k in CHECKS], rows))
    return paths


def report_lines(doc: dict, card: list, say) -> list[str]:
    """The report's section: which checks catch each fault, from which size on."""
    c, res = doc["config"], doc["faults"]
    s = c["setting"]
    lines = ["## Faulty implementations: which checks catch them", "",
             "Beside wrong constants (the negative controls above), the report's checks run on "
             "deliberately faulty simulators (`fedjax_abc.repro.faulty`: components built from "
             "the library's abstract sampler, oracle and algorithm, the library's own "
             f"untouched), each scanned over the size of its mistake, on problem (27) (Dmax = "
             f"{s['d_max']:g}, n = {s['n']}, S = {s['S']}, Q = {s['Q']}, T = {s['T']}, x0 = "
             f"{c['x0']}, alpha = {c['alpha']:.3g}, the stepsize (22)). Checks: "
             + "; ".join(f"*{k}*: {v}" for k, v in c["checks"].items())
             + f". A check flags at |z| > {c['z_flag']:g} (eq. (9): p < {c['p_flag']:g}; the "
             f"noise-free run: relative error above {c['exact']:g}). Each cell: the detection "
             "threshold, the smallest size of the mistake from which the check flags it at every "
             "larger size of the scan ('<=': already at the smallest size tried); '-': not "
             "caught within the scan; n/a: does not apply (eq. (9) is the paper's uniform "
             "sampler's). Starred: the checks that should catch the fault. At the neutral size "
             "(the correct component) every check must pass.", "",
             "| fault | what is wrong | size of the mistake (scan) | "
             + " | ".join(k for k in CHECK_NAMES) + " | correct passes |",
             "|---|---|---|" + "---|" * len(CHECK_NAMES) + "---|"]
    for f in res:
        scan_txt = ", ".join(f"{r['factor']:g}" for r in f["scan"])
        cells = [threshold_text(f["thresholds"][k], f) + ("*" if k in f["expected"] else "")
                 for k in CHECK_NAMES]
        lines.append(f"| {f['fault']} | {f['what']} | {f['factor_name']}: {scan_txt} | "
                     + " | ".join(cells) + f" | {'yes' if f['neutral_passes'] else '**no**'} |")
        caught = f["expected_catch"] and f["neutral_passes"]
        say(card, "Faulty implementations", f"the checks catch the fault: {f['fault']}",
            ", ".join(f"{k} from {threshold_text(f['thresholds'][k], f)}" for k in f["expected"])
            + ("; the correct component passes" if f["neutral_passes"] else
               "; the correct component is flagged"),
            "holds" if caught else "contradicted",
            statistic=f"per check and size: |z| > {c['z_flag']:g} (eq. (9): chi^2 p < "
                      f"{c['p_flag']:g}; noise-free run: relative error > {c['exact']:g}), "
                      "fixed keys",
            kind="self-check")
    nothing = doc.get("catch_nothing") or []
    lines += ["", ("Checks that catch none of these faults within their scans: "
                   + ", ".join(f"*{k}* ({CHECK_NAMES[k]})" for k in nothing) + "."
                   if nothing else "Every check catches at least one fault."), ""]
    return lines
