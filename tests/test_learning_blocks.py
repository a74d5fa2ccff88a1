"""The fast paths of the learning problems: closed-form gradients, pooled records, client blocks.

- The closed-form gradient of softmax and logistic regression (``DatasetGrad``) equals
  ``jax.grad`` of the loss, on a client's padded data and on a mini-batch, for both
  weightings; the MLP keeps autodiff.
- ``Problem.value_and_grad`` over the pooled rows (no padding) equals the mean of the
  clients' values and gradients over their padded data, and a run's records are the pooled
  ones.
- On a CPU, models of 2 KiB or more run their local steps a block of clients at a time; the
  numbers agree with all clients at once to rounding, and trial r's numbers (iterates,
  gaps, ||grad f||^2) do not depend on the number of trials beside it, in both modes; a
  sweep's grid point equals ``simulate`` alone bit for bit (the fixed-order sums of the
  closed-form gradient keep the point's numbers its own).
"""

import dataclasses
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc._engine import _plan
from fedjax_abc._problems._models import DatasetGrad, DatasetLoss


def _data(num_features=5, num_classes=3, n=4):
    return fa.data.synthetic_data(jax.random.key(3), 0.5, 0.5, num_clients=n,
                                  num_features=num_features, num_classes=num_classes,
                                  max_samples=30)


_CONVEX = {}


def _problems(weighting):
    """Softmax and logistic regression on 4 small clients (built once per weighting)."""
    if weighting not in _CONVEX:
        data = _data()
        binary = [(y == 0).astype(np.int32) for y in data.labels]
        _CONVEX[weighting] = (
            fa.problems.softmax_regression(data.features, data.labels, l2=1e-2, num_classes=3,
                                           weighting=weighting),
            fa.problems.logistic_regression(data.features, binary, l2=1e-2,
                                            weighting=weighting))
    return _CONVEX[weighting]


@pytest.mark.parametrize("weighting", [pytest.param("uniform", marks=pytest.mark.slow), "samples"])
def test_closed_form_gradient_equals_autodiff(weighting):
    for problem in _problems(weighting):
        assert isinstance(problem.grad_fn, DatasetGrad) and problem.grad_fn.closed_form
        x = jnp.linspace(-0.8, 0.6, problem.dim)
        autodiff = jax.grad(DatasetLoss(problem.loss.model), argnums=1)

        @jax.jit
        def both(data):  # one client's full data and a mini-batch of three of its rows
            batch = data.take(jnp.array([0, 2, 1]))
            return (problem.grad_fn(data, x), autodiff(data, x),
                    problem.grad_fn(batch, x), autodiff(batch, x))

        full, full_ad, mini, mini_ad = jax.vmap(both)(problem.params)
        np.testing.assert_allclose(full, full_ad, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(mini, mini_ad, rtol=1e-12, atol=1e-14)


@pytest.fixture(scope="module")
def mlp():
    """A tanh MLP of d = 2282 (18 KiB a model) on 4 clients, b = 5."""
    data = fa.data.synthetic_data(jax.random.key(4), 1.0, 1.0, num_clients=4, max_samples=40)
    return fa.problems.mlp(jax.random.key(0), data.features, data.labels, width=32,
                           num_classes=data.num_classes, oracle=fa.MinibatchOracle(5),
                           solver_steps=5)


def test_mlp_gradient_is_autodiff(mlp):
    assert not mlp.grad_fn.closed_form
    x = mlp.loss.model.init(jax.random.key(1))
    data0 = mlp.client(0).params
    ours, autodiff = jax.jit(lambda d: (mlp.grad_fn(d, x), jax.grad(
        DatasetLoss(mlp.loss.model), argnums=1)(d, x)))(data0)
    np.testing.assert_array_equal(ours, autodiff)


@pytest.mark.parametrize("weighting", ["uniform", "samples"])
def test_pooled_value_and_grad_equal_the_mean_over_clients(weighting, mlp):
    for problem in list(_problems(weighting)) + [mlp]:
        assert problem.pooled is not None
        x = 0.3 * jnp.cos(jnp.arange(problem.dim, dtype=jnp.float64))
        f, g = eqx.filter_jit(lambda p, x: p.value_and_grad(x))(problem, x)
        values, grads = jax.jit(jax.vmap(
            lambda i: problem.local_value_and_grad(problem.client(i), x)))(
            jnp.arange(problem.num_clients))
        np.testing.assert_allclose(f, np.mean(values), rtol=1e-12)
        np.testing.assert_allclose(g, np.mean(grads, axis=0), rtol=1e-11, atol=1e-14)
        np.testing.assert_allclose(f, eqx.filter_jit(lambda p, x: p.value(x))(problem, x),
                                   rtol=1e-12)


@pytest.fixture(scope="module")
def wide():
    """Softmax regression with d = 610 (4880 bytes a model in float64: blocks of one client)."""
    data = fa.data.synthetic_data(jax.random.key(4), 1.0, 1.0, num_clients=5, max_samples=40)
    return fa.problems.softmax_regression(data.features, data.labels, l2=1e-3,
                                          num_classes=data.num_classes,
                                          oracle=fa.MinibatchOracle(5))


@pytest.mark.slow  # 7-25 s: with the long checks, for the default run's 10 minutes
def test_records_are_the_pooled_values(wide):
    problem = wide
    x0 = 0.01 * np.sin(np.arange(problem.dim))
    res = fa.simulate(problem, num_sampled=2, local_steps=2, stepsize=0.1, rounds=2, x0=x0,
                      trials=8, key=jax.random.key(0), record_every=1)
    f, g = jax.vmap(problem.value_and_grad)(jnp.asarray(res.x).reshape(-1, problem.dim))
    np.testing.assert_allclose(res.gap, (f - problem.f_star).reshape(res.gap.shape), rtol=1e-10,
                               atol=1e-14)
    np.testing.assert_allclose(res.grad_norm_sq, jnp.sum(g * g, -1).reshape(res.gap.shape),
                               rtol=1e-10)
    per_client = float(problem.value(jnp.asarray(x0))) - float(problem.f_star)  # padded path
    np.testing.assert_allclose(res.gap[:, 0], per_client, rtol=1e-10)


def test_client_block_rule():
    assert _plan.client_block(40, 1, "float64", "cpu") is None  # the paper's problems
    assert _plan.client_block(20, 100, "float64", "cpu") is None  # 800 bytes: all at once
    assert _plan.client_block(30, 610, "float64", "cpu") == 1
    assert _plan.client_block(30, 610, "float32", "cpu") == 1
    assert _plan.client_block(30, 256, "float64", "cpu") == 2  # 2 KiB a model
    assert _plan.client_block(2, 256, "float64", "cpu") is None  # a block of every client
    assert _plan.client_block(30, 610, "float64", "gpu") is None
    assert _plan.client_block(30, 610, "float64", "cpu", closed_form=False) is None


@pytest.mark.parametrize("mode", ["mask", "gather"])
def test_blocks_agree_with_all_clients_at_once(mode, wide):
    """The same problem with its gradient declared not a closed form (``closed_form =
    False`` on its grad_fn, the same function) runs every client at once."""
    problem = wide
    kw = dict(num_sampled=2, local_steps=3, stepsize=0.1, rounds=4, x0=np.zeros(problem.dim),
              trials=8, key=jax.random.key(1), record_every=2, mode=mode)

    def gradient(params, x):
        return problem.grad_fn(params, x)

    gradient.closed_form = False
    at_once = dataclasses.replace(problem, grad_fn=gradient)
    for p, block in ((problem, 1), (at_once, None)):
        assert _plan.make_plan(4, 2, 8, "float64", jax.devices()[:1], False,
                               num_clients=p.num_clients, dim=p.dim,
                               closed_form=_plan.closed_form_gradient(p)).client_block == block
    blocked = fa.simulate(problem, **kw)
    together = fa.simulate(at_once, **kw)
    np.testing.assert_allclose(blocked.x_final, together.x_final, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(blocked.gap, together.gap, rtol=1e-10, atol=1e-15)


@pytest.mark.parametrize("mode", ["mask", "gather"])
def test_trial_does_not_depend_on_its_neighbours(mode, wide):
    problem = wide
    kw = dict(num_sampled=2, local_steps=3, stepsize=0.1, rounds=4, x0=np.zeros(problem.dim),
              key=jax.random.key(2), record_every=2, mode=mode)
    few = fa.simulate(problem, trials=8, **kw)
    many = fa.simulate(problem, trials=64, **kw)
    np.testing.assert_array_equal(few.x, many.x[:8])
    np.testing.assert_array_equal(few.gap, many.gap[:8])
    np.testing.assert_array_equal(few.grad_norm_sq, many.grad_norm_sq[:8])


@pytest.mark.parametrize("mode", ["mask", "gather"])
def test_sweep_point_equals_simulate_alone(mode, wide):
    problem = wide
    kw = dict(num_sampled=2, local_steps=3, rounds=4, x0=np.zeros(problem.dim), trials=8,
              key=jax.random.key(2), record_every=2, mode=mode)
    sw = fa.sweep(problem, grid={"stepsize": [0.1, 0.2]}, **kw)
    for alpha in (0.1, 0.2):
        assert fa.simulate(problem, stepsize=alpha, **kw).equals(sw.point(stepsize=alpha))


@pytest.mark.slow  # 7-25 s: with the long checks, for the default run's 10 minutes
def test_mlp_runs_all_clients_at_once_and_its_trials_keep_their_numbers(mlp):
    """The MLP's gradient is autodiff: no client blocks; its loss sums a mini-batch's rows
    and the classes in a fixed order, so that trial r does not depend on its neighbours."""
    problem = mlp
    assert not _plan.closed_form_gradient(problem)
    assert _plan.make_plan(2, 1, 8, "float64", jax.devices()[:1], False,
                           num_clients=problem.num_clients, dim=problem.dim,
                           closed_form=False).client_block is None
    kw = dict(num_sampled=2, local_steps=2, stepsize=0.1, rounds=2, record_every=1,
              x0=problem.loss.model.init(jax.random.key(1)), key=jax.random.key(2), mode="mask")
    few = fa.simulate(problem, trials=8, **kw)
    many = fa.simulate(problem, trials=32, **kw)
    np.testing.assert_array_equal(few.x, many.x[:8])
    np.testing.assert_array_equal(few.gap, many.gap[:8])
