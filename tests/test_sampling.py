"""Client samplers against eq. (9) and their definitions, by Monte Carlo over many keys.

For S of n clients drawn uniformly without replacement (Assumption 3), eq. (9) says
P(i in S_t) = S/n and P(i, j in S_t) = S(S-1)/(n(n-1)) for i != j. Frequencies over M keys are
compared with these within 5 binomial standard errors sqrt(p(1-p)/M).

Bad arguments of the samplers and ``sample_mask`` are refused; with ``jax_enable_x64``
switched off the samplers stay uniform and a float32 run asks for no 64-bit type.
"""

import itertools
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import fedjax_abc as fa
import reference_numpy as ref
from fedjax_abc._problems._samplers import _uniform_below

M = 20000
Z = 5.0


def draw(sampler, n, m=M, seed=0):
    keys = jax.random.split(jax.random.key(seed), m)
    idx, w = jax.vmap(lambda k: sampler(k, n))(keys)
    masks = jax.vmap(lambda k: fa.sample_mask(sampler, k, n))(keys)
    return np.asarray(idx), np.asarray(w), np.asarray(masks)


def assert_frequency(freq, p, m, what):
    se = math.sqrt(p * (1 - p) / m)
    dev = np.abs(np.asarray(freq) - p)
    assert np.all(dev <= Z * se), f"{what}: max deviation {dev.max():.4g} > {Z} se = {Z * se:.4g}"


def pair_frequencies(masks):
    m = masks.shape[0]
    return (masks.T @ masks) / m


@pytest.mark.parametrize("n,S", [(10, 3), (40, 4), (7, 1), (7, 6), (5, 5), (33, 17)])
def test_uniform_without_replacement_eq9(n, S):
    idx, w, masks = draw(fa.UniformWithoutReplacement(S), n, seed=n * 100 + S)
    assert idx.shape == (M, S) and w.shape == (M, S)
    np.testing.assert_array_equal(w, 1.0)
    assert idx.min() >= 0 and idx.max() < n
    srt = np.sort(idx, axis=1)
    assert np.all(srt[:, 1:] != srt[:, :-1]), "a sampled set has a repeated client"
    # sample_mask is the indicator vector of eq. (9): S ones, at the sampled clients
    assert set(np.unique(masks)) <= {0.0, 1.0}
    np.testing.assert_array_equal(masks.sum(axis=1), S)
    ind = np.zeros((M, n))
    np.put_along_axis(ind, idx, 1.0, axis=1)
    np.testing.assert_array_equal(masks, ind)
    if S == n:
        return
    assert_frequency(masks.mean(axis=0), S / n, M, "inclusion")
    pairs = pair_frequencies(masks)[~np.eye(n, dtype=bool)]
    assert_frequency(pairs, S * (S - 1) / (n * (n - 1)), M, "pairs")


def test_every_subset_equally_likely():
    """n = 6, S = 3: all C(6, 3) = 20 subsets appear with frequency 1/20 (chi-square, p > 1e-4)."""
    n, S = 6, 3
    idx, _, _ = draw(fa.UniformWithoutReplacement(S), n, seed=11)
    subsets = list(itertools.combinations(range(n), S))
    code = {s: j for j, s in enumerate(subsets)}
    counts = np.bincount([code[tuple(sorted(r))] for r in idx.tolist()], minlength=len(subsets))
    assert counts.size == 20 and counts.min() > 0
    _, pvalue = stats.chisquare(counts)
    assert pvalue > 1e-4, (counts, pvalue)


def test_frequency_check_has_power():
    """The inclusion check rejects a biased sampler (the first S clients twice as often)."""
    n, S = 10, 3
    rng = np.random.default_rng(0)
    weights = np.where(np.arange(n) < S, 2.0, 1.0)
    # weighted sampling without replacement: the S largest u^(1/w) (Efraimidis-Spirakis)
    chosen = np.argsort(-rng.random((M, n)) ** (1 / weights), axis=1)[:, :S]
    biased = np.zeros((M, n))
    np.put_along_axis(biased, chosen, 1.0, axis=1)
    with pytest.raises(AssertionError):
        assert_frequency(biased.mean(axis=0), S / n, M, "biased")


def test_with_replacement():
    """S iid uniform draws: every slot uniform, slots independent, counts add up to S."""
    n, S = 8, 3
    idx, w, masks = draw(fa.WithReplacement(S), n, seed=21)
    assert idx.shape == (M, S)
    np.testing.assert_array_equal(w, 1.0)
    assert idx.min() >= 0 and idx.max() < n
    for slot in range(S):
        assert_frequency(np.bincount(idx[:, slot], minlength=n) / M, 1 / n, M, f"slot {slot}")
    assert_frequency([np.mean(idx[:, 0] == idx[:, 1]), np.mean(idx[:, 1] == idx[:, 2])], 1 / n, M,
                     "repeat")
    # the mask counts repeats: a client drawn twice has weight 2
    np.testing.assert_array_equal(masks.sum(axis=1), S)
    counts = np.stack([np.bincount(r, minlength=n) for r in idx])
    np.testing.assert_array_equal(masks, counts)
    assert masks.max() >= 2


@pytest.mark.parametrize("p", [0.1, 0.5, 1.0])
def test_bernoulli(p):
    n = 12
    idx, w, masks = draw(fa.Bernoulli(p), n, seed=int(p * 100))
    np.testing.assert_array_equal(idx, np.broadcast_to(np.arange(n), (M, n)))
    np.testing.assert_array_equal(masks, w)
    assert set(np.unique(w)) <= {0.0, 1.0}
    if p == 1.0:
        np.testing.assert_array_equal(w, 1.0)
        return
    assert_frequency(w.mean(axis=0), p, M, "inclusion")
    pairs = pair_frequencies(w)[~np.eye(n, dtype=bool)]
    assert_frequency(pairs, p * p, M, "pairs")
    assert_frequency([np.mean(w.sum(axis=1) == 0)], (1 - p) ** n, M, "empty round")


def test_full_participation():
    n = 7
    idx, w, masks = draw(fa.FullParticipation(), n, m=10)
    np.testing.assert_array_equal(idx, np.broadcast_to(np.arange(n), (10, n)))
    np.testing.assert_array_equal(masks, 1.0)


def test_samplers_are_deterministic_in_the_key():
    s = fa.UniformWithoutReplacement(4)
    k = jax.random.key(3)
    a, b = s(k, 20), s(k, 20)
    np.testing.assert_array_equal(np.asarray(a[0]), np.asarray(b[0]))
    others = {tuple(np.sort(np.asarray(s(jax.random.key(j), 20)[0]))) for j in range(20)}
    assert len(others) > 15


def test_simulate_draws_fresh_participants_every_round():
    """Inside simulate, S_t is uniform and independent of S_{t-1}, and differs between trials.

    Exact oracle, S = 1 of three Huber clients with offsets (0, 0.4, -0.5), Q = 1, alpha = 1/2,
    x_0 = 0.1: x_t stays in [-0.5, 0.4], where every client is in its quadratic zone, so the
    candidates x_{t+1} = x_t / 2 + d_i / 2 are at least 0.2 apart and each round's participant
    is identified from x_{t+1}.
    """
    offsets = np.array([0.0, 0.4, -0.5])
    p = fa.problems.huber_offsets(offsets=offsets)
    T, trials, alpha = 20, 300, 0.5
    res = fa.simulate(p, num_sampled=1, local_steps=1, stepsize=alpha, rounds=T, x0=0.1,
                      trials=trials, key=jax.random.key(17), record_every=1, oracle=fa.ExactOracle())
    x = res.x[:, :, 0]
    cand = x[:, :-1, None] - alpha * ref.huber_grad(x[:, :-1, None] - offsets)  # (trials, T, 3)
    assert np.min(np.diff(np.sort(cand, axis=2), axis=2)) > 0.1
    who = np.argmin(np.abs(cand - x[:, 1:, None]), axis=2)
    np.testing.assert_allclose(np.take_along_axis(cand, who[..., None], 2)[..., 0], x[:, 1:], rtol=1e-14,
                               atol=1e-15)
    draws = trials * T
    assert_frequency(np.bincount(who.ravel(), minlength=3) / draws, 1 / 3, draws, "participant")
    pairs = np.zeros((3, 3))
    np.add.at(pairs, (who[:, :-1].ravel(), who[:, 1:].ravel()), 1)
    assert_frequency(pairs.ravel() / pairs.sum(), 1 / 9, int(pairs.sum()), "consecutive rounds")
    assert np.unique(who, axis=0).shape[0] > trials - 5  # trials do not share their draws


def test_uniform_below_has_no_visible_bias_for_odd_n():
    """n not a power of two (n = 3): each client about 1/3 of S = 1 draws."""
    idx, _, _ = draw(fa.UniformWithoutReplacement(1), 3, seed=8)
    assert_frequency(np.bincount(idx[:, 0], minlength=3) / M, 1 / 3, M, "n=3")


def test_sample_mask_inside_jit():
    f = jax.jit(lambda k: fa.sample_mask(fa.UniformWithoutReplacement(2), k, 5))
    m = np.asarray(f(jax.random.key(0)))
    assert m.shape == (5,) and m.sum() == 2 and set(np.unique(m)) == {0.0, 1.0}


def _floyd_numpy(words, n, S):
    """Floyd's algorithm as the docstring states it, in plain Python integers."""
    chosen = []
    for k in range(S):
        j = n - S + k
        t = (int(words[k]) * (j + 1)) >> 32  # floor(u * (j + 1)), u = word / 2^32
        chosen.append(j if t in chosen else t)
    return chosen


@pytest.mark.parametrize("n,S", [(40, 4), (1000, 10), (20, 16), (20, 17), (64, 40), (6, 6)])
def test_floyd_picks_match_a_plain_implementation(n, S):
    """Both code paths (written out for S <= 16, a loop beyond) pick what Floyd's algorithm picks,
    one round at a time (``from_words``) and for many trials at once (``from_words_batched``,
    what the simulator calls: a trial a column)."""
    words = np.random.default_rng(n + S).integers(0, 2 ** 32, size=(300, S), dtype=np.uint32)
    # small words collide often: exercise the "already taken" branch
    words[:100] = np.random.default_rng(1).integers(0, 2 ** 27, size=(100, S), dtype=np.uint32)
    sampler = fa.UniformWithoutReplacement(S)
    idx, _ = jax.jit(jax.vmap(lambda w: sampler.from_words(w, n)))(jax.numpy.asarray(words))
    expected = np.array([_floyd_numpy(w, n, S) for w in words] if S < n else
                        [list(range(n))] * len(words))
    np.testing.assert_array_equal(np.asarray(idx), expected)
    batched, weights = jax.jit(lambda w: sampler.from_words_batched(w, n))(
        jax.numpy.asarray(words.T))
    np.testing.assert_array_equal(np.asarray(batched), expected.T)
    np.testing.assert_array_equal(np.asarray(weights), np.ones((S, len(words))))
    assert np.mean([len(set(e)) < S for e in expected]) == 0
    if S == n:
        return
    taken = sum(int((w * ((n - S + k) + 1)) >> 32) in row[:k]  # the j branch was used
                for row, ws in zip(expected, words) for k, w in enumerate(ws.astype(object)))
    assert taken > 0


class _Reversed(fa.UniformWithoutReplacement):
    """Floyd's slots in reverse order: a subclass that changes ``from_words`` only."""

    def from_words(self, words, n):
        idx, w = super().from_words(words, n)
        return idx[::-1], w


def test_batched_slots_follow_a_subclass_from_words():
    n, S = 40, 4
    words = np.random.default_rng(3).integers(0, 2 ** 32, size=(S, 50), dtype=np.uint32)
    plain, _ = fa.UniformWithoutReplacement(S).from_words_batched(jax.numpy.asarray(words), n)
    got, _ = _Reversed(S).from_words_batched(jax.numpy.asarray(words), n)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(plain)[::-1])


def _poisson_binomial_sf(p, c):
    """P(X > c) for X a sum of independent Bernoulli(p_i): the exact law by convolution."""
    law = np.array([1.0])
    for q in p:
        law = np.convolve(law, [1 - q, q])
    return law[c + 1:].sum()


@pytest.mark.parametrize("n, p", [(1000, 0.01), (1000, 0.1), (10_000, 0.001), (200, 0.05)])
def test_tail_capacity_holds_all_but_one_round_in_a_million(n, p):
    """The capacity from Bernstein's bound against the exact binomial tail: overflow below
    1e-6, and not wasteful (at most twice the exact 1 - 1e-6 quantile)."""
    from fedjax_abc._problems._samplers import OVERFLOW_PROBABILITY, tail_capacity

    C = tail_capacity(p, n)
    assert stats.binom.sf(C, n, p) <= OVERFLOW_PROBABILITY
    assert C <= 2 * stats.binom.isf(OVERFLOW_PROBABILITY, n, p)
    assert fa.Bernoulli(p).capacity(n) == C


def test_tail_capacity_of_unequal_probabilities():
    rng = np.random.default_rng(0)
    probs = rng.uniform(0.0, 0.1, 300)
    C = fa.Poisson(probs).capacity(300)
    assert _poisson_binomial_sf(probs, C) <= 1e-6 < _poisson_binomial_sf(probs, C // 2)
    assert fa.Dropout(fa.Poisson(probs), 0.5).capacity(300) == C  # dropping keeps the bound
    assert fa.Poisson(np.full(10, 0.5)).capacity(10) is None  # more than half of n: all slots
    assert fa.UniformWithoutReplacement(3).capacity(10) is None


# ---------------------------------------------- bad input to the samplers and sample_mask


@pytest.mark.parametrize("make, match", [
    (lambda: fa.UniformWithoutReplacement(0), r"num_sampled \(S=0\) must be >= 1"),
    (lambda: fa.UniformWithoutReplacement(2.5), r"num_sampled \(S=2.5\) must be an integer"),
    (lambda: fa.UniformWithoutReplacement("2"), r"num_sampled \(S='2'\) must be an integer"),
    (lambda: fa.WithReplacement(0), r"num_sampled \(S=0\) must be >= 1"),
    (lambda: fa.Bernoulli("0.5"), r"p='0.5'\) must be a number in \(0, 1\]"),
    (lambda: fa.Bernoulli([0.5, 0.5]), r"must be a number in \(0, 1\]"),
    (lambda: fa.sample_mask(fa.UniformWithoutReplacement(2), 0, 5), r"single JAX PRNG key"),
    (lambda: fa.sample_mask(fa.UniformWithoutReplacement(6), jax.random.key(0), 5),
     r"num_sampled \(S=6\) must be in \[1, n=5\]"),
    (lambda: fa.sample_mask(fa.UniformWithoutReplacement(2), jax.random.key(0), 0),
     r"n must be an integer >= 1, got 0"),
])
def test_sampler_constructors_and_sample_mask_refuse_bad_input(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_sample_mask_still_draws_s_of_n():
    mask = np.asarray(fa.sample_mask(fa.UniformWithoutReplacement(2), jax.random.key(0), 5))
    assert sorted(mask.tolist()) == [0.0, 0.0, 0.0, 1.0, 1.0]


# ------------------------------------------------ the attributes every sampler declares


class _FirstTwo(fa.AbstractStatelessSampler):
    """Clients 0 and 1 every round; it declares neither distinct_slots nor num_sampled."""

    def num_slots(self, n):
        return 2

    def from_words(self, words, n):
        return jnp.arange(2, dtype=jnp.int32), jnp.ones(2)


class _FirstTwoDeclared(_FirstTwo):
    distinct_slots = True
    num_sampled = 2


def test_a_sampler_that_does_not_declare_its_attributes_cannot_be_made():
    """distinct_slots and num_sampled are abstract: a sampler class that leaves them out is
    refused when it is instantiated (equinox's error names them), not run with a default."""
    with pytest.raises(TypeError, match=r"Can't instantiate abstract class _FirstTwo with "
                                        r"abstract attributes \{'(distinct_slots|num_sampled)', "
                                        r"'(distinct_slots|num_sampled)'\}"):
        _FirstTwo()
    mask = fa.sample_mask(_FirstTwoDeclared(), jax.random.key(0), 5)
    assert np.asarray(mask).tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("sampler, S, distinct", [
    (fa.UniformWithoutReplacement(3), 3, True),
    (fa.WithReplacement(3), 3, False),
    (fa.FullParticipation(), None, True),
    (fa.Bernoulli(0.5), None, True),
    (fa.Poisson([0.5, 0.2]), None, True),
    (fa.ImportanceSampler([0.5, 0.5], 3), 3, False),
    (fa.Cyclic(2, 1), 1, True),
    (fa.Dropout(fa.WithReplacement(4), 0.5), 4, False),  # a wrapper's are the wrapped one's
    (fa.SizeWeighted(fa.Bernoulli(0.5), [1.0, 2.0]), None, True),
    (fa.timing.Timed(fa.UniformWithoutReplacement(4), fa.timing.Clock(
        fa.timing.Exponential(1.0)), keep=2), 2, True),  # over-selection keeps 2 of 4
])
def test_every_sampler_says_its_size_and_whether_its_slots_are_distinct(sampler, S, distinct):
    assert sampler.num_sampled == S and sampler.distinct_slots is distinct


# ------------------------------------------------ uniform sampling in float32 without x64


# With jax_enable_x64 switched off after the problem is built: a uint64 product silently
# becomes uint32 without x64, which made ``_uniform_below`` return 0 for every word (the same
# clients every round). Without x64 it now multiplies 16-bit halves in uint32 (with x64, one
# uint64 product): the same integers as the exact product in both modes.
RNG = np.random.default_rng(7)
WORDS = np.concatenate([
    np.array([0, 1, 2, 0xFFFF, 0x10000, 0x10001, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 2, 2 ** 32 - 1],
             dtype=np.uint32),
    RNG.integers(0, 2 ** 32, 2000, dtype=np.uint32),
])
QUADRATICS = fa.problems.quadratics(jax.random.key(0), n=6, d=3)  # built with x64 on
BOUNDS = np.concatenate([
    np.array([1, 2, 3, 40, 0xFFFF, 0x10000, 0x10001, 10 ** 6, 2 ** 31 - 1, 2 ** 31],
             dtype=np.uint32),
    RNG.integers(1, 2 ** 31, 40, dtype=np.uint32),
])


@pytest.fixture(params=[True, False], ids=["x64_on", "x64_off"])
def x64(request):
    """Runs the test with jax_enable_x64 as the parameter says, restoring it afterwards."""
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", request.param)
    try:
        yield request.param
    finally:
        jax.config.update("jax_enable_x64", before)


@pytest.fixture
def x64_off():
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", before)


def test_uniform_below_is_the_high_half_of_the_product(x64):
    got = np.asarray(jax.jit(jax.vmap(_uniform_below, in_axes=(None, 0)))(
        jnp.asarray(WORDS), jnp.asarray(BOUNDS)))
    assert got.dtype == np.int32
    expected = [[(int(w) * int(b)) >> 32 for w in WORDS] for b in BOUNDS]
    np.testing.assert_array_equal(got.astype(np.int64), np.array(expected, dtype=np.int64))


def test_the_x64_fixture_restores_the_flag():
    assert jax.config.jax_enable_x64  # the tests' set-up switched it on; the fixtures put it back


def _frequencies(sampler, n, sets):
    words = RNG.integers(0, 2 ** 32, (sets, sampler.num_words(n)), dtype=np.uint32)
    idx, w = jax.jit(jax.vmap(lambda ws: sampler.from_words(ws, n)))(jnp.asarray(words))
    mask = np.zeros((sets, n))
    np.add.at(mask, (np.arange(sets)[:, None], np.asarray(idx)), np.asarray(w))
    return mask


@pytest.mark.parametrize("sampler", [fa.UniformWithoutReplacement(4),
                                     fa.UniformWithoutReplacement(20), fa.WithReplacement(4)],
                         ids=["without_S4", "without_S20", "with_S4"])
def test_samplers_are_uniform_without_x64(x64_off, sampler):
    n, sets = 40, 20_000
    mask = _frequencies(sampler, n, sets)
    S = sampler.num_sampled
    assert np.all(mask.sum(1) == S)
    if isinstance(sampler, fa.UniformWithoutReplacement):
        assert mask.max() == 1  # S distinct clients
        p = S / n
    else:  # the chance that a client is drawn at least once in S draws
        p = 1 - (1 - 1 / n) ** S
    freq = (mask > 0).mean(0)
    se = np.sqrt(p * (1 - p) / sets)
    assert np.all(np.abs(freq - p) < 5 * se), (freq.min(), freq.max(), p)


def _one_hot_problem(n):
    """f_i(x) = |x - e_i|^2 / 2 on R^n: one exact step of size 1 from 0 lands on the mean of
    the sampled e_i, so x_1 S is the round's participation mask."""
    eye = np.eye(n, dtype=np.float32)
    x_star = np.full(n, 1.0 / n, dtype=np.float32)
    return fa.Problem(loss=lambda c, x: 0.5 * jnp.sum((x - c) ** 2), params=jnp.asarray(eye),
                      local_minima=jnp.zeros(n),
                      f_star=jnp.asarray(0.5 * np.sum((x_star - eye[0]) ** 2)),
                      x_star=jnp.asarray(x_star), oracle=fa.ExactOracle(), name="one-hot")


ONE_HOT = _one_hot_problem(40)  # built with x64 on (a Problem needs it), run with it off


@pytest.mark.parametrize("mode", ["mask", "gather"])
def test_float32_simulate_samples_every_client_without_x64(x64_off, mode):
    n, S, trials = 40, 4, 4000
    p = ONE_HOT
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "Explicitly requested dtype uint64 ... truncated"
        res = fa.simulate(p, sampler=fa.UniformWithoutReplacement(S), local_steps=1,
                          stepsize=1.0, rounds=1, x0=np.zeros(n), trials=trials,
                          key=jax.random.key(3), dtype="float32", mode=mode, record_x=False)
    assert res.x_final.dtype == np.float32
    mask = res.x_final * S
    np.testing.assert_allclose(mask.sum(1), S, rtol=1e-6)
    assert set(np.unique(np.round(mask, 6))) <= {0.0, 1.0}
    p_in = S / n
    se = np.sqrt(p_in * (1 - p_in) / trials)
    freq = (mask > 0.5).mean(0)
    assert np.all(np.abs(freq - p_in) < 5 * se), (freq.min(), freq.max())


@pytest.mark.parametrize("oracle", [fa.GaussianOracle(1.0, 0.5), fa.RademacherOracle(),
                                    fa.ExactOracle()], ids=lambda o: type(o).__name__)
@pytest.mark.parametrize("sampler", [fa.UniformWithoutReplacement(3), fa.WithReplacement(3),
                                     fa.Bernoulli(0.3), fa.FullParticipation()],
                         ids=lambda s: type(s).__name__)
def test_float32_path_asks_for_no_64_bit_type_without_x64(x64_off, sampler, oracle):
    """JAX warns whenever a 64-bit dtype is requested without x64: none may be."""
    p = QUADRATICS
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = fa.simulate(p, sampler=sampler, oracle=oracle, local_steps=2, stepsize=0.05,
                          rounds=4, x0=np.asarray(p.x_star) + 1.0, trials=3, key=jax.random.key(1),
                          dtype="float32", record_every=2)
    assert res.gap.dtype == np.float32 and np.all(np.isfinite(res.gap))
