# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Federated algorithms as values: FedAvg, FedProx, SCAFFOLD and FedAdam on problem (27)
#
# `fa.simulate(problem, ..., algorithm=...)` takes the federated algorithm as a value:
# `FedAvg(server_stepsize)`, `FedProx(mu)`, `Scaffold(server_stepsize)`,
# `FedOpt(optax_optimizer)`, the others of `fa.algorithms` (FedNova, FedDyn, FedExP,
# MIME, MimeLite, Scaffnew), or your own subclass of `fa.algorithms.AbstractAlgorithm`.
# This notebook runs five of them on problem (27) of the paper (Section IV-B, the
# paper's offsets) with the module behind `fedjax-abc compare --fixed`, at reduced scale, and
# then the setting where they differ most clearly: exact gradients and full
# participation, where FedAvg's fixed point can be biased by client drift and
# SCAFFOLD's [11] cannot.
#
# Statements about this run's results are printed by the code from its numbers; the
# text only says what each check compares.
#
# *This notebook is kept as the plain Python file of the same name (jupytext py:percent), paired with this executed copy; edit the `.py` file and rerun it (see `notebooks/README.md`).*

# %%
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import fedjax_abc as fa

jax.config.update("jax_enable_x64", True)  # float64, as the paper's comparisons need
fa.use_cpu_cores()  # one CPU device per core, over which the trials are sharded

# %matplotlib inline
plt.rcParams.update({"figure.dpi": 80, "axes.grid": True, "grid.alpha": 0.3, "font.size": 9})
np.set_printoptions(precision=4)
print("fedjax_abc", fa.__version__, "| jax", jax.__version__, "| backend", jax.default_backend(),
      "| float64:", jax.config.jax_enable_x64)

from fedjax_abc.repro import common, compare, offsets, paper
Z95 = 1.959963984540054

# %% [markdown]
# ## 1. Five algorithms, one interface
#
# An algorithm is an `equinox.Module` with six pure functions: `init` (server state),
# `init_client` (a client's state, `()` when stateless), `client_init` (its local state
# at the start of a round), `local_step` (one local step, given the oracle's gradient),
# `client_final` (the message and new client state) and `server_update` (the step from
# the mean of the sampled clients' messages); the engine runs the loops. Hyperparameters are array leaves of the module, so a new value runs the
# compiled program again instead of compiling a new one (the optax optimizer of
# `FedOpt` is static: one object, one program).
#
# The comparison's settings are `paper.COMPARE`: problem (27) with $n = 40$, $Q = 10$
# and $x_0 = x^\star + 10$ as in Section IV-B, $\alpha = 10^{-3}$, and
# - FedAvg (Algorithm 1), and FedAvg with server stepsize $\eta_g = 2$ [10];
# - FedProx with $\mu = 1 = L$ (the largest value of Li et al.'s grid);
# - SCAFFOLD (option II of [11]);
# - FedAdam, `FedOpt(optax.adam(lr))` with $\mathrm{lr} = \alpha Q$, the most FedAvg
#   moves in one round, since every $|f_i'| \le 1$.
#
# `compare`'s docstring and the `why` entry of its output give the reasons for each value.

# %%
P = paper.COMPARE
algs = compare.algorithms(P["alpha"], P["Q"], P["eta_g"], P["mu"])
for name, (label, alg) in algs.items():
    leaves = [float(v) for v in jax.tree_util.tree_leaves(alg)]
    print(f"{label:20s} {type(alg).__name__:9s} array leaves: {leaves}")
print({k: P[k] for k in ("n", "d_max", "S", "Q", "alpha", "x0_offset", "T", "R")})

# %% [markdown]
# Three values of FedProx's $\mu$ in a row: the first call compiles, the next two run
# the same program with a different leaf (the times include the run itself).

# %%
problem20 = fa.problems.huber_offsets(offsets=offsets.paper_offsets(20.0, P["n"]))
kw = dict(num_sampled=4, local_steps=P["Q"], stepsize=P["alpha"], rounds=2000,
          x0=problem20.x_star + P["x0_offset"], trials=32, key=jax.random.key(0),
          mode="gather", record_x=False)
for mu in (1.0, 0.1, 10.0):
    start = time.perf_counter()
    r = fa.simulate(problem20, algorithm=fa.algorithms.FedProx(mu=mu), **kw)
    print(f"FedProx(mu={mu:g}): {time.perf_counter() - start:5.2f} s, "
          f"f(x_T) - f* = {r.final('gap').mean:.3e} +- {r.final('gap').stderr:.1e}")

# %% [markdown]
# ## 2. The comparison at reduced scale
#
# `compare.run` runs every algorithm for $D_{\max} \in \{20, 200\}$ and
# $S \in \{4, 40\}$ ($S = n$: full participation) and records $f(x_t) - f^\star$ and
# $\|\nabla f(x_t)\|^2$ with 95% bands (mean $\pm$ 1.96 standard errors over trials).
# Here 32 trials and $T = 30000$ rounds; `fedjax-abc compare --fixed` runs 200 trials and
# $T = 50000$. At a given $(D_{\max}, S)$ every algorithm gets the same key, so trial
# $r$ of each sees the same sampled clients and oracle signs: $z$ is the mean of the
# paired differences from FedAvg over their standard error. The drift part (section 3)
# uses the reduced lists `paper.DRIFT_QUICK`.

# %%
start = time.perf_counter()
doc = compare.run(common.Settings(trials=32, rounds=30_000, quick=True))
print(f"{len(doc['table'])} stochastic runs and the exact-gradient sweeps in "
      f"{time.perf_counter() - start:.0f} s")
print(compare.table_text(doc))

# %%
display(compare.figure(doc))

# %% [markdown]
# What to look for, and the checks below: a server stepsize $\eta_g = 2$ doubles the
# mean step, so it should reach the neighbourhood of $x^\star$ in about half the rounds
# and fluctuate more once there. FedAdam divides its step by the pseudo-gradient's
# running size, so its speed depends on the signal against the noise rather than on
# $|f'|$: at $D_{\max} = 200$ the signal $|f'(x_0)| = 0.05$ is small, and the noise of
# $S = 4$ clients is larger than that of $S = 40$. FedProx's pull
# shortens each local run by about $\mu \alpha Q / 2$. SCAFFOLD's control variates
# remove the spread of the clients' gradients (the client-sampling error of Lemma 3)
# but carry the oracle noise of each client's last visit, whose variance
# $f_i(x) - f_i^\star$ grows with $D_{\max}$.

# %%
rows = {(r["d_max"], r["S"], r["algorithm"]): r for r in doc["table"]}
cases = [(d, S) for d in P["d_max"] for S in P["S"]]


def reach(d, S, name):
    return rows[d, S, name]["rounds_to_target"]


def z(d, S, name):
    return rows[d, S, name]["gap_vs_fedavg"]["z"]


def rel(d, S, name):
    return rows[d, S, name]["gap_vs_fedavg"]["relative"]


print(f"rounds to {compare.TARGET:g} x the initial gap (None: not within T):")
for d, S in cases:
    print(f"  Dmax = {d:3g}, S = {S:2d}: " + "; ".join(
        f"{algs[n][0]}: {reach(d, S, n)}" for n in compare.ORDER))
for name in ("fedavg_eta", "fedadam"):
    sooner = sum(reach(d, S, name) is not None and (reach(d, S, "fedavg") is None
                 or reach(d, S, name) < reach(d, S, "fedavg")) for d, S in cases)
    higher = sum(z(d, S, name) > Z95 for d, S in cases)
    lower = sum(z(d, S, name) < -Z95 for d, S in cases)
    print(f"{algs[name][0]}: reaches the target before FedAvg in {sooner} of {len(cases)} "
          f"settings; final gap significantly higher in {higher}, lower in {lower}")
prox = max(abs(rel(d, S, "fedprox")) for d, S in cases)
print(f"FedProx: largest relative difference of the final gap from FedAvg "
      f"{100 * prox:.2g}% (mu alpha Q / 2 = {100 * P['mu'] * P['alpha'] * P['Q'] / 2:.2g}%)")
print("SCAFFOLD against FedAvg: " + "; ".join(
    f"Dmax = {d:g}, S = {S}: {100 * rel(d, S, 'scaffold'):+.2g}% (z = {z(d, S, 'scaffold'):+.1f})"
    for d, S in cases))
print()
for line in doc["verdicts"]["stochastic"][-1:]:
    print(line)

# %% [markdown]
# ## 3. Client drift with exact gradients
#
# With `oracle=fa.ExactOracle()` and full participation the runs are deterministic, and
# what is left is the algorithm itself. $Q = 1$ is gradient descent, whose fixed point
# is $x^\star$. For $Q > 1$ FedAvg's fixed point is $x^\star$ only if the clients'
# local runs from $x^\star$ cancel on average. On problem (27) a client outside its
# quadratic zone $|x - d_i| < 1$ moves by exactly $\alpha$ per step, as gradient descent
# would, so the runs cancel unless such a client enters its zone within the $Q - 1$
# steps whose gradients are used: $\alpha (Q - 1) >$ clearance, the distance from
# $x^\star$ to the nearest such zone. The clearance grows with the offsets' spread.
# SCAFFOLD's control variates converge to the local gradients at $x^\star$ and cancel
# the drift. One run of each by hand, $D_{\max} = 20$, $Q = 10$, $\alpha Q = 1$:

# %%
x_star = float(problem20.x_star[0])
for alg in (fa.algorithms.FedAvg(), fa.algorithms.Scaffold()):
    r = fa.simulate(problem20, local_steps=10, stepsize=0.1, rounds=3000,
                    x0=problem20.x_star + 10.0, trials=1, key=jax.random.key(0),
                    oracle=fa.ExactOracle(), algorithm=alg, record_every=3000)
    print(f"{type(alg).__name__:9s} x_T - x* = {float(r.x_final[0, 0]) - x_star:+.3e}, "
          f"||grad f(x_T)||^2 = {float(r.grad_norm_sq[0, -1]):.2e}")

# %% [markdown]
# The sweeps of `compare.run`: $Q$ at fixed $\alpha Q$, and $\alpha Q$ at fixed $Q = 10$,
# for both $D_{\max}$, each run checked for convergence (the iterate still over the last
# 10% of rounds) and compared with the rule above.

# %%
for line in doc["verdicts"]["drift"]:
    print(line)
display(compare.drift_figure(doc))

# %% [markdown]
# ## A fair comparison: each algorithm at its own best stepsize and hyperparameters
#
# The runs above give every algorithm the same stepsize. `fa.tune` instead picks each
# one's stepsize and hyperparameters (FedProx's mu, FedDyn's a, FedExP's eps, MIME's and
# MimeLite's beta, the server learning rates of FedAvgM, FedAdam, FedYogi and FedAdagrad)
# from a grid on tuning keys (one sweep per algorithm; the lowest mean final gap, a
# diverged trial rules a point out) and reports every algorithm on one fresh key, with 95% intervals and
# paired differences against FedAvg. Here thirteen algorithms on problem (27) at reduced
# scale ($T = 1000$, 8 trials: `tuned.run`, the module behind `fedjax-abc compare`; the
# grids are in its `HYPERPARAMETERS` and `SERVER_LRS`). Scaffnew runs Geometric(1/Q)
# local iterations, Q on average, with every client in every round (its analysis assumes
# full participation). With equal local steps FedNova is FedAvg to rounding; a pick at an
# end of a grid axis is flagged. With 8 trials the intervals are wide: this table shows
# the procedure; `docs/comparisons.md` holds the full-scale table ($T = 5000$, 32 trials).
#
# Compilation sets this cell's time. An optax optimizer is static, so each server learning
# rate of FedAvgM, FedAdam, FedYogi and FedAdagrad is a program of its own (15 programs,
# against one grid program for each of the other nine algorithms), and each of the 13
# evaluation runs is one more. `fedjax-abc compare` runs the same thirteen on softmax
# regression over Synthetic(1, 1) as well (`tuned.run`'s second problem, with as many
# programs again); its full-scale table is in `docs/comparisons.md` too.

# %%
from fedjax_abc.repro import tuned

tuned_doc = tuned.run(common.Settings(quick=True), problems=["huber"])
print(tuned.summary_text(tuned_doc))

# %% [markdown]
# ## Full scale
#
# ```bash
# fedjax-abc compare --out results           # the tuned tables (docs/comparisons.md)
# fedjax-abc compare --fixed --out results   # 200 trials, T = 50000, the full drift sweeps
# fedjax-abc compare --fixed --quick --out results
# ```
#
# The first writes `tuned.json` and `tuned.csv`; `--fixed` writes `compare.json` (every
# number and the configuration), `compare.csv` (the table), `compare.png` and
# `compare_drift.png`, and prints the table and the verdicts.
