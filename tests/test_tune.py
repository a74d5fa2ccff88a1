"""fa.tune: each algorithm's stepsize picked on the tuning keys, reported on fresh ones."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import fedjax_abc as fa

A = fa.algorithms
STEPS = [1e-3, 1e-2, 5e-2, 100.0]  # 100: far beyond 2 / L, it overflows


@pytest.fixture(scope="module")
def setting():
    p = fa.problems.quadratics(jax.random.key(0), n=8, d=3)
    kw = dict(rounds=40, local_steps=4, num_sampled=3, x0=np.asarray(p.x_star) + 2.0,
              record_every=40)
    algs = {"FedAvg": A.FedAvg(), "FedProx": A.FedProx(0.5), "Scaffold": A.Scaffold()}
    out = fa.tune(p, algs, STEPS, tune_key=jax.random.key(1), eval_key=jax.random.key(2),
                  trials=16, **kw)
    return p, kw, algs, out


@pytest.mark.slow  # 7-25 s: with the long checks, for the default run's 10 minutes
def test_the_pick_is_the_best_tuning_mean_of_separate_runs(setting):
    """Each (algorithm, stepsize) run alone on the tuning key: the pick minimises the mean
    final gap, and the diverging stepsize scores +inf and is never picked."""
    p, kw, algs, out = setting
    for name, alg in algs.items():
        means = []
        for s in STEPS:
            res = fa.simulate(p, algorithm=alg, stepsize=s, key=jax.random.key(1), trials=16,
                              **kw)
            means.append(np.inf if res.num_diverged else res.gap[:, -1].mean())
        assert np.isinf(means[-1])
        assert out.algorithms[name].stepsize == STEPS[int(np.argmin(means))]
        np.testing.assert_allclose(list(out.algorithms[name].tuning.values()), means,
                                   rtol=1e-12)


@pytest.mark.slow  # 7-25 s: with the long checks, for the default run's 10 minutes
def test_the_report_is_on_the_evaluation_key_with_paired_differences(setting):
    p, kw, algs, out = setting
    ref = fa.simulate(p, algorithm=algs["FedAvg"], stepsize=out.algorithms["FedAvg"].stepsize,
                      key=jax.random.key(2), trials=16, **kw)
    assert out.algorithms["FedAvg"].result.equals(ref)
    assert out.algorithms["FedAvg"].vs_reference is None
    d = out.algorithms["Scaffold"].result.gap[:, -1] - ref.gap[:, -1]
    got = out.algorithms["Scaffold"].vs_reference
    np.testing.assert_allclose([got.mean, got.stderr], [d.mean(), d.std(ddof=1) / 4.0],
                               rtol=1e-12)
    assert "FedProx" in out.table() and out.reference == "FedAvg"


@pytest.mark.parametrize("change, match", [
    (dict(eval_key=jax.random.key(1)), r"tune_key and eval_key must differ"),
    (dict(stepsizes=[]), r"stepsizes must hold at least one stepsize"),
    (dict(stepsizes=[-1.0]), r"stepsize \(-1\) must be finite and > 0"),
    (dict(algorithms={}), r"algorithms must be a non-empty dict"),
    (dict(reference="FedNova"), r"reference \('FedNova'\) must be one of"),
    (dict(stepsize=0.1), r"tune sets 'stepsize' itself"),
])
def test_bad_arguments_are_refused_in_one_line(change, match):
    p = fa.problems.huber_offsets(jax.random.key(0), n=4, d_max=5.0)
    args = dict(algorithms={"FedAvg": A.FedAvg()}, stepsizes=[1e-2], tune_key=jax.random.key(1),
                eval_key=jax.random.key(2), trials=2, rounds=3, x0=p.x_star)
    args.update(change)
    with pytest.raises(ValueError, match=match) as e:
        fa.tune(p, **args)
    assert "\n" not in str(e.value)
