"""A learning problem's f_i*, f*, x* computed when first asked for, and runs that need none.

Building the problem and training on it solve nothing; the run records f(x_t) and forms the
gap f(x_t) - f* when it is read, the same subtraction, bit for bit, as a run of the same
problem with its minima computed first (``Problem.solved``), in float64 and float32. An
oracle whose steps read f_i* makes the run compute them first, found from its traced program.
"""

import dataclasses
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa
from fedjax_abc._problems._checks import reads_local_minima
from fedjax_abc._problems._minima import Solver
from fedjax_abc._problems._solve import solve_clients_and_global


def _data(n=6, p=3, K=3, seed=0):
    rng = np.random.default_rng(seed)
    X = [rng.normal(size=(int(m), p)) for m in rng.integers(6, 12, n)]
    y = [rng.integers(0, K, len(x)) for x in X]
    for yi in y:
        yi[:K] = np.arange(K)  # every class present
    return X, y


def _problem(oracle=None):
    X, y = _data()
    return fa.problems.softmax_regression(X, y, l2=0.1, oracle=oracle)


RUN = dict(num_sampled=3, local_steps=2, stepsize=0.1, rounds=6, trials=3, record_every=2,
           key=jax.random.key(4))


def _x0(p):
    return np.full(p.dim, 0.1)


def test_building_and_training_solve_nothing():
    p = _problem()
    assert p.minima.deferred and not p.minima.solver.done
    assert p.dim == 12 and p.num_clients == 6
    res = fa.simulate(p, x0=_x0(p), **RUN)
    assert not p.minima.solver.done  # the run recorded f(x_t) only
    assert res.metrics["loss"].shape == (3, 4) and res.trials == 3
    assert not p.minima.solver.done
    gap = res.gap  # asked for: computed now, once
    assert p.minima.solver.done
    np.testing.assert_array_equal(gap, res.metrics["loss"] - np.asarray(p.f_star))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gap_formed_on_demand_equals_a_run_with_known_minima(dtype):
    p = _problem()
    lazy = fa.simulate(p, x0=_x0(p), dtype=dtype, **RUN)
    known = p.solved()
    assert not known.minima.deferred
    eager = fa.simulate(known, x0=_x0(p), dtype=dtype, **RUN)
    assert "loss" not in eager.metrics
    np.testing.assert_array_equal(lazy.x_final, eager.x_final)
    np.testing.assert_array_equal(lazy.grad_norm_sq, eager.grad_norm_sq)
    assert lazy.gap.dtype == eager.gap.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(lazy.gap, eager.gap)
    # a wrong f* (the clients' mean minimum in its place) would show
    assert not np.array_equal(lazy.metrics["loss"] - np.asarray(jnp.mean(p.local_minima),
                                                                dtype), eager.gap)


def test_values_are_the_solver_s():
    X, y = _data()
    p = fa.problems.softmax_regression(X, y, l2=0.1)
    weights = np.ones(len(y))
    local, _, f_star, x_star, _ = solve_clients_and_global(
        p.loss.model, X, y, weights, 0.1, np.asarray(p.loss.model.init(jax.random.key(0))))
    np.testing.assert_array_equal(np.asarray(p.local_minima), local)
    assert float(p.f_star) == f_star
    np.testing.assert_array_equal(np.asarray(p.x_star), x_star)
    assert float(p.sigma_f_star) == pytest.approx(f_star - np.mean(local), rel=1e-12)
    f32 = p.astype("float32")
    assert f32.f_star.dtype == jnp.float32 and float(f32.f_star) == np.float32(f_star)


def test_theory_on_a_deferred_problem_equals_the_solved_one():
    p = _problem()
    points = np.asarray(p.x_star) + 0.5 * np.cos(np.arange(4 * p.dim)).reshape(4, p.dim)
    oracle = fa.GaussianOracle(1.0, 0.1)  # its variance reads f_i*
    a = fa.theory.abc_constants(_problem(), oracle, domain=points)
    b = fa.theory.abc_constants(p.solved(), oracle, domain=points)
    assert (a.C, a.D) == (b.C, b.D)
    assert fa.theory.sigma_f_star(_problem()) == fa.theory.sigma_f_star(p.solved())
    # eq. (11) from the minima (another summation order: equal to rounding)
    assert fa.theory.sigma_f_star(p) == pytest.approx(
        float(p.f_star) - float(jnp.mean(p.local_minima)), rel=1e-13)


class _ReadsMinimum(fa.AbstractOracle):
    """A user's oracle whose noise grows with f_i(x) - f_i* (as the paper's oracle (26))."""

    def noise(self, key, shape, dtype):
        return jax.random.normal(key, shape, dtype)

    def gradient(self, problem, client, x, z):
        scale = jnp.sqrt(jnp.maximum(problem.local_value(client, x) - client.local_min, 0.0))
        return problem.local_grad(client, x) + scale * z


class _IgnoresMinimum(_ReadsMinimum):
    def gradient(self, problem, client, x, z):
        return problem.local_grad(client, x) + 0.1 * z


@pytest.mark.parametrize("oracle, reads", [
    (fa.ExactOracle(), False), (fa.MinibatchOracle(2), False), (_IgnoresMinimum(), False),
    (fa.GaussianOracle(1.0, 0.0), True), (_ReadsMinimum(), True)])
def test_which_oracles_read_the_clients_minima(oracle, reads):
    p = _problem()
    assert reads_local_minima(p, oracle, 2, "float64") is reads
    assert not p.minima.solver.done  # found from the traced program, nothing computed


def test_an_oracle_that_reads_f_i_star_gets_them_computed_first():
    p = _problem(oracle=_ReadsMinimum())
    res = fa.simulate(p, x0=_x0(p), **RUN)
    assert p.minima.solver.done and "loss" not in res.metrics
    eager = fa.simulate(p.solved(), x0=_x0(p), **RUN)
    np.testing.assert_array_equal(res.x_final, eager.x_final)
    np.testing.assert_array_equal(res.gap, eager.gap)
    # with zeros in place of f_i* the trajectories would differ: the check matters
    zeros = fa.Problem(p.loss, p.params, jnp.zeros(6), p.f_star, p.x_star, p.oracle,
                       grad_fn=p.grad_fn, pooled=p.pooled)
    wrong = fa.simulate(zeros, x0=_x0(p), **RUN)
    assert not np.array_equal(wrong.x_final, eager.x_final)


def test_a_sweep_of_a_deferred_problem_equals_simulate():
    p = _problem()
    kw = {k: v for k, v in RUN.items() if k != "stepsize"}
    sw = fa.sweep(p, grid={"stepsize": [0.05, 0.1]}, x0=_x0(p), **kw)
    one = fa.simulate(p, x0=_x0(p), stepsize=0.1, **kw)
    point = sw.point(stepsize=0.1)
    np.testing.assert_array_equal(point.metrics["loss"], one.metrics["loss"])
    np.testing.assert_array_equal(point.gap, one.gap)


def test_a_metric_named_loss_is_refused_for_a_deferred_problem():
    p = _problem()
    with pytest.raises(ValueError, match="metric name 'loss' is taken"):
        fa.simulate(p, x0=_x0(p), metrics={"loss": lambda x: jnp.sum(x)}, **RUN)
    fa.simulate(p.solved(), x0=_x0(p), metrics={"loss": lambda x: jnp.sum(x)}, **RUN)


def test_a_pickled_result_carries_its_gap():
    p = _problem()
    res = fa.simulate(p, x0=_x0(p), **RUN)
    before = dict(vars(res))
    back = pickle.loads(pickle.dumps(res))
    np.testing.assert_array_equal(back.gap, res.gap)
    # the copy holds the formed gap and the digests, not the problem or the components
    assert isinstance(vars(back)["gap"], np.ndarray) and isinstance(vars(back)["_digests"], dict)
    assert vars(back)["_digests"] == res._settings()
    assert {k: v is before[k] for k, v in vars(res).items()} == dict.fromkeys(before, True)


def test_reading_a_result_changes_nothing_in_it():
    p = _problem()
    res = fa.simulate(p, x0=_x0(p), **RUN)
    before = dict(vars(res))
    pending = before["gap"]
    assert type(pending).__name__ == "PendingGap" and pending.minima is p.minima  # not p
    first, second = res.gap, res.gap
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(first, res.metrics["loss"] - np.asarray(p.f_star))
    assert res._settings() == res._settings()
    assert {k: v is before[k] for k, v in vars(res).items()} == dict.fromkeys(before, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.gap = first


def test_the_solver_runs_once_and_says_when_it_is_long(capsys):
    calls = []

    def solve():
        calls.append(1)
        return np.zeros(2), 0.5, np.ones(3)

    quick = Solver(solve, "f* of two clients", flops=10.0)
    assert float(quick().f_star) == 0.5 and float(quick().f_star) == 0.5 and len(calls) == 1
    assert capsys.readouterr().err == ""
    slow = Solver(solve, "f* of two clients", flops=1e12)
    slow()
    err = capsys.readouterr().err
    assert "computing f* of two clients" in err and "computed f* of two clients in" in err


def test_a_problem_takes_its_minima_one_way():
    p = _problem().solved()
    with pytest.raises(ValueError, match="needs local_minima, f_star and x_star"):
        fa.Problem(p.loss, p.params, p.local_minima, None, p.x_star, p.oracle)
    import dataclasses

    q = dataclasses.replace(_problem(), f_star=jnp.asarray(9.0))  # the others computed
    assert float(q.f_star) == 9.0 and not q.minima.deferred
    np.testing.assert_array_equal(q.x_star, p.x_star)
