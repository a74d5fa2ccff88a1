"""f_i*, f* and x* of l2-regularised softmax and logistic regression against SciPy.

The independent solver is ``scipy.optimize.minimize(method="trust-exact")`` on a NumPy loss,
gradient and Hessian written here from the formulas (not the package's code); the package's
batched float64 Newton solver must agree with it to 1e-8 relative, for every client and for
the global objective, with uniform and sample weighting. sigma_f* is eq. (11) of those.
"""

import numpy as np
import pytest
from scipy import optimize

import fedjax_abc as fa


def _data(seed, n=3, p=2, K=3):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(5, 15, n)
    X = [rng.normal(0.5 * i, 1.0, (m, p)) for i, m in enumerate(sizes)]
    y = [rng.integers(0, K, m) for m in sizes]
    return X, y


def _softmax_objective(Xs, ys, coefs, r, K):
    """F(x) = sum_i c_i sum_j CE_ij(x) + (r/2)||x||^2 with value, gradient and Hessian."""
    Xt = [np.concatenate([X, np.ones((len(X), 1))], axis=1) for X in Xs]
    q = Xt[0].shape[1]

    def parts(x):
        Th = x.reshape(q, K)
        f, g, H = 0.5 * r * x @ x, r * x, r * np.eye(x.size)
        for X, y, c in zip(Xt, ys, coefs):
            z = X @ Th
            zmax = z.max(1, keepdims=True)
            lse = (zmax + np.log(np.exp(z - zmax).sum(1, keepdims=True)))[:, 0]
            P = np.exp(z - lse[:, None])
            f += c * np.sum(lse - z[np.arange(len(y)), y])
            g += c * (X.T @ (P - np.eye(K)[y])).ravel()
            for xj, pj in zip(X, P):
                H += c * np.kron(np.outer(xj, xj), np.diag(pj) - np.outer(pj, pj))
        return f, g, H

    return parts


def _logistic_objective(Xs, ys, coefs, r):
    Xt = [np.concatenate([X, np.ones((len(X), 1))], axis=1) for X in Xs]

    def parts(x):
        f, g, H = 0.5 * r * x @ x, r * x, r * np.eye(x.size)
        for X, y, c in zip(Xt, ys, coefs):
            z = X @ x
            s = 1.0 / (1.0 + np.exp(-z))
            f += c * np.sum(np.logaddexp(0.0, z) - y * z)
            g += c * X.T @ (s - y)
            H += c * (X.T * (s * (1 - s))) @ X
        return f, g, H

    return parts


def _scipy_min(parts, d):
    res = optimize.minimize(lambda x: parts(x)[0], np.zeros(d), jac=lambda x: parts(x)[1],
                            hess=lambda x: parts(x)[2], method="trust-exact",
                            options={"gtol": 1e-13, "maxiter": 1000})
    return res.x, res.fun


@pytest.mark.parametrize("model", ["softmax", "logistic"])
@pytest.mark.parametrize("weighting", ["uniform", "samples"])
def test_newton_agrees_with_scipy(model, weighting):
    l2, K = 0.03, 3
    X, y = _data(1)
    if model == "logistic":
        y = [(a > 0).astype(int) for a in y]
        problem = fa.problems.logistic_regression(X, y, l2=l2, weighting=weighting)
    else:
        problem = fa.problems.softmax_regression(X, y, l2=l2, weighting=weighting, num_classes=K)
    n, sizes = len(X), np.array([len(a) for a in y])
    w = np.ones(n) if weighting == "uniform" else n * sizes / sizes.sum()

    def objective(Xs, ys, coefs, r):
        return (_softmax_objective(Xs, ys, coefs, r, K) if model == "softmax"
                else _logistic_objective(Xs, ys, coefs, r))

    for i in range(n):
        x_i, f_i = _scipy_min(objective([X[i]], [y[i]], [w[i] / sizes[i]], w[i] * l2),
                              problem.dim)
        assert abs(float(problem.local_minima[i]) - f_i) <= 1e-8 * abs(f_i), (i, f_i)
    x_s, f_s = _scipy_min(objective(X, y, w / (n * sizes), l2 * w.mean()), problem.dim)
    assert abs(float(problem.f_star) - f_s) <= 1e-8 * abs(f_s)
    assert np.linalg.norm(np.asarray(problem.x_star) - x_s) <= 1e-8 * np.linalg.norm(x_s)
    # the package's f is the weighted mean loss: f = sum_i (m_i/m) F_i for "samples"
    assert np.isclose(float(problem.value(x_s)), f_s, rtol=1e-12)
    assert np.isclose(fa.theory.sigma_f_star(problem),
                      f_s - np.mean(np.asarray(problem.local_minima)), rtol=1e-12)
    assert problem.certified


@pytest.mark.slow  # 7-25 s: with the long checks, for the default run's 10 minutes
def test_samples_weighting_is_the_pooled_mean_loss():
    X, y = _data(2)
    uni = fa.problems.softmax_regression(X, y, l2=0.03, num_classes=3)
    smp = fa.problems.softmax_regression(X, y, l2=0.03, num_classes=3, weighting="samples")
    pooled = fa.problems.softmax_regression([np.concatenate(X)], [np.concatenate(y)], l2=0.03,
                                            num_classes=3)
    x = np.linspace(-1, 1, uni.dim)
    assert np.isclose(float(smp.value(x)), float(pooled.value(x)), rtol=1e-12)
    assert not np.isclose(float(uni.value(x)), float(pooled.value(x)), rtol=1e-6)
    assert np.isclose(float(smp.f_star), float(pooled.f_star), rtol=1e-10)
