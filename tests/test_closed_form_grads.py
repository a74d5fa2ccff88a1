"""Closed-form gradients of the built-in problems agree with autodiff of their losses."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa


@pytest.mark.parametrize("make", [
    lambda: fa.problems.softplus_huber(),
    lambda: fa.problems.huber_offsets(jax.random.key(0), n=12, d_max=20.0),
    lambda: fa.problems.quadratics(jax.random.key(1), n=4, d=3),
])
def test_closed_form_gradient_matches_autodiff(make):
    problem = make()
    assert problem.grad_fn is not None
    xs = np.linspace(-25.0, 25.0, 1001)
    xs = np.concatenate([xs, [-1.0, 1.0, 0.0]])  # the Huber kinks included
    points = jnp.repeat(jnp.asarray(xs)[:, None], problem.dim, axis=1)

    @jax.jit
    def both(i):
        client = problem.client(i)
        closed = jax.vmap(lambda x: problem.local_grad(client, x))(points)
        auto = jax.vmap(lambda x: jax.grad(problem.loss, argnums=1)(client.params, x))(points)
        return closed, auto

    for i in range(problem.num_clients):
        closed, auto = both(i)
        np.testing.assert_allclose(closed, auto, rtol=0, atol=1e-12)
