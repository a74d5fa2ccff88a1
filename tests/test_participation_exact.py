"""fa.theory's participation closed forms against a brute-force enumeration of one round.

For small n (4..6) every outcome of a round is listed with its probability, written here from
the samplers' definitions (subsets by itertools.combinations, draws by itertools.product,
availability and delivery patterns by itertools.product over {0, 1}^n), none of the
package's helpers used. From the outcomes: pi_i, pi_ij, E[M], E[M M^T] and the sampling
error of A = sum_i M_i v_i, compared with inclusion_probabilities, weight_moments and
sampling_error to rtol 1e-10.
"""

import functools
import itertools

import numpy as np
import pytest

import fedjax_abc as fa

RTOL, ATOL = 1e-10, 1e-12


# --- one round's outcomes: (probability, slots [(client, weight), ...]) ---------------------

def patterns(a):
    """Every x in {0, 1}^n with P(x) = prod_i a_i^x_i (1 - a_i)^(1 - x_i) > 0."""
    a = np.asarray(a, np.float64)
    for x in itertools.product((0, 1), repeat=a.size):
        x = np.array(x)
        p = float(np.prod(np.where(x == 1, a, 1.0 - a)))
        if p > 0:
            yield p, x


def among(a, S):
    """Client i available w.p. a_i independently; min(S, K) of the K available uniformly."""
    for p, x in patterns(a):
        on = np.flatnonzero(x)
        subsets = list(itertools.combinations(on.tolist(), min(S, on.size)))
        for sub in subsets:  # K = 0: one empty subset, no slots
            yield p / len(subsets), [(i, 1.0) for i in sub]


def draws(p, S, unbiased):
    """S iid draws from p; a draw of i weighs 1/(S n p_i) (unbiased) or 1."""
    p = np.asarray(p, np.float64)
    n = p.size
    for seq in itertools.product(range(n), repeat=S):
        yield float(np.prod(p[list(seq)])), [
            (i, 1.0 / (S * n * p[i]) if unbiased else 1.0) for i in seq]


def horvitz_thompson(p):
    p = np.asarray(p, np.float64)
    for pr, x in patterns(p):
        yield pr, [(i, 1.0 / (p.size * p[i])) for i in np.flatnonzero(x)]


def phases(rows, S):
    """Each row a fixed available set, every row equally likely (round=None's average)."""
    return [(pr / len(rows), s) for r in rows for pr, s in among(np.asarray(r, float), S)]


def dropout(outcomes, q, unbiased):
    q = np.asarray(q, np.float64)
    for pr, slots in outcomes:
        for pd, d in patterns(q):
            yield pr * pd, [(i, w / q[i] if unbiased else w) for i, w in slots if d[i]]


def size_weighted(outcomes, sizes):
    s = np.asarray(sizes, np.float64)
    r = s.size * s / s.sum()
    for pr, slots in outcomes:
        yield pr, [(i, w * r[i]) for i, w in slots]


def exact(outcomes, n, normalised, v):
    """pi, pi_ij, E[M], E[M M^T], (mse, variance, bias_sq) from the listed outcomes."""
    P, M = [], []
    for pr, slots in outcomes:
        m = np.zeros(n)
        for i, w in slots:
            m[i] += w
        if normalised:
            m = m / m.sum() if m.sum() > 0 else np.zeros(n)
        P.append(pr)
        M.append(m)
    P, M = np.array(P), np.array(M)
    assert abs(P.sum() - 1.0) < 1e-12
    Ind = (M > 0).astype(np.float64)
    A = M @ v
    vbar = v.mean(axis=0)
    EA = P @ A
    err = (float(P @ np.sum((A - vbar) ** 2, axis=1)), float(P @ np.sum((A - EA) ** 2, axis=1)),
           float(np.sum((EA - vbar) ** 2)))
    return P @ Ind, (Ind * P[:, None]).T @ Ind, P @ M, (M * P[:, None]).T @ M, err


def vectors(n):
    return np.random.default_rng(20240 + n).normal(size=(n, 3))


# --- the samplers: name -> (sampler, n, normalised, outcomes, round) -------------------------

PP = [0.2, 0.5, 0.7, 1.0, 0.35]           # Poisson probabilities (one certain client)
P5 = [0.1, 0.3, 0.25, 0.15, 0.2]          # importance-sampling distribution
Q = [0.9, 0.6, 1.0, 0.5, 0.8]             # delivery probabilities
SIZES = [3.0, 1.0, 7.0, 2.0, 5.0]
LEAVE = np.array([0.1, 0.5, 0.0, 0.3, 0.7])
BACK = np.array([0.3, 0.5, 0.2, 1.0, 0.1])
TRACE = np.array([[1, 1, 1, 0, 0], [0, 0, 0, 1, 0], [0, 1, 0, 1, 1], [0, 0, 0, 0, 0]], bool)
G6 = [1, 0, 0, 1, 0, 0]                   # uneven groups: sizes 4 and 2

CASES = {
    "uniform_n4_S2": lambda: (fa.UniformWithoutReplacement(2), 4, True, among(np.ones(4), 2), None),
    "uniform_n6_S3": lambda: (fa.UniformWithoutReplacement(3), 6, True, among(np.ones(6), 3), None),
    "full_n5": lambda: (fa.FullParticipation(), 5, True, among(np.ones(5), 5), None),
    "bernoulli": lambda: (fa.Bernoulli(0.4), 5, True, among(np.full(5, 0.4), 5), None),
    "with_replacement": lambda: (fa.WithReplacement(3), 4, True, draws(np.full(4, .25), 3, False),
                                 None),
    "importance_norm": lambda: (fa.ImportanceSampler(P5, 3, unbiased=False), 5, True,
                                draws(P5, 3, False), None),
    "importance_unb": lambda: (fa.ImportanceSampler(P5, 3), 5, False, draws(P5, 3, True), None),
    "poisson_unb": lambda: (fa.Poisson(PP), 5, False, horvitz_thompson(PP), None),
    "poisson_norm": lambda: (fa.Poisson(PP, unbiased=False), 5, True, among(PP, 5), None),
    "markov_hetero": lambda: (fa.MarkovAvailability(LEAVE, BACK, 2), 5, True,
                              among(BACK / (LEAVE + BACK), 2), None),
    "markov_scalar": lambda: (fa.MarkovAvailability(0.2, 0.6, 3), 6, True,
                              among(np.full(6, 0.75), 3), None),
    "cyclic_default_avg": lambda: (fa.Cyclic(2, 2), 5, True,
                                   phases([[1, 1, 1, 0, 0], [0, 0, 0, 1, 1]], 2), None),
    "cyclic_default_r3": lambda: (fa.Cyclic(2, 2), 5, True, phases([[0, 0, 0, 1, 1]], 2), 3),
    "cyclic_uneven_avg": lambda: (fa.Cyclic(2, 2, groups=G6), 6, True,
                                  phases([np.equal(G6, 0), np.equal(G6, 1)], 2), None),
    "cyclic_uneven_r0": lambda: (fa.Cyclic(2, 2, groups=G6), 6, True,
                                 phases([np.equal(G6, 0)], 2), 0),
    "cyclic_three_r5": lambda: (fa.Cyclic(3, 1), 5, True, phases([[0, 0, 0, 0, 1]], 1), 5),
    "trace_avg": lambda: (fa.TraceAvailability(TRACE, 2), 5, True, phases(TRACE, 2), None),
    "trace_short_row": lambda: (fa.TraceAvailability(TRACE, 2), 5, True, phases(TRACE[1:2], 2),
                                1),
    "trace_r6": lambda: (fa.TraceAvailability(TRACE, 2), 5, True, phases(TRACE[2:3], 2), 6),
    "dropout_poisson_unb": lambda: (fa.Dropout(fa.Poisson(PP), Q), 5, False,
                                    dropout(horvitz_thompson(PP), Q, True), None),
    "dropout_importance": lambda: (fa.Dropout(fa.ImportanceSampler(P5, 2), Q), 5, False,
                                   dropout(draws(P5, 2, True), Q, True), None),
    "dropout_poisson_norm": lambda: (fa.Dropout(fa.Poisson(PP, unbiased=False), Q), 5, True,
                                     dropout(among(PP, 5), Q, False), None),
    "dropout_bernoulli": lambda: (fa.Dropout(fa.Bernoulli(0.6), 0.7), 4, True,
                                  dropout(among(np.full(4, 0.6), 4), np.full(4, 0.7), False),
                                  None),
    "dropout_full": lambda: (fa.Dropout(fa.FullParticipation(), Q), 5, True,
                             dropout(among(np.ones(5), 5), Q, False), None),
    "sized_poisson_unb": lambda: (fa.SizeWeighted(fa.Poisson(PP), SIZES), 5, False,
                                  size_weighted(horvitz_thompson(PP), SIZES), None),
    "sized_full": lambda: (fa.SizeWeighted(fa.FullParticipation(), SIZES), 5, True,
                           size_weighted(among(np.ones(5), 5), SIZES), None),
    "sized_importance_unb": lambda: (fa.SizeWeighted(fa.ImportanceSampler(P5, 2), SIZES), 5,
                                     False, size_weighted(draws(P5, 2, True), SIZES), None),
    "sized_dropout_poisson": lambda: (fa.SizeWeighted(fa.Dropout(fa.Poisson(PP), Q), SIZES), 5,
                                      False, size_weighted(dropout(horvitz_thompson(PP), Q, True),
                                                           SIZES), None),
}
UNBIASED = ["poisson_unb", "importance_unb", "dropout_poisson_unb", "dropout_importance",
            "uniform_n4_S2", "uniform_n6_S3", "full_n5", "with_replacement"]


@functools.lru_cache(maxsize=None)
def case(name):
    sampler, n, normalised, outcomes, rnd = CASES[name]()
    return sampler, n, rnd, exact(outcomes, n, normalised, vectors(n))


@pytest.mark.parametrize("name", CASES)
def test_inclusion_probabilities_match_enumeration(name):
    sampler, n, rnd, (pi, pi2, _, _, _) = case(name)
    inc = fa.theory.inclusion_probabilities(sampler, n, round=rnd)
    np.testing.assert_allclose(inc.first, pi, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(inc.second, pi2, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(np.diag(inc.second), inc.first, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", CASES)
def test_weight_moments_match_enumeration(name):
    sampler, n, rnd, (_, _, m1, m2, _) = case(name)
    wm = fa.theory.weight_moments(sampler, n, round=rnd)
    np.testing.assert_allclose(wm.mean, m1, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(wm.second, m2, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", CASES)
def test_sampling_error_matches_enumeration(name):
    sampler, n, rnd, (_, _, _, _, err) = case(name)
    got = fa.theory.sampling_error(sampler, vectors(n), round=rnd)
    np.testing.assert_allclose([got.mse, got.variance, got.bias_sq], err, rtol=RTOL, atol=ATOL)


def eq14(n, S, v):
    return (n - S) / (n - 1) / S * np.mean(np.sum((v - v.mean(axis=0)) ** 2, axis=1))


@pytest.mark.parametrize("n,S", [(n, S) for n in (4, 5, 6) for S in range(1, n + 1)])
def test_eq14_uniform_without_replacement(n, S):
    v = vectors(n)
    got = fa.theory.sampling_error(fa.UniformWithoutReplacement(S), v)
    np.testing.assert_allclose(got.mse, eq14(n, S, v), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(exact(among(np.ones(n), S), n, True, v)[4][0], eq14(n, S, v),
                               rtol=RTOL, atol=ATOL)
    assert abs(got.bias_sq) <= ATOL


@pytest.mark.parametrize("name", UNBIASED)
def test_unbiased_samplers_have_no_bias(name):
    sampler, n, rnd, (_, _, m1, _, err) = case(name)
    got = fa.theory.sampling_error(sampler, vectors(n), round=rnd)
    assert abs(got.bias_sq) <= ATOL and abs(err[2]) <= ATOL
    np.testing.assert_allclose(m1, np.full(n, 1.0 / n), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got.mse, got.variance, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("n,S", [(4, 2), (5, 3), (6, 2)])
def test_enumeration_distinguishes_with_replacement(n, S):
    """Negative control: S draws with replacement are not the paper's S-subset."""
    v = vectors(n)
    _, _, m1, m2, err = exact(draws(np.full(n, 1.0 / n), S, False), n, True, v)
    wrong = fa.theory.weight_moments(fa.UniformWithoutReplacement(S), n)
    np.testing.assert_allclose(m1, wrong.mean, rtol=RTOL, atol=ATOL)  # same mean 1/n ...
    assert not np.allclose(m2, wrong.second, rtol=1e-6, atol=1e-9)  # ... other second moments
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(m2, wrong.second, rtol=RTOL, atol=ATOL)
    assert not np.isclose(err[0], eq14(n, S, v), rtol=1e-6)
    var = np.mean(np.sum((v - v.mean(axis=0)) ** 2, axis=1))
    np.testing.assert_allclose(err[0], var / S, rtol=RTOL, atol=ATOL)  # iid draws: sigma^2 / S


def test_no_closed_form_errors():
    with pytest.raises(ValueError, match="no closed form"):
        fa.theory.weight_moments(fa.Dropout(fa.UniformWithoutReplacement(2), 0.5), 5)
    with pytest.raises(ValueError, match="no closed form"):
        fa.theory.sampling_error(fa.SizeWeighted(fa.UniformWithoutReplacement(2),
                                                 [1, 2, 3, 4, 5]), np.ones((5, 2)))
    with pytest.raises(ValueError):
        fa.theory.stationary_availability(1.0, 0.5)
    np.testing.assert_allclose(fa.theory.stationary_availability(LEAVE, BACK),
                               BACK / (LEAVE + BACK), rtol=RTOL, atol=ATOL)


# --- a user's own sampler gets the theory by giving its closed form -------------------------

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402


class Pair(fa.AbstractStatelessSampler):
    """Clients 0 and 1 every round, averaged: A = (v_0 + v_1) / 2, no randomness."""

    distinct_slots = True
    num_sampled = 2

    def num_slots(self, n):
        return 2

    def from_words(self, words, n):
        return jnp.array([0, 1], jnp.int32), jnp.ones(2)

    def participation_moments(self, n, round=None):
        on = np.zeros(n)
        on[:2] = 1.0
        m1 = on / 2
        return fa.ParticipationMoments(on, np.outer(on, on), m1, np.outer(m1, m1))


class Opaque(Pair):
    """The same sampler, without its closed form."""

    def participation_moments(self, n, round=None):
        return None


def test_a_users_sampler_gets_its_theory_and_a_run():
    n, v = 5, vectors(5)
    err = fa.theory.sampling_error(Pair(), v)
    by_hand = float(np.sum(((v[0] + v[1]) / 2 - v.mean(axis=0)) ** 2))  # A is deterministic
    assert err.mse == pytest.approx(by_hand, rel=1e-12) and err.variance == pytest.approx(0.0)
    inc = fa.theory.inclusion_probabilities(Pair(), n)
    np.testing.assert_array_equal(inc.first, [1, 1, 0, 0, 0])
    with pytest.raises(ValueError, match=r"no closed form for the participation of Opaque: a "
                                         r"sampler gives one through its participation_moments"):
        fa.theory.sampling_error(Opaque(), v)
    p = fa.problems.quadratics(jax.random.key(0), n=n, d=3)
    res = fa.simulate(p, sampler=Pair(), local_steps=1, stepsize=0.1, rounds=3, x0=np.zeros(3),
                      key=jax.random.key(1), trials=2)
    assert res.x_final.shape == (2, 3) and np.all(np.isfinite(res.x_final))
