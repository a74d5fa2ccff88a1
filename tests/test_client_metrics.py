"""Per-client metrics inside a run against the same numbers computed in NumPy from the
recorded iterates; the summaries in the DataFrame and xarray results."""

from __future__ import annotations

import functools

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
    with pytest.raises(ValueError, match=r"learning problem .* got the problem "
                                         r"'quadratics\(n=3, d=2\)'$") as e:
        fa.problems.client_metrics(p)
    assert "\n" not in str(e.value)
    data = fa.data.synthetic_data(jax.random.key(0), 0.0, 0.0, 2, max_samples=60)
    q = fa.problems.softmax_regression(data.features, data.labels, num_classes=10)
    with pytest.raises(ValueError, match="quantiles"):
        fa.problems.client_metrics(q, quantiles=(1.5,))


# ------------------------------------------------------------ each client's held-out rows


@functools.lru_cache(maxsize=None)
def _holdout_problem():
    data = fa.data.synthetic_data(jax.random.key(0), 1.0, 1.0, 6, max_samples=50)
    tx, ty, vx, vy = fa.data.client_holdout(jax.random.key(1), data.features, data.labels, 0.3)
    problem = fa.problems.softmax_regression(tx, ty, num_classes=data.num_classes)
    return data, problem, (tx, ty, vx, vy)


def test_held_out_client_metrics_match_numpy_and_differ_from_training_rows():
    data, problem, (tx, ty, vx, vy) = _holdout_problem()
    K, p = data.num_classes, data.features[0].shape[1]
    held = fa.problems.client_metrics(problem, quantiles=(0.5,), features=vx, labels=vy)
    train = fa.problems.client_metrics(problem, quantiles=(0.5,))
    assert set(held) == {n.replace("client_", "client_heldout_") for n in train}
    at = jax.jit(lambda x: ({n: f(x) for n, f in held.items()},
                            train["client_loss_worst"](x)))
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.normal(size=problem.dim)
        got, train_worst = at(x)
        loss, acc = _numpy_per_client(x, vx, vy, p, K)
        want = {"client_heldout_loss_worst": loss.max(), "client_heldout_loss_std": loss.std(),
                "client_heldout_loss_q50": np.median(loss),
                "client_heldout_accuracy_worst": acc.min(),
                "client_heldout_accuracy_q50": np.median(acc)}
        for name, value in want.items():
            assert float(got[name]) == pytest.approx(value, rel=1e-10, abs=1e-12), name
        tl, _ = _numpy_per_client(x, tx, ty, p, K)
        assert float(train_worst) == pytest.approx(tl.max(), rel=1e-10)
        assert abs(tl.max() - loss.max()) > 1e-6  # the two sets of rows do differ


def test_client_holdout_keeps_every_row_once_at_the_stated_sizes():
    sizes = [2, 3, 10, 41]
    X = [np.arange(m, dtype=float)[:, None] + 100 * i for i, m in enumerate(sizes)]
    y = [np.arange(m) % 3 for m in sizes]
    tx, ty, vx, vy = fa.data.client_holdout(jax.random.key(4), X, y, 0.25)
    for i, m in enumerate(sizes):
        k = min(max(round(0.25 * m), 1), m - 1)
        assert (len(vy[i]), len(ty[i])) == (k, m - k)
        rows = np.sort(np.concatenate([tx[i][:, 0], vx[i][:, 0]]))
        np.testing.assert_array_equal(rows, X[i][:, 0])
        np.testing.assert_array_equal(np.concatenate([ty[i], vy[i]]) % 3,
                                      np.concatenate([tx[i][:, 0], vx[i][:, 0]]) % 100 % 3)
    again = fa.data.client_holdout(jax.random.key(4), X, y, 0.25)
    other = fa.data.client_holdout(jax.random.key(5), X, y, 0.25)
    np.testing.assert_array_equal(again[2][3], vx[3])
    assert not np.array_equal(other[2][3], vx[3])


@pytest.mark.parametrize("call, match", [
    (lambda X, y, p: fa.data.client_holdout(jax.random.key(0), X, y, 1.0),
     r"test_fraction must lie in \(0, 1\)"),
    (lambda X, y, p: fa.data.client_holdout(jax.random.key(0), [X[0][:1]], [y[0][:1]], 0.5),
     r"client 0 has 1 row\(s\)"),
    (lambda X, y, p: fa.problems.client_metrics(p, features=X[:2], labels=y[:2]),
     r"two lists of n = 6 per-client arrays"),
    (lambda X, y, p: fa.problems.client_metrics(p, features=X),
     r"held-out features and labels together"),
    (lambda X, y, p: fa.problems.client_metrics(p, features=X, labels=y[:-1] + [y[-1] + 0.5]),
     r"client 5's held-out rows: labels must be integers"),
    (lambda X, y, p: fa.problems.client_metrics(p, features=X[:-1] + [X[-1][:, :3]], labels=y),
     r"client 5's held-out rows: features have 3 columns"),
])
def test_bad_held_out_rows_are_refused_in_one_line(call, match):
    _, problem, (_, _, vx, vy) = _holdout_problem()
    with pytest.raises(ValueError, match=match) as e:
        call(vx, vy, problem)
    assert "\n" not in str(e.value)
