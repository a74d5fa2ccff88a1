"""The "splitmix" generator of the random words, and a battery of statistical tests.

- its round keys are the outputs of a SplitMix64 generator seeded with the trial key, and
  its words those of a SplitMix64 generator seeded with the round key (a plain-Python
  SplitMix64 written here from Steele, Lea and Flood 2014), a client's words their slice;
- a battery (frequency, serial across neighbouring words, clients, trials and rounds,
  Marsaglia's birthday spacings) passes for both generators on words drawn the way the
  simulator draws them, and rejects an unmixed Weyl sequence (so it can fail);
- the simulator keeps its contracts under it (mask = gather, a trial independent of its
  neighbours, sweep = simulate) and agrees in distribution with an independent NumPy
  FedAvg, while its numbers differ from Threefry's.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import fedjax_abc as fa
import reference_numpy as ref
from fedjax_abc._engine import _random
from fedjax_abc._engine._threefry import fold_in_data

MASK64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


def splitmix64_sequence(seed: int, count: int) -> list[int]:
    """The first ``count`` outputs of SplitMix64 seeded with ``seed`` (plain Python ints)."""
    out, state = [], seed
    for _ in range(count):
        state = (state + GAMMA) & MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        out.append(z ^ (z >> 31))
    return out


def key_int(k) -> int:
    k = np.asarray(k, np.uint64)
    return (int(k[0]) << 32) | int(k[1])


def test_words_are_a_splitmix64_sequence():
    k = np.array([0x12345678, 0x9ABCDEF0], np.uint32)
    expected = [z >> 32 for z in splitmix64_sequence(key_int(k), 40)]
    got = np.asarray(_random.stream_words(jnp.asarray(k), 0, 40, "splitmix"))
    assert got.tolist() == expected
    # stream 1 starts 2^32 outputs later: check its first words by their position
    seed = (key_int(k) + (1 << 32) * GAMMA) & MASK64
    expected1 = [z >> 32 for z in splitmix64_sequence(seed, 5)]
    assert np.asarray(_random.stream_words(jnp.asarray(k), 1, 5, "splitmix")).tolist() == expected1


def test_round_keys_are_a_splitmix64_sequence_of_the_trial_key():
    trial = np.array([[0x12345678, 7], [0x9ABCDEF0, 11]], np.uint32)  # two trials, a column each
    rounds = 6
    got = np.stack([np.asarray(_random.round_keys(jnp.asarray(trial), jnp.int32(t), "splitmix"))
                    for t in range(rounds)])  # (rounds, 2, trials)
    for r in range(trial.shape[1]):
        expected = splitmix64_sequence(key_int(trial[:, r]), rounds)
        assert [key_int(got[t, :, r]) for t in range(rounds)] == expected
    # the default generator keeps Threefry's fold_in
    np.testing.assert_array_equal(np.asarray(_random.round_keys(jnp.asarray(trial), 3)),
                                  np.asarray(fold_in_data(jnp.asarray(trial), 3)))


@pytest.mark.parametrize("W", [1, 3, 8, 33])
def test_client_words_are_their_slice(W):
    k = jnp.asarray(np.array([7, 11], np.uint32))
    stream = np.asarray(_random.stream_words(k, 1, 50 * W, "splitmix"))
    clients = np.array([0, 1, 7, 49, 13, 13], np.int32)
    got = np.asarray(jax.jit(_random.client_words, static_argnums=(2, 3))(k, clients, W,
                                                                          "splitmix"))
    np.testing.assert_array_equal(got, np.stack([stream[i * W:(i + 1) * W] for i in clients]))


# ------------------------------------------------------------------- the test battery


def simulator_words(generator: str, trials: int, rounds: int, clients: int) -> np.ndarray:
    """Word 0 of every client, round and trial, drawn as the simulator draws them:
    (trials, rounds, clients) uint32."""
    key = jax.random.key_data(jax.random.key(2024))
    trial_keys = fold_in_data(key, jnp.arange(trials, dtype=jnp.uint32))  # (2, trials)

    def one(k, t):
        k_t = _random.round_keys(k, t, generator)
        return _random.client_words(k_t, jnp.arange(clients, dtype=jnp.int32), 1, generator)[:, 0]

    by_round = jax.vmap(one, in_axes=(None, 0))
    return np.asarray(jax.jit(jax.vmap(by_round, in_axes=(1, None)))(
        trial_keys, jnp.arange(rounds, dtype=jnp.uint32)))


def weyl_words(trials: int, rounds: int, clients: int) -> np.ndarray:
    """A bad generator: SplitMix64's counter without its mixing (consecutive words differ by
    a constant). The battery must reject it."""
    c = np.arange(trials * rounds * clients, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(0x0123456789ABCDEF) + c * np.uint64(GAMMA)
    return (z >> np.uint64(32)).astype(np.uint32).reshape(trials, rounds, clients)


def frequency_p(words: np.ndarray) -> float:
    """Chi-square of the 256 byte values over all bytes of the words."""
    counts = np.bincount(words.reshape(-1).view(np.uint8), minlength=256)
    return stats.chisquare(counts).pvalue


def monobit_p(words: np.ndarray) -> float:
    """Smallest two-sided p over the 32 bit positions of P(bit = 1) = 1/2, Bonferroni."""
    w = words.reshape(-1)
    ones = np.array([np.count_nonzero((w >> np.uint32(b)) & np.uint32(1)) for b in range(32)])
    z = (ones - w.size / 2) / np.sqrt(w.size / 4)
    return min(1.0, 32 * 2 * stats.norm.sf(np.abs(z).max()))


def serial_p(a: np.ndarray, b: np.ndarray) -> float:
    """Chi-square of the 16 x 16 table of the top 4 bits of paired words (a_j, b_j)."""
    cells = (a.reshape(-1) >> np.uint32(28)) * 16 + (b.reshape(-1) >> np.uint32(28))
    return stats.chisquare(np.bincount(cells.astype(np.int64), minlength=256)).pvalue


def birthday_p(words: np.ndarray, m: int = 512, bits: int = 24) -> float:
    """Marsaglia's birthday spacings: m birthdays among 2^bits days (the words' top bits);
    the number of repeated spacings is about Poisson(m^3 / (4 2^bits)) = Poisson(2).
    Chi-square of the counts over samples, in bins 0, 1, 2, 3, >= 4."""
    days = (words.reshape(-1) >> np.uint32(32 - bits)).astype(np.int64)
    samples = days[: days.size // m * m].reshape(-1, m)
    spacings = np.diff(np.sort(samples, axis=1), axis=1)
    spacings.sort(axis=1)
    repeats = np.count_nonzero(np.diff(spacings, axis=1) == 0, axis=1)
    lam = m ** 3 / (4.0 * 2 ** bits)
    observed = np.bincount(np.minimum(repeats, 4), minlength=5)
    probs = stats.poisson.pmf(np.arange(4), lam)
    probs = np.append(probs, 1 - probs.sum())
    return stats.chisquare(observed, probs * observed.sum()).pvalue


def battery(words: np.ndarray) -> dict:
    """p-values of every test on (trials, rounds, clients) words."""
    return {
        "frequency": frequency_p(words),
        "monobit": monobit_p(words),
        "serial, neighbouring clients": serial_p(words[:, :, :-1], words[:, :, 1:]),
        "serial, neighbouring trials": serial_p(words[:-1], words[1:]),
        "serial, consecutive rounds": serial_p(words[:, :-1], words[:, 1:]),
        "birthday spacings": birthday_p(words),
    }


P_MIN = 1e-4  # a fixed seed: a generator passes when every p-value is above this


@pytest.mark.parametrize("generator", _random.GENERATORS)
def test_battery_passes(generator):
    words = simulator_words(generator, trials=64, rounds=64, clients=64)  # 2^18 words
    p = battery(words)
    assert min(p.values()) > P_MIN, p


def test_battery_rejects_an_unmixed_sequence():
    p = battery(weyl_words(64, 64, 64))
    failed = [name for name, v in p.items() if v < 1e-10]
    assert "serial, neighbouring clients" in failed and "birthday spacings" in failed, p


# ------------------------------------------------------- the simulator under splitmix


@pytest.fixture(scope="module")
def p27():
    return fa.problems.huber_offsets(jax.random.key(0), n=12, d_max=20.0)


def test_contracts_hold(p27):
    kw = dict(num_sampled=3, local_steps=4, stepsize=0.05, rounds=20, record_every=5,
              x0=np.asarray(p27.x_star) + 3.0, key=jax.random.key(4), generator="splitmix")
    mask = fa.simulate(p27, trials=12, **kw)
    gather = fa.simulate(p27, trials=12, mode="gather", **kw)
    np.testing.assert_array_equal(mask.gap, gather.gap)
    few = fa.simulate(p27, trials=5, **kw)
    np.testing.assert_array_equal(few.gap, mask.gap[:5])  # trial r ignores its neighbours
    sw = fa.sweep(p27, grid={"stepsize": [0.02, 0.05]}, trials=12,
                  **{k: v for k, v in kw.items() if k != "stepsize"})
    np.testing.assert_array_equal(sw.point(stepsize=0.05).gap, mask.gap)
    threefry = fa.simulate(p27, trials=12, **dict(kw, generator="threefry"))
    assert not np.array_equal(threefry.gap, mask.gap)
    assert mask.config["generator"] == "splitmix" and "generator" not in threefry.config


def test_gaussian_noise_mask_equals_gather():
    """Same draws in both modes; d = 5 sums are ordered differently by XLA in the two
    programs (as under Threefry), so they agree to rounding, and differ from Threefry's."""
    q = fa.problems.quadratics(jax.random.key(1), n=6, d=5)  # 8+ words a client: Gaussian
    kw = dict(num_sampled=2, local_steps=3, stepsize=0.05, rounds=10, trials=8, record_every=5,
              x0=np.asarray(q.x_star) + 1.0, key=jax.random.key(2), generator="splitmix")
    mask = fa.simulate(q, **kw).x_final
    np.testing.assert_allclose(fa.simulate(q, mode="gather", **kw).x_final, mask,
                               rtol=0, atol=1e-14)
    threefry = fa.simulate(q, **dict(kw, generator="threefry")).x_final
    assert np.abs(threefry - mask).max() > 1e-6


def test_agrees_in_distribution_with_numpy(p27):
    S, Q, alpha, T, trials = 4, 5, 0.05, 20, 2000
    x0 = np.asarray(p27.x_star) + 4.0
    res = fa.simulate(p27, num_sampled=S, local_steps=Q, stepsize=alpha, rounds=T, x0=x0,
                      trials=trials, key=jax.random.key(11), record_every=T, mode="gather",
                      record_x=False, generator="splitmix")
    rp = ref.HuberOffsets(np.asarray(p27.params)[:, 0])
    x = ref.fedavg(rp, x0, S=S, Q=Q, stepsizes=np.full(T, alpha), trials=trials,
                   rng=np.random.default_rng(3))
    idx = np.broadcast_to(np.arange(rp.n), (trials, rp.n))
    xs = np.repeat(x[:, None, :], rp.n, axis=1)
    gap = rp.values(idx, xs).mean(1) - float(p27.f_star)
    ref.assert_same_distribution(res.gap[:, -1], gap, what="splitmix FedAvg gap")


def test_unknown_generator_is_refused(p27):
    with pytest.raises(ValueError, match="generator .'philox'. must be one of"):
        fa.simulate(p27, num_sampled=2, local_steps=2, stepsize=0.1, rounds=2, x0=0.0,
                    key=jax.random.key(0), generator="philox")
