"""Checks that catch a faulty implementation: the report's checks run on faulty simulators.

A check earns trust by failing where it should. The negative controls
(:mod:`~fedjax_abc.repro.controls`) give the theory checks wrong constants; here the
simulator itself is wrong: each fault of :mod:`~fedjax_abc.repro.faulty` (a biased sampler,
an unweighted mean where weights apply, an oracle with too large or too small a variance or
none, noise reused across local steps, sampling with replacement, Bernoulli participation in
place of the paper's sampler, a stepsize applied twice, a missing server step) is scanned
over the size of its mistake, and at every size the checks the report relies on are run on
it, at a small scale of problem (27):

- ``eq9``: eq. (9), every client in S_t with probability S/n (chi^2 of the inclusion
  counts of ``draws`` rounds, flagged at p < ``P_FLAG``); for the paper's sampler only.
- ``eq9_pairs``: eq. (9), P(i, j in S_t) = S(S-1)/(n(n-1)): averaged over the pairs (the
  number of distinct pairs in a round against S(S-1)/2, exact under the paper's sampler;
  |z| > ``Z_FLAG``) and per pair (exact binomial tails of the pair counts, Bonferroni over
  the pairs, p < ``P_FLAG``); for the paper's sampler only.
- ``lemma2``: Lemma 2 / eq. (13), E_t[x_{t+1}] under the sampler equals E_t[x_{t+1}] under
  full participation (one round from x* + 2, ``round_trials`` trials each; |z| > ``Z_FLAG``).
- ``noise_free``: the noise-free run of Table II (exact gradients, full participation) against
  the same recursion written out in NumPy (relative error above ``EXACT``).
- ``noise``: the gradient noise a run applies, two-sided: the variance of x_1 after one round
  with full participation from x* + 2 (``noise_trials`` trials), against the NumPy
  implementation's (|z| > ``Z_FLAG``, the s.e. of each variance from its fourth moment): a
  variance too small or too large, or noise reused across local steps, changes it.
- ``reference``: the mean x_T and gap f(x_T) - f* against an independent NumPy
  implementation of Algorithm 1 (``trials`` trials each; |z| > ``Z_FLAG``), as the report's
  agreement of every number with a float64 reimplementation; in the transient (from x* + 2
  at the stepsize (22)), where the drift sets x_T.
- ``reference_stationary``: the same near stationarity (``STATIONARY``: from x*, alpha =
  1e-3, T = 2000), where the noise and the sampling set the spread of x_T and the gap; the
  variance of x_T is compared too (two-sided).
- ``abc``: Assumption 2, the oracle's Monte Carlo variance against the stated
  C (f_i - f_i*) + D (C = 1, D = 0 for (27)) at a few points (z > ``Z_FLAG``; one-sided, as
  the assumption: a variance too small passes it).
- ``theorem2``: bound (21) at the stepsize (22) against the observed min_t E||grad f||^2
  (fails where the bound is below the upper end of the 95% interval).

A fault's *detection threshold* for a check is the smallest factor of the scan from which the
check flags it at every larger factor; "-" where it flags none. The neutral factor (the
correct component) must pass every check. The scan runs for ``SEEDS`` seeds (keys of their
own, and the NumPy implementation's seed with them); the report gives each threshold's spread
over them. Every random draw comes from fixed keys.

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
# The near-stationary setting of ``reference_stationary``: from x*, at alpha, T rounds.
STATIONARY = dict(alpha=1e-3, T=2000, trials=2000)
SETTING = dict(d_max=20.0, n=40, S=4, Q=10, T=300, x0_offset=2.0, trials=1000,
               round_trials=200_000, draws=20000, abc_samples=4000, noise_trials=20000,
               stationary=STATIONARY)
SEEDS = 5  # the scan's seeds: seed, seed + 1, ..., seed + SEEDS - 1
CHECKS = ("eq9", "eq9_pairs", "lemma2", "noise_free", "noise", "reference",
          "reference_stationary", "abc", "theorem2")
CHECK_NAMES = {
    "eq9": "eq. (9): inclusion frequencies",
    "eq9_pairs": "eq. (9): pair probabilities, averaged over the pairs and per pair",
    "lemma2": "Lemma 2: E[x_{t+1}] against full participation",
    "noise_free": "Table II's noise-free run against its recursion",
    "noise": "the gradient noise a run applies: Var(x_1) of one round, full participation, "
             "against the NumPy implementation (two-sided)",
    "reference": "agreement with an independent implementation (transient: from x* + 2)",
    "reference_stationary": "the same near stationarity (from x*; alpha, T and trials as "
                            "stated above), the variance of x_T too",
    "abc": "Assumption 2: oracle variance against C (f_i - f_i*) + D (one-sided)",
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
    """The faults and their scans."""
    import fedjax_abc as fa

    def mixed(wrong):
        return lambda p, f: dict(sampler=faulty.MixedSampler(
            fa.UniformWithoutReplacement(S), wrong(p), f))

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
              "variance ratio", (1.0, 1.1, 1.25, 1.5, 2.0, 4.0), 1.0,
              ("abc", "noise", "reference_stationary"),
              lambda p, f: dict(oracle=faulty.ScaledNoise(p.oracle, math.sqrt(f)))),
        Fault("stepsize applied twice", "each local step y - factor alpha g",
              "stepsize factor", (1.0, 1.001, 1.01, 1.1, 1.5, 2.0), 1.0,
              ("noise_free", "reference"),
              lambda p, f: dict(algorithm=faulty.ScaledLocalStep(f))),
        Fault("missing server step", "the server keeps x_t in every k-th round",
              "share of rounds skipped 1/k", (0.0, 0.01, 0.02, 0.05, 0.1, 0.5), 0.0,
              ("noise_free", "reference"),
              lambda p, f: dict(algorithm=faulty.SkipsServerSteps(int(round(1 / f)) if f else 0))),
        # appended, so that the faults above keep their keys (fault index k of run_key)
        Fault("oracle variance too small", "the oracle's noise scaled by sqrt(factor) < 1 "
              f"(1/S = {1 / S:g}: the variance of a mean of S draws; 0: no noise)",
              "variance ratio", (1.0, 0.9, 0.75, 0.5, 1.0 / S, 0.0), 1.0,
              ("noise", "reference_stationary"),
              lambda p, f: dict(oracle=faulty.ScaledNoise(p.oracle, math.sqrt(f)))),
        Fault("noise reused across local steps", "one noise draw shared by k consecutive "
              "local steps", "steps per draw k", (1.0, 2.0, 5.0, 10.0), 1.0,
              ("noise", "reference_stationary"),
              lambda p, f: dict(oracle=faulty.ReusedNoise(p.oracle, int(f)))),
        Fault("sampling with replacement", "S independent uniform draws (a client may fill two "
              "slots) in a share of the rounds", "share of rounds", (0.0, 0.1, 0.25, 0.5, 1.0),
              0.0, ("eq9_pairs",), mixed(lambda p: fa.WithReplacement(S))),
        Fault("Bernoulli participation", "each client in independently with p = S/n in a share "
              "of the rounds", "share of rounds", (0.0, 0.1, 0.25, 0.5, 1.0), 0.0,
              ("eq9_pairs", "reference_stationary"),
              mixed(lambda p: fa.Bernoulli(S / p.num_clients))),
    )


class Case(NamedTuple):
    """The small problem the checks run on."""

    problem: object
    offsets: np.ndarray
    x0: float
    alpha: float
    bound: float
    references: dict  # the NumPy reference runs made for this case, by their arguments


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
    return Case(problem, d, x0, float(alpha), float(bound), {})


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


def reference_cached(c: Case, d: np.ndarray, x0: float, S: int, Q: int, alpha: float, T: int,
                     trials: int, seed: int, probs=None, full: bool = False) -> np.ndarray:
    """:func:`reference_run`, computed once per set of arguments for the case ``c`` (the
    NumPy implementation does not depend on the fault, and the scan asks for the same run at
    every size); kept in ``c.references``."""
    key = (np.asarray(d, float).tobytes(), float(x0), int(S), int(Q), float(alpha), int(T),
           int(trials), int(seed), None if probs is None else np.asarray(probs, float).tobytes(),
           bool(full))
    if key not in c.references:
        c.references[key] = reference_run(d, x0, S, Q, alpha, T, trials, seed, probs=probs,
                                          full=full)
    return c.references[key]


def _z(a: np.ndarray, b: np.ndarray) -> float:
    se = math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
    return float((a.mean() - b.mean()) / se) if se > 0 else (0.0 if a.mean() == b.mean() else math.inf)


def _var_z(a: np.ndarray, b: np.ndarray) -> float:
    """z of the difference of two sample variances, each s.e. from its fourth moment
    (sqrt((m4 - v^2) / m)); infinite where one sample has no spread and the other has."""
    def moments(x):
        v = float(x.var(ddof=1))
        m4 = float(np.mean((x - x.mean()) ** 4))
        return v, max(m4 - v * v, 0.0) / x.size

    (va, sa), (vb, sb) = moments(a), moments(b)
    se = math.sqrt(sa + sb)
    if se > 0:
        return (va - vb) / se
    return 0.0 if va == vb else math.copysign(math.inf, va - vb)


def _simulate(c: Case, setting: dict, parts: dict, key, rounds: int, trials: int, x0=None,
              record: int = None, alpha: float = None):
    import warnings

    import fedjax_abc as fa

    kw = dict(parts)
    if "sampler" not in kw:
        kw["num_sampled"] = setting["S"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fa.simulate(c.problem, local_steps=setting["Q"],
                           stepsize=c.alpha if alpha is None else alpha, rounds=rounds,
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


def check_eq9_pairs(parts: dict, setting: dict, key) -> dict:
    """eq. (9)'s pair probability over ``draws`` rounds: the mean number of distinct pairs
    in S_t against S(S-1)/2 (the pair probability averaged over the pairs; exact under the
    paper's sampler, whose every round has S distinct clients), and each pair's count
    against Binomial(draws, S(S-1)/(n(n-1))) (exact two-sided tails, Bonferroni over the
    n(n-1)/2 pairs)."""
    import jax
    from scipy import stats

    import fedjax_abc as fa

    sampler = parts.get("sampler") or fa.UniformWithoutReplacement(setting["S"])
    n, S, m = setting["n"], setting["S"], setting["draws"]
    idx, w = jax.vmap(lambda k: sampler(k, n))(jax.random.split(key, m))
    inside = np.zeros((m, n))
    rows = np.repeat(np.arange(m)[:, None], np.asarray(idx).shape[1], axis=1)
    np.add.at(inside, (rows, np.asarray(idx)), np.asarray(w) > 0)
    inside = (inside > 0).astype(float)
    k = inside.sum(axis=1)
    pairs = k * (k - 1) / 2
    diff, spread = float(pairs.mean() - S * (S - 1) / 2), float(pairs.std(ddof=1))
    z = diff / (spread / math.sqrt(m)) if spread > 0 else (
        0.0 if diff == 0 else math.copysign(math.inf, diff))
    counts = (inside.T @ inside)[np.triu_indices(n, 1)]
    p2 = S * (S - 1) / (n * (n - 1))
    tails = np.minimum(stats.binom.cdf(counts, m, p2), stats.binom.sf(counts - 1, m, p2))
    p_pairs = float(min(1.0, 2 * tails.min() * counts.size))
    return {"flag": abs(z) > Z_FLAG or p_pairs < P_FLAG, "statistic": z,
            "pairs_per_round": float(pairs.mean()), "p_value_pairs": p_pairs}


def check_noise(c: Case, parts: dict, setting: dict, key, seed: int = 0) -> dict:
    """The noise a run applies: Var(x_1) after one round with full participation from x0
    (``noise_trials`` trials) against the NumPy implementation's, two-sided."""
    import fedjax_abc as fa

    R = setting["noise_trials"]
    run = dict(parts, sampler=fa.FullParticipation())
    got = np.asarray(_simulate(c, setting, run, key, 1, R).x_final[:, 0], float)
    want = reference_cached(c, c.offsets, c.x0, setting["n"], setting["Q"], c.alpha, 1, R,
                            23456 + seed, full=True)
    z = _var_z(got, want)
    ratio = float(got.var() / want.var()) if want.var() > 0 else math.nan
    return {"flag": abs(z) > Z_FLAG, "statistic": z, "variance_ratio": ratio}


def check_reference_stationary(c: Case, parts: dict, setting: dict, key, probs=None,
                               seed: int = 0) -> dict:
    """x_T and f(x_T) - f* against the NumPy implementation near stationarity: from x*, at
    ``setting["stationary"]``'s alpha and T (its own number of trials): the means of x_T and
    of the gap, and the variance of x_T (two-sided, s.e. from the fourth moments), where
    the noise and the sampling set the spread."""
    st = setting.get("stationary", STATIONARY)
    x_star = float(c.problem.x_star[0])
    res = _simulate(c, setting, parts, key, st["T"], st["trials"], x0=x_star, alpha=st["alpha"])
    ref = reference_cached(c, c.offsets, x_star, setting["S"], setting["Q"], st["alpha"], st["T"],
                           st["trials"], 34567 + seed, probs=probs)
    f_star = float(c.problem.f_star)
    gap_ref = np.mean(_huber(ref[:, None] - c.offsets[None, :]), axis=1) - f_star
    x = np.asarray(res.x_final[:, 0], float)
    zx, zv = _z(x, ref), _var_z(x, ref)
    zg = _z(np.asarray(res.gap[:, -1], float), gap_ref)
    return {"flag": max(abs(zx), abs(zg), abs(zv)) > Z_FLAG, "statistic": max(zx, zg, zv, key=abs),
            "z_x": zx, "z_gap": zg, "z_var": zv}


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


def check_reference(c: Case, parts: dict, setting: dict, key, probs=None,
                    seed: int = 0) -> tuple[dict, dict]:
    """x_T and f(x_T) - f* against the NumPy implementation; bound (21) against the
    observed min_t E||grad f(x_t)||^2 of the same run (both results). ``seed``: the scan's
    seed offset, added to the NumPy implementation's own seed."""
    R, T = setting["trials"], setting["T"]
    res = _simulate(c, setting, parts, key, T, R, record=common.record_every(T, 30))
    ref = reference_cached(c, c.offsets, c.x0, setting["S"], setting["Q"], c.alpha, T, R,
                           12345 + seed, probs=probs)
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


def run_fault(fault: Fault, factor: float, c: Case, setting: dict, key, seed: int = 0,
              checks=CHECKS) -> dict:
    """Every check (of ``checks``) on ``fault`` at ``factor``: check name -> result (None:
    not applicable); ``seed``: the scan's seed offset for the NumPy implementation."""
    import jax

    parts = fault.parts(c.problem, factor)
    probs = None
    if fault.name == "unweighted mean":
        probs = _importance_probs(setting["n"], factor)
    out = {}
    if "reference" in checks or "theorem2" in checks:
        out["reference"], out["theorem2"] = check_reference(
            c, parts, setting, jax.random.fold_in(key, 3), probs, seed)
    run = {"eq9": lambda: check_eq9(parts, setting, jax.random.fold_in(key, 0))
           if fault.paper_sampler else None,
           "eq9_pairs": lambda: check_eq9_pairs(parts, setting, jax.random.fold_in(key, 5))
           if fault.paper_sampler else None,
           "lemma2": lambda: check_lemma2(c, parts, setting, jax.random.fold_in(key, 1)),
           "noise_free": lambda: check_noise_free(c, parts, setting, jax.random.fold_in(key, 2)),
           "noise": lambda: check_noise(c, parts, setting, jax.random.fold_in(key, 6), seed),
           "reference_stationary": lambda: check_reference_stationary(
               c, parts, setting, jax.random.fold_in(key, 7), probs, seed),
           "abc": lambda: check_abc(c, parts, setting, jax.random.fold_in(key, 4))}
    for name in checks:
        if name not in out:
            out[name] = run[name]()
    return {name: out[name] for name in checks}


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


def scan(setting: dict = SETTING, seed: int = 0, which=None, progress=None,
         offset: int = 0) -> list[dict]:
    """Every fault (or those named in ``which``) at every factor of its scan, for one seed;
    fault k at factor j uses ``common.run_key(seed, "faults", k, j)``; ``offset``: the seed's
    place in the scan (0 for the first), added to the NumPy implementation's own seeds;
    ``progress(done, total, seconds)`` is told after each factor."""
    c = case(setting)
    chosen = [(k, _sizes(f, setting)) for k, f in enumerate(faults(setting["S"]))
              if which is None or f.name in which]
    total, done = sum(len(f.factors) for _, f in chosen), 0
    out = []
    for k, fault in chosen:
        rows = []
        for j, f in enumerate(fault.factors):
            rows.append({"factor": f, "checks": run_fault(
                fault, f, c, setting, common.run_key(seed, "faults", k, j), offset)})
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


def _sizes(fault: Fault, setting: dict) -> Fault:
    """The fault with the sizes its scan runs: all of them, or with ``setting["ends"]`` the
    neutral size and the largest only (a quick run: whether the checks catch the gross
    mistake and pass the correct component, no thresholds)."""
    if not setting.get("ends"):
        return fault
    far = max(fault.factors, key=lambda f: abs(f - fault.neutral))
    return fault._replace(factors=(fault.neutral, far))


def scan_seeds(setting: dict = SETTING, seed: int = 0, seeds: int = SEEDS, which=None,
               progress=None) -> list[dict]:
    """:func:`scan` for the seeds seed, seed + 1, ..., seed + seeds - 1, one result per fault:
    the first seed's scan and thresholds, and "seeds" (the seeds), "per_seed" (each seed's
    "thresholds" and "neutral_passes"), "threshold_spread" (check -> the threshold of each
    seed), "neutral_passes" and "expected_catch" over every seed."""
    runs = []
    count = sum(len(_sizes(f, setting).factors) for f in faults(setting["S"])
                if which is None or f.name in which)
    for i in range(seeds):
        tell = None if progress is None else (
            lambda done, total, sec, i=i: progress(i * count + done, seeds * count, sec))
        runs.append(scan(setting, seed + i, which, tell, offset=i))
    out = []
    for per in zip(*runs):
        first = dict(per[0])
        first.update(seeds=[seed + i for i in range(seeds)],
                     per_seed=[{"seed": seed + i, "thresholds": f["thresholds"],
                                "neutral_passes": f["neutral_passes"],
                                "flags": {name: [None if r["checks"][name] is None else
                                                 bool(r["checks"][name]["flag"]) for r in f["scan"]]
                                          for name in CHECKS}}
                               for i, f in enumerate(per)],
                     threshold_spread={name: [f["thresholds"][name] for f in per] for name in CHECKS},
                     neutral_passes=all(f["neutral_passes"] for f in per),
                     expected_catch=all(f["expected_catch"] for f in per))
        out.append(first)
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


def spread_text(values, fault: dict) -> str:
    """The thresholds of several seeds as one cell: the value where all seeds agree, else
    each value (nearest the neutral size first) with the number of seeds that gave it
    ("1.5 x3, 2 x2")."""
    texts = [threshold_text(t, fault) for t in values]
    if len(set(texts)) == 1:
        return texts[0]

    def order(t):
        return (t is None, abs(t - fault["neutral"]) if isinstance(t, float) else 0.0)

    seen = {}
    for t, text in sorted(zip(values, texts), key=lambda p: order(p[0])):
        seen[text] = seen.get(text, 0) + 1
    return ", ".join(f"{text} x{n}" for text, n in seen.items())


def run(settings: common.Settings, progress: common.Progress) -> dict:
    """The scan of every fault over ``SEEDS`` seeds; returns the document of ``faults.json``."""
    setting = dict(SETTING)
    if settings.quick:  # one seed, the neutral and the largest size, shorter runs
        setting.update(trials=200, round_trials=20_000, draws=5000, abc_samples=1000,
                       noise_trials=2000, stationary=dict(STATIONARY, T=300, trials=200),
                       ends=True)
    if settings.trials:  # the transient runs' trials; the stationary run keeps its own
        setting["trials"] = settings.trials
    if settings.rounds:
        setting["T"] = settings.rounds
    seeds = 1 if settings.quick else SEEDS
    total = seeds * sum(len(_sizes(f, setting).factors) for f in faults(setting["S"]))
    progress.plan(float(total))
    callback = progress.task("faults", float(total), unit="sizes", work_unit="sizes")
    results = scan_seeds(setting, settings.seed, seeds, progress=callback)
    progress.finish_task()
    c = case(setting)
    config = common.base_config(settings, "faults", setting["trials"], setting["T"],
                                "quick" if settings.quick else "paper")
    config.update(precision="float64", problem="huber_offsets (eq. 27), paper offsets", setting=setting,
                  alpha=c.alpha, alpha_rule="the stepsize (22) of Theorem 2", bound=c.bound,
                  x0=f"x* + {setting['x0_offset']:g}", z_flag=Z_FLAG, p_flag=P_FLAG,
                  exact=EXACT, checks=CHECK_NAMES, seeds=[settings.seed + i for i in range(seeds)],
                  key_tags="(fault index, factor index) under each seed")
    return {"experiment": "faults", "config": config, "faults": results,
            "catch_nothing": [k for k in CHECKS if all(
                all(t in (None, "n/a") for t in f.get("threshold_spread", {}).get(
                    k, [f["thresholds"][k]])) for f in results)]}


def write(doc: dict, out: str) -> list[str]:
    """faults.json and faults.csv (one row per fault, seed and factor, one column per check)."""
    import os

    paths = [common.write_json(os.path.join(out, "faults.json"), doc)]
    names = list(doc["config"].get("checks") or CHECKS)
    rows = []
    for f in doc["faults"]:
        for per in f.get("per_seed") or [{"seed": doc["config"].get("seed"), "flags": {
                k: [None if r["checks"][k] is None else bool(r["checks"][k]["flag"])
                    for r in f["scan"]] for k in names}}]:
            for j, r in enumerate(f["scan"]):
                rows.append([f["fault"], per["seed"], r["factor"]] + [
                    "" if per["flags"][k][j] is None else int(per["flags"][k][j]) for k in names])
    paths.append(common.write_csv(os.path.join(out, "faults.csv"),
                                  ["fault", "seed", "factor"] + [f"flagged_{k}" for k in names],
                                  rows))
    return paths


def report_lines(doc: dict, card: list, say) -> list[str]:
    """The report's section: which checks catch each fault, from which size on (over the
    seeds the results carry)."""
    c, res = doc["config"], doc["faults"]
    s = c["setting"]
    names = list(c["checks"])  # the checks these results ran
    seeds = c.get("seeds") or [c.get("seed")]
    st = s.get("stationary")
    spread = (f"Each cell: the detection threshold over {len(seeds)} seeds (keys of their own): "
              "the smallest size of the mistake from which the check flags it at every larger "
              "size of the scan; one value where all seeds agree, else each value with the "
              "number of seeds that gave it ('x3')" if len(seeds) > 1 else
              "Each cell: the detection threshold, the smallest size of the mistake from which "
              "the check flags it at every larger size of the scan, from one seed (fixed keys; "
              f"a rerun of `fedjax-abc reproduce faults` scans {SEEDS} seeds and gives the "
              "spread)")
    lines = ["## Faulty implementations: which checks catch them", "",
             "Beside wrong constants (the negative controls above), the report's checks run on "
             "deliberately faulty simulators (`fedjax_abc.repro.faulty`: components built from "
             "the library's abstract sampler, oracle and algorithm, the library's own "
             f"untouched), each scanned over the size of its mistake, on problem (27) (Dmax = "
             f"{s['d_max']:g}, n = {s['n']}, S = {s['S']}, Q = {s['Q']}, T = {s['T']}, x0 = "
             f"{c['x0']}, alpha = {c['alpha']:.3g}, the stepsize (22))"
             + (f"; near stationarity from x* at alpha = {st['alpha']:g}, T = {st['T']}, "
                f"{st['trials']} trials" if st else "") + ". Checks: "
             + "; ".join(f"*{k}*: {v}" for k, v in c["checks"].items())
             + f". A check flags at |z| > {c['z_flag']:g} (eq. (9): p < {c['p_flag']:g}; the "
             f"noise-free run: relative error above {c['exact']:g}). {spread}; '<=': already at "
             "the smallest size tried; '-': not caught within the scan; n/a: does not apply "
             "(eq. (9) is the paper's uniform sampler's). Starred: the checks that should "
             "catch the fault. At the neutral size (the correct component) every check must "
             "pass.", "",
             "| fault | what is wrong | size of the mistake (scan) | "
             + " | ".join(k for k in names) + " | correct passes |",
             "|---|---|---|" + "---|" * len(names) + "---|"]
    for f in res:
        scan_txt = ", ".join(f"{r['factor']:g}" for r in f["scan"])
        spreads = f.get("threshold_spread") or {k: [f["thresholds"][k]] for k in names}
        cells = [spread_text(spreads[k], f) + ("*" if k in f["expected"] else "") for k in names]
        lines.append(f"| {f['fault']} | {f['what']} | {f['factor_name']}: {scan_txt} | "
                     + " | ".join(cells) + f" | {'yes' if f['neutral_passes'] else '**no**'} |")
        caught = f["expected_catch"] and f["neutral_passes"]
        say(card, "Faulty implementations", f"the checks catch the fault: {f['fault']}",
            ", ".join(f"{k} from {spread_text(spreads[k], f)}" for k in f["expected"])
            + ("; the correct component passes" if f["neutral_passes"] else
               "; the correct component is flagged"),
            "holds" if caught else "contradicted",
            statistic=f"per check and size: |z| > {c['z_flag']:g} (eq. (9): chi^2 p < "
                      f"{c['p_flag']:g}; noise-free run: relative error > {c['exact']:g}), "
                      + (f"over {len(seeds)} seeds" if len(seeds) > 1 else "fixed keys, one seed"),
            kind="self-check")
    nothing = doc.get("catch_nothing") or []
    lines += ["", ("Checks that catch none of these faults within their scans: "
                   + ", ".join(f"*{k}* ({c['checks'][k]})" for k in nothing) + "."
                   if nothing else "Every check catches at least one fault.")]
    new_checks = [k for k in CHECKS if k not in c["checks"]]
    new_faults = [f.name for f in faults(s["S"]) if f.name not in {x["fault"] for x in res}]
    if new_checks or new_faults:
        lines += ["", "These results predate "
                  + " and ".join(part for part in (
                      ("the checks " + ", ".join(f"*{k}* ({CHECK_NAMES[k]})" for k in new_checks))
                      if new_checks else "",
                      ("the faults " + ", ".join(new_faults)) if new_faults else "") if part)
                  + f"; `fedjax-abc reproduce faults` runs them, over {SEEDS} seeds."]
    return lines + [""]
