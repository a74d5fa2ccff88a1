"""``fa.stats`` as numerical contracts: coverage and power by Monte Carlo against closed forms
(with negative controls that the checks can fail), paired differences against NumPy on real
runs, Holm by hand, a precision-targeted run equal to a fixed-size one bit for bit, and bad
input in one line.

Monte Carlo bands follow Morris, White and Crowther ("Using simulation studies to evaluate
statistical methods", Statistics in Medicine 2019): the coverage of R replications has
binomial standard error sqrt(p (1 - p) / R), 0.0022 at p = 0.95 and R = 10,000, so the band
94-96% is +-4.6 standard errors; at R = 4,000 (the sequential rules) it is 0.0034.
"""

from __future__ import annotations

import dataclasses
import doctest
import importlib
import math
import warnings

import jax
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc._stats._bootstrap import jackknife_values
from fedjax_abc._stats._intervals import t_quantile
from fedjax_abc._stats._sequential import mixture_ratio

MU = 0.3  # the true mean difference of the generated pairs
SD_DIFF = math.sqrt(0.4)  # sd of a - b: unit variances, correlation 0.8


def paired_normal(rng, reps: int, n: int) -> np.ndarray:
    """(reps, n) paired differences a - b of unit-variance normals of correlation 0.8 whose
    means differ by MU: d ~ N(MU, 0.4) in closed form."""
    z1, z2 = rng.standard_normal((2, reps, n))
    a = 1.0 + z1
    b = 1.0 - MU + 0.8 * z1 + 0.6 * z2
    return a - b


def coverage(interval, *, reps: int, n: int, seed: int) -> float:
    """The share of ``reps`` samples of n paired differences whose ``interval(d) -> (low,
    high)`` covers MU."""
    d = paired_normal(np.random.default_rng(seed), reps, n)
    hits = 0
    for row in d:
        low, high = interval(row)
        hits += low <= MU <= high
    return hits / reps


def in_band(rate: float) -> bool:
    return 0.94 <= rate <= 0.96


def _library(method):
    def interval(d):
        iv = fa.stats.mean_interval(d, method=method)
        return iv.ci_low, iv.ci_high
    return interval


# ------------------------------------------------------------------ fixed-size coverage

@pytest.mark.parametrize("method, n", [("normal", 200), ("t", 10), ("t", 200)])
def test_fixed_size_intervals_cover_at_95(method, n):
    rate = coverage(_library(method), reps=10_000, n=n, seed=1)
    assert in_band(rate), rate


def test_the_normal_interval_under_covers_at_few_trials():
    """Why the t option exists: z instead of t_{0.975, 4} = 2.78 at 5 trials covers about 88%."""
    rate = coverage(_library("normal"), reps=10_000, n=5, seed=2)
    assert rate < 0.94 and abs(rate - 0.878) < 0.01, rate


def test_the_coverage_check_catches_a_wrong_stderr():
    """Shown failing: s / n in place of s / sqrt(n), and no division at all, leave the band."""
    def wrong(divide):
        def interval(d):
            half = 1.959963984540054 * d.std(ddof=1) / divide(d.size)
            return d.mean() - half, d.mean() + half
        return interval

    too_narrow = coverage(wrong(lambda n: n), reps=2_000, n=200, seed=3)
    too_wide = coverage(wrong(lambda n: 1.0), reps=2_000, n=200, seed=3)
    right = coverage(wrong(math.sqrt), reps=2_000, n=200, seed=3)
    assert not in_band(too_narrow) and too_narrow < 0.2
    assert not in_band(too_wide) and too_wide == 1.0
    assert abs(right - 0.95) < 0.015  # the same helper passes the right formula


# ------------------------------------------------------------- coverage under stopping

def stopped(rule: str, d: np.ndarray, *, batch: int, target: float, tuned_for: float,
            mu: float = MU):
    """For each row of ``d`` (one sequential experiment), the rule's interval when it first
    reaches the target half-width at a look after each batch (or at the last trial):
    (covers MU, trials at the stop)."""
    reps, max_n = d.shape
    looks = np.arange(batch, max_n + 1, batch)
    blocks = d[:, :looks[-1]].reshape(reps, looks.size, batch)
    s1 = np.cumsum(blocks.sum(axis=2), axis=1)
    s2 = np.cumsum(np.einsum("rlb,rlb->rl", blocks, blocks), axis=1)
    mean = s1 / looks
    sd = np.sqrt(np.maximum((s2 - looks * mean ** 2) / (looks - 1), 0.0))
    half = fa.stats.sequential_half_width(looks, sd, rule=rule, tuned_for=tuned_for)
    stop = half <= target
    stop[:, -1] = True
    k = np.argmax(stop, axis=1)
    rows = np.arange(reps)
    return np.abs(mean[rows, k] - mu) <= half[rows, k], looks[k]


def test_the_confidence_sequence_covers_under_optional_stopping_and_naive_does_not():
    """4,000 sequential experiments (looks every 8 trials, up to 2,048), stopping when the
    half-width reaches 0.3 sd: the normal-mixture sequence covers at >= 94%, the naive rule
    on the same data below 95% by more than 4 standard errors."""
    d = paired_normal(np.random.default_rng(4), 4_000, 2_048)
    target = 0.3 * SD_DIFF
    cs, n_cs = stopped("confidence-sequence", d, batch=8, target=target, tuned_for=128)
    naive, n_naive = stopped("naive", d, batch=8, target=target, tuned_for=128)
    se = math.sqrt(0.95 * 0.05 / d.shape[0])
    assert cs.mean() >= 0.94, cs.mean()
    assert naive.mean() < 0.95 - 4 * se, naive.mean()
    # the price of validity: more trials at the stop than a fixed-n interval needs
    assert n_cs.mean() > n_naive.mean() > (1.96 / 0.3) ** 2 * 0.8


def test_the_confidence_sequence_on_a_skewed_metric():
    """Lognormal trials (skewness 6.2), looks every 64 trials up to 4,096, a target of 0.2
    sd, the default tuning: the sequence still covers at >= 94% (the plug-in's caveat is for
    first looks at a few trials), the naive rule about 90%."""
    x = np.random.default_rng(14).lognormal(size=(4_000, 4_096))
    mean, sd = math.exp(0.5), math.sqrt((math.e - 1) * math.e)
    kw = dict(batch=64, target=0.2 * sd, tuned_for=math.sqrt(64 * 4_096), mu=mean)
    cs, _ = stopped("confidence-sequence", x, **kw)
    naive, _ = stopped("naive", x, **kw)
    assert cs.mean() >= 0.94 and naive.mean() < 0.93, (cs.mean(), naive.mean())


def test_the_normal_mixture_boundary_by_hand():
    r = mixture_ratio(0.05)
    assert r - math.log1p(r) == pytest.approx(2 * math.log(20.0), rel=1e-12)
    # at n = tuned_for: sd / n sqrt((n + n / r) (log(1 + r) + 2 log 20))
    n = 500.0
    hand = 2.0 / n * math.sqrt((n + n / r) * (math.log1p(r) + 2 * math.log(20.0)))
    got = fa.stats.confidence_sequence_half_width(n, 2.0, tuned_for=n)
    assert float(got) == pytest.approx(hand, rel=1e-13)
    widths = [float(fa.stats.confidence_sequence_half_width(n, 1.0, tuned_for=t))
              for t in (n / 4, n, 4 * n)]
    assert widths[1] < min(widths[0], widths[2])  # tightest where it is tuned
    naive = fa.stats.sequential_half_width(100, 1.0, rule="naive")
    assert float(naive) == pytest.approx(1.959963984540054 / 10, rel=1e-15)


# ----------------------------------------------------------------------------- power

def test_a_pilots_trial_count_achieves_its_power():
    """4,000 times: a pilot of 200 differences, the t count for delta = 0.25 sd, then an
    experiment of that many trials tested by the t interval: the rejection rate is 80% within
    3 points (binomial s.e. 0.63 points)."""
    rng = np.random.default_rng(5)
    delta, rejected, counts = 0.25 * SD_DIFF, 0, []
    for _ in range(4_000):
        pilot = MU + SD_DIFF * rng.standard_normal(200)
        n = fa.stats.trials_needed(pilot - pilot.mean(), delta).trials
        counts.append(n)
        d = delta + SD_DIFF * rng.standard_normal(n)
        iv = fa.stats.mean_interval(d, method="t")
        rejected += not iv.ci_low <= 0.0 <= iv.ci_high
    assert abs(rejected / 4_000 - 0.80) <= 0.03, rejected / 4_000
    assert 110 < np.mean(counts) < 145


def test_achieved_power_against_monte_carlo_and_the_normal_formula_short_at_few_trials():
    """The t power formula is exact for normal differences; the normal formula's count at
    delta = sd (8 trials) has a t test's power of 0.68, not 0.8 (negative control)."""
    rng = np.random.default_rng(6)
    n_t = fa.stats.t_trials(1.0, 1.0)
    n_normal = math.ceil(fa.stats.normal_trials(1.0, 1.0))
    assert (n_t, n_normal) == (10, 8)
    for n in (n_t, n_normal):
        d = 1.0 + rng.standard_normal((20_000, n))
        t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n))
        crit = float(t_quantile(0.975, n - 1))
        rate = np.mean(np.abs(t) > crit)
        exact = fa.stats.achieved_power(n, 1.0, 1.0)
        assert abs(rate - exact) < 4 * math.sqrt(exact * (1 - exact) / 20_000), (n, rate, exact)
    assert fa.stats.achieved_power(n_normal, 1.0, 1.0) < 0.8 - 0.1
    assert fa.stats.achieved_power(n_normal, 1.0, 1.0, method="normal") >= 0.8
    # (z_0.975 + z_0.8)^2 / (0.5)^2 by hand
    assert fa.stats.normal_trials(2.0, 1.0) == pytest.approx(
        (1.959963984540054 + 0.8416212335729143) ** 2 * 4, rel=1e-12)


# --------------------------------------------------------- paired differences, real runs

@pytest.fixture(scope="module")
def pair():
    """FedAvg and FedProx(mu = 0.1) on the same 16 trials (same key) of a small problem."""
    p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
    kw = dict(num_sampled=2, local_steps=5, stepsize=1e-2, rounds=50, trials=16,
              x0=p.x_star + 1.0, key=jax.random.key(1), record_every=10)
    return p, kw, fa.simulate(p, **kw), fa.simulate(
        p, algorithm=fa.algorithms.FedProx(mu=0.1), **kw)


@pytest.mark.parametrize("metric, record, method", [("gap", -1, "normal"), ("gap", 2, "t"),
                                                    ("grad_norm_sq", -1, "t")])
def test_paired_difference_against_numpy(pair, tmp_path, metric, record, method):
    _, _, fedavg, fedprox = pair
    np.savez(tmp_path / "trials.npz", a=getattr(fedprox, metric), b=getattr(fedavg, metric))
    saved = np.load(tmp_path / "trials.npz")
    d = saved["a"][:, record] - saved["b"][:, record]
    n = d.size
    mean, se = d.sum() / n, math.sqrt(((d - d.sum() / n) ** 2).sum() / (n - 1) / n)
    c = 1.959963984540054 if method == "normal" else 2.131449545559323  # t_{0.975, 15}
    got = fa.stats.paired_difference(fedprox, fedavg, metric, record=record, method=method)
    assert got.trials == 16 and got.excluded == 0 and se > 0
    assert got.mean == pytest.approx(mean, rel=1e-12, abs=1e-300)
    assert got.stderr == pytest.approx(se, rel=1e-12)
    assert (got.ci_low, got.ci_high) == pytest.approx((mean - c * se, mean + c * se), rel=1e-12)
    p = math.erfc(abs(mean / se) / math.sqrt(2)) if method == "normal" else None
    if p is not None:
        assert got.p_value == pytest.approx(p, rel=1e-12)
    # pairing is what makes it precise: the unpaired standard error is larger
    unpaired = math.sqrt(saved["a"][:, record].var(ddof=1) / n
                         + saved["b"][:, record].var(ddof=1) / n)
    assert got.stderr < unpaired


def test_runs_of_other_trials_are_refused_in_one_line(pair):
    p, kw, fedavg, fedprox = pair
    other_key = fa.simulate(p, **dict(kw, key=jax.random.key(2)))
    later = fa.simulate(p, **kw, first_trial=16)
    longer = dataclasses.replace(fedprox, config=dict(fedprox.config, rounds=60))
    for other, named in ((other_key, "key"), (later, "first_trial"), (longer, "rounds")):
        with pytest.raises(ValueError) as err:
            fa.stats.paired_difference(other, fedavg)
        text = str(err.value)
        assert "\n" not in text and named in text.split("differ in ")[1], text
    fewer = dataclasses.replace(fedprox, config=dict(fedprox.config, trials=8))
    with pytest.raises(ValueError, match=r"trials \(8 and 16\)"):
        fa.stats.pairwise({"a": fewer, "b": fedavg})
    for call, word in ((lambda: fa.stats.paired_difference(fedprox, fedavg, "loss"), "metric"),
                       (lambda: fa.stats.paired_difference(fedprox, fedavg, record=9), "record"),
                       (lambda: fa.stats.paired_difference(fedprox, fedavg, level=95), "level"),
                       (lambda: fa.stats.paired_difference(fedprox, fedavg, method="z"), "method"),
                       (lambda: fa.stats.rank({"a": fedprox, "b": fedavg}, rng=None), "rng"),
                       (lambda: fa.stats.trials_needed([1.0, 2.0], 0.0), "delta")):
        with pytest.raises(ValueError) as err:
            call()
        assert "\n" not in str(err.value) and str(err.value).startswith(word), str(err.value)


def test_several_methods_on_real_runs(pair):
    _, _, fedavg, fedprox = pair
    runs = {"FedAvg": fedavg, "FedProx": fedprox}
    table = fa.stats.pairwise(runs, baseline="FedAvg")
    one = fa.stats.paired_difference(fedprox, fedavg)
    assert table.rows[0].difference == one and table.rows[0].p_holm == one.p_value
    a = fa.stats.rank(runs, rng=np.random.default_rng(0), draws=500)
    b = fa.stats.rank(runs, rng=np.random.default_rng(0), draws=500)
    assert a.names == b.names and np.array_equal(a.probabilities, b.probabilities)
    assert np.allclose(a.probabilities.sum(axis=0), 1) and np.allclose(a.probabilities.sum(1), 1)
    assert "FedProx - FedAvg" in table.table() and "E rank" in a.table()


def test_the_compare_command_uses_the_library(pair):
    from fedjax_abc.repro import compare

    _, _, fedavg, fedprox = pair
    out = compare.paired_statistics({"fedavg": fedavg, "fedprox": fedprox},
                                    np.random.default_rng(0))
    c, d = out["vs_fedavg"]["fedprox"], fa.stats.paired_difference(fedprox, fedavg)
    assert (c["diff"], c["stderr"], c["ci_low"], c["ci_high"]) == (d.mean, d.stderr, d.ci_low,
                                                                   d.ci_high)
    assert c["p_holm"] == d.p_value  # one comparison: Holm changes nothing
    pilot = fa.stats.paired_values(fedprox, fedavg)
    assert c["trials_needed"] == fa.stats.trials_needed(
        pilot, 0.01 * fedavg.gap[:, -1].mean()).trials
    assert out["ranking"]["probabilities"].shape == (2, 2)


# ---------------------------------------------------------------- Holm and the ranking

def test_holm_by_hand():
    """p = (0.01, 0.04, 0.03, 0.005), m = 4. Sorted: 0.005, 0.01, 0.03, 0.04; times
    (m - i + 1) = 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04; running maximum: 0.02, 0.03, 0.06,
    0.06. Back in the given order: 0.03, 0.06, 0.06, 0.02. At alpha = 0.05 Holm rejects the
    two smallest (0.005 <= 0.05/4, 0.01 <= 0.05/3) and stops at 0.03 > 0.05/2."""
    adjusted = fa.stats.holm([0.01, 0.04, 0.03, 0.005])
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02], rel=1e-14)
    assert (adjusted <= 0.05).tolist() == [True, False, False, True]
    assert fa.stats.holm([0.3]).tolist() == [0.3]
    assert fa.stats.holm([0.5, 0.5, 0.9]).tolist() == [1.0, 1.0, 1.0]  # capped at 1
    with pytest.raises(ValueError, match="p_values"):
        fa.stats.holm([0.1, 1.5])


def test_rank_probabilities_against_the_normal_approximation():
    """Two methods whose paired difference is d-bar with stderr se: the bootstrap's
    P(B ranks first) is about Phi(d-bar / se) (here about 0.84)."""
    rng = np.random.default_rng(7)
    base = rng.standard_normal(400)
    other = base - 0.05 + 0.5 * rng.standard_normal(400)
    d = base - other
    z = d.mean() / (d.std(ddof=1) / math.sqrt(d.size))
    expected = 0.5 * math.erfc(-z / math.sqrt(2))
    r = fa.stats.rank({"A": base, "B": other}, rng=8, draws=4_000)
    p_b_first = r.probabilities[r.names.index("B"), 0]
    assert abs(p_b_first - expected) < 0.03, (p_b_first, expected)
    assert r.expected.sum() == pytest.approx(3.0)


# ------------------------------------------------------------------------ bootstrap

def test_jackknife_quantiles_against_leaving_each_trial_out():
    x = np.random.default_rng(9).lognormal(size=37)
    for q in (0.1, 0.5, 0.9, float("nan")):
        brute = [np.delete(x, i).mean() if math.isnan(q) else np.quantile(np.delete(x, i), q)
                 for i in range(x.size)]
        assert np.allclose(jackknife_values(x, q), brute, rtol=1e-14, atol=0)


def test_bootstrap_intervals_by_hand_and_for_a_skewed_law():
    x = np.random.default_rng(10).lognormal(size=300)
    kw = dict(rng=11, draws=2_000)
    pct = fa.stats.bootstrap_interval(x, "median", method="percentile", **kw)
    basic = fa.stats.bootstrap_interval(x, "median", method="basic", **kw)
    # the same resamples: basic = 2 theta - percentile's ends, reversed
    assert basic.ci_low == pytest.approx(2 * pct.estimate - pct.ci_high, rel=1e-14)
    assert basic.ci_high == pytest.approx(2 * pct.estimate - pct.ci_low, rel=1e-14)
    d = fa.stats.describe(x, rng=12, draws=2_000)
    # a right-skewed law: the BCa interval of the mean leans right of the normal one
    assert d.skewness > 2 and d.mean.ci_high > d.normal.ci_high
    assert d.median.ci_low < d.median.estimate < d.median.ci_high  # (coverage: below)
    assert d.quantiles[0].estimate < d.median.estimate < d.quantiles[1].estimate


def test_bca_covers_the_median_of_a_skewed_law():
    """400 samples of 60 lognormal trials: the BCa interval of the median covers 1 at
    93-97% (binomial s.e. 1.1 points)."""
    rng = np.random.default_rng(13)
    hits = 0
    for _ in range(400):
        b = fa.stats.bootstrap_interval(rng.lognormal(size=60), "median", rng=rng, draws=1_000)
        hits += b.ci_low <= 1.0 <= b.ci_high
    assert 0.93 <= hits / 400 <= 0.97, hits / 400


# ------------------------------------------------------------- precision-targeted runs

@pytest.fixture(scope="module")
def sims():
    p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
    sim = fa.Simulation(p, num_sampled=2, local_steps=5, rounds=50, record_every=10)
    prox = fa.Simulation(p, num_sampled=2, local_steps=5, rounds=50, record_every=10,
                         algorithm=fa.algorithms.FedProx(mu=0.1))
    return p, sim, prox


def test_run_until_equals_a_fixed_run_of_its_final_count(sims):
    p, sim, _ = sims
    call = dict(key=jax.random.key(3), x0=p.x_star + 1.0, stepsize=1e-2)
    out = fa.stats.run_until(sim, **call, half_width=0.02, batch=8, growth=1.5)
    assert out.reached and out.trials > 16 and out.trials % 8 == 0
    assert [look.trials for look in out.looks][:3] == [8, 16, 24]
    fixed = sim.run(**call, trials=out.trials)
    assert out.result.equals(fixed)
    assert out.estimate.mean == pytest.approx(fixed.gap[:, -1].mean(), rel=1e-14)
    assert out.estimate.half_width <= 0.02 < out.looks[-2].half_width


def test_run_until_a_paired_difference(sims):
    p, sim, prox = sims
    call = dict(key=jax.random.key(4), x0=p.x_star + 1.0, stepsize=1e-2)
    out = fa.stats.run_until(sim, **call, baseline=prox, half_width=1e-3, batch=8,
                             max_trials=64)
    assert out.baseline.equals(prox.run(**call, trials=out.trials))
    d = fa.stats.paired_difference(out.result, out.baseline)
    assert out.estimate.mean == pytest.approx(d.mean, rel=1e-12)
    assert out.reached == (out.estimate.half_width <= 1e-3)


def test_a_target_the_budget_cannot_reach_warns_with_what_was_reached(sims):
    p, sim, _ = sims
    call = dict(key=jax.random.key(3), x0=p.x_star + 1.0, stepsize=1e-2, batch=8)
    with pytest.warns(fa.stats.BudgetWarning) as caught:
        out = fa.stats.run_until(sim, **call, half_width=1e-9, max_trials=16)
    text = str(caught[0].message)
    assert not out.reached and out.trials == 16
    assert "max_trials=16" in text and "16 trials" in text and "1e-09" in text
    assert f"{out.estimate.mean:.4g}" in text
    with pytest.warns(fa.stats.BudgetWarning, match="max_seconds"):
        out = fa.stats.run_until(sim, **call, half_width=1e-9, max_seconds=1e-6)
    assert out.trials == 8
    for bad, word in ((dict(half_width=0.0), "half_width"),
                      (dict(half_width=1.0, batch=1), "batch"),
                      (dict(half_width=1.0, rule="peek"), "rule"),
                      (dict(half_width=1.0, growth=0.5), "growth")):
        with pytest.raises(ValueError, match=f"^{word}"):
            fa.stats.run_until(sim, **{**call, **bad})


# ---------------------------------------------------------------------- docstrings

@pytest.mark.parametrize("module", ["fedjax_abc.stats", "fedjax_abc._stats._intervals",
                                    "fedjax_abc._stats._paired", "fedjax_abc._stats._multiple",
                                    "fedjax_abc._stats._bootstrap", "fedjax_abc._stats._power",
                                    "fedjax_abc._stats._sequential"])
def test_docstring_examples_run(module):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fa.DivergenceWarning)
        result = doctest.testmod(importlib.import_module(module),
                                 optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0


def test_a_sweep_against_its_baseline_point_equals_pairwise_by_hand():
    p = fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)
    res = fa.sweep(p, grid={"stepsize": [1e-3, 1e-2, 3e-2]}, num_sampled=2, local_steps=5,
                   rounds=50, x0=p.x_star + 1.0, trials=16, key=jax.random.key(1))
    got = fa.stats.against_baseline(res, {"stepsize": 1e-2})
    assert [r.first for r in got.rows] == ["stepsize=0.001", "stepsize=0.03"]
    by_hand = fa.stats.pairwise({"a": res.results[0], "b": res.results[1],
                                 "c": res.results[2]}, baseline="b")
    for mine, theirs in zip(got.rows, by_hand.rows):
        assert mine.difference == theirs.difference and mine.p_holm == theirs.p_holm
    gaps = res.gap[:, :, -1]
    np.testing.assert_allclose(got.rows[0].difference.mean, np.mean(gaps[0] - gaps[1]),
                               rtol=1e-12)
    with pytest.raises(ValueError, match="no grid point"):
        fa.stats.against_baseline(res, {"stepsize": 5.0})
