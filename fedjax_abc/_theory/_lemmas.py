"""Lemmas 4-8 (inequalities 15-19) as numerical diagnostics, by Monte Carlo over one round.

Every quantity the proofs of Section II-D bound is a conditional expectation E_t[.] given x_t
over one round's randomness: the oracle noise along the n virtual trajectories
x~^l_{i,t} (Section II-A, all n clients, l = 0, ..., Q-1) and the sampled set S_t (S of n,
without replacement, Assumption 3). From each given point x_t, :func:`lemma_diagnostics` runs
M independent replicates of one round of Algorithm 1 (:func:`round_sample`: the package's
oracle and sampler) and estimates, with standard errors,

- the drift sum sum_i sum_l E_t||x~^l_{i,t} - x_t||^2,
- the local objective gaps sum sum_i sum_l E_t[f_i(x~^l_{i,t}) - f_i*],
- Psi_t (Lemma 3), E_t||G_t||^2, the sampling error of Lemma 3 (eq. 14) and
  E_t[f(x_{t+1})] - f*;

then evaluates both sides of (15)-(19) with the constants L, C, D, sigma_f*, I_S
(:func:`lemma4_terms` ... :func:`lemma8_terms`, one per inequality). Every side is linear
in these expectations, so each replicate gives an unbiased sample of lhs - rhs, and an
inequality *holds* at a point when the mean of lhs - rhs is at most 3 of its standard
errors (paired, same replicates). The points can be any x_t, e.g. iterates of a run
(``theory.run_points`` of ``simulate(..., record_x=True)``).

Reference: Lemmas 3-8, eq. (14)-(19), Appendices C-F.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_abc._problems._oracles import AbstractOracle
from fedjax_abc._problems._problem import Problem, cast_floating
from fedjax_abc._problems._samplers import UniformWithoutReplacement, sample_mask
from fedjax_abc._theory._grid import check_int, check_nonneg, check_positive
from fedjax_abc._theory._heterogeneity import sampling_factor, sigma_f_star

__all__ = ["Estimate", "LemmaCheck", "LemmaConstants", "LemmaDiagnostics", "RoundSample",
           "lemma4_terms", "lemma5_terms", "lemma6_terms", "lemma7_terms", "lemma8_terms",
           "lemma_diagnostics", "lemma_stepsize_limits", "round_sample"]

Z_HOLDS = 3.0  # an inequality holds when mean(lhs - rhs) <= 3 standard errors


class RoundSample(NamedTuple):
    """One replicate of one round from x_t (scalars; a leading axis per vmap).

    Attributes:
      drift: sum_i sum_{l<Q} ||x~^l_{i,t} - x_t||^2 (Lemmas 4, 6, 7).
      gaps: sum_i sum_{l<Q} (f_i(x~^l_{i,t}) - f_i*) (Lemmas 4, 5).
      psi: (1/n) sum_i ||sum_l grad f_i(x~^l_{i,t}) - Q grad f-bar_t||^2, Psi_t's sample (Lemma 3).
      sampling_error: ||(1/S) sum_{i in S_t} sum_l grad f_i(x~^l_{i,t}) - Q grad f-bar_t||^2 (14).
      grad_bar_sq: ||grad f-bar_t||^2 (Lemma 2).
      G_sq: ||G_t||^2 (eq. 6).
      next_gap: f(x_{t+1}) - f*, x_{t+1} = x_t - alpha G_t.
    """

    drift: jax.Array
    gaps: jax.Array
    psi: jax.Array
    sampling_error: jax.Array
    grad_bar_sq: jax.Array
    G_sq: jax.Array
    next_gap: jax.Array


def round_sample(key: jax.Array, problem: Problem, oracle: AbstractOracle, x: jax.Array, stepsize,
                 num_sampled: int, local_steps: int) -> RoundSample:
    """One round of Algorithm 1 from x_t with all n virtual trajectories (Section II-A).

    Client i draws its Q steps' noise with ``oracle.noise(k_i, (Q, d), dtype)``, k_i the i-th
    of ``split(k_noise, n)``; S_t is ``sample_mask(UniformWithoutReplacement(S), k_S, n)``,
    (k_S, k_noise) = ``split(key)``. Pure and single-example: vmap it over keys and points.

    Args:
      key: this replicate's key.
      problem, oracle: the problem and its oracle g_i (Assumption 2).
      x: x_t, shape (d,).
      stepsize: alpha_t.
      num_sampled: S (static).
      local_steps: Q (static).

    Returns:
      A :class:`RoundSample` of scalars.
    """
    n, Q = problem.num_clients, local_steps
    k_s, k_noise = jax.random.split(key)
    shape = (Q,) + x.shape

    def client(i, k):
        c = problem.client(i)
        noise = oracle.noise(k, shape, x.dtype)

        def step(carry, l):
            x_l, drift, gap, sum_g, sum_grad = carry
            f, grad = problem.local_value_and_grad(c, x_l)
            g = oracle.gradient(problem, c, x_l, oracle.step_noise(noise, l, shape, x.dtype))
            carry = (x_l - stepsize * g, drift + jnp.sum((x_l - x) ** 2), gap + f - c.local_min,
                     sum_g + g, sum_grad + grad)
            return carry, None

        zero, z = jnp.zeros((), x.dtype), jnp.zeros_like(x)
        (_, drift, gap, sum_g, sum_grad), _ = jax.lax.scan(step, (x, zero, zero, z, z),
                                                           jnp.arange(Q))
        return drift, gap, sum_g, sum_grad

    drift, gap, sum_g, sum_grad = jax.vmap(client)(jnp.arange(n), jax.random.split(k_noise, n))
    mask = sample_mask(UniformWithoutReplacement(num_sampled), k_s, n).astype(x.dtype)
    b = sum_grad - jnp.mean(sum_grad, axis=0)  # b_i = sum_l grad f_i - Q grad f-bar_t
    G = mask @ sum_g / num_sampled
    x_next = x - stepsize * G
    return RoundSample(
        drift=jnp.sum(drift), gaps=jnp.sum(gap), psi=jnp.mean(jnp.sum(b * b, axis=-1)),
        sampling_error=jnp.sum((mask @ b / num_sampled) ** 2),
        grad_bar_sq=jnp.sum((jnp.mean(sum_grad, axis=0) / Q) ** 2), G_sq=jnp.sum(G * G),
        next_gap=problem.gap(x_next))


class LemmaConstants(NamedTuple):
    """What the right sides of (15)-(19) need besides the round's expectations.

    Attributes:
      L, C, D: smoothness (Assumption 1) and ABC constants (eq. 8).
      sigma: sigma_f* (eq. 11).
      n, S, Q: clients, sampled clients, local steps; I_S = (n - S)/(n - 1) (eq. 10).
      alpha: alpha_t.
      gap: f(x_t) - f*, shape (P,).
      grad_sq: ||grad f(x_t)||^2, shape (P,).
    """

    L: float
    C: float
    D: float
    sigma: float
    n: int
    S: int
    Q: int
    alpha: float
    gap: np.ndarray
    grad_sq: np.ndarray

    @property
    def I_S(self) -> float:
        return sampling_factor(self.n, self.S)


def lemma4_terms(s: RoundSample, k: LemmaConstants):
    """Inequality (15), Lemma 4 (alpha <= 1/(2 L Q)): (lhs, right-side terms, names).

    E_t[f(x_{t+1}) - f*] <= [f(x_t) - f*] - (alpha Q / 2)||grad f(x_t)||^2
      + (alpha^2 C L / (S n)) sum_i sum_l E_t[f_i(x~^l) - f_i*] + (alpha^2 L I_S / S) Psi_t
      + (alpha L^2 / (2 n)) sum_i sum_l E_t||x_t - x~^l||^2 + alpha^2 L Q D / S.
    """
    a, L, C, D, Q, S, n = k.alpha, k.L, k.C, k.D, k.Q, k.S, k.n
    terms = [k.gap, -a * Q / 2 * k.grad_sq,
             a * a * C * L / (S * n) * s.gaps, a * a * L * k.I_S / S * s.psi,
             a * L * L / (2 * n) * s.drift, a * a * L * Q * D / S]
    names = ("f(x_t)-f*", "-aQ/2|grad f|^2", "local gaps", "Psi_t", "drift", "D")
    return s.next_gap, terms, names


def lemma5_terms(s: RoundSample, k: LemmaConstants):
    """Inequality (16), Lemma 5 (no stepsize condition; holds for every realisation).

    sum_i sum_l [f_i(x~^l) - f_i*] <= 2 n Q [f(x_t) - f*] + 2 n Q sigma_f*
      + L sum_i sum_l ||x~^l - x_t||^2.
    """
    nQ = k.n * k.Q
    terms = [2 * nQ * k.gap, 2 * nQ * k.sigma, k.L * s.drift]
    return s.gaps, terms, ("2nQ(f(x_t)-f*)", "2nQ sigma_f*", "L drift")


def lemma6_terms(s: RoundSample, k: LemmaConstants):
    """Inequality (17), Lemma 6 (alpha <= min{1/(2 sqrt3 Q L), 1/(2 sqrt(2 Q C L))}).

    sum_l sum_i E_t||x_t - x~^l||^2 <= 6 a^2 Q^3 n ||grad f(x_t)||^2
      + 4 a^2 Q^3 n (3L + 2C) sigma_f* + 2 a^2 Q^2 n D + 4 a^2 Q^3 n (2C + 3L)[f(x_t) - f*].
    """
    a2, Q, n, L, C = k.alpha ** 2, k.Q, k.n, k.L, k.C
    terms = [6 * a2 * Q ** 3 * n * k.grad_sq, 4 * a2 * Q ** 3 * n * (3 * L + 2 * C) * k.sigma,
             2 * a2 * Q ** 2 * n * k.D, 4 * a2 * Q ** 3 * n * (2 * C + 3 * L) * k.gap]
    return s.drift, terms, ("|grad f|^2", "sigma_f*", "D", "f(x_t)-f*")


def lemma7_terms(s: RoundSample, k: LemmaConstants):
    """Inequality (18), Lemma 7 (no stepsize condition; holds for every realisation).

    Psi_t <= (2 Q L^2 / n) sum_i sum_l E_t||x~^l - x_t||^2 + 4 Q^2 L sigma_f*
      + 4 Q^2 L [f(x_t) - f*].
    """
    Q, L = k.Q, k.L
    terms = [2 * Q * L * L / k.n * s.drift, 4 * Q * Q * L * k.sigma,
             4 * Q * Q * L * k.gap]
    return s.psi, terms, ("drift", "sigma_f*", "f(x_t)-f*")


def lemma8_terms(s: RoundSample, k: LemmaConstants):
    """Inequality (19), Lemma 8 (alpha <= 1/(8 Q (L + C))).

    E_t[f(x_{t+1}) - f*] <= (1 + 2a^2QCL/S + 4a^2Q^2L^2 I_S/S + 12a^3Q^3L^2(L+C))[f(x_t) - f*]
      - (a Q / 4)||grad f(x_t)||^2 + a^2 L Q D (1 + 2 a Q L S) / S
      + (2 a^2 Q^2 L sigma_f* / S)(2 L I_S + C/Q) + 12 a^3 Q^3 L^2 (L + C) sigma_f*.
    """
    a, L, C, D, Q, S, I = k.alpha, k.L, k.C, k.D, k.Q, k.S, k.I_S
    cubic = 12 * a ** 3 * Q ** 3 * L * L * (L + C)
    terms = [k.gap, 2 * a * a * Q * C * L / S * k.gap, 4 * a * a * Q * Q * L * L * I / S * k.gap,
             cubic * k.gap, -a * Q / 4 * k.grad_sq, a * a * L * Q * D / S,
             2 * a ** 3 * Q * Q * L * L * D, 4 * a * a * Q * Q * L * L * I * k.sigma / S,
             2 * a * a * Q * L * C * k.sigma / S, cubic * k.sigma]
    names = ("f(x_t)-f*", "C gap", "I_S gap", "a^3 gap", "-aQ/4|grad f|^2", "D", "a^3 D",
             "I_S sigma_f*", "C sigma_f*", "a^3 sigma_f*")
    return s.next_gap, terms, names


def lemma_stepsize_limits(L: float, C: float, Q: int) -> dict:
    """The largest alpha_t each lemma allows: {4: 1/(2LQ), 5: inf, 6: ..., 7: inf, 8: 1/(8Q(L+C))}.

    Lemma 6's is min{1/(2 sqrt(3) Q L), 1/(2 sqrt(2 Q C L))}: what (42) needs,
    3 a^2 Q^2 L^2 <= 1/4 and 2 a^2 Q C L <= 1/4 (infinite second part when C = 0).

    Example:
      >>> import fedjax_abc as fa
      >>> fa.theory.lemma_stepsize_limits(1.0, 1.0, 10)[8]
      0.00625
    """
    six = min(1 / (2 * math.sqrt(3) * Q * L), math.inf if C == 0 else 1 / (2 * math.sqrt(2 * Q * C * L)))
    return {4: 1 / (2 * L * Q), 5: math.inf, 6: six, 7: math.inf, 8: 1 / (8 * Q * (L + C))}


class Estimate(NamedTuple):
    """A Monte Carlo mean and its standard error, each of shape (P,)."""

    mean: np.ndarray
    stderr: np.ndarray


class LemmaCheck(NamedTuple):
    """Both sides of one inequality at every point (shapes (P,) unless noted).

    Attributes:
      equation: "(15)" ... "(19)".
      lhs, lhs_stderr: the left side's estimate.
      rhs, rhs_stderr: the right side (its expectations estimated on the same replicates).
      diff_stderr: standard error of mean(lhs - rhs), paired.
      ratio: rhs / lhs, the slack factor.
      holds: mean(lhs - rhs) <= 3 diff_stderr (+ 1e-12 relative, for rounding).
      terms: the right side's terms, shape (P, K), summing to rhs.
      term_names: K names.
      shift: the term both sides share (f(x_t) - f* in (15) and (19), else 0): lhs - shift
        and rhs - shift are the measured and the bounded change over the round.
      stepsize_limit: the lemma's largest alpha_t (inf: no condition).
      stepsize_ok: alpha_t <= stepsize_limit.
    """

    equation: str
    lhs: np.ndarray
    lhs_stderr: np.ndarray
    rhs: np.ndarray
    rhs_stderr: np.ndarray
    diff_stderr: np.ndarray
    ratio: np.ndarray
    holds: np.ndarray
    terms: np.ndarray
    term_names: tuple
    shift: np.ndarray
    stepsize_limit: float
    stepsize_ok: bool


class LemmaDiagnostics(NamedTuple):
    """:func:`lemma_diagnostics`' result at P points.

    Attributes:
      points: x_t, shape (P, d).
      constants: the :class:`LemmaConstants` used (gap, grad_sq of shape (P,)).
      replicates: M.
      quantities: name -> :class:`Estimate` for every :class:`RoundSample` field.
      lemma4, lemma5, lemma6, lemma7, lemma8: :class:`LemmaCheck` of (15), ..., (19).
    """

    points: np.ndarray
    constants: LemmaConstants
    replicates: int
    quantities: dict
    lemma4: LemmaCheck
    lemma5: LemmaCheck
    lemma6: LemmaCheck
    lemma7: LemmaCheck
    lemma8: LemmaCheck

    @property
    def checks(self) -> tuple:
        return (self.lemma4, self.lemma5, self.lemma6, self.lemma7, self.lemma8)


def _mean_se(a: np.ndarray) -> Estimate:
    return Estimate(a.mean(axis=-1), a.std(axis=-1, ddof=1) / math.sqrt(a.shape[-1]))


def _check(equation, fn, samples: RoundSample, k: LemmaConstants, limit: float) -> LemmaCheck:
    col = LemmaConstants(*k[:8], k.gap[:, None], k.grad_sq[:, None])  # broadcast over M
    lhs, terms, names = fn(samples, col)
    terms = np.stack([np.broadcast_to(t, lhs.shape) for t in terms], axis=1)  # (P, K, M)
    rhs = terms.sum(axis=1)
    l, r, dif = _mean_se(lhs), _mean_se(rhs), _mean_se(lhs - rhs)
    tol = Z_HOLDS * dif.stderr + 1e-12 * np.maximum(np.abs(l.mean), np.abs(r.mean))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = r.mean / l.mean
    shift = k.gap if equation in ("(15)", "(19)") else np.zeros_like(k.gap)
    return LemmaCheck(equation, l.mean, l.stderr, r.mean, r.stderr, dif.stderr, ratio,
                      dif.mean <= tol, terms.mean(axis=2), names, shift, limit,
                      bool(k.alpha <= limit * (1 + 1e-12)))


def lemma_diagnostics(key: jax.Array, problem: Problem, points, *, stepsize: float, num_sampled: int,
                      local_steps: int, L: float, C: float, D: float, num_replicates: int = 1000,
                      oracle: Optional[AbstractOracle] = None) -> LemmaDiagnostics:
    """Lemmas 4-8 at given points x_t: both sides of (15)-(19) by Monte Carlo, in float64.

    From each point, ``num_replicates`` independent rounds (:func:`round_sample`, the key of
    point p and replicate m is ``split(key, (P, M))[p, m]``) estimate the expectations E_t[.]
    the inequalities contain; f(x_t) - f* and ||grad f(x_t)||^2 are exact.

    Args:
      key: PRNG key.
      problem: a :class:`~fedjax_abc.Problem` (its f_i*, f* give the gaps and sigma_f*).
      points: x_t, shape (P, d) (or (d,) for one point), e.g. iterates of ``simulate``.
      stepsize: alpha_t > 0.
      num_sampled: S in [1, n].
      local_steps: Q >= 1.
      L, C, D: the constants of Assumptions 1-2 for the problem and oracle.
      num_replicates: M >= 2.
      oracle: default ``problem.oracle``.

    Returns:
      A :class:`LemmaDiagnostics`.

    Raises:
      ValueError: in one line, for points of the wrong shape, S outside [1, n], M < 2 or a
        constant out of range.

    Example:
      >>> import jax, fedjax_abc as fa
      >>> p = fa.problems.huber_offsets(offsets=[0.0, 4.0, 8.0])
      >>> r = fa.theory.lemma_diagnostics(jax.random.key(0), p, [[10.0]], stepsize=0.01,
      ...         num_sampled=2, local_steps=5, L=1.0, C=1.0, D=0.0, num_replicates=200)
      >>> [bool(c.holds[0]) for c in r.checks], r.lemma8.stepsize_ok
      ([True, True, True, True, True], True)

    Reference: Lemmas 4-8, eq. (15)-(19); Section II-A (virtual trajectories).
    """
    n, d = problem.num_clients, problem.dim
    pts = np.asarray(points, np.float64)
    if pts.ndim == 1 and pts.shape[0] == d:
        pts = pts[None]
    if pts.ndim != 2 or pts.shape[1] != d or pts.shape[0] < 1:
        raise ValueError(f"points must have shape (P, d={d}), got {pts.shape}")
    if not np.all(np.isfinite(pts)):
        raise ValueError("points must be finite")
    if isinstance(num_sampled, (int, np.integer)) and not isinstance(num_sampled, bool) and \
            not 1 <= num_sampled <= n:
        raise ValueError(f"num_sampled (S={num_sampled}) must be in [1, n={n}]")
    UniformWithoutReplacement(num_sampled).validate(n)
    S = int(num_sampled)
    if n < 2:
        raise ValueError(f"the lemmas need n >= 2 clients, got n={n}")
    Q = check_int("local_steps (Q)", local_steps)
    M = check_int("num_replicates (M)", num_replicates, 2)
    alpha = check_positive("stepsize", stepsize)
    L, C, D = check_positive("L", L), check_nonneg("C", C), check_nonneg("D", D)
    p64 = problem.astype(jnp.float64)
    o64 = cast_floating(p64.oracle if oracle is None else oracle, jnp.float64)
    keys = jax.random.split(key, (pts.shape[0], M))
    samples = _run(keys, p64, o64, jnp.asarray(pts), jnp.asarray(alpha, jnp.float64), S, Q)
    samples = RoundSample(*(np.asarray(a, np.float64) for a in samples))  # (P, M) each
    gap = np.asarray(jax.vmap(p64.gap)(jnp.asarray(pts)), np.float64)
    grad_sq = np.asarray(jax.vmap(lambda x: jnp.sum(p64.grad(x) ** 2))(jnp.asarray(pts)), np.float64)
    k = LemmaConstants(L, C, D, sigma_f_star(problem), n, S, Q, alpha, gap, grad_sq)
    lim = lemma_stepsize_limits(L, C, Q)
    fns = {4: ("(15)", lemma4_terms), 5: ("(16)", lemma5_terms), 6: ("(17)", lemma6_terms),
           7: ("(18)", lemma7_terms), 8: ("(19)", lemma8_terms)}
    checks = {j: _check(eq, fn, samples, k, lim[j]) for j, (eq, fn) in fns.items()}
    quantities = {name: _mean_se(getattr(samples, name)) for name in RoundSample._fields}
    return LemmaDiagnostics(pts, k, M, quantities, *(checks[j] for j in range(4, 9)))


@eqx.filter_jit
def _run(keys, problem, oracle, pts, alpha, S: int, Q: int) -> RoundSample:
    """round_sample for keys (P, M) at points (P, d): a map over points of a vmap over keys."""
    def at_point(kx):
        k, x = kx
        return jax.vmap(lambda kk: round_sample(kk, problem, oracle, x, alpha, S, Q))(k)

    return jax.lax.map(at_point, (keys, pts))
