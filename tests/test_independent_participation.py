"""Independent participation drawn at its cost: Bernoulli(p) and Poisson(p_i).

Each client takes part with its own probability, independently of the others; the samplers
draw the participants in client order by geometric skips (about p n draws a round, not n).
Against the closed forms, with fixed seeds: the number of participants has the binomial
(Poisson-binomial) law (chi-square over 40,000 rounds), each client's inclusion frequency
is p_i and each pair's p_i p_j (z-scores, Bonferroni over the clients or pairs). Wrong
variants (a count one short, a participant's neighbour left out) fail the same checks. The
round's slots drawn a chunk at a time (``slot_chunks``) hold the participants of the whole
draw in the same order; Bernoulli and Poisson with equal probabilities make the same draws;
mask and gather give the same numbers bit for bit.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import fedjax_abc as fa
from test_engine_local_work import same_numbers

ROUNDS = 40_000
FAMILY_ALPHA = 1e-3  # the chance that a correct sampler fails one of a test's checks


def words(rounds=ROUNDS, seed=0):
    """The sampler words (2, R) of R independent rounds."""
    return jax.random.bits(jax.random.key(seed), (2, rounds), jnp.uint32)


def taken(sampler, n, w):
    """Who takes part, (R, n) bool, and the weights (R, n), from words w (2, R)."""
    idx, wt = sampler.from_words_batched(w, n)
    idx, wt = np.asarray(idx), np.asarray(wt)
    np.testing.assert_array_equal(idx, np.broadcast_to(np.arange(n)[:, None], idx.shape))
    return wt.T > 0, wt.T


def poisson_binomial(p):
    """The law of a sum of independent Bernoulli(p_i), by convolution."""
    law = np.array([1.0])
    for q in p:
        law = np.convolve(law, [1 - q, q])
    return law


def count_pvalue(counts, law):
    """Chi-square p-value of observed counts against a law on 0, 1, ...; cells with fewer
    than 5 expected merged into their neighbours."""
    observed = np.bincount(counts, minlength=law.size)[:law.size]
    expected = law * counts.size
    obs, exp, o, e = [], [], 0.0, 0.0
    for k in range(law.size):
        o, e = o + observed[k], e + expected[k]
        if e >= 5 and expected[k + 1:].sum() >= 5:
            obs.append(o), exp.append(e)
            o, e = 0.0, 0.0
    obs[-1], exp[-1] = obs[-1] + o, exp[-1] + e
    obs, exp = np.asarray(obs), np.asarray(exp)
    return stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue


def z_bound(checks):
    """|z| that a normal deviate exceeds with chance FAMILY_ALPHA / checks (Bonferroni)."""
    return stats.norm.isf(FAMILY_ALPHA / (2 * checks))


def max_z(freq, p, m):
    se = np.sqrt(p * (1 - p) / m)
    ok = se > 0
    assert np.all(freq[~ok] == p[~ok])  # certain (or impossible) events: exactly
    return float(np.max(np.abs(freq[ok] - p[ok]) / se[ok]))


PROBS = np.linspace(0.005, 0.06, 200)  # Poisson: mean 6.5 participants of 200
SAMPLERS = {
    "bernoulli": (fa.Bernoulli(0.03), np.full(200, 0.03)),
    "poisson": (fa.Poisson(PROBS), PROBS),
    "poisson_normalised": (fa.Poisson(PROBS, unbiased=False), PROBS),
}


# ------------------------------------------------------------------------ the law of the draws


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_the_count_has_the_binomial_law(name):
    sampler, p = SAMPLERS[name]
    who, _ = taken(sampler, p.size, words(seed=1))
    assert count_pvalue(who.sum(1), poisson_binomial(p)) > FAMILY_ALPHA


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_each_client_takes_part_with_its_probability(name):
    sampler, p = SAMPLERS[name]
    who, wt = taken(sampler, p.size, words(seed=2))
    assert max_z(who.mean(0), p, ROUNDS) < z_bound(p.size)
    if name == "poisson":  # Horvitz-Thompson weights 1 / (n p_i) on the participants
        np.testing.assert_allclose(wt[who], np.broadcast_to(1 / (p.size * p), who.shape)[who])
    else:
        np.testing.assert_array_equal(wt[who], 1.0)


PAIR_PROBS = np.array([0.3, 0.5, 0.05, 1.0, 0.3, 0.7, 0.2, 0.3, 0.9, 0.4, 0.1, 0.3])


@pytest.mark.parametrize("sampler", [fa.Bernoulli(0.3), fa.Poisson(PAIR_PROBS)],
                         ids=["bernoulli", "poisson"])
def test_pairs_take_part_independently(sampler):
    """pi_ij = p_i p_j for every pair, neighbours in client order included (the geometric
    skips join them), and a certain client with everyone."""
    n = PAIR_PROBS.size
    p = np.full(n, 0.3) if isinstance(sampler, fa.Bernoulli) else PAIR_PROBS
    who, _ = taken(sampler, n, words(seed=3))
    pairs = (who.T.astype(float) @ who) / ROUNDS
    i, j = np.triu_indices(n, 1)
    assert max_z(who.mean(0), p, ROUNDS) < z_bound(n)
    assert max_z(pairs[i, j], p[i] * p[j], ROUNDS) < z_bound(i.size)


def _count_one_short(who):
    """A wrong draw: each round's last participant left out."""
    last = np.where(who.any(1), who.shape[1] - 1 - np.argmax(who[:, ::-1], axis=1), -1)
    wrong = who.copy()
    wrong[np.arange(who.shape[0])[last >= 0], last[last >= 0]] = False
    return wrong


def _no_neighbours(who):
    """A wrong draw: a participant's right-hand neighbour never takes part."""
    wrong = who.copy()
    wrong[:, 1:] &= ~who[:, :-1]
    return wrong


def test_wrong_draws_fail_the_same_checks():
    """Negative controls: the checks above reject a count one short (its law) and a draw
    that leaves out a participant's neighbour (its pairs), as a gap one too long would."""
    n, p = 200, np.full(200, 0.03)
    who, _ = taken(fa.Bernoulli(0.03), n, words(seed=1))
    assert count_pvalue(who.sum(1), poisson_binomial(p)) > FAMILY_ALPHA  # the right draw
    assert count_pvalue(_count_one_short(who).sum(1), poisson_binomial(p)) < 1e-6
    m, q = PAIR_PROBS.size, np.full(PAIR_PROBS.size, 0.3)
    wrong = _no_neighbours(taken(fa.Bernoulli(0.3), m, words(seed=3))[0])
    pairs = (wrong.T.astype(float) @ wrong) / ROUNDS
    i, j = np.triu_indices(m, 1)
    assert max_z(pairs[i, j], q[i] * q[j], ROUNDS) > 10 * z_bound(i.size)


# ------------------------------------------------------------- the same draws, however drawn


def chunked(sampler, n, w, capacity):
    """The slots of ``slot_chunks``, every chunk until every trial's participants are in:
    (idx (m, R), weights (m, R)), and its counts and spans."""
    ch = sampler.slot_chunks(w, n, capacity)
    needed = int(np.max(ch.span))
    parts = [ch.first] + [ch.chunk(k) for k in range(1, -(-needed // capacity))]
    for idx, wt in parts:  # no client in two slots of a chunk unless weightless in both
        idx, wt = np.asarray(idx), np.asarray(wt)
        assert idx.shape == (capacity, w.shape[1]) and idx.min() >= 0 and idx.max() < n
        for r in range(idx.shape[1]):
            held = idx[wt[:, r] != 0, r]
            assert np.intersect1d(held, idx[wt[:, r] == 0, r]).size == 0
            assert np.unique(held).size == held.size
    idx = np.concatenate([np.asarray(a) for a, _ in parts])
    wt = np.concatenate([np.asarray(b) for _, b in parts])
    return idx, wt, np.asarray(ch.count), np.asarray(ch.span)


@pytest.mark.parametrize("sampler, n, capacity", [
    (fa.Bernoulli(0.3), 40, 5),                                    # several chunks a round
    (fa.Bernoulli(0.02), 1000, 32),                                # the capacity of p n = 20
    (fa.Poisson(np.linspace(0.05, 0.6, 40)), 40, 6),
    (fa.Poisson(np.linspace(0.05, 0.6, 40), unbiased=False), 40, 6),
    (fa.Poisson(0.25, unbiased=False), 40, 8),
], ids=["bernoulli_overflow", "bernoulli_capacity", "poisson", "poisson_normalised",
        "poisson_scalar"])
def test_chunks_hold_the_participants_of_the_whole_draw_in_order(sampler, n, capacity):
    """slot_chunks gives the participants of from_words_batched, in client order, with the
    same weights: the engine's compacted slots, drawn at their cost."""
    w = words(rounds=300, seed=5)
    idx, wt, count, span = chunked(sampler, n, w, capacity)
    all_idx, all_w = sampler.from_words_batched(w, n)
    all_idx, all_w = np.asarray(all_idx), np.asarray(all_w)
    for r in range(w.shape[1]):
        mine = wt[:, r] != 0
        assert mine.sum() == count[r] == np.sum(all_w[:, r] != 0)
        assert not mine[span[r]:].any()
        np.testing.assert_array_equal(idx[mine, r], all_idx[all_w[:, r] != 0, r])
        np.testing.assert_array_equal(wt[mine, r], all_w[all_w[:, r] != 0, r])
    assert span.max() > capacity or capacity == 32  # the small capacities overflowed


def test_bernoulli_and_poisson_with_equal_probabilities_make_the_same_draws():
    n, w = 50, words(rounds=200, seed=6)
    b = np.asarray(fa.Bernoulli(0.2).from_words_batched(w, n)[1])
    for same in (fa.Poisson(0.2, unbiased=False), fa.Poisson(np.full(n, 0.2), unbiased=False)):
        np.testing.assert_array_equal(np.asarray(same.from_words_batched(w, n)[1]), b)
    _, one = fa.Bernoulli(0.2).from_words(w[:, 7], n)  # one round: its column of the batch
    np.testing.assert_array_equal(np.asarray(one), b[:, 7])


def test_a_round_draws_two_words_and_needs_no_array_of_n():
    """The sampler reads two words a round at any n; its chunks hold no array of n: a
    billion clients at p = 1e-8 (about 11 participants) draw in a few candidates, and the
    positions' sums do not overflow (32 gaps of up to n each)."""
    for s in (fa.Bernoulli(0.1), fa.Poisson(np.full(10, 0.1))):
        assert s.num_words(10) == 2 and s.num_words(10 ** 6) == 2
    n = 2 ** 30
    ch = fa.Bernoulli(1e-8).slot_chunks(words(rounds=2000, seed=7), n, 32)
    idx, wt = (np.asarray(a) for a in ch.first)
    assert idx.min() >= 0 and idx.max() < n
    count = np.asarray(ch.count)
    assert abs(count.mean() - n * 1e-8) < 4 * math.sqrt(n * 1e-8 / count.size)
    assert np.all(np.diff(np.where(wt > 0, idx, n), axis=0)[wt[1:] > 0] > 0)  # client order


def test_certain_clients_take_part_every_round_also_without_x64():
    top = jnp.full((2,), 0xFFFFFFFF, jnp.uint32)
    jax.config.update("jax_enable_x64", False)
    try:
        _, w1 = fa.Bernoulli(1.0).from_words(top, 5)
        _, w2 = fa.Poisson([1.0, 0.5, 1.0], unbiased=False).from_words(top, 3)
        who = np.asarray(fa.Bernoulli(0.3).from_words_batched(words(rounds=4000, seed=8), 20)[1])
    finally:
        jax.config.update("jax_enable_x64", True)
    np.testing.assert_array_equal(np.asarray(w1), 1.0)
    assert np.asarray(w2)[[0, 2]].tolist() == [1.0, 1.0]
    assert abs(who.mean() - 0.3) < 4 * math.sqrt(0.3 * 0.7 / who.size)


# ------------------------------------------------------------------------------ in the engine


@pytest.mark.parametrize("sampler", [
    fa.Bernoulli(0.04), fa.Poisson(np.linspace(0.01, 0.07, 120)),
    fa.Poisson(np.linspace(0.01, 0.07, 120), unbiased=False)],
    ids=["bernoulli", "poisson", "poisson_normalised"])
def test_mask_equals_gather_bit_for_bit(sampler):
    """n = 120 with about 5 participants a round: gather computes the capacity's slots
    (not n), with the numbers of mask."""
    p = fa.problems.huber_offsets(jax.random.key(0), n=120, d_max=10.0)
    assert sampler.capacity(120) < 60
    kw = dict(sampler=sampler, local_steps=2, stepsize=0.05, rounds=8, x0=p.x_star + 3.0,
              trials=4, key=jax.random.key(1), record_every=4)
    mask = fa.simulate(p, mode="mask", **kw)
    gather = fa.simulate(p, mode="gather", **kw)
    assert same_numbers(mask, gather)
    assert np.all(np.any(mask.x != mask.x[:, :1], axis=1))  # the rounds moved x
