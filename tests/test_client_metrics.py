"""Per-client metrics inside a run against the same numbers computed in NumPy from the
recorded iterates; the summaries in the DataFrame and xarray results."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import fedjax_abc as fa


def _numpy_per_client(x, features, labels, p, K):
    """Softmax regression written out: W (p, K), b (K,); each client's mean cross-entropy and
    accuracy on its rows."""
    W, b = x[: p * K].reshape(p, K), x[p * K:]
    loss, acc = [], []
    for X, y in zip(features, labels):
        z = X @ W + b
        z = z - z.max(1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(1, keepdims=True))
        loss.append(-logp[np.arange(len(y)), y].mean())
        acc.append(np.mean(np.argmax(z, 1) == y))
    return np.array(loss), np.array(acc)


@pytest.mark.slow  # a run and 36 NumPy evaluations, about 6 s
def test_client_metrics_match_numpy_on_the_recorded_iterates():
    data = fa.data.synthetic_data(jax.random.key(0), 1.0, 1.0, 8, max_samples=80)
    K, p = data.num_classes, data.features[0].shape[1]
    problem = fa.problems.softmax_regression(data.features, data.labels, num_classes=K,
                                             oracle=fa.MinibatchOracle(5))
    metrics = fa.problems.client_metrics(problem, quantiles=(0.25, 0.5))
    res = fa.simulate(problem, num_sampled=3, local_steps=2, stepsize=0.05, rounds=12, trials=3,
                      key=jax.random.key(1), x0=np.zeros(problem.dim), record_every=4,
                      metrics=metrics)
    for r in range(res.trials):
        for j in range(res.rounds.size):
            loss, acc = _numpy_per_client(res.x[r, j], data.features, data.labels, p, K)
            want = {"client_loss_worst": loss.max(), "client_loss_std": loss.std(),
                    "client_loss_q25": np.quantile(loss, 0.25),
                    "client_loss_q50": np.median(loss), "client_accuracy_worst": acc.min(),
                    "client_accuracy_std": acc.std(),
                    "client_accuracy_q50": np.median(acc)}
            for name, value in want.items():
                assert res.metrics[name][r, j] == pytest.approx(value, rel=1e-10, abs=1e-12), name
    # after t = 0 (x = 0: log K for all) the clients differ: the worst above the median
    assert np.all(res.metrics["client_loss_worst"][:, 1:] > res.metrics["client_loss_q50"][:, 1:])
    frame = res.to_dataframe()
    assert {"client_loss_worst", "client_accuracy_q25"} <= set(frame.columns)
    assert "client_loss_std" in res.to_xarray()


def test_client_metrics_refuse_what_is_not_a_learning_problem():
    p = fa.problems.quadratics(jax.random.key(0), n=3, d=2)
    with pytest.raises(ValueError, match="learning problem"):
        fa.problems.client_metrics(p)
    data = fa.data.synthetic_data(jax.random.key(0), 0.0, 0.0, 2, max_samples=60)
    q = fa.problems.softmax_regression(data.features, data.labels, num_classes=10)
    with pytest.raises(ValueError, match="quantiles"):
        fa.problems.client_metrics(q, quantiles=(1.5,))
