"""Trials that blow up are counted and left out of the summaries, never averaged into NaN.

The problem: f_i(x) = (x - c_i)^4 / 4 with the exact oracle. Gradient descent from x
contracts where alpha (x - c)^2 < 2 and overshoots without bound where it is much larger,
so with per-trial starts x0 some trials converge and the others overflow to inf, then NaN,
within a few rounds: which trials diverge is known in advance.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc.repro import common
from fedjax_abc.repro import report as _report

STARTS = np.array([[0.5], [300.0], [-0.8], [1.0], [-500.0], [0.2], [0.9], [250.0]])
FAR = np.abs(STARTS[:, 0]) > 100  # these diverge at alpha = 0.01


@pytest.fixture(scope="module")
def quartic():
    loss = lambda c, x: 0.25 * jnp.sum((x - c) ** 4)  # noqa: E731
    return fa.make_problem(loss, jnp.array([[0.0], [0.1], [-0.1]]), fa.ExactOracle(),
                           local_minima=[0.0, 0.0, 0.0], x_star=[0.0],
                           f_star=float(np.mean(np.array([0.0, 0.1, -0.1]) ** 4) / 4),
                           name="quartic")


def run(p, **kw):
    base = dict(local_steps=2, stepsize=0.01, rounds=40, x0=STARTS, trials=len(STARTS),
                key=jax.random.key(0), record_every=2)
    base.update(kw)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = fa.simulate(p, **base)
    return res, [w for w in caught if issubclass(w.category, fa.DivergenceWarning)]


def test_diverged_trials_are_counted(quartic):
    res, _ = run(quartic)
    np.testing.assert_array_equal(res.diverged, FAR)
    assert res.num_diverged == FAR.sum() == 3
    bad = ~(np.isfinite(res.gap) & np.isfinite(res.grad_norm_sq) & np.isfinite(res.x).all(axis=2))
    for r in range(res.trials):  # the first recorded round with anything non-finite
        expected = res.rounds[np.argmax(bad[r])] if bad[r].any() else -1
        assert res.diverged_at[r] == expected
    assert np.all(res.diverged_at[FAR] > 0) and np.all(res.diverged_at[~FAR] == -1)
    assert np.all(np.isfinite(res.gap[~FAR])) and not np.all(np.isfinite(res.gap[FAR]))


def test_summary_is_numpy_on_the_finite_trials(quartic):
    res, _ = run(quartic)
    keep = ~FAR
    m = keep.sum()
    for name in ("gap", "grad_norm_sq", "x"):
        s = res.summary(name)
        values = getattr(res, name)[keep]
        np.testing.assert_array_equal(s.mean, values.mean(axis=0))
        np.testing.assert_array_equal(s.stderr, values.std(axis=0, ddof=1) / np.sqrt(m))
        assert s.excluded == 3 and np.all(np.isfinite(s.mean))
    f = res.final("gap")
    np.testing.assert_array_equal(f.mean, res.gap[keep, -1].mean())
    assert f.excluded == 3
    xf = res.final("x_final")
    np.testing.assert_array_equal(xf.mean, res.x_final[keep].mean(axis=0))


def test_summary_can_refuse_instead(quartic):
    res, _ = run(quartic)
    first = int(res.diverged_at[FAR].min())
    with pytest.raises(ValueError, match=rf"3 of 8 trials diverged .*round t={first}\b"):
        res.summary("gap", diverged="raise")
    with pytest.raises(ValueError, match=r"3 of 8 trials diverged"):
        res.final("grad_norm_sq", diverged="raise")
    with pytest.raises(ValueError, match=r"diverged \('include'\) must be one of"):
        res.summary("gap", diverged="include")


def test_simulate_warns_once(quartic):
    res, caught = run(quartic)
    assert len(caught) == 1
    text = str(caught[0].message)
    assert "3 of 8 trials diverged" in text and f"round t={res.diverged_at[FAR].min()}" in text
    assert issubclass(fa.DivergenceWarning, RuntimeWarning) and "DivergenceWarning" in fa.__all__


def test_finite_runs_are_unchanged(quartic):
    res, caught = run(quartic, x0=STARTS[~FAR], trials=int((~FAR).sum()))
    assert caught == [] and res.num_diverged == 0 and np.all(res.diverged_at == -1)
    s = res.summary("gap", diverged="raise")
    assert s.excluded == 0
    expected = fa.summarize(res.gap)
    for a, b in zip(s[:4], expected[:4]):
        np.testing.assert_array_equal(a, b)


def test_all_diverged_is_an_error(quartic):
    res, caught = run(quartic, x0=STARTS[FAR], trials=int(FAR.sum()))
    assert res.num_diverged == res.trials and len(caught) == 1
    with pytest.raises(ValueError, match=r"3 of 3 trials diverged.*no finite trial"):
        res.summary("gap")


def test_quadratics_with_a_large_stepsize():
    """Every trial of a linear recursion past its stability limit diverges; and all are counted."""
    p = fa.problems.quadratics(jax.random.key(1), n=4, d=3)
    res, caught = run(p, stepsize=5.0, rounds=400, record_every=20, x0=np.ones(3), trials=5,
                      num_sampled=2, mode="gather")
    assert res.num_diverged == 5 and len(caught) == 1
    assert np.all(res.diverged_at > 0)


def test_repro_records_and_reports_divergence(quartic):
    """common.simulate logs diverged runs; the report lists them per run."""
    progress = common.Progress("fig1", enabled=False)
    res = common.simulate(quartic, num_sampled=3, local_steps=2, stepsize=0.01, rounds=40,
                          x0=STARTS, trials=len(STARTS), key=jax.random.key(0),
                          precision="float64", record=2, progress=progress, desc="S=3")
    assert res.num_diverged == 3
    entry = progress.diverged["S=3"]
    assert entry == {"trials": 3, "of": 8, "first_round": int(res.diverged_at[FAR].min())}
    stats = common.final_stats(res, "gap")
    assert stats == common.mean_se(res.gap[~FAR, -1])
    doc = {"experiment": "fig1", "diverged": progress.diverged,
           "config": {"scale": "quick", "trials": 8, "rounds": 40, "precision": "float64",
                      "seed": 0, "wall_seconds": 1.0, "timings": []}}
    lines = _report.divergence_lines({"fig1": doc})
    text = "\n".join(lines)
    assert "| fig1 | S=3 | 3 of 8 |" in text
    assert _report.divergence_lines({"fig1": dict(doc, diverged={})}) == []


def test_theory_checks_count_diverged_trials(quartic):
    kw = dict(L=1.0, C=1.0, num_sampled=3, local_steps=2, rounds=40, trials=4,
              key=jax.random.key(0), alpha0=0.01, p=0.75, strict=False)
    with pytest.raises(ValueError, match=r"4 of 4 trials diverged.*no finite trial to check"), \
            pytest.warns(fa.DivergenceWarning):
        fa.theory.theorem3_check(quartic, x0=[300.0], **kw)  # every trial starts far: all diverge
    near = fa.theory.theorem3_check(quartic, x0=[0.5], **kw)
    assert near["diverged_trials"] == 0 and near["diverged_from_round"] is None
