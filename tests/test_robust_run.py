"""Robust aggregation and Byzantine clients in a run: the engine's seam.

What a run adds to the rules themselves (``test_robust_rules.py``): the default program is
unchanged; a round's robust aggregate is x_t + F(updates) with the attack's vector in
place of the sampled Byzantine clients' updates, checked against a NumPy round written
from that definition; mask and gather make the same numbers, and a trial its own whatever
its neighbours; the Byzantine sets drawn per trial have the uniform law; bad settings fail
in one line before anything runs.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc import robust as rb
from reference_robust import coordinate_median as np_median, krum as np_krum

KEY = jax.random.key(1)


@pytest.fixture(scope="module")
def problem():
    return fa.problems.huber_offsets(jax.random.key(0), n=10, d_max=20.0)


def _kw(problem, **extra):
    return dict(dict(num_sampled=7, local_steps=3, stepsize=1e-2, rounds=20,
                     x0=problem.x_star + 1.0, trials=8, key=KEY, record_every=10), **extra)


def test_the_default_rule_is_todays_program(problem):
    plain = fa.simulate(problem, **_kw(problem))
    named = fa.simulate(problem, aggregator=rb.WeightedMean(), **_kw(problem))
    assert np.array_equal(plain.x_final, named.x_final)
    assert "aggregator" not in named.config and "byzantine" not in named.config


def test_the_held_mean_equals_the_streamed_one_to_rounding(problem):
    # no Byzantine client sampled (f = 0): the round holds its messages, the rule is the mean
    plain = fa.simulate(problem, **_kw(problem))
    held = fa.simulate(problem, byzantine=rb.Byzantine(rb.SignFlip(), f=0), **_kw(problem))
    np.testing.assert_allclose(held.x_final, plain.x_final, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("aggregator, byzantine", [
    (rb.Median(), None),
    (rb.Krum(2), rb.Byzantine(rb.SignFlip(), f=2)),
    (rb.WeightedMean(), rb.Byzantine(rb.ALittleIsEnough(1.5), clients=[0, 3])),
    (rb.compose(rb.Bucketing(2), rb.TrimmedMean(1)), rb.Byzantine(rb.Gaussian(0.0, 5.0), f=1)),
    (rb.compose(rb.NNM(2), rb.GeometricMedian()), rb.Byzantine(
        rb.OptimalInnerProductManipulation(evals=6), f=2)),
])
def test_mask_and_gather_agree_bit_for_bit(problem, aggregator, byzantine):
    kw = _kw(problem, aggregator=aggregator, byzantine=byzantine)
    mask = fa.simulate(problem, mode="mask", **kw)
    gather = fa.simulate(problem, mode="gather", **kw)
    assert np.array_equal(mask.x_final, gather.x_final)
    assert np.all(np.isfinite(mask.x_final))


def test_mask_and_gather_agree_under_random_participation(problem):
    kw = _kw(problem, num_sampled=None, sampler=fa.Bernoulli(0.5), aggregator=rb.Median(),
             byzantine=rb.Byzantine(rb.InnerProductManipulation(3.0), f=3))
    mask = fa.simulate(problem, mode="mask", **kw)
    gather = fa.simulate(problem, mode="gather", **kw)
    assert np.array_equal(mask.x_final, gather.x_final)


def test_a_trial_does_not_depend_on_its_neighbours(problem):
    kw = _kw(problem, aggregator=rb.MultiKrum(2), byzantine=rb.Byzantine(rb.Mimic(), f=2))
    few = fa.simulate(problem, **dict(kw, trials=3))
    many = fa.simulate(problem, **dict(kw, trials=19))
    assert np.array_equal(few.x_final, many.x_final[:3])
    later = fa.simulate(problem, **dict(kw, trials=4, first_trial=2))
    assert np.array_equal(later.x_final[:1], few.x_final[2:])


def _one_round(problem, aggregator, byzantine, **kw):
    """x_1 of every trial after one round of full participation, Q = 1, exact gradients."""
    res = fa.simulate(problem, num_sampled=None, local_steps=1, stepsize=0.1, rounds=1,
                      x0=problem.x_star + 1.0, trials=4, key=KEY, oracle=fa.ExactOracle(),
                      aggregator=aggregator, byzantine=byzantine, **kw)
    return res.x_final


def _updates(problem, x0, alpha):
    """Every client's update y_i - x_0 after one exact local step: -alpha grad f_i(x_0)."""
    return np.stack([-alpha * np.asarray(problem.local_grad(problem.client(i), x0))
                     for i in range(problem.num_clients)])


def test_one_round_is_x_t_plus_the_rule_of_the_updates(problem):
    x0 = np.asarray(problem.x_star + 1.0)
    u = _updates(problem, jnp.asarray(x0), 0.1)
    np.testing.assert_allclose(_one_round(problem, rb.Median(), None)[0],
                               x0 + np_median(u, np.ones(len(u))), rtol=0, atol=1e-14)
    # clients 0 and 5 Byzantine, sign flip: their updates -mean(honest updates)
    honest = np.ones(len(u), bool)
    honest[[0, 5]] = False
    lied = u.copy()
    lied[~honest] = -u[honest].mean(axis=0)
    x1 = _one_round(problem, rb.Krum(2), rb.Byzantine(rb.SignFlip(), clients=[0, 5]))
    np.testing.assert_allclose(x1[0], x0 + np_krum(lied, np.ones(len(u)), 2), rtol=0,
                               atol=1e-14)


def test_a_wrong_round_fails_the_round_check(problem):
    # negative control: the rule applied to the models, not the updates (Clipping is not
    # translation-equivariant), is not what the run computes
    x0 = np.asarray(problem.x_star + 1.0)
    u = _updates(problem, jnp.asarray(x0), 0.1)
    models = x0 + u
    clipped = models * np.minimum(1, 0.05 / np.linalg.norm(models, axis=1))[:, None]
    x1 = _one_round(problem, rb.compose(rb.Clipping(0.05), rb.WeightedMean()), None)
    assert not np.allclose(x1[0], clipped.mean(axis=0), atol=1e-6)
    right = u * np.minimum(1, 0.05 / np.linalg.norm(u, axis=1))[:, None]
    np.testing.assert_allclose(x1[0], x0 + right.mean(axis=0), rtol=0, atol=1e-14)


def test_the_mean_under_ipm_contracts_by_the_closed_form(problem):
    # one exact round, all n sampled, f Byzantine sending -tau mean(honest): the mean update
    # is ((n - f) - f tau)/n times the honest mean update
    n, f, tau = problem.num_clients, 3, 2.0
    x0 = np.asarray(problem.x_star + 1.0)
    u = _updates(problem, jnp.asarray(x0), 0.1)
    x1 = _one_round(problem, None, rb.Byzantine(rb.InnerProductManipulation(tau),
                                                clients=[1, 2, 7]))
    honest = np.delete(u, [1, 2, 7], axis=0).mean(axis=0)
    np.testing.assert_allclose(x1[0] - x0, ((n - f) - f * tau) / n * honest, rtol=1e-12)


def test_drawn_byzantine_sets_have_the_uniform_law():
    # each client is Byzantine with probability f/n, exactly f per trial
    from fedjax_abc._engine._aggregate import members
    n, f, R = 12, 4, 4000
    keys = jax.vmap(lambda r: jax.random.key_data(jax.random.fold_in(KEY, r)))(jnp.arange(R)).T
    mask = np.asarray(members(rb.Byzantine(rb.SignFlip(), f=f), keys, n, "threefry"))
    assert mask.shape == (n, R) and np.all(mask.sum(axis=0) == f)
    freq = mask.mean(axis=1)
    se = np.sqrt(f / n * (1 - f / n) / R)
    assert np.all(np.abs(freq - f / n) < 4 * se), freq
    # pairs: P(i and j) = f (f - 1) / (n (n - 1))
    pair = (mask[0] & mask[1]).mean()
    p2 = f * (f - 1) / (n * (n - 1))
    assert abs(pair - p2) < 4 * np.sqrt(p2 * (1 - p2) / R)


def test_a_rule_put_in_with_tree_at_runs_and_is_checked(problem):
    sim = fa.Simulation(problem, num_sampled=7, local_steps=3, rounds=20, record_every=10,
                        aggregator=rb.GeometricMedian(0.1, 3))
    a = sim.run(key=KEY, x0=problem.x_star + 1.0, trials=8, stepsize=1e-2)
    other = eqx.tree_at(lambda s: s.components.aggregator.nu, sim, 5.0)
    b = other.run(key=KEY, x0=problem.x_star + 1.0, trials=8, stepsize=1e-2)
    assert not np.array_equal(a.x_final, b.x_final)
    bad = eqx.tree_at(lambda s: s.components.aggregator.nu, sim, -1.0)
    with pytest.raises(ValueError, match="nu"):
        bad.run(key=KEY, x0=problem.x_star + 1.0, trials=8, stepsize=1e-2)
    krum = eqx.tree_at(lambda s: s.components.aggregator, sim, rb.Krum(3))
    with pytest.raises(ValueError, match=r"Krum\(f=3\) needs n >= 2f \+ 3"):
        krum.run(key=KEY, x0=problem.x_star + 1.0, trials=8, stepsize=1e-2)


def test_a_sweep_over_an_attack_parameter_is_one_program(problem):
    from conftest import count_compilations
    byz = rb.Byzantine(rb.ALittleIsEnough(1.0), f=2)
    kw = _kw(problem, aggregator=rb.Median(), byzantine=byz)
    res = fa.sweep(problem, grid={"byzantine.attack.tau": [0.5, 1.0, 3.0]}, **kw)
    one = fa.simulate(problem, **kw)
    assert np.array_equal(res.results[1].x_final, one.x_final)
    with count_compilations() as events:
        fa.sweep(problem, grid={"byzantine.attack.tau": [0.7, 2.0, 4.0]}, **kw)
    assert events == []


@pytest.mark.parametrize("kwargs, match", [
    (dict(aggregator=rb.Krum(2)), r"Krum\(f=2\) needs n >= 2f \+ 3 inputs, got 5 slots"),
    (dict(aggregator=rb.compose(rb.NNM(1), rb.MultiKrum(2))), r"MultiKrum\(f=2\) needs n >= 2f"),
    (dict(aggregator=rb.TrimmedMean(3)), r"TrimmedMean\(f=3\) needs n > 2f"),
    (dict(aggregator=rb.MDA(1), num_sampled=None), None),
    (dict(aggregator="median"), "aggregator must be a fedjax_abc.robust.AbstractAggregator"),
    (dict(byzantine=rb.Byzantine(rb.SignFlip(), f=10)), r"f \(10\) must be below"),
    (dict(byzantine=rb.Byzantine(rb.SignFlip(), clients=[3, 11])), "must be below n=10"),
    (dict(aggregator=rb.Median(), num_sampled=None, sampler=fa.SizeWeighted(
        fa.UniformWithoutReplacement(5), np.arange(1, 11))), "participants have weight 1"),
])
def test_bad_settings_fail_in_one_line_before_any_work(problem, kwargs, match):
    kw = _kw(problem, num_sampled=5)
    kw.update(kwargs)
    if match is None:  # fits: MDA over n = 10 slots, f = 1
        fa.Simulation(problem, **{k: v for k, v in kw.items()
                                  if k not in ("stepsize", "x0", "trials", "key")})
        return
    with pytest.raises(ValueError, match=match) as err:
        fa.simulate(problem, **kw)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("make, match", [
    (lambda: rb.Krum(-1), "f"),
    (lambda: rb.GeometricMedian(nu=0.0), "nu"),
    (lambda: rb.CenteredClipping(tau=-1.0), "tau"),
    (lambda: rb.Clipping(c=0.0), "c"),
    (lambda: rb.Bucketing(0), "s"),
    (lambda: rb.ALittleIsEnough(tau=0.0), "tau"),
    (lambda: rb.Gaussian(sigma=-1.0), "sigma"),
    (lambda: rb.Byzantine(rb.SignFlip()), "f .* or clients"),
    (lambda: rb.Byzantine(rb.SignFlip(), clients=[1, 1]), "distinct"),
    (lambda: rb.Byzantine(rb.Median(), f=1), "attack must be"),
    (lambda: rb.compose(rb.Median(), rb.Krum(1)), "pre-aggregators"),
    (lambda: rb.OptimalALittleIsEnough(ratio=1.2), "ratio"),
    (lambda: rb.alie_z_max(10, 6), "alie_z_max"),
])
def test_bad_values_fail_in_one_line(make, match):
    with pytest.raises(ValueError, match=match) as err:
        make()
    assert "\n" not in str(err.value)


def test_worst_picks_each_rules_worst_attack(problem):
    attacks = [rb.Byzantine(rb.InnerProductManipulation(tau), f=2) for tau in (0.5, 8.0, 2.0)]
    res = fa.sweep(problem, grid={"aggregator": [rb.Median(), rb.TrimmedMean(2)],
                                  "byzantine": attacks}, **_kw(problem))
    worst, labels = res.worst("byzantine")
    means = res.final().mean  # (rules, attacks)
    assert list(worst.axes) == ["aggregator"] and labels.shape == (2,)
    np.testing.assert_array_equal(worst.final().mean, means.max(axis=1))
    assert [res.axes["byzantine"].index(lab) for lab in labels] == list(means.argmax(axis=1))
    with pytest.raises(ValueError, match="no grid axis 'attack'"):
        res.worst("attack")


def test_worst_counts_a_point_whose_trials_all_diverged_as_the_worst(problem):
    res = fa.sweep(problem, grid={"byzantine": [rb.Byzantine(rb.SignFlip(), f=2),
                                                rb.Byzantine(rb.Inf(), f=2)]},
                   **_kw(problem, aggregator=rb.WeightedMean()))
    assert res.axes["byzantine"] == ("Byzantine(attack=SignFlip(), f=2)",
                                     "Byzantine(attack=Inf(), f=2)")
    _, labels = res.worst("byzantine")
    assert labels.tolist() == "Byzantine(attack=Inf(), f=2)"


def _labelled(flip: bool = False):
    """A small softmax regression of 7 clients, 3 classes (labels flipped to 2 - y if asked)."""
    rng = np.random.default_rng(4)
    X = [rng.normal(size=(5 + i % 3, 2)) for i in range(7)]
    y = [rng.integers(0, 3, size=len(x)) for x in X]
    return fa.problems.softmax_regression(X, [2 - v if flip else v for v in y], l2=0.1,
                                          num_classes=3)


def test_label_flipping_sends_the_mean_honest_update_on_flipped_labels():
    # one exact round, every client sampled, Q = 1: the Byzantine clients 1 and 4 send the
    # mean over the honest clients of -alpha grad f_i on the flipped data (ByzFL's
    # LabelFlipping), the problem built again from flipped labels for the reference
    p, flipped = _labelled(), _labelled(flip=True)
    x0 = np.full(p.dim, 0.1)
    kw = dict(num_sampled=None, local_steps=1, stepsize=0.5, rounds=1, x0=x0, trials=2,
              key=KEY, oracle=fa.ExactOracle(), byzantine=rb.Byzantine(rb.LabelFlip(),
                                                                      clients=[1, 4]))
    got = {mode: fa.simulate(p, mode=mode, **kw).x_final[0] for mode in ("mask", "gather")}
    # a learning problem's mask and gather programs agree to rounding (XLA orders a
    # client's products by the batch's shape)
    np.testing.assert_allclose(got["mask"], got["gather"], rtol=1e-13, atol=1e-15)

    def update(problem, i):
        return -0.5 * np.asarray(problem.local_grad(problem.client(i), jnp.asarray(x0)))

    honest = [i for i in range(7) if i not in (1, 4)]
    lie = np.mean([update(flipped, i) for i in honest], axis=0)
    u = [lie if i in (1, 4) else update(p, i) for i in range(7)]
    np.testing.assert_allclose(got["mask"], x0 + np.mean(u, axis=0), rtol=1e-12, atol=1e-14)
    # a wrong reference: the Byzantine clients' own flipped updates
    own = [update(flipped, i) if i in (1, 4) else update(p, i) for i in range(7)]
    assert not np.allclose(got["mask"], x0 + np.mean(own, axis=0), rtol=1e-6)


def test_label_flipping_needs_a_problem_with_labels(problem):
    with pytest.raises(ValueError, match="label flipping needs a learning problem") as err:
        fa.simulate(problem, **_kw(problem, byzantine=rb.Byzantine(rb.LabelFlip(), f=2)))
    assert "\n" not in str(err.value)
