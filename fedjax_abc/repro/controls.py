"""Negative controls: inputs under which the theory checks must fail, beside ones where they pass.

A check that passes whatever it is given tests nothing: on the paper's problems (15)-(19)
hold with wide margins even with C = 0 or a too-small L. A negative control is a small case
where the check is nearly tight with the true constants, so that one wrong input (a too-small
L; C = 0 or D = 0 for a noisy oracle; sigma_f* = 0 for heterogeneous clients; a stepsize far
outside the condition) makes it fail by many standard errors. Every correct row must pass
and every wrong row fail; what a check cannot see is listed in :data:`CANNOT_FAIL`.

The problems are f_i(x) = |x - c_i|^2 / 2 (L = 1, f_i* = 0, x* and f* in closed form) with
``fa.GaussianOracle(C, D)`` (variance C (f_i - f_i*) + D, with equality). Per family one
function (:func:`lemma_controls`, :func:`theorem2_controls`, :func:`theorem3_controls`);
:func:`run` gathers them (strict JSON), :func:`control_lines` renders the table.

Reference: Lemmas 4-8, eq. (15)-(19); Theorem 2, eq. (20)-(21); Theorem 3.
"""

from __future__ import annotations

import math
from typing import final

import jax
import jax.numpy as jnp
import numpy as np

import fedjax_abc as fa

Z_FAIL = 3.0  # holds when mean(lhs - rhs) <= 3 standard errors, as in lemma_diagnostics
EQUATION = {4: "(15)", 5: "(16)", 6: "(17)", 7: "(18)", 8: "(19)"}
SHAPE = dict(n=4, d=4, S=2, Q=4, M=1000)  # of every lemma case
CANNOT_FAIL = (  # measured on these cases; no wrong row for them
    "(16), (18): no C, no D, no stepsize condition; sigma_f* is the problem's own",
    "(17): L multiplies only sigma_f* and the gap; slack 28 on clients at +-1: L = 0.2 holds",
    "(17), (19): 14x their stepsize limits hold; they fail once local steps overshoot",
    "(15): a too-large stepsize fails at 3x-6x 1/(2LQ), holds again at 8x and 14x",
    "Theorem 2: outside (20), (21) outgrows the observed minimum (83x at 5x the limit)",
    "(15)-(19): a factor-2 error in L, C or D (each halved) holds on every case: their slacks "
    "are about 2, so rhs/lhs falls to 0.98-1.1, within 3 s.e. (the wrong rows above are 5x "
    "or more off; factor2_errors)",
)
# The factor-2 errors of CANNOT_FAIL: each constant of a case halved (L always; C and D where
# the case has them).
HALVED = ("L", "C", "D")


def _loss(c, x):  # module level, so that every problem here shares one compiled program
    return 0.5 * jnp.sum((x - c) ** 2)


@final
class SignOracle(fa.AbstractOracle):
    """g_i = grad f_i + eps sqrt((C (f_i - f_i*) + D)/d), eps uniform on {-1, 1}^d: variance
    C (f_i - f_i*) + D exactly, as ``GaussianOracle(C, D)``, but cheaper to draw."""

    C: jax.Array
    D: jax.Array

    def noise(self, key, shape, dtype):
        return jax.random.rademacher(key, shape, dtype)

    def gradient(self, problem, client, x, noise):
        f, g = problem.local_value_and_grad(client, x)
        var = self.C * jnp.maximum(f - client.local_min, 0.0) + self.D
        return g + noise * jnp.sqrt(var / x.shape[-1])


def quadratic(centres, C: float, D: float, signs: bool = False) -> fa.Problem:
    """f_i(x) = |x - c_i|^2 / 2, centres c (n, d), oracle GaussianOracle(C, D) (or SignOracle).

    Example:
      >>> import numpy as np
      >>> p = quadratic(np.array([[-1.0], [1.0]]), C=0.0, D=1.0)
      >>> float(p.f_star), float(p.x_star[0])
      (0.5, 0.0)
    """
    c = np.asarray(centres, np.float64)
    if c.ndim != 2 or c.shape[0] < 2:
        raise ValueError(f"centres must have shape (n >= 2, d), got {c.shape}")
    x_star = c.mean(axis=0)
    f_star = float(np.mean(0.5 * np.sum((x_star - c) ** 2, axis=1)))
    oracle = SignOracle(jnp.asarray(C, float), jnp.asarray(D, float)) if signs else \
        fa.GaussianOracle(C, D)
    return fa.Problem(loss=_loss, params=jnp.asarray(c), local_minima=jnp.zeros(c.shape[0]),
                      f_star=jnp.asarray(f_star), x_star=jnp.asarray(x_star), oracle=oracle,
                      name="quadratic")


def _lemma_cases() -> list[dict]:
    """Per case: centres, x_t, alpha, the true constants, and per lemma its wrong inputs."""
    n, d, Q = SHAPE["n"], SHAPE["d"], SHAPE["Q"]
    same, split = np.zeros((n, d)), np.repeat([[-1.0], [-1.0], [1.0], [1.0]], d, axis=1)
    return [
        dict(case="shared minimiser, additive noise (C = 0, D = 1), x_t = x*", centres=same,
             x=np.zeros(d), alpha=0.005, C=0.0, D=1.0,
             wrong={4: [dict(L=0.2), dict(D=0.0)], 5: [dict(L=0.2)],
                    6: [dict(D=0.0), dict(alpha=4.0)], 8: [dict(L=0.2), dict(D=0.0), dict(alpha=4.0)]}),
        dict(case="clients at +-1, multiplicative noise (C = 300, D = 0), x_t = x*",
             centres=split, x=np.zeros(d), alpha=1 / (8 * Q * 301.0), C=300.0, D=0.0,
             wrong={4: [dict(C=0.0)], 6: [dict(C=0.0)], 8: [dict(C=0.0)]}),
        dict(case="clients at +-1, weak additive noise (D = 0.01), x_t = x*", centres=split,
             x=np.zeros(d), alpha=0.01, C=0.0, D=0.01, wrong={6: [dict(L=0.02)], 7: [dict(L=0.2)]}),
        dict(case="shared minimiser, weak noise (D = 0.01), x_t = x* + 1", centres=same,
             x=np.ones(d), alpha=1 / (2 * Q), C=0.0, D=0.01, wrong={4: [dict(alpha=4 / (2 * Q))]}),
    ]


def _z(diff: float, se: float) -> float:
    return diff / se if se > 0 else math.copysign(math.inf, diff)


def _label(change: dict, limit: float) -> str:
    if "alpha" in change:
        return f"alpha = {change['alpha']:g} ({change['alpha'] / limit:.0f}x the limit)"
    return ", ".join(f"{k} = {v:g}" for k, v in change.items()) or "correct"


def lemma_controls(key) -> list[dict]:
    """Lemmas 4-8: each case's correct constants and wrong inputs through ``lemma_diagnostics``.

    Args:
      key: a JAX PRNG key. All inputs of case j use ``fold_in(key, j)`` on purpose: the
        correct and the wrong constants are judged on the same replicates.

    Returns:
      A dict per (lemma, case, input): "check", "lemma", "equation", "case", "input", "stepsize",
      "stepsize_limit", "stepsize_ok", "lhs", "rhs", "ratio" (rhs/lhs), "z" (mean(lhs - rhs)
      over its paired standard error), "holds", "expected" (should hold), "as_expected".
    """
    rows = []
    for j, case in enumerate(_lemma_cases()):
        p, runs = quadratic(case["centres"], case["C"], case["D"]), {}
        true = dict(L=1.0, C=case["C"], D=case["D"], alpha=case["alpha"])
        for lemma in sorted(case["wrong"]):
            for change in [{}] + case["wrong"][lemma]:
                a, tag = {**true, **change}, tuple(change.items())
                if tag not in runs:
                    runs[tag] = fa.theory.lemma_diagnostics(
                        jax.random.fold_in(key, j), p, case["x"][None], stepsize=a["alpha"],
                        num_sampled=SHAPE["S"], local_steps=SHAPE["Q"], L=a["L"], C=a["C"],
                        D=a["D"], num_replicates=SHAPE["M"])
                ch = runs[tag].checks[lemma - 4]
                holds = bool(ch.holds[0])
                rows.append(dict(
                    check=f"Lemma {lemma} {EQUATION[lemma]}", lemma=lemma, equation=EQUATION[lemma],
                    case=case["case"], input=_label(change, ch.stepsize_limit),
                    stepsize=float(a["alpha"]), stepsize_limit=float(ch.stepsize_limit),
                    stepsize_ok=bool(ch.stepsize_ok), lhs=float(ch.lhs[0]), rhs=float(ch.rhs[0]),
                    ratio=float(ch.ratio[0]), holds=holds, expected=not change,
                    z=_z(float(ch.lhs[0] - ch.rhs[0]), float(ch.diff_stderr[0])),
                    as_expected=holds == (not change)))
    return sorted(rows, key=lambda r: r["lemma"])  # stable: cases keep their order


def factor2_errors(key) -> list[dict]:
    """Every lemma check on every case of :func:`lemma_controls` with one of L, C, D halved
    (a factor-2 error), on the replicates of the correct row (``fold_in(key, j)``): what
    :data:`CANNOT_FAIL` says the checks cannot see.

    Returns:
      A dict per (case, halved constant, lemma): "case", "input", "lemma", "ratio" (rhs/lhs),
      "z", "holds".
    """
    rows = []
    for j, case in enumerate(_lemma_cases()):
        p = quadratic(case["centres"], case["C"], case["D"])
        true = dict(L=1.0, C=case["C"], D=case["D"])
        for name in HALVED:
            if not true[name]:
                continue
            a = {**true, name: true[name] / 2}
            r = fa.theory.lemma_diagnostics(
                jax.random.fold_in(key, j), p, case["x"][None], stepsize=case["alpha"],
                num_sampled=SHAPE["S"], local_steps=SHAPE["Q"], L=a["L"], C=a["C"], D=a["D"],
                num_replicates=SHAPE["M"])
            for lemma, ch in zip(sorted(EQUATION), r.checks):
                rows.append(dict(case=case["case"], input=f"{name} = {a[name]:g}", lemma=lemma,
                                 ratio=float(ch.ratio[0]), holds=bool(ch.holds[0]),
                                 z=_z(float(ch.lhs[0] - ch.rhs[0]), float(ch.diff_stderr[0]))))
    return rows


def theorem2_comparison(key, problem, x0, *, stepsize: float, num_sampled: int, local_steps: int,
                        rounds: int, trials: int, claims: dict) -> list[dict]:
    """Bound (21) under each claimed set of constants against one run's min_t E||grad f(x_t)||^2.

    ``observed``: the least over t < T of the mean over trials of ||grad f(x_t)||^2, with its
    standard error; a claim holds when observed - bound <= 3 standard errors.

    Args:
      key: the run's PRNG key. problem, x0: the problem and x_0 (Delta_f = f(x0) - f*).
      stepsize, num_sampled, local_steps, rounds, trials: alpha, S, Q, T, trials (>= 2).
      claims: label -> dict(L=, C=, D=, sigma_f_star=), the constants (21) is evaluated with.

    Returns:
      A dict per claim: "input", "L", "C", "D", "sigma_f_star", "stepsize", "stepsize_limit"
      (20) and "stepsize_ok" under it, "bound", "observed", "observed_stderr", "argmin_round",
      "ratio" (bound/observed), "z" ((observed - bound)/stderr), "holds".
    """
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials < 2:
        raise ValueError(f"trials ({trials!r}) must be an integer >= 2 for a standard error")
    if not claims:
        raise ValueError("claims must name at least one set of constants (label -> dict)")
    res = fa.simulate(problem, num_sampled=num_sampled, local_steps=local_steps, stepsize=stepsize,
                      rounds=rounds, x0=x0, trials=trials, key=key, record_every=1, record_x=False)
    if res.num_diverged:
        raise ValueError(f"{res.num_diverged} of {trials} trials diverged at alpha = {stepsize:g}")
    summ = fa.summarize(np.asarray(res.grad_norm_sq, np.float64)[:, :-1])  # t = 0, ..., T - 1
    t = int(np.argmin(summ.mean))
    observed, stderr = float(summ.mean[t]), float(summ.stderr[t])
    delta = float(problem.astype(jnp.float64).gap(jnp.asarray(x0, jnp.float64)))
    n, rows = problem.num_clients, []
    for label, k in claims.items():
        bound = fa.theory.theorem2_bound(stepsize, k["L"], k["C"], k["D"], k["sigma_f_star"], delta,
                                         n, num_sampled, local_steps, rounds, check_stepsize=False)
        limit = fa.theory.theorem2_stepsize_limit(k["L"], k["C"], n, num_sampled, local_steps, rounds)
        z = _z(observed - bound, stderr)
        rows.append(dict(input=label, **{v: float(k[v]) for v in ("L", "C", "D", "sigma_f_star")},
                         stepsize=float(stepsize), stepsize_limit=float(limit),
                         stepsize_ok=bool(stepsize <= limit * (1 + 1e-12)), bound=float(bound),
                         observed=observed, observed_stderr=stderr, argmin_round=t, z=z,
                         ratio=bound / observed if observed > 0 else math.inf, holds=z <= Z_FAIL))
    return rows


def theorem2_controls(key, *, dim: int = 64, rounds: int = 2000, trials: int = 64) -> list[dict]:
    """Theorem 2 at the largest stepsize (20), full participation (n = S = 4), Q = 1.

    x0 puts ||grad f(x0)||^2 at the noise floor alpha (C sigma_f* + D)/(S (2 - alpha)), where
    the observed minimum stays, while (21) without its noise terms is about 6/(alpha Q T)
    of it: D = 0 and L/50 fail on additive noise, sigma_f* = 0 and C = 0 on multiplicative
    noise with heterogeneous clients (:class:`SignOracle`).

    Args:
      key: a JAX PRNG key (case j: ``fold_in(key, j)``). dim, rounds, trials: d, T, trials.

    Returns:
      :func:`theorem2_comparison`'s rows with "check", "case", "expected", "as_expected".
    """
    n, S, Q = 4, 4, 1
    split = np.repeat([[-0.25], [-0.25], [0.25], [0.25]], dim, axis=1)
    cases = [("shared minimiser, additive noise (C = 0, D = 1)", np.zeros((n, dim)), 0.0, 1.0,
              [dict(D=0.0), dict(L=0.02)]), ("clients at +-1/4, multiplicative noise (C = 10, "
              "D = 0)", split, 10.0, 0.0, [dict(sigma_f_star=0.0), dict(C=0.0)])]
    rows = []
    for j, (case, centres, C, D, wrong) in enumerate(cases):
        p = quadratic(centres, C, D, signs=True)
        true = dict(L=1.0, C=C, D=D, sigma_f_star=max(0.0, fa.theory.sigma_f_star(p)))
        alpha = fa.theory.theorem2_stepsize_limit(1.0, C, n, S, Q, rounds)
        floor = alpha * (C * true["sigma_f_star"] + D) / (S * (2 - alpha))
        x0 = np.asarray(p.x_star, np.float64) + math.sqrt(floor / dim)
        claims = {_label(ch, 1.0): {**true, **ch} for ch in [{}] + wrong}
        for r in theorem2_comparison(jax.random.fold_in(key, j), p, x0, stepsize=alpha, num_sampled=S,
                                     local_steps=Q, rounds=rounds, trials=trials, claims=claims):
            ok = r["input"] == "correct"
            rows.append(dict(check="Theorem 2 (21)", case=case, **r, expected=ok,
                             as_expected=r["holds"] == ok))
    return rows


def theorem3_controls(L: float = 1.0, C: float = 1.0, Q: int = 4, horizon: int = 1000) -> list[dict]:
    """Theorem 3's conditions on one valid and four invalid schedules (alpha_0 = 1/(8Q(L+C))).

    Accepted ("holds"): ``check_theorem3_schedule`` finds alpha_t <= 1/(8 Q (L + C))
    ("stepsize_ok") and sum alpha_t = inf, sum alpha_t^2 < inf ("tail_exponent_ok").

    Returns:
      A dict per schedule: "check", "case", "input", "stepsize_ok", "sum_diverges",
      "sum_sq_converges", "tail_exponent", "holds", "expected", "as_expected".
    """
    a0 = fa.theory.theorem3_stepsize_limit(L, C, Q)

    def power(scale, p, shift=1.0):
        return lambda t: scale * (shift / (jnp.asarray(t, jnp.float64) + shift)) ** p

    schedules = [("alpha_0 (t0/(t + t0))^0.6, t0 = 100", "valid", power(a0, 0.6, 100.0), True),
                 ("constant alpha_0", "sum alpha_t^2 = inf", a0, False),
                 ("alpha_0/(t + 1)^0.4", "sum alpha_t^2 = inf", power(a0, 0.4), False),
                 ("alpha_0/(t + 1)^1.5", "sum alpha_t < inf", power(a0, 1.5), False),
                 ("2 alpha_0/(t + 1)^0.6", "alpha_0 above 1/(8Q(L+C))", power(2 * a0, 0.6), False)]
    rows = []
    for case, label, schedule, expected in schedules:
        c = fa.theory.check_theorem3_schedule(schedule, L, C, Q, horizon)
        ok = bool(c.holds and c.tail_exponent_ok)
        rows.append(dict(check="Theorem 3", case=case, input=label, stepsize_ok=bool(c.holds),
                         sum_diverges=bool(c.sum_diverges), sum_sq_converges=bool(c.sum_sq_converges),
                         tail_exponent=float(c.tail_exponent), holds=ok, expected=expected,
                         as_expected=ok == expected))
    return rows


def run(key) -> dict:
    """{"lemmas", "theorem2", "theorem3": rows, "cannot_fail", "all_as_expected"}; strict JSON
    (a non-finite number, such as z over a zero standard error, becomes None)."""
    try:
        k_lemmas, k_thm2 = jax.random.split(key)
    except (TypeError, ValueError):
        raise ValueError(f"key must be a JAX PRNG key, e.g. jax.random.key(0); got {key!r}") from None
    doc = {"lemmas": lemma_controls(k_lemmas), "theorem2": theorem2_controls(k_thm2),
           "theorem3": theorem3_controls()}
    doc = {name: [{k: None if isinstance(v, float) and not math.isfinite(v) else v
                   for k, v in r.items()} for r in rows] for name, rows in doc.items()}
    return {**doc, "cannot_fail": list(CANNOT_FAIL),
            "all_as_expected": all(r["as_expected"] for rows in doc.values() for r in rows)}


def _num(v) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.3g}"


def control_lines(doc: dict) -> list[str]:
    """The Markdown section "**Negative controls.**": a table (a row per control) and a verdict.

    Example:
      >>> control_lines({"lemmas": [], "theorem2": [], "theorem3": []})[0][:25]
      '**Negative controls.** Ea'
    """
    if not all(name in doc for name in ("lemmas", "theorem2", "theorem3")):
        raise ValueError("doc needs 'lemmas', 'theorem2', 'theorem3': pass what controls.run returns")
    lines = ["**Negative controls.** Each check on a case where it is nearly tight: with the true "
             "constants it must pass, with one wrong input fail (z: mean(lhs - rhs), or observed "
             "minus bound, in standard errors; a check holds at z <= 3).", "",
             "| check | case | input | slack rhs/lhs or bound/observed | z | verdict |",
             "| --- | --- | --- | --- | --- | --- |"]
    rows = doc["lemmas"] + doc["theorem2"] + doc["theorem3"]
    for r in rows:
        verdict = ("accepted", "rejected") if r["check"] == "Theorem 3" else ("holds", "fails")
        verdict = verdict[0] if r["holds"] else verdict[1]
        lines.append(f"| {r['check']} | {r['case']} | {r['input']} | {_num(r.get('ratio'))} | "
                     f"{_num(r.get('z'))} | {verdict}{'' if r['as_expected'] else ' (unexpected)'} |")
    good = [r["as_expected"] for r in rows if r["expected"]]
    bad = [r["as_expected"] for r in rows if not r["expected"]]
    lines += ["", f"{'Every' if all(good + bad) else 'Not every'} control behaves as it should: "
              f"{sum(good)} of {len(good)} correct inputs pass and {sum(bad)} of {len(bad)} "
              "wrong inputs fail."]
    return lines
