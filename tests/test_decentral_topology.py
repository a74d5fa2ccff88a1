"""Gossip topologies, weights and the sparse mixing step against the NumPy reference.

- every topology's W (both weight rules, and a given W) equals ``reference_gossip``'s,
  written from the definitions, and is doubly stochastic (symmetric but for the one-peer
  exponential graph);
- ``mix`` (padded neighbour lists) equals the reference's CSR product W X, per trial and
  vmapped over trials: to rounding (XLA fuses a * b + c into one rounding), exactly for the
  one-peer graphs whose weights 1/2 make every product exact;
- pure consensus X_{t+1} = W_t X_t by ``lax.scan`` matches NumPy's ||X_t - Xbar||^2 to
  1e-12, its observed rate is lambda_2 (ring, torus, Erdos-Renyi, complete), the one-peer
  exponential graph averages exactly in log2 n rounds for n a power of 2 (and not otherwise);
- ``is_connected`` agrees with SciPy's connected components on drawn graphs;
- every bad input is refused in one line.
"""

from __future__ import annotations

import functools
import os
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.sparse import csgraph, csr_matrix

from conftest import count_compilations
from fedjax_abc import decentral as dc
import reference_gossip as ref

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MH, UNIFORM = dc.MetropolisHastings(), dc.UniformWeights()
RULES = {"mh": (MH, ref.metropolis_hastings), "uniform": (UNIFORM, ref.max_degree)}

# static topologies: (topology, n, its adjacency from the reference); mix writes out the
# slots of Star(9) (k_max = 8) and loops over those of Complete(20) and Star(12)
STATIC = {
    "ring8": (dc.Ring(), 8, lambda: ref.ring(8)),
    "torus3x4": (dc.Torus(3, 4), 12, lambda: ref.torus(3, 4)),
    "complete6": (dc.Complete(), 6, lambda: ref.complete(6)),
    "complete20": (dc.Complete(), 20, lambda: ref.complete(20)),
    "star9": (dc.Star(), 9, lambda: ref.star(9)),
    "star12": (dc.Star(), 12, lambda: ref.star(12)),
}


def _words(seed: int, shape) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2 ** 32, size=shape, dtype=np.uint32)


def _X(seed: int, *shape) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _close(got, want):
    """Equal to rounding: every entry within 1e-14 of the largest |value| of the sum."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    assert np.max(np.abs(got - want)) <= 1e-14 * max(1.0, np.max(np.abs(want)))


def _doubly_stochastic(W, symmetric=True):
    W = np.asarray(W)
    assert np.all(W >= 0)
    np.testing.assert_allclose(W.sum(axis=0), 1.0, rtol=0, atol=1e-14)
    np.testing.assert_allclose(W.sum(axis=1), 1.0, rtol=0, atol=1e-14)
    if symmetric:
        np.testing.assert_allclose(W, W.T, rtol=0, atol=1e-15)


def _round(topology, weights, n, X, t=0, words=None, trial_words=None):
    """One trial's round: (W dense, W X) from the package's lists."""
    state = None if trial_words is None else topology.init_state(n, trial_words)
    nb = topology.neighbours(n, weights, t, words, state)
    return dc.dense(nb), dc.mix(nb, X)


_step = functools.partial(jax.jit, static_argnums=(2,))(_round)


@functools.partial(jax.jit, static_argnums=(2,))
def _steps(topology, weights, n, X, words=None, trial_words=None):
    """:func:`_round` of R trials at once (X, words, trial words with a leading trials axis)."""
    return jax.vmap(lambda x, w, tw: _round(topology, weights, n, x, 0, w, tw))(
        X, words, trial_words)


# ------------------------------------------------------------ W and one step, each topology

@pytest.mark.parametrize("rule", sorted(RULES))
@pytest.mark.parametrize("case", sorted(STATIC))
def test_static_topologies_match_the_reference(case, rule):
    topology, n, adjacency = STATIC[case]
    weights, ref_weights = RULES[rule]
    want = ref_weights(adjacency())
    X = _X(1, n, 3)
    W, got = _step(topology, weights, n, jnp.asarray(X))
    _close(W, want)
    _doubly_stochastic(W)
    _close(got, ref.mix_trials(want, X[None])[0])
    assert topology.max_degree(n) == {"ring8": 2, "torus3x4": 4}.get(case, n - 1)
    # static topologies ignore the round
    np.testing.assert_array_equal(_step(topology, weights, n, jnp.asarray(X), 5)[0], W)


def test_the_weight_rules_on_regular_and_irregular_graphs():
    # regular: both rules are 1 / (deg + 1); the star's leaves keep 1 - 1/n under both
    one = jnp.ones((7, 1))
    np.testing.assert_array_equal(_step(dc.Ring(), MH, 7, one)[0],
                                  _step(dc.Ring(), UNIFORM, 7, one)[0])
    W = np.asarray(_step(dc.Torus(3, 4), MH, 12, jnp.ones((12, 1)))[0])
    assert np.all((W == 0) | (W == 0.2) | np.eye(12, dtype=bool))
    np.testing.assert_allclose(np.diag(W), 0.2, rtol=0, atol=1e-15)  # 1 - 4 (0.2)
    star = np.asarray(_step(dc.Star(), MH, 9, jnp.ones((9, 1)))[0])
    np.testing.assert_allclose(np.diag(star), [1 / 9] + [8 / 9] * 8, rtol=0, atol=1e-15)
    np.testing.assert_allclose(_step(dc.Complete(), MH, 6, jnp.ones((6, 1)))[0],
                               np.full((6, 6), 1 / 6), rtol=0, atol=1e-15)


@pytest.mark.parametrize("rule", sorted(RULES))
def test_erdos_renyi_per_trial_matches_the_reference(rule):
    n, p, R = 12, 0.35, 6
    weights, ref_weights = RULES[rule]
    er = dc.ErdosRenyi(p)
    words = _words(2, (R, er.num_trial_words(n)))
    assert words.shape[1] == n * (n - 1) // 2
    X = _X(3, R, n, 2)
    W, got = _steps(er, weights, n, jnp.asarray(X), trial_words=jnp.asarray(words))
    wants = [ref_weights(ref.erdos_renyi(n, p, words[r])) for r in range(R)]
    for r in range(R):
        _close(W[r], wants[r])
        _doubly_stochastic(W[r])
    _close(got, ref.mix_trials(wants, X))
    degrees = [int(ref.erdos_renyi(n, p, words[r]).sum(1).max()) for r in range(R)]
    assert len(set(degrees)) > 1  # the draws differ between trials
    # the check can fail: the other rule differs on these irregular graphs
    other = ref.max_degree if rule == "mh" else ref.metropolis_hastings
    assert np.max(np.abs(W[0] - other(ref.erdos_renyi(n, p, words[0])))) > 1e-3


@pytest.mark.parametrize("n", [8, 6])  # a power of 2, and the general rule
def test_exponential_is_ying_et_als_one_peer_graph_exactly(n):
    topo = dc.Exponential()
    X = _X(4, n, 3)
    for rule in sorted(RULES):
        for t in range(2 * topo.period(n) + 1):  # the round traced: one program a rule
            want = ref.exponential(n, t)
            W, got = _step(topo, RULES[rule][0], n, jnp.asarray(X), t)
            np.testing.assert_array_equal(W, want)
            _doubly_stochastic(W, symmetric=False)
            # weights 1/2: every product exact, the sum of two terms rounded once
            np.testing.assert_array_equal(got, want @ X)


@pytest.mark.parametrize("n", [8, 7])
def test_random_matching_per_round_matches_the_reference_exactly(n):
    topo, R = dc.RandomMatching(), 16
    assert topo.num_words(n) == n
    words = _words(5, (R, n))
    X = _X(6, R, n, 3)
    wants = [ref.matching(n, words[r]) for r in range(R)]
    for rule in sorted(RULES):
        W, got = _steps(topo, RULES[rule][0], n, jnp.asarray(X), jnp.asarray(words))
        for r in range(R):
            np.testing.assert_array_equal(W[r], wants[r])
        np.testing.assert_array_equal(got, ref.mix_trials(wants, X))
    assert {int(np.sum(np.diag(W) == 1.0)) for W in wants} == {n % 2}  # odd n: one alone


def test_a_given_matrix_is_used_as_it_is():
    W = ref.metropolis_hastings(ref.torus(3, 4)) * 0.5 + 0.5 * np.eye(12)  # lazy: still on it
    X = _X(7, 12, 2)
    for topo in (dc.Torus(3, 4), dc.Complete()):
        rule = dc.Matrix(W)
        rule.validate(topo, 12)
        dense_W, got = _step(topo, rule, 12, jnp.asarray(X))
        np.testing.assert_array_equal(dense_W, W)
        _close(got, W @ X)


def test_trials_do_not_depend_on_their_neighbours():
    """A trial's mixed values are the same bit for bit alone or vmapped with others."""
    n, R = 10, 5
    er, match = dc.ErdosRenyi(0.4), dc.RandomMatching()
    tw, rw, X = _words(8, (R, er.num_trial_words(n))), _words(9, (R, n)), _X(10, R, n, 2)

    def both(tw, rw, x):
        a = er.neighbours(n, state=er.init_state(n, tw))
        b = match.neighbours(n, words=rw)
        return dc.mix(b, dc.mix(a, x))

    batched = jax.jit(jax.vmap(both))(jnp.asarray(tw), jnp.asarray(rw), jnp.asarray(X))
    single = jax.jit(both)
    for r in range(R):
        np.testing.assert_array_equal(batched[r], single(tw[r], rw[r], X[r]))


def test_trials_innermost_equals_vmap_over_trials():
    """With one W for all trials, X (n, d, R) mixes in one call as the vmapped trials do."""
    nb = dc.Torus(3, 4).neighbours(12)
    X = jnp.asarray(_X(11, 12, 3, 4))
    by_trial = jax.jit(jax.vmap(dc.mix, in_axes=(None, 2), out_axes=2))(nb, X)
    _close(jax.jit(dc.mix)(nb, X), by_trial)


def test_a_new_edge_probability_compiles_nothing_new():
    n = 9
    words = jnp.asarray(_words(12, (n * (n - 1) // 2,)))
    X = jnp.ones((n, 1))
    _step(dc.ErdosRenyi(0.3), MH, n, X, trial_words=words)
    with count_compilations() as events:
        W, _ = _step(dc.ErdosRenyi(0.6), MH, n, X, trial_words=words)
    assert events == []
    np.testing.assert_array_equal(W, ref.metropolis_hastings(ref.erdos_renyi(n, 0.6, words)))


# ------------------------------------------------------------------------- pure consensus

@functools.partial(jax.jit, static_argnums=(1, 3, 6))
def _path(topology, n, X0, T, state=None, words=None, t0=0):
    """||X_t - Xbar||^2 / n, t = 0..T, along X_{t+1} = W_t X_t by lax.scan (one trial;
    round t's words words[t - t0]), Metropolis-Hastings weights."""
    mean = X0.mean(axis=0)

    def step(X, inputs):
        t, w = inputs
        X = dc.mix(topology.neighbours(n, MH, t, w, state), X)
        return X, jnp.sum((X - mean) ** 2) / n

    w = jnp.zeros((T, 0), jnp.uint32) if words is None else words
    _, errors = jax.lax.scan(step, X0, (t0 + jnp.arange(T), w))
    return jnp.concatenate([jnp.sum((X0 - mean) ** 2)[None] / n, errors])


CONSENSUS = {  # (topology, n, the reference's W_t)
    "ring": (dc.Ring(), 16, lambda n, words: lambda s: ref.metropolis_hastings(ref.ring(n))),
    "torus": (dc.Torus(4, 5), 20,
              lambda n, words: lambda s: ref.metropolis_hastings(ref.torus(4, 5))),
    "complete": (dc.Complete(), 8,
                 lambda n, words: lambda s: ref.metropolis_hastings(ref.complete(n))),
    "exponential": (dc.Exponential(), 16, lambda n, words: lambda s: ref.exponential(n, s)),
    "matching": (dc.RandomMatching(), 10, lambda n, words: lambda s: ref.matching(n, words[s])),
}


@functools.partial(jax.jit, static_argnums=(1,))
def _draw(topology, n, trial_words):
    return topology.init_state(n, trial_words)


def _erdos_renyi(n, p, seed):
    """A drawn G(n, p): (topology, its trial state, the trial words)."""
    topology = dc.ErdosRenyi(p)
    tw = _words(seed, (topology.num_trial_words(n),))
    return topology, _draw(topology, n, jnp.asarray(tw)), tw


@pytest.mark.parametrize("case", sorted(CONSENSUS) + ["erdos_renyi"])
def test_consensus_by_scan_matches_numpy(case):
    T, state, words = 40, None, None
    if case == "erdos_renyi":
        n = 14
        topology, state, tw = _erdos_renyi(n, 0.3, 14)
        fixed = ref.metropolis_hastings(ref.erdos_renyi(n, 0.3, tw))
        Ws = lambda s: fixed  # noqa: E731
    else:
        topology, n, make = CONSENSUS[case]
        words = _words(15, (T, n)) if topology.num_words(n) else None
        Ws = make(n, words)
    X0 = _X(16, n, 3)
    got = np.asarray(_path(topology, n, jnp.asarray(X0), T, state,
                           None if words is None else jnp.asarray(words)))
    want = ref.consensus_errors(Ws, X0, T)
    # relative 1e-12 while the deviation is at least 1e-4 of the start's; beyond, the
    # rounding of X (about 1e-16 |X0| an entry) sets the scale: |e - e'| <~ |Y| 1e-16 |Y_0|
    big = want >= 1e-8 * want[0]
    np.testing.assert_allclose(got[big], want[big], rtol=1e-12)
    assert np.all(np.abs(got - want) <= 1e-12 * np.sqrt(want * want[0]) + 1e-30 * want[0])
    assert got[-1] < 0.5 * got[0]  # it mixes


@pytest.mark.parametrize("case", ["ring", "torus", "erdos_renyi", "complete"])
def test_the_observed_rate_is_lambda_2(case):
    """(e_T / e_{T-S})^(1 / 2S) -> lambda_2 = ||W - 11^T/n||_2 from NumPy's eigenvalues."""
    state = None
    if case == "erdos_renyi":
        n = 24
        topology, state, tw = _erdos_renyi(n, 0.3, 17)
        assert bool(jax.jit(dc.is_connected)(state))
        W = ref.metropolis_hastings(ref.erdos_renyi(n, 0.3, tw))
    else:
        topology, n, make = CONSENSUS[case]
        W = make(n, None)(0)
    lam = np.max(np.abs(np.linalg.eigvalsh(W - 1.0 / n)))
    X0 = jnp.asarray(_X(18, n, 2))
    if case == "complete":
        e = np.asarray(_path(topology, n, X0, 2))
        assert lam < 1e-15 and e[1] <= 1e-28 * e[0]  # W = 11^T / n: consensus in one step
        return
    T = int(np.ceil(np.log(1e-14) / (2 * np.log(lam))))  # e_T / e_0 about 1e-14
    S = T // 4
    e = np.asarray(_path(topology, n, X0, T, state))
    rate = (e[T] / e[T - S]) ** (1 / (2 * S))
    assert abs(rate - lam) < 2e-3 * lam, (rate, lam)
    assert np.all(np.diff(e) <= 0)  # a symmetric W never increases the distance


@pytest.mark.parametrize("t0", [0, 3])
def test_exponential_graph_averages_exactly_in_log2_n_rounds(t0):
    """For n = 2^tau, any tau consecutive rounds give W_{tau-1} ... W_0 = 11^T / n (Ying et
    al. 2021); n = 12 (tau = 4) does not average exactly (the negative control)."""
    for n, exact in ((16, True), (12, False)):
        topo = dc.Exponential()
        tau = topo.period(n)
        e = np.asarray(_path(topo, n, jnp.asarray(_X(19, n, 3)), tau, None, None, t0))
        assert e[tau - 1] > 1e-3 * e[0]  # not after tau - 1 rounds
        if exact:
            assert e[tau] <= 1e-28 * e[0], e
        else:
            assert e[tau] > 1e-4 * e[0], e


# --------------------------------------------------------------------------- connectivity

def test_is_connected_agrees_with_scipy():
    n, p, R = 10, 0.18, 200
    er = dc.ErdosRenyi(p)
    words = _words(20, (R, er.num_trial_words(n)))
    got = np.asarray(jax.jit(jax.vmap(lambda w: dc.is_connected(er.init_state(n, w))))(
        jnp.asarray(words)))
    want = np.array([csgraph.connected_components(
        csr_matrix(ref.erdos_renyi(n, p, w)), directed=False)[0] == 1 for w in words])
    np.testing.assert_array_equal(got, want)
    assert 0 < want.sum() < R  # both kinds drawn
    assert bool(dc.is_connected(dc.Ring().graph(9)))
    two = dc.Graph(jnp.asarray([[1, 2], [0, 2], [0, 1], [4, 5], [3, 5], [3, 4]]),
                   jnp.ones((6, 2), bool))
    assert not bool(dc.is_connected(two))


# ------------------------------------------------------------------------------ bad input

def _recheck(module):
    """What the engine does with a component after ``eqx.tree_at`` (which skips
    ``__init__``): its ``__check_init__`` again."""
    module.__check_init__()
    return module


def test_bad_inputs_are_refused_in_one_line():
    cases = [
        (lambda: dc.Ring().graph(2), "Ring needs n >= 3 nodes, got n=2"),
        (lambda: dc.Torus(2, 5), r"Torus rows must be an integer >= 3, got 2"),
        (lambda: dc.Torus(3, 4.0), r"Torus cols must be an integer >= 3"),
        (lambda: dc.Torus(3, 4).graph(16), r"Torus\(3, 4\) has 12 nodes, got n=16"),
        (lambda: dc.Complete().graph(1), "Complete needs n >= 2 nodes, got n=1"),
        (lambda: dc.Exponential().graph(1), "Exponential needs n >= 2 nodes"),
        (lambda: dc.Star().graph(0), r"n \(nodes\) must be an integer >= 1"),
        (lambda: dc.ErdosRenyi(0.0), r"ErdosRenyi's p must be a number in \(0, 1\], got 0.0"),
        (lambda: dc.ErdosRenyi(1.5), r"ErdosRenyi's p must be a number in \(0, 1\]"),
        (lambda: dc.ErdosRenyi("0.5"), r"ErdosRenyi's p must be a number in \(0, 1\]"),
        (lambda: _recheck(eqx.tree_at(lambda t: t.p, dc.ErdosRenyi(0.5), jnp.asarray(2.0))),
         r"ErdosRenyi's p must be a number in \(0, 1\], got 2.0"),
        (lambda: dc.ErdosRenyi(0.5).init_state(5), r"ErdosRenyi on n=5 nodes \(once a trial\) "
         "needs 10 uint32 words, got none"),
        (lambda: dc.ErdosRenyi(0.5).init_state(5, np.zeros(9, np.uint32)),
         r"needs 10 uint32 words, got shape \(9,\)"),
        (lambda: dc.ErdosRenyi(0.5).graph(5), "ErdosRenyi draws its graph once a trial"),
        (lambda: dc.RandomMatching().graph(6), r"RandomMatching on n=6 nodes \(a round\) needs 6 "
         "uint32 words, got none"),
        (lambda: dc.RandomMatching().graph(6, words=np.zeros(6)), "needs uint32 words, got dtype"),
        (lambda: dc.Matrix([[0.5, 0.5], [0.5, 0.4]]),
         r"W is not doubly stochastic: row 1 sums to 0.9"),
        (lambda: dc.Matrix([[0.6, 0.4], [0.5, 0.5]]), "W is not doubly stochastic: column 0"),
        (lambda: dc.Matrix([[1.2, -0.2], [-0.2, 1.2]]), r"W must be non-negative, got W\[0, 1\]"),
        (lambda: dc.Matrix(np.ones((2, 3)) / 3), r"W must be a square matrix, got shape \(2, 3\)"),
        (lambda: dc.Matrix([[0.5, 0.25, 0.25], [0.5, 0.5, 0.0], [0.0, 0.25, 0.75]]),
         r"W must be symmetric, got W\[0, 1\] = 0.25 but W\[1, 0\] = 0.5"),
        (lambda: _recheck(eqx.tree_at(lambda m: m.W, dc.Matrix(np.eye(2)), np.full((2, 2), 0.6))),
         "W is not doubly stochastic"),
        (lambda: dc.Matrix(np.full((4, 4), 0.25)).validate(dc.Ring(), 4),
         r"Matrix\(W\) puts weight on \(0, 2\), which is no edge of Ring"),
        (lambda: dc.Matrix(np.eye(4)).validate(dc.Ring(), 5),
         r"Matrix\(W\) has W of shape \(4, 4\), not \(5, 5\) for n=5 nodes"),
        (lambda: dc.Matrix(np.eye(4)).validate(dc.RandomMatching(), 4),
         r"Matrix\(W\) needs a static topology, got RandomMatching"),
        (lambda: dc.Matrix(np.eye(4)).validate(dc.Exponential(), 4),
         r"Matrix\(W\) needs a static topology, got Exponential"),
        (lambda: dc.mix(dc.Ring().neighbours(5), jnp.ones((4, 2))),
         r"X must have one row a node \(n=5\), got shape \(4, 2\)"),
    ]
    for make, message in cases:
        with pytest.raises(ValueError, match=message) as info:  # noqa: PT012
            make()
        assert "\n" not in str(info.value), str(info.value)


# ----------------------------------------------------------------------- the benchmark

def test_the_benchmark_agrees_with_scipy_at_tiny_sizes():
    """``benchmarks/gossip_mixing.py`` at n = 64, 4 trials: the package's step equals the
    CSR products to rounding (exactly on the one-peer graph); both sides timed."""
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from benchmarks import gossip_mixing

    for topology in ("ring", "exponential"):
        row = gossip_mixing.measure(topology, n=64, d=3, trials=4, repeats=1)
        assert row["max_abs_diff"] <= (0.0 if topology == "exponential" else 1e-14)
        assert row["jax_s"] > 0 and row["scipy_s"] > 0 and row["jax_innermost_s"] > 0
        assert row["ratio"] == pytest.approx(row["scipy_s"] / row["jax_s"])
        assert row["entries"] == 4 * 3 * row["nnz"]


def test_a_topology_must_declare_its_flags():
    """``time_varying`` and ``symmetric`` are abstract class variables: a topology that
    leaves one out is refused when it is made."""
    class Forgetful(dc.AbstractTopology):
        time_varying = False

        def max_degree(self, n):
            return 2

        def graph(self, n, t=0, words=None, state=None):
            return dc.Ring().graph(n)

    with pytest.raises(TypeError, match="symmetric"):
        Forgetful()
