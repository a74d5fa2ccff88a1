"""SimResult.with_metrics and SimResult.plot: the curves drawn are the summaries' numbers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import pytest

import fedjax_abc as fa

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def result():
    p = fa.problems.quadratics(jax.random.key(0), n=6, d=3)
    return fa.simulate(p, num_sampled=2, local_steps=2, stepsize=0.1, rounds=6, trials=5,
                       key=jax.random.key(1), x0=jnp.ones(3), record_every=2,
                       transform=fa.transforms.QSGD(2))


def test_with_metrics_broadcasts_per_record_values_and_refuses_bad_ones(result):
    r = result.with_metrics(half=result.rounds / 2, per_trial=np.arange(20.0).reshape(5, 4))
    np.testing.assert_array_equal(r.metrics["half"], np.tile([0.0, 1.0, 2.0, 3.0], (5, 1)))
    assert r.final("per_trial").mean == pytest.approx(np.mean([3, 7, 11, 15, 19]))
    assert "half" not in result.metrics  # a new result; the old one is as it was
    with pytest.raises(ValueError, match="already has a field or metric 'bits'"):
        result.with_metrics(bits=result.rounds)
    with pytest.raises(ValueError, match="must have shape"):
        result.with_metrics(wrong=np.zeros(3))


def test_plot_draws_the_mean_against_rounds_and_against_bits(result):
    from matplotlib.figure import Figure

    ax = Figure().subplots()
    result.plot(ax=ax, label="gap")
    result.plot("gap", x="bits", ax=ax, band=False)
    rounds_line, bits_line = ax.get_lines()
    s = result.summary("gap")
    np.testing.assert_allclose(rounds_line.get_ydata(), s.mean)
    np.testing.assert_array_equal(rounds_line.get_xdata(), result.rounds)
    np.testing.assert_allclose(bits_line.get_xdata(), result.metrics["bits"].mean(0))
    assert len(ax.collections) == 1  # one band, the first curve's
    assert ax.get_yscale() == "log"
    with pytest.raises(ValueError, match="must be one of"):
        result.plot("gap", x="nothing", ax=ax)


def test_an_asynchronous_run_is_plotted_against_server_steps():
    from matplotlib.figure import Figure

    p = fa.problems.quadratics(jax.random.key(0), n=6, d=2)
    out = fa.timing.simulate_async(p, fa.timing.FedBuff(2),
                                   fa.timing.Clock(fa.timing.Exponential(1.0)), concurrency=3,
                                   local_steps=2, stepsize=0.1, steps=6, trials=2,
                                   key=jax.random.key(1), x0=jnp.ones(2))
    assert out.plot(ax=Figure().subplots()).get_xlabel() == "server step t"
    sync = fa.simulate(p, num_sampled=2, local_steps=2, stepsize=0.1, rounds=4,
                       key=jax.random.key(1), x0=jnp.ones(2))
    assert sync.plot(ax=Figure().subplots()).get_xlabel() == "communication round t"
