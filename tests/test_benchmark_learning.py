"""``benchmarks/baselines/fedavg_jax.py``: the plain-JAX FedAvg of the learning benchmark.

- Its MLP parameters (``to_params``) are those of the equinox module the package trains:
  the same logits on the same rows.
- With every client sampled (S = n) and a batch of all of a client's rows, its FedAvg is
  deterministic and equals the package's FedAvg with exact gradients on the same softmax
  regression problem, round for round (to rounding).
- The batched products and their flop count have the shapes the benchmark times.
"""

import os
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

import fedjax_abc as fa  # noqa: E402
from benchmarks.baselines.fedavg_jax import (_logits, batched_products, make_fedavg,  # noqa: E402
                                             product_flops, to_params)


def test_mlp_parameters_are_the_modules():
    net = eqx.nn.MLP(6, 3, 5, 1, activation=jax.nn.tanh, key=jax.random.key(0))
    leaves = jax.tree_util.tree_leaves(eqx.filter(net, eqx.is_inexact_array))  # the package's x
    x = jnp.concatenate([jnp.ravel(a) for a in leaves])
    X = jax.random.normal(jax.random.key(1), (4, 6))
    ours = _logits("mlp", to_params("mlp", x, 6, 3, 5), X)
    np.testing.assert_allclose(ours, jax.vmap(net)(X), rtol=1e-12, atol=1e-12)


def test_full_batch_full_participation_matches_the_package():
    rng = np.random.default_rng(0)
    n, m, p, K = 3, 6, 4, 3
    X = [rng.normal(size=(m, p)) for _ in range(n)]
    y = [rng.integers(0, K, size=m) for _ in range(n)]
    problem = fa.problems.softmax_regression(X, y, l2=0.1, num_classes=K)
    T, Q, alpha = 4, 2, 0.3
    res = fa.simulate(problem, num_sampled=n, local_steps=Q, stepsize=alpha, rounds=T,
                      x0=np.zeros(problem.dim), trials=1, key=jax.random.key(0))
    run = make_fedavg("softmax", num_sampled=n, local_steps=Q, batch=m, rounds=T,
                      stepsize=alpha, l2=0.1)
    data = problem.params
    params = to_params("softmax", jnp.zeros((2, problem.dim)), p, K)
    W, b = run(data.features, data.labels, data.count, params, jax.random.split(
        jax.random.key(1), 2))
    ours = jnp.concatenate([W.reshape(2, -1), b], axis=1)
    np.testing.assert_allclose(ours[0], res.x_final[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ours[1], ours[0], rtol=1e-10, atol=1e-12)


def test_products_shapes_and_flops():
    fn, args = batched_products("mlp", 3, 8, jnp.float64, p=6, K=3, width=5)
    dW1, dW2 = fn(*args)
    assert dW1.shape == (3, 6, 5) and dW2.shape == (3, 5, 3)
    assert product_flops("mlp", 3, 8, p=6, K=3, width=5) == 2 * 3 * 8 * (2 * 6 * 5 + 3 * 5 * 3)
    fn, args = batched_products("softmax", 2, 4, jnp.float64, p=6, K=3)
    assert fn(*args).shape == (2, 6, 3)
    assert product_flops("softmax", 2, 4, p=6, K=3) == 2 * 2 * 4 * 2 * 6 * 3
