"""Bad input to the learning problems and the mini-batch oracle: one-line ValueErrors."""

import jax
import numpy as np
import pytest

import fedjax_abc as fa

X = [np.zeros((4, 2)), np.ones((3, 2))]
Y = [np.array([0, 1, 0, 1]), np.array([1, 0, 1])]


def _one_line(excinfo):
    text = str(excinfo.value)
    assert "\n" not in text and text, text
    return text


@pytest.mark.parametrize("features, labels, match", [
    (X, Y[:1], "features has 2 clients and labels 1"),
    ([np.zeros((4, 2)), np.ones((3, 2))], [Y[0], np.array([1, 0])], "client 1: 3 rows of features but 2 labels"),
    ([np.zeros((4, 2)), np.zeros((0, 2))], [Y[0], np.array([], int)], "client 1 has no samples"),
    (X, [Y[0], np.array([1, 0, 5])], r"client 1: label 5 outside \[0, K=2\)"),
    (X, [Y[0], np.array([1, 0, -1])], r"client 1: label -1 outside"),
    (X, [Y[0], np.array([0.5, 0, 1])], "client 1: labels must be integers"),
    (np.zeros((2, 3, 2)), Y, "features must be a list of n per-client arrays"),
    ([np.zeros((4, 2)), np.ones((3, 5))], Y, "client 1: 5 features, client 0 has 2"),
    ([np.zeros(4), np.ones((3, 2))], Y, r"client 0: features must have shape \(m_i, p\)"),
])
def test_bad_data(features, labels, match):
    with pytest.raises(ValueError, match=match) as excinfo:
        fa.problems.logistic_regression(features, labels, l2=0.1)
    _one_line(excinfo)


def test_bad_settings():
    for kw, match in [(dict(l2=0.0), r"l2 \(0.0\) must be > 0"), (dict(l2=-1.0), "must be finite and >= 0"),
                      (dict(weighting="clients"), "weighting"),
                      (dict(oracle="exact"), "oracle must be a fedjax_abc.AbstractOracle")]:
        with pytest.raises(ValueError, match=match) as excinfo:
            fa.problems.softmax_regression(X, Y, **{"l2": 0.1, **kw})
        _one_line(excinfo)
    with pytest.raises(ValueError, match=r"label 3 outside \[0, K=3\)"):
        fa.problems.softmax_regression(X, [Y[0], np.array([1, 3, 0])], num_classes=3)
    for b, match in [(0, "batch_size must be an integer >= 1"), (2.5, "batch_size must be")]:
        with pytest.raises(ValueError, match=match):
            fa.MinibatchOracle(b)
    with pytest.raises(ValueError, match="replace must be True or False"):
        fa.MinibatchOracle(2, replace="yes")


def test_batch_larger_than_a_client_without_replacement():
    with pytest.raises(ValueError, match=r"batch_size \(b=4\) exceeds client 1's 3 samples") as e:
        fa.problems.logistic_regression(X, Y, l2=0.1, oracle=fa.MinibatchOracle(4))
    _one_line(e)
    problem = fa.problems.logistic_regression(X, Y, l2=0.1, oracle=fa.MinibatchOracle(4, replace=True))
    kw = dict(local_steps=2, stepsize=0.1, rounds=2, x0=np.zeros(3), key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"exceeds client 1's 3 samples") as e:  # in simulate's checks
        fa.simulate(problem, oracle=fa.MinibatchOracle(4), **kw)
    _one_line(e)
    quad = fa.problems.quadratics(jax.random.key(0), n=2, d=3)
    with pytest.raises(ValueError, match="MinibatchOracle needs a learning problem"):
        fa.simulate(quad, oracle=fa.MinibatchOracle(2), **dict(kw, x0=np.zeros(3)))


def test_bad_partitions_and_data():
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="num_clients .5. must be <= num_examples .4."):
        fa.data.iid_partition(key, 4, 5)
    with pytest.raises(ValueError, match="alpha"):
        fa.data.dirichlet_partition(key, np.array([0, 1, 1]), 2, alpha=0.0)
    with pytest.raises(ValueError, match="3 clients x 2 samples need 6 examples, have 4"):
        fa.data.dirichlet_partition(key, np.array([0, 1, 1, 0]), 3, 1.0, samples_per_client=2)
    with pytest.raises(ValueError, match="key must be a single JAX PRNG key"):
        fa.data.synthetic_data(0, 1.0, 1.0)
    with pytest.raises(ValueError, match="alpha"):
        fa.data.synthetic_data(key, -1.0, 1.0)
