"""Float64 minimisation of learning objectives, batched over clients: f_i*, f*, x*.

Every objective here has the form F(x) = sum_j c_j ell(x; X_j, y_j) + (r / 2) ||x||^2 over
rows (X_j, y_j) with weights c_j >= 0: a client's f_i (c_j = w_i / m_i on its rows, r = w_i
l2) or the global f = (1/n) sum_i f_i (all rows, c_j = w_i / (n m_i), r = l2 mean_i w_i).

- :func:`newton`: for the convex models (softmax and logistic regression with l2 > 0,
  strongly convex): Newton's method with the closed-form Hessian, a Cholesky solve and a
  backtracking (Armijo) line search, in a ``lax.while_loop`` ``vmap``-ed over a batch of
  objectives. It stops after a step of at most 1e-10 max(1, ||x||_inf) in every coordinate
  (quadratic convergence then leaves an error near float64 rounding) or when no step
  decreases F, or after 200 steps. Clients are grouped by their rows rounded up to a power of two, so a round
  of the batch costs about sum_i m_i d^2, not n max_i m_i d^2.
- :func:`lbfgs`: for the nonconvex MLP: optax's L-BFGS for a fixed number of steps,
  ``vmap``-ed over the batch, keeping the best point evaluated. A local method: what it
  returns is the best value found, not a certified infimum.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.scipy.linalg import cho_factor, cho_solve
from threadpoolctl import threadpool_limits

__all__ = ["Solution", "lbfgs", "newton", "solve_clients_and_global"]


class Solution(NamedTuple):
    """Minimisers found for a batch of k objectives.

    Attributes:
      x: (k, d). value: (k,) F(x). grad_max: (k,) ||grad F(x)||_inf. iterations: (k,).
    """

    x: np.ndarray
    value: np.ndarray
    grad_max: np.ndarray
    iterations: np.ndarray


def _objective(model, X, y, c, r):
    def F(x):
        return jnp.sum(c * model.sample_losses(x, X, y)) + 0.5 * r * jnp.sum(x * x)
    return F


def _block_values(model, Xb, yb, cb, owner, k, r, x):
    """F_1..F_k at x (k, d): per-block weighted losses summed per owner, plus (r/2)||x||^2."""
    per_block = jax.vmap(lambda o, X, y, c: jnp.sum(c * model.sample_losses(x[o], X, y)))(
        owner, Xb, yb, cb)
    return jax.ops.segment_sum(per_block, owner, num_segments=k) + 0.5 * r * jnp.sum(x * x, -1)


def _block_hessians(model, Xb, yb, cb, owner, k, x):
    """sum over each owner's blocks of the loss Hessians, (k, d, d), one block at a time."""
    d = x.shape[1]

    def add(H, b):
        return H.at[owner[b]].add(model.hessian(x[owner[b]], Xb[b], yb[b], cb[b])), None

    H, _ = jax.lax.scan(add, jnp.zeros((k, d, d), x.dtype), jnp.arange(owner.shape[0]))
    return H


@functools.partial(jax.jit, static_argnames=("model", "k", "max_iter"))
def _newton_blocks(model, Xb, yb, cb, owner, r, x0, k, max_iter):
    def F(x):
        return _block_values(model, Xb, yb, cb, owner, k, r, x)

    def vg(x):
        return F(x), jax.grad(lambda z: jnp.sum(F(z)))(x)  # the F_i are separable in x_i

    eye = jnp.eye(x0.shape[1], dtype=x0.dtype)

    def cond(state):
        return jnp.any(~state[4]) & (state[3] < max_iter)

    def body(state):
        x, f, g, it, done = state
        H = _block_hessians(model, Xb, yb, cb, owner, k, x) + r[:, None, None] * eye
        step = jax.vmap(lambda h, v: -cho_solve(cho_factor(h), v))(H, g)
        step = jnp.where(done[:, None], 0.0, step)
        dec = -jnp.sum(g * step, axis=1)  # the Newton decrements squared, >= 0

        # F's rounding: near x* a Newton step lowers F by less than that; it is taken all the
        # same (the steps then shrink quadratically: the stopping rule ends the loop)
        slack = 16 * jnp.finfo(f.dtype).eps * jnp.maximum(1.0, jnp.abs(f))

        def failing(t, fn):  # Armijo not met (NaN counts as not met) and t not yet tiny
            return ~(fn <= f - 1e-4 * t * dec + slack) & (t > 1e-12)

        def ls_body(ls):
            t, fn = ls
            t = jnp.where(failing(t, fn), t / 2, t)
            return t, F(x + t[:, None] * step)

        t0 = jnp.ones_like(f)
        t, fn = jax.lax.while_loop(lambda ls: jnp.any(failing(*ls)), ls_body,
                                   (t0, F(x + step)))
        moved = (fn <= f + slack) & ~done
        x_new = jnp.where(moved[:, None], x + t[:, None] * step, x)
        f_new, g_new = vg(x_new)
        size = jnp.max(jnp.abs(t[:, None] * step), axis=1)
        small = size <= 1e-10 * jnp.maximum(1.0, jnp.max(jnp.abs(x_new), axis=1))
        return x_new, f_new, g_new, it + 1, done | small | ~moved

    f0, g0 = vg(x0)
    x, f, g, it, _ = jax.lax.while_loop(cond, body, (x0, f0, g0, 0, jnp.zeros((k,), bool)))
    return x, f, jnp.max(jnp.abs(g), axis=1), jnp.full((k,), it)


_ROWS = 64  # rows per block of the Newton solver, at most
_BLOCK_COST = 8  # a block's own cost in the Hessians' scan, counted in rows


def _block_rows(sizes) -> int:
    """Rows per block: the power of two up to _ROWS that costs least, a block costing its
    rows (padding included) plus _BLOCK_COST: 64 for clients of a hundred rows, 1 for
    clients of one row (whose blocks of 64 would be 63 rows of padding)."""
    sizes = np.asarray(sizes)
    return min((2 ** j for j in range(int(np.log2(_ROWS)) + 1)),
               key=lambda rows: (int(np.sum(-(-sizes // rows))) * (rows + _BLOCK_COST), -rows))


def _blocks(features, labels, coefs, owners, rows: int = _ROWS):
    """Cuts every (X, y, c) of the lists into blocks of ``rows`` rows (zero-weight padding)."""
    Xb, yb, cb, ob = [], [], [], []
    for X, y, c, o in zip(features, labels, coefs, owners):
        m = len(y)
        nb = -(-m // rows)
        Xp, yp, cp = _pad(nb * rows, np.asarray(X, np.float64), np.asarray(y), np.asarray(c))
        Xb.append(Xp.reshape(nb, rows, -1))
        yb.append(yp.reshape(nb, rows))
        cb.append(cp.reshape(nb, rows))
        ob.append(np.full(nb, o, np.int32))
    Xb, yb, cb, ob = (np.concatenate(Xb), np.concatenate(yb), np.concatenate(cb),
                      np.concatenate(ob))
    # whole powers of two of blocks (zero-weight ones added): problems of similar size share
    # one compiled program
    extra = (1 << int(np.ceil(np.log2(ob.shape[0])))) - ob.shape[0]
    return (np.concatenate([Xb, np.zeros((extra,) + Xb.shape[1:])]),
            np.concatenate([yb, np.zeros((extra, rows), yb.dtype)]),
            np.concatenate([cb, np.zeros((extra, rows))]),
            np.concatenate([ob, np.zeros((extra,), np.int32)]))


def newton(model, features, labels, coefs, owners, r, x0, max_iter: int = 200) -> Solution:
    """Minimises k = len(r) strongly convex objectives at once by Newton's method (float64).

    Objective o is F_o(x) = sum of c_j ell(x; X_j, y_j) over the rows of the entries with
    owner o, plus (r_o / 2) ||x||^2. The rows are cut into blocks (:func:`_block_rows`: 64
    rows for clients of a hundred rows, fewer for smaller ones), so the program's shapes
    depend on the number of blocks and their rows only; memory: k d^2 for the Hessians.

    Args:
      model: a convex model with ``sample_losses`` and ``hessian``.
      features, labels, coefs: lists of (m, p), (m,), (m,) arrays.
      owners: which objective each list entry belongs to, in [0, k).
      r: (k,) l2 coefficients. x0: (k, d) starting points.
      max_iter: Newton steps at most.

    Returns:
      A :class:`Solution`.
    """
    Xb, yb, cb, ob = _blocks(features, labels, coefs, owners,
                             _block_rows([len(y) for y in labels]))
    r = np.asarray(r, np.float64)
    # the Cholesky factorisations call OpenBLAS through SciPy; its threads spin and slow it
    # down up to a hundredfold when the cores are busy: one thread is enough for d ~ 10^3
    with threadpool_limits(1, user_api="blas"):
        out = jax.block_until_ready(_newton_blocks(
            model, jnp.asarray(Xb), jnp.asarray(yb), jnp.asarray(cb), jnp.asarray(ob),
            jnp.asarray(r), jnp.asarray(x0, jnp.float64), k=int(r.shape[0]),
            max_iter=max_iter))
    return Solution(*(np.asarray(a) for a in out))


def _lbfgs_one(model, X, y, c, r, x0, steps):
    F = _objective(model, X, y, c, r)
    opt = optax.lbfgs()
    vg = optax.value_and_grad_from_state(F)

    def step(carry, _):
        x, state, best_x, best_f = carry
        f, g = vg(x, state=state)
        better = f < best_f
        best_x, best_f = jnp.where(better, x, best_x), jnp.where(better, f, best_f)
        updates, state = opt.update(g, state, x, value=f, grad=g, value_fn=F)
        return (optax.apply_updates(x, updates), state, best_x, best_f), None

    init = (x0, opt.init(x0), x0, jnp.asarray(jnp.inf, x0.dtype))
    (x, _, best_x, best_f), _ = jax.lax.scan(step, init, None, length=steps)
    f, g = jax.value_and_grad(F)(x)
    better = f < best_f
    best_x = jnp.where(better, x, best_x)
    best_f, best_g = jax.value_and_grad(F)(best_x)
    return best_x, best_f, jnp.max(jnp.abs(best_g)), jnp.asarray(steps)


@functools.partial(jax.jit, static_argnames=("model", "steps"))
def _lbfgs_batch(model, X, y, c, r, x0, steps):
    return jax.vmap(lambda *a: _lbfgs_one(model, *a, steps))(X, y, c, r, x0)


def lbfgs(model, X, y, c, r, x0, steps: int = 500) -> Solution:
    """``steps`` L-BFGS steps (optax) on k objectives at once; the best point evaluated."""
    out = _lbfgs_batch(model, *(jnp.asarray(a, jnp.float64) if np.asarray(a).dtype.kind == "f"
                                else jnp.asarray(a) for a in (X, y, c, r, x0)), steps)
    return Solution(*(np.asarray(a) for a in out))


def _pad(rows: int, X: np.ndarray, y: np.ndarray, c: np.ndarray):
    m = y.shape[0]
    Xp = np.zeros((rows, X.shape[1]))
    yp = np.zeros((rows,), np.int32)
    cp = np.zeros((rows,))
    Xp[:m], yp[:m], cp[:m] = X, y, c
    return Xp, yp, cp


def solve_clients_and_global(model, features, labels, weights, l2: float, x0, *,
                             steps: int = 500):
    """(f_i* (n,), their minimisers (n, d), f*, x* (d,), how) of a learning problem.

    ``features``/``labels``: the n clients' unpadded arrays; ``weights``: w_i. Client i's
    objective is w_i ((1/m_i) sum_j ell_ij + (l2/2)||x||^2), the global one their mean.
    Convex models use :func:`newton` (all n + 1 objectives in one program), others
    :func:`lbfgs` with ``steps``; ``how`` says which.
    """
    n = len(labels)
    sizes = np.array([len(y) for y in labels])
    weights = np.asarray(weights, np.float64)
    x0 = np.asarray(x0, np.float64)
    local = [np.full(m, w / m) for m, w in zip(sizes, weights)]
    shared = [np.full(m, w / (n * m)) for m, w in zip(sizes, weights)]
    r = np.concatenate([weights * l2, [l2 * weights.mean()]])
    if model.convex:
        sol = newton(model, list(features) * 2, list(labels) * 2, local + shared,
                     list(range(n)) + [n] * n, r, np.broadcast_to(x0, (n + 1,) + x0.shape))
        how = "newton"
        return sol.value[:n], sol.x[:n], float(sol.value[n]), sol.x[n], how
    M = int(sizes.max())
    padded = [_pad(M, np.asarray(X, np.float64), np.asarray(y), c)
              for X, y, c in zip(features, labels, local)]
    X, y, c = (np.stack(a) for a in zip(*padded))
    sol = lbfgs(model, X, y, c, r[:n], np.broadcast_to(x0, (n,) + x0.shape), steps)
    Xg, yg, cg = _pad(int(sizes.sum()), np.concatenate([np.asarray(a, np.float64) for a in features]),
                      np.concatenate([np.asarray(a) for a in labels]), np.concatenate(shared))
    glob = lbfgs(model, Xg[None], yg[None], cg[None], r[n:], x0[None], steps)
    how = f"lbfgs ({steps} steps, best value found)"
    return sol.value, sol.x, float(glob.value[0]), glob.x[0], how
