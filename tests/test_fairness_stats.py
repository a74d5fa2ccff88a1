"""Fairness summaries across clients (``fa.stats.fairness``) against NumPy computations
written from the definitions, on the per-client losses a run records.

The reference below computes, per trial and record, the worst, best and mean client loss,
the variance (divisor n), the Gini coefficient from its definition (the mean absolute
difference over all ordered pairs, divided by twice the mean) and the 10% quantile by
linear interpolation between order statistics, then the mean over the kept trials with
the normal 95% interval mean -/+ 1.959964 s / sqrt(m) (s with divisor m - 1).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import fedjax_abc as fa

Z95 = 1.959963984540054


def reference(losses: np.ndarray, q: float = 0.1) -> dict:
    """name -> (per-trial values (m, records), mean, ci_low, ci_high), by explicit loops."""
    m, R, n = losses.shape
    values = {k: np.zeros((m, R)) for k in ("worst", "best", "mean", "variance", "gini", "low")}
    for r in range(m):
        for t in range(R):
            f = [float(v) for v in losses[r, t]]
            mu = sum(f) / n
            values["worst"][r, t] = max(f)
            values["best"][r, t] = min(f)
            values["mean"][r, t] = mu
            values["variance"][r, t] = sum((v - mu) ** 2 for v in f) / n
            mad = sum(abs(u - v) for u in f for v in f) / n ** 2  # mean absolute difference
            values["gini"][r, t] = mad / (2 * mu)
            s = sorted(f)
            h = (n - 1) * q
            j = int(np.floor(h))
            values["low"][r, t] = s[j] + (h - j) * (s[min(j + 1, n - 1)] - s[j])
    out = {}
    for k, v in values.items():
        mean = v.mean(axis=0)
        se = np.sqrt(((v - mean) ** 2).sum(axis=0) / (m - 1) / m)
        out[k] = (v, mean, mean - Z95 * se, mean + Z95 * se)
    return out


def check(summary, ref) -> None:
    _, mean, low, high = ref
    np.testing.assert_allclose(summary.mean, mean, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(summary.ci_low, low, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(summary.ci_high, high, rtol=1e-10, atol=1e-13)


@pytest.fixture(scope="module")
def noisy_run():
    """FedAvg with a Gaussian oracle on 6 heterogeneous quadratics in R^2, S = 3 of 6, 9
    trials; trial 4 starts at 1e200 (its losses overflow: it diverges at t = 0)."""
    p = fa.problems.quadratics(jax.random.key(0), n=6, d=2, C=0.5, D=0.2)
    x0 = np.ones((9, 2))
    x0[4] = 1e200
    with pytest.warns(fa.DivergenceWarning, match="1 of 9 trials diverged"):
        return fa.simulate(p, num_sampled=3, local_steps=3, stepsize=0.1, rounds=20, x0=x0,
                           trials=9, key=jax.random.key(1), record_every=5,
                           record_clients=True)


def test_fairness_of_a_run_against_numpy(noisy_run):
    res = noisy_run
    assert res.client_loss.shape == (9, 5, 6) and res.client_x.shape == (9, 5, 6, 2)
    assert res.diverged.tolist() == [r == 4 for r in range(9)]
    f = fa.stats.fairness(res)
    kept = res.client_loss[~res.diverged]
    ref = reference(kept)
    assert f.trials == 8 and f.excluded == 1 and f.quantile == 0.1
    np.testing.assert_array_equal(f.rounds, res.rounds)
    for name in ("worst", "best", "mean", "variance", "gini", "low"):
        check(getattr(f, name), ref[name])
        assert getattr(f, name).excluded == 1
    # negative controls: the diverged trial kept, or the sample variance, do not agree
    with pytest.raises(AssertionError):
        check(fa.stats.fairness(np.where(np.isfinite(res.client_loss), res.client_loss,
                                         1e6)).worst, ref["worst"])
    with pytest.raises(AssertionError):
        check(f.variance, reference(kept * np.sqrt(6 / 5))["variance"])  # divisor n - 1
    # the per-trial functions against the reference's per-trial values
    for fn, name in ((fa.stats.worst_loss, "worst"), (fa.stats.best_loss, "best"),
                     (fa.stats.mean_loss, "mean"), (fa.stats.loss_variance, "variance"),
                     (fa.stats.gini_coefficient, "gini"), (fa.stats.loss_quantile, "low")):
        np.testing.assert_allclose(fn(kept), ref[name][0], rtol=1e-12, atol=1e-15)
    # the client losses are the clients' f_i at the recorded models (x_t for FedAvg)
    p = fa.problems.quadratics(jax.random.key(0), n=6, d=2, C=0.5, D=0.2)
    a, c = (np.asarray(v) for v in p.params)
    x = res.x[~res.diverged]  # (8, 5, 2)
    direct = 0.5 * np.sum(a[None, None] * (x[:, :, None] - c[None, None]) ** 2, axis=-1)
    np.testing.assert_allclose(kept, direct, rtol=1e-12)


def test_fairness_of_an_array_leaves_out_non_finite_trials():
    """From a (trials, records, n) array: a trial with a NaN or inf anywhere is left out;
    another quantile; a (trials, n) array is one record."""
    rng = np.random.default_rng(1)
    losses = rng.exponential(1.0, size=(7, 3, 5))
    losses[2, 1, 3] = np.nan
    losses[5, 0, 0] = np.inf
    f = fa.stats.fairness(losses, quantile=0.25)
    keep = np.array([True, True, False, True, True, False, True])
    ref = reference(losses[keep], q=0.25)
    assert f.trials == 5 and f.excluded == 2 and f.rounds is None
    for name in ("worst", "best", "mean", "variance", "gini", "low"):
        check(getattr(f, name), ref[name])
    one = fa.stats.fairness(losses[keep][:, 0])
    check(one.gini, tuple(v[:, 0] if np.ndim(v) == 2 else v[0] for v in reference(
        losses[keep][:, :1])["gini"]))


def test_gini_coefficient_by_hand():
    """0 for equal losses; (n - 1) / n when one client has all of it; for (1, 2, 3) the
    ordered pairs' absolute differences sum to 2 (1 + 2 + 1) = 8, their mean over the 9
    pairs is 8/9, and G = (8/9) / (2 * 2) = 2/9."""
    assert fa.stats.gini_coefficient([3.0, 3.0, 3.0]) == 0.0
    np.testing.assert_allclose(fa.stats.gini_coefficient([0.0, 0.0, 0.0, 0.0, 5.0]), 0.8)
    np.testing.assert_allclose(fa.stats.gini_coefficient([1.0, 2.0, 3.0]), 2 / 9, rtol=1e-15)
    assert np.isnan(fa.stats.gini_coefficient([0.0, 0.0]))


def test_the_worst_loss_interval_covers_at_its_level():
    """Coverage by repeated simulation: 1000 runs of 200 trials whose 5 client losses are
    iid Exponential(1); E max = 1 + 1/2 + ... + 1/5. The normal 95% interval of the mean
    worst loss covers it in a share within 4 binomial standard errors of 0.95."""
    rng = np.random.default_rng(2)
    truth = sum(1 / k for k in range(1, 6))
    hits = 0
    reps = 1000
    for _ in range(reps):
        w = fa.stats.fairness(rng.exponential(1.0, size=(200, 1, 5))).worst
        hits += bool(w.ci_low[0] <= truth <= w.ci_high[0])
    assert abs(hits / reps - 0.95) < 4 * np.sqrt(0.95 * 0.05 / reps), hits


def test_fairness_bad_input_one_line():
    p = fa.problems.quadratics(jax.random.key(0), n=3, d=1)
    plain = fa.simulate(p, local_steps=1, stepsize=0.1, rounds=2, x0=np.ones(1), trials=2,
                        key=jax.random.key(0), record_every=1)
    bad = [
        (lambda: fa.stats.fairness(plain), "run with record_clients=True"),
        (lambda: fa.stats.fairness(np.full((3, 2, 4), np.nan)), "all 3 trials diverged"),
        (lambda: fa.stats.fairness(np.ones((3, 2, 4)), quantile=1.5), r"quantile \(1.5\)"),
        (lambda: fa.stats.fairness(np.ones(4)), r"shape \(trials, records, n\)"),
    ]
    for call, match in bad:
        with pytest.raises(ValueError, match=match) as e:
            call()
        assert "\n" not in str(e.value)
