"""An MLP problem (nonconvex, x = an equinox MLP's parameters flattened) in mask mode.

The default test is small (d ~ 300). The slow one is the issue's size, d ~ 10^4 with 100
trials in mask mode with trial chunks, in a subprocess whose peak resident memory is read
back: mask mode keeps n x (trials per chunk) x d numbers per copy of the clients' models
(8 bytes each in float64), a few copies at once, plus the data.
"""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

import fedjax_abc as fa

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow  # 7-25 s: with the long checks, for the default run's 10 minutes
def test_small_mlp_runs_in_mask_mode():
    data = fa.data.load_digits(jax.random.key(0), num_clients=4, alpha=1.0)
    problem = fa.problems.mlp(jax.random.key(1), data.features, data.labels, width=4,
                              oracle=fa.MinibatchOracle(8), solver_steps=30)
    assert problem.dim == 64 * 4 + 4 + 4 * 10 + 10 and not problem.certified
    x0 = problem.loss.model.init(jax.random.key(1))
    assert float(problem.f_star) <= float(problem.value(x0))  # the best found is no worse than x0
    res = fa.simulate(problem, num_sampled=2, local_steps=5, stepsize=0.2, rounds=20, x0=x0,
                      trials=16, trial_chunk=8, key=jax.random.key(2), record_every=10)
    assert np.all(np.isfinite(res.gap)) and res.gap[:, -1].mean() < res.gap[:, 0].mean()
    ev = fa.problems.evaluate(problem, res.x_final, data.test_features, data.test_labels)
    assert ev.accuracy.mean() > 0.2


MEMORY_SCRIPT = r"""
import json, resource, sys, time
import jax, numpy as np
import fedjax_abc as fa
width, trials, chunk = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
data = fa.data.load_digits(jax.random.key(0), num_clients=10, alpha=0.5)
problem = fa.problems.mlp(jax.random.key(1), data.features, data.labels, width=width,
                          oracle=fa.MinibatchOracle(16), solver_steps=20)
x0 = problem.loss.model.init(jax.random.key(1))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter()
res = fa.simulate(problem, num_sampled=5, local_steps=5, stepsize=0.1, rounds=10, x0=x0,
                  trials=trials, trial_chunk=chunk, key=jax.random.key(2), record_every=10,
                  record_x=False, mode="mask")
print(json.dumps(dict(d=problem.dim, n=problem.num_clients, trials=trials, chunk=chunk,
                      seconds=time.perf_counter() - t, rss_before_mb=before,
                      peak_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      finite=bool(np.all(np.isfinite(res.gap))))))
"""


def measure_mlp_memory(width=150, trials=100, chunk=50):
    """Runs the MLP in a subprocess; returns its measurements (d, peak RSS in MB, ...)."""
    out = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, str(width), str(trials), str(chunk)],
                         cwd=REPO, capture_output=True, text=True, timeout=1200,
                         env=dict(os.environ, PYTHONPATH=REPO))
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_mlp_d_1e4_100_trials_mask_fits_in_memory():
    m = measure_mlp_memory()
    assert m["d"] > 9000 and m["finite"]
    state_mb = m["n"] * m["chunk"] * m["d"] * 8 / 2**20  # one copy of the clients' models
    print(f"\nMLP d={m['d']}, n={m['n']}, {m['trials']} trials in chunks of {m['chunk']}: "
          f"peak RSS {m['peak_mb']:.0f} MB (before the run {m['rss_before_mb']:.0f} MB), "
          f"one state copy {state_mb:.0f} MB, {m['seconds']:.1f} s")
    assert m["peak_mb"] < 16_000
