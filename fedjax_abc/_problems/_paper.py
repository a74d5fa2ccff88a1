"""The paper's problems, each with its oracle, and a d-dimensional family.

- :func:`softplus_huber`: eq. (25) with oracle (26), Section IV-A (n = 16).
- :func:`huber_offsets`: eq. (27) with the sign oracle of Section IV-B (n Huber clients).
- :func:`bgd_counterexample`: the two clients of Theorem 1 (smooth, lower bounded, not BGD).
- :func:`quadratics`: heterogeneous diagonal quadratics in R^d with a Gaussian ABC oracle.

f_i*, f* and x* are computed in float64 when the problem is built: closed forms where they
exist, exact 1-D convex minimisation (bisection on the derivative) for (25) and (27), and a
global search with refinement for Theorem 1's nonconvex clients.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_abc._problems import _minimize
from fedjax_abc._problems._args import check_key, check_real, require_x64
from fedjax_abc._problems._oracles import (AbstractOracle, GaussianOracle, RademacherOracle,
                                          nonnegative)
from fedjax_abc._problems._problem import Problem

__all__ = [
    "bgd_counterexample",
    "huber",
    "huber_offsets",
    "quadratics",
    "softplus_huber",
]


# why a problem builder needs x64 whatever the run's dtype (checked before any JAX work)
_FLOAT64 = "(f_i*, f*, x* are found in float64, for a float32 run too)"


def huber(z):
    """The Huber function of eq. (25): z^2/2 for |z| < 1, |z| - 1/2 otherwise (elementwise)."""
    a = jnp.abs(z)
    return jnp.where(a < 1, 0.5 * z * z, a - 0.5)


def _np_huber(z):
    a = np.abs(z)
    return np.where(a < 1, 0.5 * z * z, a - 0.5)


def _np_softplus(z):
    return np.logaddexp(0.0, z)


def _np_sigmoid(z):
    return 0.5 * (1.0 + np.tanh(0.5 * z))


# ---------------------------------------------------------------- eq. (25) + oracle (26)


def _softplus_huber_loss(params, x):
    kind, shift = params  # kind 0: Huber f_1; kind 1: softplus ln(1 + e^{x - i + 1})
    z = x[0]
    return jnp.where(kind == 0, huber(z), jax.nn.softplus(z - shift))


def _softplus_huber_grad(params, x):
    kind, shift = params
    z = x[0]
    return jnp.where(kind == 0, jnp.clip(z, -1, 1), jax.nn.sigmoid(z - shift)).reshape(1)


def _oracle26_magnitude(problem, client, x, value):
    """Oracle (26): sqrt(|x|) for the Huber client 1, sqrt(f_i(x)) for the softplus clients."""
    params = client.params
    return jnp.where(params[0] == 0, jnp.sqrt(jnp.abs(x[0])), jnp.sqrt(nonnegative(value)))


def softplus_huber(n: int = 16) -> Problem:
    """Problem (25) with the Bernoulli-sign oracle (26) (Section IV-A).

    f_1(x) = Huber(x); f_i(x) = ln(1 + e^{x - i + 1}), i = 2, ..., n (the paper: n = 16).
    g_i(x; xi) = grad f_i(x) +/- m_i(x) with probability 1/2 each, m_1 = sqrt(|x|),
    m_i = sqrt(f_i(x)). f_i* = 0 for all i; L = 1, C = 1, D = 1/2.

    Args:
      n: number of clients (>= 2).

    Returns:
      A :class:`~fedjax_abc.Problem` with d = 1.

    Example:
      >>> import fedjax_abc as fa
      >>> p = fa.problems.softplus_huber()
      >>> p.num_clients, round(float(p.sigma_f_star), 4) == round(float(p.f_star), 4)
      (16, True)
    """
    require_x64(f"fa.problems.softplus_huber {_FLOAT64}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise ValueError(f"n ({n}) must be an integer >= 2")
    shifts = np.arange(n, dtype=np.float64)  # client i (1-based) has shift i - 1
    kinds = np.ones(n, dtype=np.int32)
    kinds[0] = 0

    def fprime(x):
        return (np.clip(x, -1, 1) + np.sum(_np_sigmoid(x - shifts[1:]))) / n

    x_star = _minimize.convex_root_1d(fprime, -50.0 - n, 50.0)
    f_star = (_np_huber(x_star) + np.sum(_np_softplus(x_star - shifts[1:]))) / n
    return Problem(
        loss=_softplus_huber_loss,
        params=(jnp.asarray(kinds), jnp.asarray(shifts)),
        local_minima=jnp.zeros(n),
        f_star=jnp.asarray(f_star),
        x_star=jnp.asarray([x_star]),
        oracle=RademacherOracle(magnitude=_oracle26_magnitude),
        grad_fn=_softplus_huber_grad,
        name=f"softplus_huber(n={n})",
    )


# ---------------------------------------------------------------------------- eq. (27)


def _huber_offset_loss(offset, x):
    return jnp.sum(huber(x - offset))


def _huber_offset_grad(offset, x):
    return jnp.clip(x - offset, -1, 1)


def huber_offsets(key: Optional[jax.Array] = None, n: int = 40, d_max: float = 200.0, *,
                  offsets=None) -> Problem:
    """Problem (27): f_i(x) = Huber(x - d_i), d_1 = d_2 = 0, d_3..d_n ~ U[0, Dmax] (Section IV-B).

    Oracle: g_i(x; eps) = grad f_i(x) + eps sqrt(f_i(x) - f_i*), eps = +/-1 with probability
    1/2 (variance f_i - f_i*: L = 1, C = 1, D = 0). f_i* = 0, so sigma_f* = f*.

    Args:
      key: draws d_3, ..., d_n uniformly on [0, Dmax] (``jax.random.uniform``, float64).
      n: number of clients (>= 2).
      d_max: Dmax > 0.
      offsets: the n offsets d_i given explicitly instead of drawn (then key is ignored).

    Returns:
      A :class:`~fedjax_abc.Problem` with d = 1; ``params`` holds the offsets, shape (n, 1).

    Example:
      >>> import jax, fedjax_abc as fa
      >>> p = fa.problems.huber_offsets(jax.random.key(0), n=40, d_max=20.0)
      >>> p.num_clients, float(p.local_minima.max())
      (40, 0.0)
    """
    require_x64(f"fa.problems.huber_offsets {_FLOAT64}")
    if offsets is None:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
            raise ValueError(f"n ({n}) must be an integer >= 2")
        d_max = check_real("d_max (Dmax)", d_max, low=0.0, strict=True)
        if key is None:
            raise ValueError("key is required to draw the offsets (or pass offsets=)")
        check_key("key", key)
        rest = np.asarray(jax.random.uniform(key, (n - 2,), jnp.float64, 0.0, d_max))
        offsets = np.concatenate([np.zeros(2), rest])
        label = f"huber_offsets(n={n}, d_max={d_max:g})"
    else:
        try:
            offsets = np.asarray(offsets)
        except ValueError:  # ragged
            offsets = np.asarray(None)
        if offsets.ndim != 1 or offsets.dtype.kind not in "iuf":
            raise ValueError(f"offsets must be a list of n >= 2 numbers (one per client), got "
                             f"{offsets.dtype} values of shape {offsets.shape}")
        offsets = offsets.astype(np.float64)
        n = offsets.shape[0]
        if n < 2 or not np.all(np.isfinite(offsets)):
            raise ValueError(f"offsets must be >= 2 finite numbers, got shape {offsets.shape}")
        label = f"huber_offsets(n={n}, given offsets)"

    def fprime(x):
        return np.mean(np.clip(x - offsets, -1, 1))

    x_star = _minimize.convex_root_1d(fprime, offsets.min() - 2.0, offsets.max() + 2.0)
    f_star = np.mean(_np_huber(x_star - offsets))
    return Problem(
        loss=_huber_offset_loss,
        params=jnp.asarray(offsets).reshape(n, 1),
        local_minima=jnp.zeros(n),
        f_star=jnp.asarray(f_star),
        x_star=jnp.asarray([x_star]),
        oracle=RademacherOracle(),
        grad_fn=_huber_offset_grad,
        name=label,
    )


# ---------------------------------------------------------------------------- Theorem 1


def _thm1_r(x):
    return jnp.sqrt(1.0 + x * x)


def _bgd_counterexample_loss(sign, x):
    r = _thm1_r(x[0])
    return r + sign * 0.5 * r * jnp.sin(jnp.sqrt(r))


def bgd_counterexample(oracle: Optional[AbstractOracle] = None, search_radius: float = 200.0) -> Problem:
    """Theorem 1's two clients: f_{1,2}(x) = r(x) +/- (r(x)/2) sin(sqrt(r(x))), r = sqrt(1 + x^2).

    (The extracted text lost the square roots; these are the definitions the proof's own
    derivatives U'(R) = sin(sqrt R)/2 + sqrt(R) cos(sqrt R)/4 and r(x_k) = (2 k pi)^2 at
    x_k = sqrt((2 k pi)^4 - 1) require.) f = r, f* = 1 at x* = 0. The f_i* are found by a
    global search on [-search_radius, search_radius] with refinement (f_i >= r/2 >= |x|/2,
    so the minima lie near 0).

    Args:
      oracle: default: sign oracle with variance f_i - f_i* (C = 1, D = 0).
      search_radius: half width of the search box for f_i*.

    Returns:
      A :class:`~fedjax_abc.Problem` with n = 2, d = 1.
    """
    require_x64(f"fa.problems.bgd_counterexample {_FLOAT64}")
    if oracle is not None and not isinstance(oracle, AbstractOracle):
        raise ValueError(f"oracle must be a fedjax_abc.AbstractOracle or None, got {oracle!r}")
    search_radius = check_real("search_radius", search_radius, low=0.0, strict=True)
    signs = jnp.asarray([1.0, -1.0])
    f64 = jax.jit(_bgd_counterexample_loss)
    minima = [
        _minimize.global_minimum(lambda x, s=s: float(f64(s, jnp.asarray(x))), 1,
                                 -search_radius, search_radius)[1]
        for s in (1.0, -1.0)
    ]
    return Problem(
        loss=_bgd_counterexample_loss,
        params=signs,
        local_minima=jnp.asarray(minima),
        f_star=jnp.asarray(1.0),
        x_star=jnp.asarray([0.0]),
        oracle=RademacherOracle() if oracle is None else oracle,
        name="bgd_counterexample",
    )


# ------------------------------------------------------------------- d-dimensional family


def _quadratic_loss(params, x):
    a, c = params
    return 0.5 * jnp.sum(a * (x - c) ** 2)


def _quadratic_grad(params, x):
    a, c = params
    return a * (x - c)


def quadratics(key: jax.Array, n: int = 10, d: int = 100, *, curvature=(0.5, 1.0),
               spread: float = 1.0, C: float = 1.0, D: float = 0.1) -> Problem:
    """Heterogeneous diagonal quadratics f_i(x) = (1/2) sum_j a_ij (x_j - c_ij)^2 in R^d.

    a_ij ~ U[curvature], c_ij ~ N(0, spread^2). Closed forms: f_i* = 0,
    x*_j = sum_i a_ij c_ij / sum_i a_ij, f* = f(x*); L = max a_ij. Oracle: Gaussian with
    variance C (f_i - f_i*) + D.

    Args:
      key: draws a and c.
      n, d: clients (>= 1) and dimension (>= 1).
      curvature: (a_min, a_max), 0 < a_min <= a_max.
      spread: standard deviation of the centres c_ij (>= 0).
      C, D: ABC constants of the Gaussian oracle.

    Returns:
      A :class:`~fedjax_abc.Problem` with closed-form gradients.
    """
    require_x64(f"fa.problems.quadratics {_FLOAT64}")
    for name, v in (("n", n), ("d", d)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} ({v}) must be an integer >= 1")
    if isinstance(curvature, (str, bytes)) or not hasattr(curvature, "__len__") or len(curvature) != 2:
        raise ValueError(f"curvature must be a pair (a_min, a_max), got {curvature!r}")
    a_min, a_max = (check_real(f"curvature[{i}]", v) for i, v in enumerate(curvature))
    if not 0 < a_min <= a_max:
        raise ValueError(f"curvature {curvature} must satisfy 0 < a_min <= a_max")
    spread = check_real("spread", spread, low=0.0)
    check_key("key", key)
    ka, kc = jax.random.split(key)
    a = np.asarray(jax.random.uniform(ka, (n, d), jnp.float64, a_min, a_max))
    c = spread * np.asarray(jax.random.normal(kc, (n, d), jnp.float64))
    x_star = (a * c).sum(0) / a.sum(0)
    f_star = np.mean(0.5 * np.sum(a * (x_star - c) ** 2, axis=1))
    return Problem(
        loss=_quadratic_loss,
        params=(jnp.asarray(a), jnp.asarray(c)),
        local_minima=jnp.zeros(n),
        f_star=jnp.asarray(f_star),
        x_star=jnp.asarray(x_star),
        oracle=GaussianOracle(C, D),
        grad_fn=_quadratic_grad,
        name=f"quadratics(n={n}, d={d})",
    )
