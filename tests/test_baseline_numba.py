"""The Numba baseline (``benchmarks/baselines/numba_impl.py``) against ``fedjax_abc.simulate``.

- In distribution, on problem (27) with the package's sign oracle: over 4000 trials the
  mean of x_T and the mean and variance of the final gap f(x_T) - f* lie within 4 standard
  errors of the package's, for the "sampled" and the "all" kernel in float64, and for the
  "sampled" kernel in float32.
- Path by path: the two kernels draw the same random words, so with one seed they give the
  same x_T (up to the order of the S-term average); S = n averages every client.

Numba is an optional dependency (the ``bench`` extra): without it these tests are skipped.
"""

import math
import os
import sys

import jax
import numpy as np
import pytest

pytest.importorskip("numba")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

import fedjax_abc as fa  # noqa: E402
from benchmarks.baselines import HuberOffsets  # noqa: E402
from benchmarks.baselines.numba_impl import numba_all, numba_sampled  # noqa: E402

TRIALS = 4000
Z = 4.0


@pytest.fixture(scope="module")
def setting():
    p = fa.problems.huber_offsets(jax.random.key(0), n=12, d_max=20.0)
    kw = dict(num_sampled=3, local_steps=5, stepsize=1e-2, rounds=60,
              x0=np.asarray(p.x_star) + 10.0)
    res = fa.simulate(p, trials=TRIALS, key=jax.random.key(7), record_x=False, **kw)
    return p, HuberOffsets(np.asarray(p.params)), kw, res


def _stats(x, gap):
    """(mean, standard error) of x_T, of the final gap, and of the gap's variance."""
    x = np.asarray(x, dtype=np.float64)[:, 0]
    g = np.asarray(gap, dtype=np.float64)
    N = g.shape[0]
    var = g.var(ddof=1)
    m4 = np.mean((g - g.mean()) ** 4)
    return {"x_T": (x.mean(), x.std(ddof=1) / math.sqrt(N)),
            "gap mean": (g.mean(), math.sqrt(var / N)),
            "gap variance": (var, math.sqrt(max(m4 - var**2, 0.0) / N))}


@pytest.mark.parametrize("kernel,dtype,seed", [(numba_sampled, "float64", 3),
                                               (numba_all, "float64", 4),
                                               (numba_sampled, "float32", 5)],
                         ids=["sampled-float64", "all-float64", "sampled-float32"])
def test_numba_agrees_with_package_in_distribution(setting, kernel, dtype, seed):
    p, base, kw, res = setting
    gap = jax.jit(jax.vmap(p.gap))
    x = kernel(base, trials=TRIALS, seed=seed, dtype=dtype, **kw)
    assert x.shape == res.x_final.shape and x.dtype == np.dtype(dtype)
    assert np.all(np.isfinite(x))
    ref = _stats(res.x_final, res.gap[:, -1])
    got = _stats(x, gap(x.astype(np.float64)))
    # the run must move: x_T differs from x_0 by many standard errors
    assert abs(ref["x_T"][0] - kw["x0"][0]) > 10 * ref["x_T"][1]
    for stat, ((m1, s1), (m2, s2)) in ((k, (ref[k], got[k])) for k in ref):
        z = (m1 - m2) / math.sqrt(s1**2 + s2**2)
        assert abs(z) < Z, f"{stat}: package {m1:.6g} vs numba {m2:.6g}, z = {z:.2f}"


def test_kernels_share_their_random_words(setting):
    _, base, kw, _ = setting
    kw = dict(kw, rounds=20)
    a = numba_sampled(base, trials=300, seed=5, **kw)
    b = numba_all(base, trials=300, seed=5, **kw)
    np.testing.assert_allclose(a, b, rtol=1e-12)
    assert not np.allclose(a, numba_sampled(base, trials=300, seed=6, **kw))
    # S = n: every client is averaged, and both kernels agree
    full = dict(kw, num_sampled=base.num_clients)
    np.testing.assert_allclose(numba_sampled(base, trials=50, seed=1, **full),
                               numba_all(base, trials=50, seed=1, **full), rtol=1e-12)
    # a trial's result does not depend on the block it runs in
    np.testing.assert_array_equal(numba_sampled(base, trials=300, seed=5, block=7, **kw), a)


def test_numba_checks_its_input(setting):
    _, base, kw, _ = setting
    with pytest.raises(ValueError, match="num_sampled"):
        numba_sampled(base, trials=2, **dict(kw, num_sampled=13))
    with pytest.raises(ValueError, match="dtype"):
        numba_all(base, trials=2, dtype="int32", **kw)


def test_runner_runs_a_pinned_numba_case():
    from benchmarks import run
    from benchmarks.workloads import _case

    case = _case("table2", "numba_all", "all", "float32", "huber27", 40, 4, 10, 20, 100, cores=1)
    row = run.run_case(dict(case, repeat=1), timeout=300)
    assert "error" not in row, row.get("error")
    assert row["cpus_pinned"] == row["cpus_pinned"][:1] and len(row["cpus_pinned"]) == 1
    assert row["finite"] and row["compile_s"] > 0 and row["run_s"] > 0
    assert row["cores_used"] < 1.5
