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
    (dict(trials=1), r"eval_trials \(default: trials\) must be >= 2, got 1"),
    (dict(eval_trials=1), r"eval_trials \(default: trials\) must be >= 2, got 1"),
])
def test_bad_arguments_are_refused_in_one_line(change, match):
    p = fa.problems.huber_offsets(jax.random.key(0), n=4, d_max=5.0)
    args = dict(algorithms={"FedAvg": A.FedAvg()}, stepsizes=[1e-2], tune_key=jax.random.key(1),
                eval_key=jax.random.key(2), trials=2, rounds=3, x0=p.x_star)
    args.update(change)
    with pytest.raises(ValueError, match=match) as e:
        fa.tune(p, **args)
    assert "\n" not in str(e.value)


# ------------------------------------------------ hyperparameters, variants, settings

SMALL = dict(rounds=20, local_steps=3, num_sampled=3, record_every=20)
GRID = [1e-2, 5e-2]


def small():
    p = fa.problems.quadratics(jax.random.key(3), n=6, d=2)
    return p, dict(SMALL, x0=np.asarray(p.x_star) + 1.0)


def separate_means(p, kw, alg):
    """The tuning criterion of each stepsize, each (algorithm, stepsize) run on its own."""
    return [fa.simulate(p, algorithm=alg, stepsize=s, key=jax.random.key(1), trials=8,
                        **kw).gap[:, -1].mean() for s in GRID]


def test_hyperparameters_are_picked_as_separate_runs_would():
    """FedProx's mu (an array field) tuned with the stepsize: each tuning score is the mean
    of a run made alone with that algorithm, and the pick is the lowest."""
    p, kw = small()
    out = fa.tune(p, {"FedProx": A.FedProx(0.0)}, GRID, tune_key=jax.random.key(1),
                  eval_key=jax.random.key(2), trials=8,
                  hyperparameters={"FedProx": {"mu": [0.0, 5.0]}}, **kw)
    prox = out.algorithms["FedProx"]
    expect = {(s, mu): m for mu in (0.0, 5.0)
              for s, m in zip(GRID, separate_means(p, kw, A.FedProx(mu)))}
    assert list(prox.tuning) == [(0.01, 0.0), (0.05, 0.0), (0.01, 5.0), (0.05, 5.0)]
    np.testing.assert_allclose([prox.tuning[k] for k in expect], list(expect.values()),
                               rtol=1e-12)
    best = min(expect, key=expect.get)
    assert (prox.stepsize, prox.hyperparameters) == (best[0], {"mu": best[1]})
    assert float(prox.algorithm.mu) == best[1]
    assert prox.result.equals(fa.simulate(p, algorithm=A.FedProx(best[1]), stepsize=best[0],
                                          key=jax.random.key(2), trials=8, **kw))
    assert "mu=" in out.table()


@pytest.mark.slow  # 7-25 s: with the long checks, for the default run's 10 minutes
def test_variants_are_picked_as_separate_runs_would():
    """FedAdam's server learning rate (not an array field) as a list of variants."""
    p, kw = small()
    adams = [A.FedAdam(0.01), A.FedAdam(0.3)]
    out = fa.tune(p, {"FedAdam": adams}, GRID, tune_key=jax.random.key(1),
                  eval_key=jax.random.key(2), trials=8, **kw)
    adam = out.algorithms["FedAdam"]
    means = [m for a in adams for m in separate_means(p, kw, a)]
    np.testing.assert_allclose(list(adam.tuning.values()), means, rtol=1e-12)
    k = int(np.argmin(means))
    assert adam.algorithm is adams[k // 2] and adam.stepsize == GRID[k % 2]
    assert adam.hyperparameters == {"variant": k // 2} and "variant=" in out.table()
    named = fa.tune(p, {"FedAdam": {"lr 0.01": adams[0], "lr 0.3": adams[1]}}, GRID,
                    tune_key=jax.random.key(1), eval_key=jax.random.key(2), trials=8, **kw)
    assert named.algorithms["FedAdam"].hyperparameters == {"variant": ["lr 0.01", "lr 0.3"][k // 2]}


@pytest.mark.slow  # 7-25 s: with the long checks, for the default run's 10 minutes
def test_per_algorithm_settings_and_one_compilation_per_shape():
    """Scaffnew runs with its own law of local steps (``settings``); a second tune with new
    hyperparameter values compiles nothing."""
    from conftest import count_backend_compilations as count_compilations

    p, kw = small()
    scaffnew = A.Scaffnew(1 / 3)
    args = dict(tune_key=jax.random.key(1), eval_key=jax.random.key(2), trials=4,
                settings={"Scaffnew": {"local_steps": scaffnew.local_steps(9),
                                       "num_sampled": 6}}, **kw)
    fa.tune(p, {"FedDyn": A.FedDyn(0.1), "Scaffnew": scaffnew}, GRID,
            hyperparameters={"FedDyn": {"alpha": [0.1, 1.0]}}, **args)
    with count_compilations() as later:
        out = fa.tune(p, {"FedDyn": A.FedDyn(0.1), "Scaffnew": scaffnew}, GRID,
                      hyperparameters={"FedDyn": {"alpha": [0.3, 3.0]}}, **args)
    assert later == []
    sc = out.algorithms["Scaffnew"]
    ref = fa.simulate(p, algorithm=scaffnew, stepsize=sc.stepsize, key=jax.random.key(2),
                      trials=4, **dict(kw, local_steps=scaffnew.local_steps(9), num_sampled=6))
    assert sc.result.equals(ref)


@pytest.mark.parametrize("change, match", [
    (dict(hyperparameters={"FedNova": {"mu": [0.1]}}),
     r"hyperparameters\['FedNova'\]: 'FedNova' is not one of the algorithms"),
    (dict(hyperparameters={"FedProx": {"mu": []}}),
     r"hyperparameters\['FedProx'\]\['mu'\] must be a non-empty list"),
    (dict(hyperparameters={"FedProx": {"mu": [-1.0]}}),
     r"hyperparameters\['FedProx'\]: grid axis 'algorithm.mu' value -1.0: mu must be >= 0"),
    (dict(hyperparameters={"FedProx": {"mu": ["big"]}}),
     r"hyperparameters\['FedProx'\]\['mu'\] must hold numbers"),
    (dict(hyperparameters={"FedProx": {"beta": [0.5]}}),
     r"FedProx has no field 'beta'"),
    (dict(settings={"FedProx": {"stepsize": 0.1}}), r"tune sets 'stepsize' itself"),
    (dict(algorithms={"FedProx": []}), r"algorithms\['FedProx'\] must hold at least one"),
])
def test_bad_tuning_grids_are_refused_in_one_line(change, match):
    p = fa.problems.huber_offsets(jax.random.key(0), n=4, d_max=5.0)
    args = dict(algorithms={"FedProx": A.FedProx(0.1)}, stepsizes=[1e-2],
                tune_key=jax.random.key(1), eval_key=jax.random.key(2), trials=2, rounds=3,
                x0=p.x_star)
    args.update(change)
    with pytest.raises(ValueError, match=match) as e:
        fa.tune(p, **args)
    assert "\n" not in str(e.value)
