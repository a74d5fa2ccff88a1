"""Gossip theory (``fa.theory``'s mixing functions) against closed forms and simulation.

- ``mixing_matrix`` is the reference's W for every topology and weights rule, symmetric (but
  for the one-peer exponential graph) and doubly stochastic;
- ``second_eigenvalue`` against the circulant spectra of the ring and the torus, the star's
  1 - 1/n, the complete graph's 0; ``spectral_gap`` and ``mixing_parameter`` (p = 1 -
  lambda_2^2); the exponential graph's period has p = 1 exactly for n a power of 2;
- ``consensus_error`` is the reference's iteration; ``consensus_bound`` bounds it and is
  attained along the second eigenvector;
- ``expected_matching_contraction``: exactly the mean over every ordering of the nodes
  (n = 5, 6), and within 3 standard errors of many drawn matchings, over one round and
  three (fixed seed); the wrong closed form (1/2 for even n) is many standard errors off;
- D-SGD's Theorem 2 terms: hand-computed values, and the observed order of the tuned bound
  in T (a log-log slope, as diffrax's order tests);
- every bad input is refused in one line.
"""

from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc import decentral as dc
import reference_gossip as ref

th = fa.theory
MH, UNIFORM = dc.MetropolisHastings(), dc.UniformWeights()


def _words(seed: int, shape) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2 ** 32, size=shape, dtype=np.uint32)


# ------------------------------------------------------------------------- the matrices

def _cases():
    er_words = _words(1, (66,))
    match_words = _words(2, (9,))
    return [  # (name, topology, n, keyword arguments, the reference's W, symmetric)
        ("ring", dc.Ring(), 9, {}, lambda rule: rule(ref.ring(9)), True),
        ("torus", dc.Torus(3, 5), 15, {}, lambda rule: rule(ref.torus(3, 5)), True),
        ("complete", dc.Complete(), 7, {}, lambda rule: rule(ref.complete(7)), True),
        ("star", dc.Star(), 8, {}, lambda rule: rule(ref.star(8)), True),
        ("erdos_renyi", dc.ErdosRenyi(0.4), 12, {"trial_words": er_words},
         lambda rule: rule(ref.erdos_renyi(12, 0.4, er_words)), True),
        ("exponential", dc.Exponential(), 8, {"t": 2}, lambda rule: ref.exponential(8, 2), False),
        ("matching", dc.RandomMatching(), 9, {"words": match_words},
         lambda rule: ref.matching(9, match_words), True),
    ]


@pytest.mark.parametrize("rule", ["mh", "uniform"])
def test_mixing_matrices_are_the_references(rule):
    weights, ref_rule = {"mh": (MH, ref.metropolis_hastings),
                         "uniform": (UNIFORM, ref.max_degree)}[rule]
    for name, topology, n, kw, want, symmetric in _cases():
        W = th.mixing_matrix(topology, weights, n, **kw)
        assert isinstance(W, np.ndarray) and W.dtype == np.float64, name
        np.testing.assert_allclose(W, want(ref_rule), rtol=0, atol=1e-15, err_msg=name)
        assert np.all(W >= 0), name
        np.testing.assert_allclose(W.sum(0), 1.0, rtol=0, atol=1e-14, err_msg=name)
        np.testing.assert_allclose(W.sum(1), 1.0, rtol=0, atol=1e-14, err_msg=name)
        if symmetric:
            np.testing.assert_allclose(W, W.T, rtol=0, atol=1e-15, err_msg=name)
    # the default weights are Metropolis-Hastings'
    np.testing.assert_array_equal(th.mixing_matrix(dc.Star(), None, 6),
                                  th.mixing_matrix(dc.Star(), MH, 6))


# ------------------------------------------------------------------------------ spectra

def _circulant(first_row_values, n):
    """max over k = 1..n-1 of |sum_j c_j cos(2 pi k j / n)|: lambda_2 of a symmetric circulant."""
    k = np.arange(1, n)
    return float(np.max(np.abs(sum(c * np.cos(2 * np.pi * k * j / n)
                                   for j, c in first_row_values))))


@pytest.mark.parametrize("n", [5, 8, 12])
def test_ring_second_eigenvalue_is_the_circulants(n):
    lam = th.second_eigenvalue(th.mixing_matrix(dc.Ring(), MH, n))
    want = _circulant([(0, 1 / 3), (1, 1 / 3), (n - 1, 1 / 3)], n)
    assert lam == pytest.approx(want, abs=1e-14)
    assert lam == pytest.approx(1 / 3 + 2 / 3 * math.cos(2 * math.pi / n), abs=1e-14)
    assert th.spectral_gap(th.mixing_matrix(dc.Ring(), MH, n)) == pytest.approx(1 - want, abs=1e-14)


@pytest.mark.parametrize("rows,cols", [(3, 3), (3, 5), (4, 6)])
def test_torus_second_eigenvalue_is_the_product_spectrums(rows, cols):
    """W = I/5 + (A_rows (x) I + I (x) A_cols)/5: eigenvalues 1/5 + 2/5 (cos 2 pi a / rows
    + cos 2 pi b / cols), (a, b) != (0, 0)."""
    lam = th.second_eigenvalue(th.mixing_matrix(dc.Torus(rows, cols), MH, rows * cols))
    a, b = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    eig = 0.2 + 0.4 * (np.cos(2 * np.pi * a / rows) + np.cos(2 * np.pi * b / cols))
    want = np.max(np.abs(eig.ravel()[1:]))
    assert lam == pytest.approx(want, abs=1e-14)


def test_star_complete_and_exponential_spectra():
    for n in (3, 6, 10):
        assert th.second_eigenvalue(th.mixing_matrix(dc.Star(), MH, n)) == \
            pytest.approx(1 - 1 / n, abs=1e-14)
        assert th.second_eigenvalue(th.mixing_matrix(dc.Complete(), MH, n)) < 1e-15
    # one exponential round: W = (I + P^s) / 2 is normal; ||W - J/n||_2 = max_k |1 + w^(ks)|/2
    n, t = 16, 1
    W = th.mixing_matrix(dc.Exponential(), MH, n, t=t)
    k = np.arange(1, n)
    want = np.max(np.abs(1 + np.exp(2j * np.pi * k * 2 ** t / n)) / 2)
    assert th.second_eigenvalue(W) == pytest.approx(want, abs=1e-14)
    assert want == pytest.approx(1.0)  # one round alone does not mix (k = n/2: P^2 fixes it)


def test_mixing_parameter_is_one_minus_lambda_squared():
    W = th.mixing_matrix(dc.Torus(3, 4), MH, 12)
    lam, gap = th.second_eigenvalue(W), th.spectral_gap(W)
    p = th.mixing_parameter(W)
    assert p == pytest.approx(1 - lam ** 2, abs=1e-15)
    assert p == pytest.approx(gap * (2 - gap), abs=1e-15)
    # Assumption 4's inequality holds for random X and is tight along the eigenvector
    rng = np.random.default_rng(3)
    Y = rng.standard_normal((12, 4))
    Y -= Y.mean(0)
    assert np.sum((W @ Y) ** 2) <= (1 - p) * np.sum(Y ** 2) * (1 + 1e-12)
    vals, vecs = np.linalg.eigh(W)
    v = vecs[:, np.argmax(np.abs(vals) * (np.abs(vals) < 1 - 1e-9))]
    assert np.sum((W @ v) ** 2) == pytest.approx((1 - p) * np.sum(v ** 2), rel=1e-12)


@pytest.mark.parametrize("n,exact", [(16, True), (32, True), (12, False)])
def test_the_exponential_graphs_period_averages_exactly(n, exact):
    topo = dc.Exponential()
    tau = topo.period(n)
    stack = np.stack([th.mixing_matrix(topo, None, n, t=t) for t in range(tau)])
    p = th.mixing_parameter(stack)
    if exact:
        assert tau == int(math.log2(n)) and p == pytest.approx(1.0, abs=1e-12)
        X0 = np.random.default_rng(4).standard_normal((n, 3))
        assert th.consensus_error(stack, X0, tau) <= 1e-28 * th.consensus_error(stack, X0, 0)
    else:
        assert 0 < p < 0.999


# ----------------------------------------------------------------------------- consensus

@pytest.mark.parametrize("name", ["ring", "torus", "erdos_renyi", "star"])
def test_consensus_error_and_bound(name):
    case = {c[0]: c for c in _cases()}[name]
    _, topology, n, kw, want, _ = case
    W = th.mixing_matrix(topology, MH, n, **kw)
    X0 = np.random.default_rng(5).standard_normal((n, 2))
    errors = ref.consensus_errors(W, X0, 30)
    for t in (0, 1, 7, 30):
        e = th.consensus_error(W, X0, t)
        assert e == pytest.approx(errors[t], rel=1e-12)
        assert e <= th.consensus_bound(W, X0, t) * (1 + 1e-12)
    # the bound is attained along an eigenvector of the eigenvalue of largest |.| after 1
    vals, vecs = np.linalg.eigh(W)
    order = np.argsort(-np.abs(vals))
    v = vecs[:, order[1]] if abs(vals[order[0]] - 1) < 1e-12 else vecs[:, order[0]]
    for t in (1, 5):
        assert th.consensus_error(W, v, t) == pytest.approx(th.consensus_bound(W, v, t),
                                                            rel=1e-10)


def test_consensus_of_a_vector_and_time_varying_rounds():
    n = 6
    stack = np.stack([ref.matching(n, _words(6 + s, (n,))) for s in range(3)])
    x0 = np.arange(n, dtype=float)
    Y = x0 - x0.mean()
    for s in range(5):
        Y = stack[s % 3] @ Y
    assert th.consensus_error(stack, x0, 5) == pytest.approx(np.sum(Y ** 2) / n, rel=1e-14)


# ------------------------------------------------------------------- random matchings

def _ratio_exact_mean(n):
    """The mean of ||W Y||^2 / ||Y||^2 over every ordering of the nodes (each matching
    equally often), for one Y."""
    Y = np.random.default_rng(7).standard_normal((n, 2))
    Y -= Y.mean(0)
    ratios = []
    for order in itertools.permutations(range(n)):
        W = ref.matching(n, np.argsort(order).astype(np.uint32))  # node order[k] at k
        ratios.append(np.sum((W @ Y) ** 2) / np.sum(Y ** 2))
    return float(np.mean(ratios))


@pytest.mark.parametrize("n", [5, 6])
def test_matching_contraction_is_exact_over_every_ordering(n):
    assert _ratio_exact_mean(n) == pytest.approx(th.expected_matching_contraction(n),
                                                 abs=1e-14)


@functools.partial(jax.jit, static_argnums=(0, 3))
def _matching_ratios(n, words, Y, rounds):
    """||W_rounds ... W_1 Y||^2 / ||Y||^2 for each trial's drawn matchings (package's)."""
    topo = dc.RandomMatching()

    def trial(w):
        X = Y
        for s in range(rounds):
            X = dc.mix(topo.neighbours(n, words=w[s]), X)
        return jnp.sum((X - Y.mean(0)) ** 2) / jnp.sum((Y - Y.mean(0)) ** 2)

    return jax.vmap(trial)(words)


@pytest.mark.parametrize("n,rounds", [(8, 1), (9, 1), (10, 3)])
def test_matching_contraction_by_monte_carlo(n, rounds):
    R = 20_000
    words = _words(8 + n, (R, rounds, n))
    Y = jnp.asarray(np.random.default_rng(9).standard_normal((n, 3)))
    ratios = np.asarray(_matching_ratios(n, jnp.asarray(words), Y, rounds))
    mean, se = ratios.mean(), ratios.std(ddof=1) / math.sqrt(R)
    closed = th.expected_matching_contraction(n) ** rounds
    assert abs(mean - closed) < 3 * se, (mean, closed, se)
    # the negative control: a wrong closed form (the odd-n value 1/2 for every n) fails
    if n % 2 == 0:
        wrong = 0.5 ** rounds
        assert abs(mean - wrong) > 10 * se, (mean, wrong, se)


# ------------------------------------------------------------------ D-SGD (Theorem 2)

def test_dsgd_terms_by_hand():
    t = th.dsgd_bound_terms(mu=0.5, L=2.0, sigma_sq=4.0, zeta_sq=9.0, p=0.25, tau=2,
                            stepsize=0.05, rounds=100, n=8, r0=3.0)
    assert t.linear == pytest.approx(3.0 * math.exp(-0.5 * 0.05 * 100 / 2) / 0.05)
    assert t.noise == pytest.approx(0.05 * 4.0 / 8)
    assert t.consensus == pytest.approx(2.0 * 0.05 ** 2 * 8 * (4.0 + 8 * 9.0))
    assert t.total == pytest.approx(t.linear + t.noise + t.consensus)
    assert t.stepsize_limit == pytest.approx(0.25 / 4.0)
    it = th.dsgd_iterations(mu=0.5, L=2.0, sigma_sq=4.0, zeta_sq=9.0, p=0.25, tau=2,
                            epsilon=0.01, n=8)
    assert it.noise == pytest.approx(4.0 / (0.5 * 8 * 0.01))
    assert it.consensus == pytest.approx(math.sqrt(2.0) * (3 * 2 + 2 * math.sqrt(0.5))
                                         / (0.5 * 0.25 * 0.1))
    assert it.linear == pytest.approx(2.0 * 2 / (0.5 * 0.25) * math.log(100))
    assert it.total == pytest.approx(it.noise + it.consensus + it.linear)


def _tuned(T, **kw):
    """The bound minimised over the stepsize (a fine log grid up to p / (L tau))."""
    limit = kw["p"] / (kw["L"] * kw["tau"])
    return min(th.dsgd_bound_terms(stepsize=eta, rounds=T, **kw).total
               for eta in limit * np.logspace(-9, 0, 400))


@pytest.mark.parametrize("sigma_sq,zeta_sq,order", [(1.0, 1.0, 1.0), (0.0, 1.0, 2.0)])
def test_dsgd_tuned_bound_has_theorem_2s_order_in_T(sigma_sq, zeta_sq, order):
    """Noise: ~ sigma^2 / (mu n T) (order 1); without noise the consensus term
    L zeta^2 tau^2 / (mu^2 p^2 T^2) leads (order 2); log factors bend the slope a little."""
    kw = dict(mu=0.1, L=1.0, sigma_sq=sigma_sq, zeta_sq=zeta_sq, p=0.05, tau=1, n=16, r0=1.0)
    Ts = [10 ** 8, 10 ** 9, 10 ** 10]  # past the transient of the other terms
    slope = np.polyfit(np.log(Ts), np.log([_tuned(T, **kw) for T in Ts]), 1)[0]
    assert -order - 0.05 < slope < -order + 0.25, slope


def test_dsgd_iterations_grow_as_the_graph_mixes_worse():
    kw = dict(mu=0.1, L=1.0, sigma_sq=1.0, zeta_sq=1.0, tau=1, epsilon=1e-3, n=16)
    ring = th.mixing_parameter(th.mixing_matrix(dc.Ring(), MH, 16))
    full = th.mixing_parameter(th.mixing_matrix(dc.Complete(), MH, 16))
    assert full == pytest.approx(1.0)
    a, b = th.dsgd_iterations(p=ring, **kw), th.dsgd_iterations(p=full, **kw)
    assert a.noise == b.noise and a.consensus > 5 * b.consensus and a.linear > 5 * b.linear


# ------------------------------------------------------------------------------ bad input

def test_bad_inputs_are_refused_in_one_line():
    two_rings = np.kron(np.eye(2), th.mixing_matrix(dc.Ring(), MH, 4))
    sc = dict(mu=0.5, L=2.0, sigma_sq=1.0, zeta_sq=1.0, p=0.5, tau=1)
    cases = [
        (lambda: th.second_eigenvalue([[0.5, 0.5], [0.5, 0.4]]),
         r"W is not doubly stochastic: row 1 sums to 0.9"),
        (lambda: th.second_eigenvalue([[0.9, 0.1], [0.2, 0.8]]),
         "W is not doubly stochastic: column 0"),
        (lambda: th.second_eigenvalue(np.ones(3) / 3), r"W must be a square matrix, got shape"),
        (lambda: th.mixing_parameter(two_rings), r"W does not mix \(lambda_2 = 1\): a "
         "disconnected graph"),
        (lambda: th.mixing_parameter(np.stack([th.mixing_matrix(dc.Exponential(), None, 8, t=1)])),
         r"W does not mix"),
        (lambda: th.consensus_bound(np.stack([np.eye(3)] * 2), np.ones(3), 1),
         r"consensus_bound needs one matrix W \(n, n\), got shape \(2, 3, 3\)"),
        (lambda: th.consensus_error(np.eye(3), np.ones(4), 1),
         r"X0 must have one row a node \(n=3\), got shape \(4,\)"),
        (lambda: th.consensus_error(np.eye(3), np.ones(3), -1),
         r"t \(rounds\) must be an integer >= 0, got -1"),
        (lambda: th.expected_matching_contraction(1), "a matching needs n >= 2 nodes, got n=1"),
        (lambda: th.mixing_matrix(dc.Ring(), MH, 2), "Ring needs n >= 3 nodes, got n=2"),
        (lambda: th.mixing_matrix(dc.ErdosRenyi(0.5), MH, 12),
         r"ErdosRenyi on n=12 nodes \(once a trial\) needs 66 uint32 words, got none"),
        (lambda: th.mixing_matrix(dc.RandomMatching(), MH, 4), "needs 4 uint32 words, got none"),
        (lambda: th.mixing_matrix(dc.Ring(), dc.Matrix(np.full((5, 5), 0.2)), 5),
         r"Matrix\(W\) puts weight on \(0, 2\), which is no edge of Ring"),
        (lambda: th.dsgd_bound_terms(**dict(sc, p=0.0), stepsize=0.1, rounds=10, n=4),
         r"p \(0\) must be finite and > 0"),
        (lambda: th.dsgd_bound_terms(**dict(sc, p=1.5), stepsize=0.1, rounds=10, n=4),
         r"p \(1.5\) must be in \(0, 1\]"),
        (lambda: th.dsgd_bound_terms(**sc, stepsize=0.5, rounds=10, n=4),
         r"stepsize \(0.5\) must be at most p / \(L tau\) = 0.25"),
        (lambda: th.dsgd_bound_terms(**dict(sc, L=0.1), stepsize=0.1, rounds=10, n=4),
         r"L \(0.1\) must be at least mu \(0.5\)"),
        (lambda: th.dsgd_bound_terms(**dict(sc, tau=0), stepsize=0.1, rounds=10, n=4),
         r"tau must be an integer >= 1, got 0"),
        (lambda: th.dsgd_iterations(**sc, epsilon=2.0, n=4), r"epsilon \(2\) must be in \(0, 1\)"),
        (lambda: th.dsgd_iterations(**dict(sc, sigma_sq=-1.0), epsilon=0.1, n=4),
         r"sigma_sq \(-1\) must be finite and >= 0"),
    ]
    for make, message in cases:
        with pytest.raises(ValueError, match=message) as info:  # noqa: PT012
            make()
        assert "\n" not in str(info.value), str(info.value)
