"""User metrics recorded inside a run: ``simulate(..., metrics={name: fn})``.

- a metric's record equals the function applied afterwards to the recorded iterates
  (computed here with NumPy from ``SimResult.x``), at t = 0 and every record;
- metrics change no other number, agree between mask and gather, between a sweep point and
  ``simulate`` alone, across checkpoint resumption and trial shares, and survive the
  DataFrame / netCDF round trips;
- held-out accuracy and loss (``fa.problems.held_out_metrics``) equal ``evaluate`` on the
  iterates, and a new test set of the same shapes compiles nothing;
- bad metrics, and metric names taken by a result field or a grid axis of the sweep, are
  refused in one line before anything runs.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
from conftest import count_backend_compilations
from small_run import SETTINGS as KW6, small_problem, small_run


def offsets(n=8, seed=0):
    return fa.problems.huber_offsets(jax.random.key(seed), n=n, d_max=10.0)


P = offsets()
X_STAR = float(np.asarray(P.x_star)[0])
KW = dict(num_sampled=3, local_steps=3, stepsize=0.05, rounds=12, trials=6,
          key=jax.random.key(3), record_every=4, x0=np.asarray(P.x_star) + 2.0)
METRICS = {"dist_sq": lambda x: jnp.sum((x - X_STAR) ** 2),
           "above": lambda x: (x[0] > X_STAR).astype(jnp.int32)}


@pytest.fixture(scope="module")
def plain():
    return fa.simulate(P, **KW)


@pytest.fixture(scope="module")
def with_metrics():
    return fa.simulate(P, metrics=METRICS, **KW)


def test_metric_is_the_function_of_the_recorded_iterates(with_metrics):
    x = with_metrics.x[..., 0]  # (trials, records)
    assert with_metrics.metrics["dist_sq"].shape == (6, 4)
    np.testing.assert_allclose(with_metrics.metrics["dist_sq"], (x - X_STAR) ** 2, rtol=1e-14)
    np.testing.assert_array_equal(with_metrics.metrics["above"], (x > X_STAR).astype(float))
    assert with_metrics.metrics["dist_sq"][:, 0] == pytest.approx(4.0)  # t = 0: x0 = x* + 2
    assert with_metrics.config["metrics"] == ["dist_sq", "above"]


def test_metrics_change_no_other_number(plain, with_metrics):
    for name in ("gap", "grad_norm_sq", "x", "x_final", "diverged_at"):
        np.testing.assert_array_equal(getattr(plain, name), getattr(with_metrics, name))
    assert plain.metrics == {} and "metrics" not in plain.config


def test_summary_and_final_take_metric_names(with_metrics):
    values = with_metrics.metrics["dist_sq"]
    s = with_metrics.summary("dist_sq")
    np.testing.assert_allclose(s.mean, values.mean(axis=0))
    np.testing.assert_allclose(s.stderr, values.std(axis=0, ddof=1) / np.sqrt(6))
    assert with_metrics.final("dist_sq").mean == pytest.approx(values[:, -1].mean())
    with pytest.raises(ValueError, match="'dist_sq'"):
        with_metrics.summary("dist")


def test_gather_and_float32(with_metrics):
    g = fa.simulate(P, metrics=METRICS, **dict(KW, mode="gather"))
    np.testing.assert_array_equal(g.metrics["dist_sq"], with_metrics.metrics["dist_sq"])
    f32 = fa.simulate(P, metrics=METRICS, **dict(KW, dtype="float32"))
    assert f32.metrics["dist_sq"].dtype == np.float32
    np.testing.assert_allclose(f32.metrics["dist_sq"], (f32.x[..., 0] - np.float32(X_STAR)) ** 2,
                               rtol=1e-5, atol=1e-6)


def test_labelled_and_file_round_trips(with_metrics, tmp_path):
    df = with_metrics.to_dataframe()
    assert list(df.columns) == ["trial", "round", "gap", "grad_norm_sq", "dist_sq", "above",
                                "diverged"]
    np.testing.assert_array_equal(df["dist_sq"].to_numpy(),
                                  with_metrics.metrics["dist_sq"].reshape(-1))
    summary = with_metrics.to_dataframe(summary=True)
    assert set(summary["quantity"]) == {"gap", "grad_norm_sq", "dist_sq", "above"}
    assert with_metrics.to_xarray()["dist_sq"].dims == ("trial", "round")
    path = with_metrics.save(tmp_path / "r.nc")
    back = fa.load(path)
    assert back.equals(with_metrics) and list(back.metrics) == ["dist_sq", "above"]
    other = fa.simulate(P, metrics={"dist_sq": METRICS["dist_sq"]}, **KW)
    assert not other.equals(with_metrics)


def test_sweep_points_and_trial_shares(with_metrics, tmp_path):
    kw = {k: v for k, v in KW.items() if k != "stepsize"}
    sw = fa.sweep(P, grid={"stepsize": [0.02, 0.05]}, metrics=METRICS, **kw)
    assert sw.metrics["dist_sq"].shape == (2, 6, 4)
    np.testing.assert_array_equal(sw.point(stepsize=0.05).metrics["dist_sq"],
                                  with_metrics.metrics["dist_sq"])
    assert fa.load(sw.save(tmp_path / "s.nc")).equals(sw)
    a = fa.simulate(P, metrics=METRICS, **dict(KW, trials=2))
    b = fa.simulate(P, metrics=METRICS, first_trial=2, **dict(KW, trials=4))
    whole = fa.SimResult.concatenate([a, b])
    np.testing.assert_array_equal(whole.metrics["dist_sq"], with_metrics.metrics["dist_sq"])


def test_checkpoint_resumes_and_knows_the_metrics(with_metrics, tmp_path):
    path = os.fspath(tmp_path / "c.npz")
    first = fa.simulate(P, metrics=METRICS, checkpoint=path, **KW)
    assert first.equals(with_metrics)
    with pytest.raises(ValueError, match="metrics"):
        fa.simulate(P, metrics={"dist_sq": METRICS["dist_sq"]}, checkpoint=path, **KW)


def learning_problem():
    rng = np.random.default_rng(0)
    X = [rng.normal(size=(12, 3)) for _ in range(3)]
    y = [(x @ np.array([1.0, -1.0, 0.5]) > 0).astype(int) for x in X]
    return fa.problems.logistic_regression(X, y, l2=0.1), rng


def test_held_out_metrics_equal_evaluate_and_compile_once():
    p, rng = learning_problem()
    kw = dict(local_steps=2, stepsize=0.2, rounds=10, x0=np.zeros(p.dim), trials=3,
              key=jax.random.key(1), record_every=5, num_sampled=2)
    Xt, yt = rng.normal(size=(40, 3)), rng.integers(0, 2, size=40)
    res = fa.simulate(p, metrics=fa.problems.held_out_metrics(p, Xt, yt), **kw)
    ev = fa.problems.evaluate(p, res.x, Xt, yt)
    np.testing.assert_array_equal(res.metrics["test_accuracy"], ev.accuracy)
    np.testing.assert_allclose(res.metrics["test_loss"], ev.loss, rtol=1e-13)
    other = (rng.normal(size=(40, 3)), rng.integers(0, 2, size=40))
    with count_backend_compilations() as events:
        again = fa.simulate(p, metrics=fa.problems.held_out_metrics(p, *other), **kw)
    assert not events, "a new test set of the same shapes recompiled the run"
    np.testing.assert_array_equal(again.metrics["test_accuracy"],
                                  fa.problems.evaluate(p, again.x, *other).accuracy)


@pytest.mark.parametrize("metrics, message", [
    ({"gap": lambda x: x[0]}, "'gap' is taken"),
    ({"not a name": lambda x: x[0]}, "identifier"),
    ({"a": 3}, r"metrics\['a'\] must be a function"),
    ({"a": lambda x: x}, r"metrics\['a'\] must return one real number .* shape \(1,\)"),
    ({"a": lambda x: x.missing}, r"metrics\['a'\] fails on x of shape \(1,\): AttributeError"),
    ([lambda x: x[0]], "metrics must be a dict"),
])
def test_bad_metrics_are_refused(metrics, message):
    with pytest.raises(ValueError, match=message):
        fa.simulate(P, metrics=metrics, **KW)


def test_held_out_metrics_checks_its_data():
    p, _ = learning_problem()
    with pytest.raises(ValueError, match="must match"):
        fa.problems.held_out_metrics(p, np.zeros((4, 3)), np.zeros(5, int))
    with pytest.raises(ValueError, match="integers"):
        fa.problems.held_out_metrics(p, np.zeros((4, 3)), np.zeros(4))


# --------------------------------------- metrics named like a result field or a grid axis


@pytest.fixture(scope="module")
def problem():
    return small_problem()


@pytest.mark.parametrize("name", ["diverged", "gap", "grad_norm_sq", "x", "trial", "round"])
def test_metric_named_like_a_result_field_is_refused(problem, name):
    with pytest.raises(ValueError, match=rf"metric name '{name}' is taken; not one of gap, "
                                         r"grad_norm_sq, x, x_final, diverged_at, diverged"):
        small_run(problem, metrics={name: jnp.sum})


@pytest.mark.parametrize("name, axis", [("stepsize", "stepsize"),
                                        ("algorithm_mu", "algorithm.mu")])
def test_metric_named_like_a_sweep_axis_is_refused(problem, name, axis):
    with pytest.raises(ValueError, match=rf"metric name '{name}' is taken by a grid axis of the "
                                         rf"sweep; not one of .*, {axis}"):
        fa.sweep(problem, grid={axis: [0.05, 0.1] if axis == "stepsize" else [0.0, 0.1]},
                 metrics={name: jnp.sum}, num_sampled=2, x0=problem.x_star + 2.0,
                 **({"stepsize": 0.05, "algorithm": fa.algorithms.FedProx(0.0)}
                    if axis != "stepsize" else {}), **KW6)


def test_sweep_with_a_free_metric_name_saves(problem, tmp_path):
    sw = fa.sweep(problem, grid={"stepsize": [0.05, 0.1]}, metrics={"total": jnp.sum},
                  num_sampled=2, x0=problem.x_star + 2.0, **KW6)
    assert list(sw.to_dataframe().columns) == ["stepsize", "trial", "round", "gap",
                                               "grad_norm_sq", "total", "diverged"]
    assert fa.load(sw.save(tmp_path / "s.nc")).equals(sw)
