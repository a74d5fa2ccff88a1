"""Your own equinox model as a learning problem: eqx.nn.Linear against the built-in softmax
regression on the same data, a small CNN on digits' 8x8 images, and the one-line errors."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa

P = fa.problems


@pytest.fixture(scope="module")
def data():
    return fa.data.synthetic_data(jax.random.key(0), 1.0, 1.0, 6, max_samples=60)


def _to_linear(x, p, K):
    """softmax_regression's x = (W (p, K), b) in eqx.nn.Linear's order (weight (K, p), b)."""
    W, b = x[: p * K].reshape(p, K), x[p * K:]
    return np.concatenate([W.T.ravel(), b])


@pytest.mark.slow  # two Newton solves and four runs, about 10 s
def test_a_linear_module_is_softmax_regression(data):
    p, K = data.features[0].shape[1], data.num_classes
    ref = P.softmax_regression(data.features, data.labels, num_classes=K, l2=1e-2)
    mine = P.from_model(eqx.nn.Linear(p, K, key=jax.random.key(1)), P.cross_entropy,
                        data.features, data.labels, l2=1e-2, convex=True)
    assert mine.dim == ref.dim and mine.certified
    assert float(mine.f_star) == pytest.approx(float(ref.f_star), rel=1e-10)
    np.testing.assert_allclose(mine.local_minima, ref.local_minima, rtol=1e-9)
    sigma = lambda q: float(fa.theory.sigma_f_star(q))  # noqa: E731
    assert sigma(mine) == pytest.approx(sigma(ref), rel=1e-8)
    np.testing.assert_allclose(mine.x_star, _to_linear(np.asarray(ref.x_star), p, K), atol=1e-7)
    kw = dict(num_sampled=3, local_steps=3, stepsize=0.1, rounds=20, trials=3,
              key=jax.random.key(2), x0=np.zeros(ref.dim), record_every=5, oracle=fa.ExactOracle())
    a, b = fa.simulate(ref, **kw), fa.simulate(mine, **kw)
    np.testing.assert_allclose(b.gap, a.gap, rtol=1e-9, atol=1e-12)
    for r in range(3):
        np.testing.assert_allclose(b.x_final[r], _to_linear(a.x_final[r], p, K), atol=1e-12)
    # the control: without the l2 term on the bias leaf the objective differs
    assert not np.isclose(float(P.from_model(eqx.nn.Linear(p, K, key=jax.random.key(1)),
                                              P.cross_entropy, data.features, data.labels,
                                              l2=2e-2, convex=True).f_star), float(ref.f_star))


class SmallCNN(eqx.Module):
    """Four 3x3 filters on the 8x8 image, tanh, a linear read-out of the 4 x 6 x 6 maps."""

    conv: eqx.nn.Conv2d
    out: eqx.nn.Linear

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.conv = eqx.nn.Conv2d(1, 4, 3, key=k1)
        self.out = eqx.nn.Linear(4 * 6 * 6, 10, key=k2)

    def __call__(self, row):
        return self.out(jnp.tanh(self.conv(row.reshape(1, 8, 8))).ravel())


@pytest.mark.slow  # L-BFGS for f* and 40 rounds of a CNN: about 40 s
def test_a_cnn_on_digits_trains():
    data = fa.data.load_digits(jax.random.key(0), num_clients=5, alpha=None)
    net = SmallCNN(jax.random.key(1))
    problem = P.from_model(net, P.cross_entropy, data.features, data.labels, l2=1e-4,
                           oracle=fa.MinibatchOracle(16), solver_steps=100)
    assert not problem.certified and problem.dim == 4 * 9 + 4 + 144 * 10 + 10
    x0 = np.asarray(problem.loss.model.init(None))
    res = fa.simulate(problem, num_sampled=3, local_steps=5, stepsize=0.1, rounds=40, trials=2,
                      key=jax.random.key(2), x0=x0, record_every=40,
                      metrics=P.held_out_metrics(problem, data.test_features, data.test_labels))
    acc = res.metrics["test_accuracy"]
    assert acc[:, 0].max() < 0.3 and acc[:, -1].min() > 0.7  # from chance to trained
    assert np.all(res.gap[:, -1] < 0.5 * res.gap[:, 0])


def test_bad_models_and_losses_get_one_line_errors(data):
    p = data.features[0].shape[1]
    cases = [(lambda: P.from_model(lambda r: r, P.cross_entropy, data.features, data.labels),
              "equinox.Module"),
             (lambda: P.from_model(eqx.nn.Linear(p + 1, 10, key=jax.random.key(0)),
                                   P.cross_entropy, data.features, data.labels), "failed"),
             (lambda: P.from_model(eqx.nn.Linear(p, "scalar", key=jax.random.key(0)),
                                   P.cross_entropy, data.features, data.labels), "K >= 2"),
             (lambda: P.from_model(eqx.nn.Linear(p, 10, key=jax.random.key(0)),
                                   lambda m, X, y: jax.vmap(m)(X), data.features, data.labels),
              "one number"),
             (lambda: P.from_model(eqx.nn.Linear(p, 10, key=jax.random.key(0)), None,
                                   data.features, data.labels), "loss must be")]
    for call, words in cases:
        with pytest.raises(ValueError, match=words) as e:
            call()
        assert "\n" not in str(e.value)


class _Masked(eqx.Module):
    """A linear classifier with an integer buffer (a mask of its classes), read in __call__."""

    linear: eqx.nn.Linear
    keep: jax.Array

    def __call__(self, row):
        return jnp.where(self.keep > 0, self.linear(row), -1e3)


@pytest.mark.slow  # over 10 s: with the long checks
def test_a_model_with_an_integer_buffer_trains_as_without_it():
    rng = np.random.default_rng(0)
    X = [rng.normal(size=(10, 3)) for _ in range(2)]
    y = [rng.integers(0, 2, 10) for _ in range(2)]
    linear = eqx.nn.Linear(3, 2, key=jax.random.key(0))
    kw = dict(num_sampled=2, local_steps=2, stepsize=0.1, rounds=3, key=jax.random.key(0),
              x0=np.zeros(8))
    buffered = P.from_model(_Masked(linear, jnp.ones(2, jnp.int32)), P.cross_entropy, X, y)
    plain = P.from_model(linear, P.cross_entropy, X, y)
    assert buffered.dim == plain.dim == 8
    assert float(buffered.f_star) == float(plain.f_star)
    np.testing.assert_array_equal(fa.simulate(buffered, **kw).x_final,
                                  fa.simulate(plain, **kw).x_final)
    # the buffer is read: masking a class changes the model
    masked = P.from_model(_Masked(linear, jnp.array([1, 0], jnp.int32)), P.cross_entropy, X, y)
    assert float(masked.f_star) != float(plain.f_star)
