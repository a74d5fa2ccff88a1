"""The schedule component: Rounds() is the default, the same program and numbers;
anything else than an AbstractSchedule is refused in one line."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa


def test_rounds_is_the_default():
    p = fa.problems.quadratics(jax.random.key(0), n=6, d=3)
    kw = dict(num_sampled=3, local_steps=2, stepsize=0.1, rounds=12, x0=jnp.ones(3), trials=4,
              key=jax.random.key(1), record_every=3)
    assert fa.Simulation(p, local_steps=2, rounds=12).schedule == fa.Rounds()
    a, b = fa.simulate(p, **kw), fa.simulate(p, **kw, schedule=fa.Rounds())
    for name in ("gap", "grad_norm_sq", "x", "x_final"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.config == b.config


def test_not_a_schedule():
    p = fa.problems.quadratics(jax.random.key(0), n=6, d=3)
    with pytest.raises(ValueError, match=r"^schedule must be a fedjax_abc.AbstractSchedule .* got str$"):
        fa.simulate(p, local_steps=2, stepsize=0.1, rounds=4, x0=jnp.ones(3),
                    key=jax.random.key(1), schedule="rounds")
