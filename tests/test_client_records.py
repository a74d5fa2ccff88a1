"""``simulate(..., record_clients=True)``: every client's own model and loss at every record.

Against NumPy: an algorithm without personal models records x_t for every client and
f_i(x_t), which NumPy computes from the recorded iterates. The records change nothing
else (the run's other arrays bit for bit), follow a trial whatever runs beside it, resume
from a checkpoint bit for bit, and survive saving, joining shares and sweeps.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_abc as fa


@pytest.fixture(scope="module")
def problem():
    return fa.problems.quadratics(jax.random.key(0), n=6, d=3)


def settings(p, **kw):
    base = dict(num_sampled=3, local_steps=2, stepsize=0.1, rounds=24, record_every=4,
                x0=jnp.ones(3), trials=5, key=jax.random.key(1))
    base.update(kw)
    return base


def numpy_losses(p, x):
    """f_i(x_i) for client models x (..., n, d), from the diagonal quadratics' parameters:
    f_i(x) = 1/2 sum_j a_ij (x_j - c_ij)^2, written out."""
    a, c = (np.asarray(v) for v in p.params)
    return 0.5 * np.sum(a * (x - c) ** 2, axis=-1)


def test_global_models_and_their_losses(problem):
    plain = fa.simulate(problem, **settings(problem))
    res = fa.simulate(problem, **settings(problem), record_clients=True)
    for name in ("gap", "grad_norm_sq", "x", "x_final"):
        np.testing.assert_array_equal(getattr(res, name), getattr(plain, name), err_msg=name)
    assert plain.client_x is None and plain.client_loss is None
    n, d = problem.num_clients, problem.dim
    assert res.client_x.shape == (5, 7, n, d) and res.client_loss.shape == (5, 7, n)
    np.testing.assert_array_equal(res.client_x, np.broadcast_to(res.x[:, :, None], res.client_x.shape))
    np.testing.assert_allclose(res.client_loss, numpy_losses(problem, res.client_x), rtol=1e-12)
    # their mean is f(x_t): the gap plus f*
    np.testing.assert_allclose(res.client_loss.mean(-1), res.gap + float(problem.f_star),
                               rtol=1e-12)


def test_client_states_reach_the_records(problem):
    """A personal model read from the client states (a subclass of FedAvg whose clients
    keep their last local model): each client's record is its own last local model, the
    initial point for a client never sampled, and its loss is f_i there."""

    class LastLocal(fa.algorithms.FedAvg):
        def init_client(self, x0):
            return x0

        def client_final(self, server, client, y, local, info):
            return y, y

        def personal(self, server, client, objective):
            return client

    res = fa.simulate(problem, **settings(problem, num_sampled=6), algorithm=LastLocal(),
                      record_clients=True)
    assert np.array_equal(res.client_x[:, 0], np.ones((5, 6, 3)))
    moved = res.client_x[:, -1] - res.x[:, -1][:, None]
    assert np.abs(moved).max() > 1e-3  # the local models differ from the mean
    # full participation: the server's model is the clients' mean of their local models
    np.testing.assert_allclose(res.client_x[:, -1].mean(1), res.x[:, -1], rtol=1e-12)
    np.testing.assert_allclose(res.client_loss, numpy_losses(problem, res.client_x), rtol=1e-12)


def test_a_trial_does_not_depend_on_its_neighbours_or_the_mode(problem):
    few = fa.simulate(problem, **settings(problem, trials=3), record_clients=True)
    many = fa.simulate(problem, **settings(problem, trials=11), record_clients=True,
                       pad_trials=False)
    gathered = fa.simulate(problem, **settings(problem, trials=3), record_clients=True,
                           mode="gather")
    np.testing.assert_array_equal(many.client_loss[:3], few.client_loss)
    np.testing.assert_array_equal(many.client_x[:3], few.client_x)
    np.testing.assert_allclose(gathered.client_loss, few.client_loss, rtol=1e-13)


def test_resumes_joins_saves_and_sweeps(problem, tmp_path):
    kw = settings(problem, rounds=40, record_every=2, trials=6, trial_chunk=3)
    straight = fa.simulate(problem, **kw, record_clients=True)
    calls = []

    def stop(done, total, secs):
        calls.append(done)
        if len(calls) == 3:
            raise KeyboardInterrupt

    path = tmp_path / "run.npz"
    with pytest.raises(KeyboardInterrupt):
        fa.simulate(problem, **kw, record_clients=True, checkpoint=path, progress=stop)
    resumed = fa.simulate(problem, **kw, record_clients=True, checkpoint=path)
    assert resumed.equals(straight)
    # a checkpoint of the run without client records is another run's
    with pytest.raises(ValueError, match="record_clients"):
        fa.simulate(problem, **kw, checkpoint=path)

    first = fa.simulate(problem, **dict(kw, trials=2), record_clients=True)
    second = fa.simulate(problem, **dict(kw, trials=4), record_clients=True, first_trial=2)
    joined = fa.SimResult.concatenate([first, second])
    np.testing.assert_array_equal(joined.client_loss, straight.client_loss)

    saved = fa.load(straight.save(tmp_path / "res.nc"))
    assert saved.equals(straight)

    sim = fa.Simulation(problem, num_sampled=3, local_steps=2, rounds=8, record_every=4,
                        algorithm=fa.algorithms.FedProx(0.1), record_clients=True)
    grid = fa.sweep(sim, grid={"algorithm.mu": [0.0, 0.5]}, key=jax.random.key(1),
                    x0=jnp.ones(3), stepsize=0.1, trials=2)
    assert grid.client_loss.shape == (2, 2, 3, 6)
    alone = fa.simulate(problem, **settings(problem, rounds=8, trials=2),
                        algorithm=fa.algorithms.FedProx(0.5), record_clients=True)
    np.testing.assert_array_equal(grid.client_loss[1], alone.client_loss)
    assert "client_loss" in grid.to_xarray()


def test_bad_flag_and_memory(problem):
    with pytest.raises(ValueError, match="record_clients"):
        fa.simulate(problem, **settings(problem), record_clients="yes")
    big = fa.problems.quadratics(jax.random.key(0), n=2000, d=2000)
    with pytest.raises(ValueError, match="memory"):
        fa.simulate(big, **settings(big, x0=jnp.ones(2000), rounds=10_000, record_every=1,
                                    trials=100), record_x=False, record_clients=True)
