"""Bad input to the learning problems and the mini-batch oracle: one-line ValueErrors.

Labels outside [0, K) or not dense, bad arguments of the learning constructors, and test data
that the model cannot read (``evaluate``, ``held_out_metrics``) included.
"""

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


# ----------------------------------------------------- labels outside [0, K) or not dense


X1 = [np.array([[0.0], [1.0]]), np.array([[2.0], [3.0], [1.5]])]  # one feature
Y1 = [np.array([0, 1]), np.array([1, 1, 0])]


@pytest.fixture(scope="module")
def logistic():
    return fa.problems.logistic_regression(X1, Y1, l2=0.1)


@pytest.mark.parametrize("labels, match", [
    ([0, 2], r"test label 2 outside \[0, K=2\)"),
    ([-1, 1], r"test label -1 outside \[0, K=2\)"),
    ([0.5, 1.0], "labels must be integers"),
])
def test_test_labels_outside_the_classes_are_refused(logistic, labels, match):
    Xt = np.array([[0.0], [3.0]])
    with pytest.raises(ValueError, match=match):
        fa.problems.evaluate(logistic, logistic.x_star, Xt, np.array(labels))
    with pytest.raises(ValueError, match=match):
        fa.problems.held_out_metrics(logistic, Xt, np.array(labels))
    # labels in range: the accuracy of the model's predictions
    ev = fa.problems.evaluate(logistic, logistic.x_star, Xt, np.array([0, 1]))
    assert float(ev.accuracy) == 1.0 and np.isfinite(ev.loss)


def test_sparse_labels_are_refused_with_how_to_remap():
    sparse = [np.array([0, 1000]), np.array([1000, 1000, 0])]
    with pytest.raises(ValueError, match=r"labels take 2 values in 0\.\.1000, which makes K=1001 "
                                         r"classes: remap them to 0\.\.1 \(e\.g\. numpy\.unique"):
        fa.problems.softmax_regression(X1, sparse, l2=0.1)
    with pytest.raises(ValueError, match=r"K=1001 classes: remap them"):
        fa.problems.mlp(jax.random.key(0), X1, sparse, width=4)
    # remapped as the message says: the problem of the dense labels
    _, dense = np.unique(np.concatenate(sparse), return_inverse=True)
    p = fa.problems.softmax_regression(X1, [dense[:2], dense[2:]], l2=0.1)
    assert p.loss.model.num_classes == 2
    # K given: classes absent from the training data are the user's choice
    three = fa.problems.softmax_regression(X1, Y1, l2=0.1, num_classes=3)
    assert three.loss.model.num_classes == 3


# ----------------------------- bad arguments of the learning constructors and of evaluate


@pytest.fixture(scope="module")
def problem():
    return fa.problems.huber_offsets(jax.random.key(0), n=6, d_max=10.0)


@pytest.mark.parametrize("fn, match", [
    (lambda: fa.problems.softmax_regression(X1, Y1, l2="0.1"), r"l2 must be a number, got '0\.1'"),
    (lambda: fa.problems.softmax_regression(X1, Y1, num_classes="2"),
     r"num_classes \(K\) must be an integer >= 2, got '2'"),
    (lambda: fa.problems.softmax_regression({"a": X1[0]}, {"a": Y1[0]}),
     r"features must be a list of n per-client arrays, got dict"),
    (lambda: fa.problems.softmax_regression([X1[0], np.array([["a"], ["b"], ["c"]])], Y1),
     r"client 1: features must be an array of numbers"),
    (lambda: fa.problems.mlp(jax.random.key(0), X1, Y1, width=0),
     r"MLP width must be an integer >= 1, got 0"),
    (lambda: fa.problems.mlp(jax.random.key(0), X1, Y1, depth=-1),
     r"MLP depth must be an integer >= 0, got -1"),
    (lambda: fa.problems.mlp(0, X1, Y1, width=4), r"key must be a single JAX PRNG key"),
    (lambda: fa.problems.mlp(jax.random.key(0), X1, Y1, width=4, solver_steps=0),
     r"solver_steps must be an integer >= 1, got 0"),
    (lambda: fa.problems.learning_problem("softmax", X1, Y1),
     r"model must be a fedjax_abc\.problems\.SoftmaxRegression, LogisticRegression, MLP or EquinoxModel"),
    (lambda: fa.problems.SoftmaxRegression(0, 2),
     r"SoftmaxRegression num_features \(p\) must be an integer >= 1, got 0"),
    (lambda: fa.problems.SoftmaxRegression(2, 1),
     r"SoftmaxRegression num_classes \(K\) must be an integer >= 2, got 1"),
    (lambda: fa.problems.LogisticRegression(2.0),
     r"LogisticRegression num_features \(p\) must be an integer >= 1, got 2\.0"),
    (lambda: fa.data.split(np.zeros((4, 1)), np.zeros(4, int), [np.array([0, 1]), np.array([1, 5])]),
     r"parts\[1\] holds index 5 outside 0\.\.3 \(the 4 samples\)"),
    (lambda: fa.data.split(np.zeros((4, 1)), np.zeros(4, int), 2),
     r"parts must be a list of index arrays"),
])
def test_learning_constructors_refuse_bad_arguments(fn, match):
    with pytest.raises(ValueError, match=match):
        fn()


def test_evaluate_refuses_test_data_the_model_cannot_read(problem):
    lg = fa.problems.logistic_regression(X1, Y1, l2=0.1)
    for fn in (lambda *a: fa.problems.evaluate(lg, lg.x_star, *a),
               lambda *a: fa.problems.held_out_metrics(lg, *a)):
        with pytest.raises(ValueError, match=r"features have 3 columns; the model takes p=1"):
            fn(np.zeros((2, 3)), np.array([0, 1]))
        with pytest.raises(ValueError, match=r"hold no test samples \(m = 0\)"):
            fn(np.zeros((0, 1)), np.zeros(0, int))
        with pytest.raises(ValueError, match=r"features must be finite"):
            fn(np.array([[np.nan], [1.0]]), np.array([0, 1]))
    with pytest.raises(ValueError, match=r"take a learning problem or its model"):
        fa.problems.evaluate(problem, problem.x_star, np.zeros((2, 1)), np.array([0, 1]))
    with pytest.raises(ValueError, match=r"take a learning problem or its model"):
        fa.problems.held_out_metrics(problem, np.zeros((2, 1)), np.array([0, 1]))


def test_a_problem_takes_pooled_data_of_the_declared_kind_only():
    """Problem.pooled is an AbstractPooled (value_and_grad and check_matches, which a
    problem runs when it is built): anything else is refused in one line."""
    lg = fa.problems.logistic_regression(X1, Y1, l2=0.1)
    kw = dict(loss=lg.loss, params=lg.params, minima=lg.minima, oracle=lg.oracle,
              grad_fn=lg.grad_fn)
    assert fa.Problem(**kw, pooled=lg.pooled).pooled is lg.pooled
    with pytest.raises(ValueError, match=r"Problem.pooled must be an AbstractPooled or None, "
                                         r"got dict"):
        fa.Problem(**kw, pooled={"value_and_grad": None})
