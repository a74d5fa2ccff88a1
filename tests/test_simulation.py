"""A Simulation is a value: what ``eqx.tree_at`` puts into its components is what runs.

Each check compares a changed Simulation with a fresh ``simulate`` given the changed value
(bit for bit), sees that the value is read (the result differs from the unchanged one),
that the change compiles nothing new, and that a value the component's constructor refuses
is refused by ``run`` with the constructor's own message.
"""

from __future__ import annotations

import equinox as eqx
import jax
import numpy as np
import pytest

import fedjax_abc as fa
from conftest import count_compilations

N = 10
CALL = dict(key=jax.random.key(3), trials=5, stepsize=2e-2)


@pytest.fixture(scope="module")
def problem():
    return fa.problems.huber_offsets(jax.random.key(0), n=N, d_max=20.0)


def _settings(problem):
    """(name, the Simulation's arguments, where, a new value, a value the constructor
    refuses, the arguments with the new value) for a field of each kind of component."""
    return [
        ("algorithm", dict(num_sampled=3, algorithm=fa.algorithms.FedProx(mu=0.1)),
         lambda s: s.algorithm.mu, 0.7, -0.5,
         dict(num_sampled=3, algorithm=fa.algorithms.FedProx(mu=0.7))),
        ("sampler", dict(sampler=fa.Bernoulli(0.3)), lambda s: s.sampler.p, 0.8, 1.5,
         dict(sampler=fa.Bernoulli(0.8))),
        ("transform", dict(num_sampled=3, transform=fa.transforms.Clip(1.0)),
         lambda s: s.transform.norm, 0.05, -1.0,
         dict(num_sampled=3, transform=fa.transforms.Clip(0.05))),
        ("oracle", dict(num_sampled=3, oracle=fa.GaussianOracle(1.0, 0.5)),
         lambda s: s.oracle.D, 4.0, -1.0,
         dict(num_sampled=3, oracle=fa.GaussianOracle(1.0, 4.0))),
    ]


def _constructor_error(kind: str, bad) -> str:
    make = {"algorithm": lambda: fa.algorithms.FedProx(mu=bad),
            "sampler": lambda: fa.Bernoulli(bad),
            "transform": lambda: fa.transforms.Clip(bad),
            "oracle": lambda: fa.GaussianOracle(1.0, bad)}[kind]
    with pytest.raises(ValueError) as err:
        make()
    return str(err.value)


@pytest.mark.parametrize("index", range(4), ids=["algorithm", "sampler", "transform", "oracle"])
def test_a_changed_leaf_is_what_runs(problem, index):
    kind, kw, where, value, bad, changed_kw = _settings(problem)[index]
    common = dict(local_steps=3, rounds=12, record_every=4)
    x0 = np.asarray(problem.x_star) + 1.0
    sim = fa.Simulation(problem, **kw, **common)
    before = sim.run(x0=x0, **CALL)
    changed = eqx.tree_at(where, sim, value)
    assert float(where(changed)) == value
    with count_compilations() as events:
        after = changed.run(x0=x0, **CALL)
    assert events == [], f"changing {kind} compiled {events}"
    fresh = fa.simulate(problem, x0=x0, **changed_kw, **common, **CALL)
    assert np.array_equal(after.x_final, fresh.x_final)
    assert np.array_equal(after.gap, fresh.gap)
    assert not np.array_equal(after.x_final, before.x_final), f"{kind}'s value is not read"
    # the original is unchanged: a value, not a handle
    assert np.array_equal(sim.run(x0=x0, **CALL).x_final, before.x_final)
    message = _constructor_error(kind, bad)
    with pytest.raises(ValueError) as err:
        eqx.tree_at(where, sim, bad).run(x0=x0, **CALL)
    assert str(err.value) == message


def test_a_replaced_component_is_checked_and_run_as_given(problem):
    common = dict(num_sampled=3, local_steps=3, rounds=12, record_every=4)
    x0 = np.asarray(problem.x_star) + 1.0
    sim = fa.Simulation(problem, **common)  # FedAvg
    prox = eqx.tree_at(lambda s: s.algorithm, sim, fa.algorithms.FedProx(mu=0.3))
    fresh = fa.simulate(problem, algorithm=fa.algorithms.FedProx(mu=0.3), x0=x0, **common,
                        **CALL)
    assert np.array_equal(prox.run(x0=x0, **CALL).x_final, fresh.x_final)
    # a component that the constructor refuses with this sampler is refused by run
    scaffold = eqx.tree_at(lambda s: s.sampler, sim, fa.WithReplacement(3))
    scaffold = eqx.tree_at(lambda s: s.algorithm, scaffold, fa.algorithms.Scaffold())
    with pytest.raises(ValueError, match="whose slots are distinct clients"):
        scaffold.run(x0=x0, **CALL)


def test_a_problems_array_is_what_runs(problem):
    common = dict(num_sampled=3, local_steps=3, rounds=12, record_every=4)
    x0 = np.asarray(problem.x_star) + 1.0
    other = fa.problems.huber_offsets(jax.random.key(9), n=N, d_max=20.0)
    sim = fa.Simulation(problem, **common)
    before = sim.run(x0=x0, **CALL)
    moved = eqx.tree_at(lambda s: (s.problem.params, s.problem.local_minima, s.problem.f_star,
                                   s.problem.x_star), sim,
                        (other.params, other.local_minima, other.f_star, other.x_star))
    with count_compilations() as events:
        got = moved.run(x0=x0, **CALL)
    assert events == []
    assert np.array_equal(got.gap, fa.simulate(other, x0=x0, **common, **CALL).gap)
    assert not np.array_equal(got.gap, before.gap)


def test_the_problems_own_oracle_follows_the_problem(problem):
    """Without oracle=, a Simulation runs its problem's oracle as the problem is now: a
    problem put in (or its oracle's constant changed) with eqx.tree_at runs as a fresh
    simulate of it would (the first problem's oracle ran before), in a sweep too."""
    common = dict(num_sampled=3, local_steps=3, rounds=12, record_every=4)
    x0 = np.asarray(problem.x_star) + 1.0
    import dataclasses

    exact = dataclasses.replace(problem, oracle=fa.ExactOracle())
    sim = fa.Simulation(problem, **common)
    swapped = eqx.tree_at(lambda s: s.problem, sim, exact)
    fresh = fa.simulate(exact, x0=x0, **common, **CALL)
    assert np.array_equal(swapped.run(x0=x0, **CALL).x_final, fresh.x_final)
    assert swapped.oracle == exact.oracle and swapped.run(x0=x0, **CALL).config["oracle"] == \
        "ExactOracle"
    both = fa.sweep(sim, grid={"problem": [problem, exact]}, x0=x0, **CALL)
    assert np.array_equal(both.point(problem="problem[1]").x_final, fresh.x_final)
    with pytest.raises(ValueError, match=r"values sharing a label are numbered.*'problem\[1\]'"):
        both.point(problem=exact)  # two problems of one name: the label names the point


def test_values_the_constructors_refuse_are_refused_through_tree_at(problem):
    """Shapes and kinds the constructors check, put in with eqx.tree_at, are refused by
    run (they ran before: a per-coordinate mu, a PmfSteps capped at its old Q_max,
    fractional step counts, probabilities not summing to 1); a Python number is an array
    of the run's dtype, compiling nothing new."""
    common = dict(num_sampled=3, rounds=12, record_every=4)
    x0 = np.asarray(problem.x_star) + 1.0
    prox = fa.Simulation(problem, local_steps=3, algorithm=fa.algorithms.FedProx(0.1), **common)
    with pytest.raises(ValueError, match=r"mu must be a scalar, got shape \(10,\)"):
        eqx.tree_at(lambda s: s.algorithm.mu, prox, np.full(N, 0.5)).run(x0=x0, **CALL)
    prox.run(x0=x0, **CALL)
    with count_compilations() as events:
        by_int = eqx.tree_at(lambda s: s.algorithm.mu, prox, 2).run(x0=x0, **CALL)
    assert events == []
    fresh = fa.simulate(problem, local_steps=3, algorithm=fa.algorithms.FedProx(2.0), x0=x0,
                        **common, **CALL)
    assert np.array_equal(by_int.x_final, fresh.x_final)
    pmf = fa.Simulation(problem, local_steps=fa.PmfSteps([0.5, 0.5]), **common)
    with pytest.raises(ValueError, match="probs must have max_steps=2 entries"):
        eqx.tree_at(lambda s: s.local_steps.probs, pmf, np.array([0, 0, 0, 1.0])).run(
            x0=x0, **CALL)
    counts = fa.Simulation(problem, local_steps=fa.PerClientSteps(np.full(N, 2)), **common)
    with pytest.raises(ValueError, match="counts must be integers"):
        eqx.tree_at(lambda s: s.local_steps.counts, counts, np.full(N, 1.5)).run(x0=x0, **CALL)
    importance = fa.Simulation(problem, local_steps=2, sampler=fa.ImportanceSampler(
        np.full(N, 1.0 / N), 3), rounds=12, record_every=4)
    with pytest.raises(ValueError, match="probs must sum to 1, got 1.000005"):
        eqx.tree_at(lambda s: s.sampler.probs, importance,
                    np.r_[0.1 + 5e-6, np.full(N - 1, 0.1)]).run(x0=x0, **CALL)


def test_a_learning_problems_data_changed_alone_is_refused():
    """Its records read the pooled rows and its minima were computed from the data it was
    built with: new per-client data alone recorded the old data's loss (and gap)."""
    import dataclasses

    data = fa.data.synthetic_data(jax.random.key(0), 1.0, 1.0, 6, num_features=3,
                                  num_classes=2, max_samples=20)
    p = fa.problems.softmax_regression(data.features, data.labels, l2=1e-2)
    sim = fa.Simulation(p, num_sampled=2, local_steps=2, rounds=4, record_every=2)
    call = dict(x0=np.zeros(p.dim), key=jax.random.key(0), stepsize=0.1)
    sim.run(**call)
    for changed in (eqx.tree_at(lambda s: s.problem.params.features, sim,
                                sim.problem.params.features * 3.0),
                    eqx.tree_at(lambda s: s.problem.params.l2, sim, sim.problem.params.l2 * 100)):
        with pytest.raises(ValueError, match="build a new problem from the new data"):
            changed.run(**call)
    with pytest.raises(ValueError, match="build a new problem from the new data"):
        dataclasses.replace(p, params=dataclasses.replace(p.params, weight=p.params.weight * 2))


def test_a_default_record_spacing_is_chosen_again_for_another_oracle():
    data = fa.data.synthetic_data(jax.random.key(0), 1.0, 1.0, 8, num_features=4,
                                  num_classes=3, max_samples=20)
    p = fa.problems.softmax_regression(data.features, data.labels, l2=1e-2,
                                       oracle=fa.MinibatchOracle(4))
    kw = dict(num_sampled=2, local_steps=1, rounds=64)
    call = dict(key=jax.random.key(1), x0=np.zeros(p.dim), trials=2, stepsize=0.1)
    sim = fa.Simulation(p, **kw)
    exact = eqx.tree_at(lambda s: s.oracle, sim, fa.ExactOracle()).run(**call)
    fresh = fa.simulate(p, oracle=fa.ExactOracle(), **kw, **call)
    assert len(sim.run(**call).rounds) < len(exact.rounds) == len(fresh.rounds) == 65


def test_shapes_are_static(problem):
    sim = fa.Simulation(problem, num_sampled=3, local_steps=3, rounds=12)
    assert sim.spec.rounds == 12 and sim.local_steps == 3
    with pytest.raises(TypeError):  # S is a static field: not a leaf equinox can replace
        eqx.tree_at(lambda s: s.sampler.num_sampled, sim, 4)
    hash(sim.spec)  # hashable: the spec keys the compiled program


def test_simulate_is_a_simulations_run(problem):
    kw = dict(num_sampled=3, local_steps=3, rounds=12, record_every=4,
              algorithm=fa.algorithms.FedProx(mu=0.2))
    x0 = np.asarray(problem.x_star) - 1.0
    a = fa.simulate(problem, x0=x0, **kw, **CALL)
    b = fa.Simulation(problem, **kw).run(x0=x0, **CALL)
    assert a.equals(b)


def test_a_sweep_of_a_simulation_runs_its_points(problem):
    kw = dict(num_sampled=3, local_steps=3, rounds=12, record_every=4)
    x0 = np.asarray(problem.x_star) + 1.0
    sim = fa.Simulation(problem, algorithm=fa.algorithms.FedProx(mu=0.1), **kw)
    sim = eqx.tree_at(lambda s: s.algorithm.mu, sim, 0.3)  # the value as it is now is used
    res = fa.sweep(sim, grid={"stepsize": [1e-2, 3e-2]}, x0=x0, key=CALL["key"], trials=5)
    for i, alpha in enumerate([1e-2, 3e-2]):
        one = fa.simulate(problem, algorithm=fa.algorithms.FedProx(mu=0.3), x0=x0, **kw,
                          key=CALL["key"], trials=5, stepsize=alpha)
        assert res.results[i].equals(one)
    mus = fa.sweep(sim, grid={"algorithm.mu": [0.0, 0.5]}, x0=x0, key=CALL["key"], trials=5,
                   stepsize=2e-2)
    point = eqx.tree_at(lambda s: s.algorithm.mu, sim, 0.5).run(x0=x0, **CALL)
    assert np.array_equal(mus.results[1].x_final, point.x_final)
    sizes = fa.sweep(sim, grid={"num_sampled": [2, 4]}, x0=x0, key=CALL["key"], trials=5,
                     stepsize=2e-2)
    assert sizes.results[1].config["num_sampled"] == 4
    full = fa.Simulation(problem, **dict(kw, num_sampled=None))  # every client: S = n
    assert fa.sweep(full, grid={"num_sampled": [2]}, x0=x0, key=CALL["key"], trials=5,
                    stepsize=2e-2).results[0].config["num_sampled"] == 2
    other = fa.Simulation(problem, sampler=fa.WithReplacement(3),
                          **{k: v for k, v in kw.items() if k != "num_sampled"})
    with pytest.raises(ValueError, match="has a WithReplacement; vary 'sampler' instead"):
        fa.sweep(other, grid={"num_sampled": [2]}, x0=x0, key=CALL["key"], trials=5,
                 stepsize=2e-2)
    with pytest.raises(ValueError, match=r"\['rounds'\] are the Simulation's"):
        fa.sweep(sim, grid={"stepsize": [1e-2]}, x0=x0, key=CALL["key"], rounds=5)


def test_a_metric_with_data_is_a_component():
    rng = np.random.default_rng(0)
    X = [rng.normal(size=(12, 3)) for _ in range(3)]
    y = [(x @ np.array([1.0, -1.0, 0.5]) > 0).astype(int) for x in X]
    p = fa.problems.logistic_regression(X, y, l2=0.1)
    Xt, yt = rng.normal(size=(30, 3)), rng.integers(0, 2, size=30)
    sim = fa.Simulation(p, num_sampled=2, local_steps=2, rounds=4, record_every=2,
                        metrics=fa.problems.held_out_metrics(p, Xt, yt))
    hash(sim.spec)  # the metrics' arrays are data, not part of the static spec
    assert set(sim.spec.metric_names) == {"test_loss", "test_accuracy"}
    res = sim.run(key=CALL["key"], x0=np.zeros(p.dim), trials=3, stepsize=0.2)
    np.testing.assert_array_equal(res.metrics["test_accuracy"],
                                  fa.problems.evaluate(p, res.x, Xt, yt).accuracy)


def test_the_config_describes_every_setting(problem):
    res = fa.simulate(problem, num_sampled=3, local_steps=fa.GeometricSteps(0.5, 4), rounds=4,
                      x0=0.0, transform=fa.transforms.dp_fedavg(0.5, 1.1), **CALL)
    assert res.config["transform"] == "DPFedAvg(clip_norm=0.5, noise_multiplier=1.1)"
    chained = fa.simulate(problem, num_sampled=3, local_steps=2, rounds=4, x0=0.0,
                          transform=fa.transforms.chain(fa.transforms.Clip(0.5),
                                                        fa.transforms.QSGD(2)), **CALL)
    assert chained.config["transform"] == ("Chain(transforms=[Clip(norm=0.5), "
                                           "QSGD(levels=2, value_bits=32)])")
    assert res.config["local_steps"] == "GeometricSteps(p=0.5, max_steps=4, shared=False)"
    # a sampler that S describes in full has no sampler_config; one of the same field has
    assert "sampler_config" not in res.config
    drawn = fa.simulate(problem, sampler=fa.WithReplacement(3), local_steps=2, rounds=4,
                        x0=0.0, **CALL)
    assert drawn.config["sampler_config"] == "WithReplacement(num_sampled=3)"


def test_scaffnews_p_and_its_law_are_one_value(problem):
    scaffnew = fa.algorithms.Scaffnew(0.5)
    kw = dict(sampler=fa.FullParticipation(), rounds=6, record_every=3)
    x0 = np.asarray(problem.x_star) + 1.0
    sim = fa.Simulation(problem, algorithm=scaffnew, local_steps=scaffnew.local_steps(8), **kw)
    sim.run(x0=x0, **CALL)  # p and the law agree
    message = r"Scaffnew's p \(0.9\) and its law of local steps' p \(0.5\) differ"
    with pytest.raises(ValueError, match=message):  # a tree_at of p alone
        eqx.tree_at(lambda s: s.algorithm.p, sim, 0.9).run(x0=x0, **CALL)
    with pytest.raises(ValueError, match=message):  # a sweep's axis of p alone
        fa.sweep(problem, grid={"algorithm.p": [0.5, 0.9]}, algorithm=scaffnew,
                 local_steps=scaffnew.local_steps(8), x0=x0, **kw, **CALL)
    with pytest.raises(ValueError, match=message):
        fa.simulate(problem, algorithm=fa.algorithms.Scaffnew(0.9),
                    local_steps=scaffnew.local_steps(8), x0=x0, **kw, **CALL)
    both = eqx.tree_at(lambda s: (s.algorithm.p, s.components.local_steps.p), sim, (0.9, 0.9))
    fresh = fa.simulate(problem, algorithm=fa.algorithms.Scaffnew(0.9),
                        local_steps=fa.algorithms.Scaffnew(0.9).local_steps(8), x0=x0, **kw,
                        **CALL)
    assert np.array_equal(both.run(x0=x0, **CALL).x_final, fresh.x_final)


class _Named(fa.ExactOracle):
    label: str = "mine"  # a field that is not an array: a static value of the layout


def test_a_components_plain_fields_and_a_problem_axis(problem):
    x0 = np.asarray(problem.x_star) + 1.0
    sim = fa.Simulation(problem, num_sampled=3, local_steps=2, rounds=6, oracle=_Named())
    assert sim.run(x0=x0, **CALL).equals(sim.run(x0=x0, **CALL))
    other = fa.problems.huber_offsets(jax.random.key(9), n=N, d_max=20.0)
    sw = fa.sweep(sim, grid={"problem": [problem, other]}, x0=x0, key=CALL["key"], trials=5,
                  stepsize=2e-2)
    one = fa.simulate(other, num_sampled=3, local_steps=2, rounds=6, oracle=_Named(), x0=x0,
                      **CALL)
    assert np.array_equal(sw.results[1].x_final, one.x_final)


def test_numbers_of_trials_of_one_call_shape_share_a_program(problem):
    """What the docstring promises: trials padded to 8 a device; 1 to 8 trials (one device)
    share one program, and so do 12 and 16 where the call's devices stay the same."""
    from conftest import count_compilations

    sim = fa.Simulation(problem, num_sampled=2, local_steps=3, rounds=7, mode="gather")
    kw = dict(stepsize=0.01, x0=np.asarray(problem.x_star) + 1.0, key=jax.random.key(0))
    sim.run(trials=1, **kw)
    with count_compilations() as again:
        sim.run(trials=8, **kw)
        sim.run(trials=5, **kw)
    assert again == []
    sim.run(trials=16, **kw)
    with count_compilations() as again:
        sim.run(trials=12, **kw)
    assert again == []
    with count_compilations() as more:
        sim.run(trials=40, **kw)
    assert more  # another shape: compiled
