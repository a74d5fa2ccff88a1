"""FedAvg on a learning problem with the mini-batch oracle against an independent NumPy run.

The package's run (``MinibatchOracle`` drawing rows from counter-based words, Floyd's
algorithm) and ``reference_numpy.fedavg`` on ``reference_numpy.LogisticData`` (rows as the
b smallest of m_i uniforms, the loss and gradient written from the formulas) are fed the
same data and agree in distribution: the final gap f(x_T) - f* and ||grad f(x_T)||^2 have
means and variances within 4 standard errors, with uniform and with sample weighting.
"""

import jax
import numpy as np
import pytest

import fedjax_abc as fa
from tests import reference_numpy as ref

TRIALS = 400


def _data(seed=0, n=5, p=3):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(8, 21, n)
    X = [rng.normal(i * 0.3, 1.0, (m, p)) for i, m in enumerate(sizes)]
    y = [(x @ np.array([1.0, -1.0, 0.5]) + rng.normal(0, 1, len(x)) > 0.2 * i).astype(int)
         for i, x in enumerate(X)]
    return X, y


@pytest.mark.parametrize("weighting", [pytest.param("uniform", marks=pytest.mark.slow), "samples"])
def test_fedavg_minibatch_matches_numpy_reference(weighting):
    X, y = _data()
    problem = fa.problems.logistic_regression(X, y, l2=0.1, weighting=weighting,
                                              oracle=fa.MinibatchOracle(4))
    base = ref.LogisticData(X, y, l2=0.1, batch=4, weighting=weighting)
    # the two objectives are the same function: f and grad f agree at a point
    x = np.linspace(-1.0, 1.0, problem.dim)
    assert np.isclose(float(problem.value(x)), base.f(x), rtol=1e-12)
    assert np.allclose(np.asarray(problem.grad(x)), base.grad_f(x), rtol=1e-10, atol=1e-14)
    kw = dict(local_steps=3, stepsize=0.3, rounds=20, x0=np.ones(problem.dim))
    res = fa.simulate(problem, num_sampled=2, trials=TRIALS, key=jax.random.key(3),
                      record_every=20, **kw)
    x_ref = ref.fedavg(base, kw["x0"], S=2, Q=3, stepsizes=np.full(20, 0.3), trials=TRIALS,
                       rng=np.random.default_rng(5))
    gap_ref = np.array([base.f(xr) for xr in x_ref]) - float(problem.f_star)
    gns_ref = np.array([np.sum(base.grad_f(xr) ** 2) for xr in x_ref])
    assert res.gap[:, -1].mean() < 0.2 * res.gap[:, 0].mean()  # the runs moved
    ref.assert_same_distribution(res.gap[:, -1], gap_ref, what=f"gap ({weighting})")
    ref.assert_same_distribution(res.grad_norm_sq[:, -1], gns_ref, what=f"||grad f||^2 ({weighting})")

