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
# # Participation models: who takes part, with which weight, and what it costs
#
# The paper samples S of n clients uniformly without replacement; its Lemma 3 (eq. 14)
# gives the sampling error of that choice, $\frac{I_S}{S}\Psi_t$. Real deployments sample
# otherwise: each client with its own probability (Poisson), by importance, in cycles,
# from whoever is available (a Markov chain per device, or a recorded trace), with
# dropouts and stragglers. Each is a sampler value here, and `fa.theory` gives its
# inclusion probabilities $\pi_i$, $\pi_{ij}$ and its sampling error in closed form.
# This notebook checks those closed forms against draws, shows what the availability
# chain looks like, and runs FedAvg under six models with the module behind
# `fedjax-abc compare --participation`, at reduced scale.
#
# Statements about this run's results are printed by the code from its numbers.
#
# *This notebook is kept as the plain Python file of the same name (jupytext py:percent), paired with this executed copy; edit the `.py` file and rerun it (see `notebooks/README.md`).*

# %%
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
print("fedjax_abc", fa.__version__, "| jax", jax.__version__, "| float64:",
      jax.config.jax_enable_x64)

from fedjax_abc.repro import common, participation

# %% [markdown]
# ## 1. Lemma 3 for any sampler
#
# The round's aggregate is $A = \sum_i M_i v_i$ with $M_i$ the weight client $i$ gets.
# Its error against the full mean needs only $E[M_i]$ and $E[M_i M_j]$:
# $E\|A - \bar v\|^2 = \sum_{ij} E[M_i M_j]\langle v_i, v_j\rangle - 2\sum_i E[M_i]
# \langle v_i, \bar v\rangle + \|\bar v\|^2$. For the paper's sampler this is
# $\frac{I_S}{S}\cdot\frac1n\sum_i\|v_i - \bar v\|^2$, eq. (14). Below: the sampling
# error of the clients' gradients of problem (27) at $x^\star + 1$ as the expected number
# of participants grows, for five samplers with the same expected participation.

# %%
from fedjax_abc.repro import offsets

problem = fa.problems.huber_offsets(offsets=offsets.paper_offsets(20.0, 40))
n = problem.num_clients
v = participation.local_gradients(problem, np.asarray(problem.x_star) + 1.0)
psi = np.mean(np.sum((v - v.mean(0)) ** 2, axis=1))
sizes = [1, 2, 4, 8, 16, 32, 40]
models = {
    "uniform (paper)": lambda S: fa.UniformWithoutReplacement(S),
    "with replacement": lambda S: fa.WithReplacement(S),
    "Poisson, unbiased": lambda S: fa.Poisson(np.full(n, S / n)),
    "Poisson, averaged": lambda S: fa.Poisson(np.full(n, S / n), unbiased=False),
    "Markov, S of the available": lambda S: fa.MarkovAvailability(0.2, 0.1, S),
}
fig, ax = plt.subplots(figsize=(6, 3.6))
for name, make in models.items():
    err = np.array([fa.theory.sampling_error(make(S), v).mse for S in sizes])
    ax.plot(sizes, np.where(err > 0, err, np.nan), "o-", label=name)  # 0 off the log axis
    print(f"{name:28s} S = 4: {err[2]:.4f}   S = n = 40: {err[-1]:.4f}")
ax.plot(sizes, [fa.theory.sampling_factor(n, S) / S * psi for S in sizes], "k:",
        label=r"eq. (14): $I_S \Psi / S$")
ax.set_xscale("log"); ax.set_yscale("log")
ax.set_xlabel("S (expected participants)"); ax.set_ylabel(r"$E\|A - \bar v\|^2$")
ax.legend(fontsize=7); plt.show()
same = np.allclose([fa.theory.sampling_error(fa.UniformWithoutReplacement(S), v).mse
                    for S in sizes], [fa.theory.sampling_factor(n, S) / S * psi for S in sizes])
print("the paper's sampler's closed form equals eq. (14) at every S:", same)

# %% [markdown]
# ## 2. The closed forms against draws
#
# 40000 rounds of each sampler's own draws (its `sample` with its state carried, 400
# trials of 100 rounds), the inclusion frequencies against $\pi_i$ with 4 standard errors.

# %%
def frequencies(sampler, n, trials=400, rounds=100, seed=0):
    words = jax.random.bits(jax.random.key(seed), (rounds, trials, sampler.num_words(n)),
                            jnp.uint32)
    state = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (trials,) + a.shape),
                                   sampler.init_state(n))
    def one(state, w):
        idx, wt, state = jax.vmap(sampler.sample, in_axes=(0, None, 0))(w, n, state)
        took = jax.vmap(lambda i, x: jnp.zeros(n).at[i].add(x))(idx, wt) > 0
        return state, took
    _, took = jax.lax.scan(one, state, words)
    per_trial = np.asarray(took).mean(axis=0)  # (trials, n)
    return per_trial.mean(0), per_trial.std(0, ddof=1) / np.sqrt(trials)

m = 8
checks = {"Poisson": fa.Poisson(np.linspace(0.1, 0.9, m)),
          "importance": fa.ImportanceSampler(np.arange(1.0, m + 1) / np.sum(np.arange(1.0, m + 1)), 3),
          "cyclic, groups 3+3+2": fa.Cyclic(3, 2, groups=[0, 0, 0, 1, 1, 1, 2, 2]),
          "Markov": fa.MarkovAvailability(np.linspace(0.05, 0.4, m), 0.2, 3),
          "dropout over Poisson": fa.Dropout(fa.Poisson(0.5), np.linspace(0.5, 1.0, m))}
fig, axes = plt.subplots(1, len(checks), figsize=(14, 2.8), sharey=True)
for ax, (name, s) in zip(axes, checks.items()):
    freq, se = frequencies(s, m, rounds=99 if "cyclic" in name else 100)
    pi = fa.theory.inclusion_probabilities(s, m).first
    ax.errorbar(np.arange(m), freq, 4 * se, fmt="o", ms=3, label="draws (4 s.e.)")
    ax.plot(np.arange(m), pi, "k_", ms=12, label=r"$\pi_i$")
    ax.set_title(name, fontsize=9); ax.set_xlabel("client i")
    z = np.max(np.abs(freq - pi) / np.where(se > 1e-12, se, np.inf))
    print(f"{name:22s} largest |frequency - pi_i| / s.e. = {z:.2f}")
axes[0].legend(fontsize=7); axes[0].set_ylabel("P(client takes part)"); plt.show()

# %% [markdown]
# ## 3. What availability looks like
#
# One trial of `MarkovAvailability(p_leave=0.2, p_return=0.1, S=4)` over 60 rounds: grey
# is available, black is chosen. Availability persists (a client away stays away for
# $1/p_\mathrm{return} = 10$ rounds on average), so successive rounds see the same few
# clients, which independent sampling never does.

# %%
s = fa.MarkovAvailability(0.2, 0.1, 4)
words = jax.random.bits(jax.random.key(1), (60, s.num_words(n)), jnp.uint32)
def step(state, w):
    idx, wt, state = s.sample(w, n, state)
    return state, (state["available"], jnp.zeros(n).at[idx].add(wt) > 0)
_, (avail, chosen) = jax.lax.scan(step, s.init_state(n), words)
picture = np.asarray(avail, float) * 0.4 + np.asarray(chosen, float) * 0.6
fig, ax = plt.subplots(figsize=(10, 3))
ax.imshow(picture.T, aspect="auto", cmap="Greys", interpolation="nearest")
ax.set_xlabel("round t"); ax.set_ylabel("client i"); ax.grid(False); plt.show()
print(f"available: {np.asarray(avail).mean():.3f} of the clients (stationary "
      f"{float(fa.theory.stationary_availability(0.2, 0.1)):.3f}); chosen per round: "
      f"{np.asarray(chosen).sum(1).mean():.2f}")

# %% [markdown]
# ## 4. FedAvg under six participation models
#
# Problem (27) with the paper's offsets (Dmax = 20) and softmax regression on
# Synthetic(1, 1), each with about S participants a round under uniform, importance
# (probabilities proportional to the clients' gradient norms at $x_0$), Poisson, cyclic,
# Markov and straggler participation (`participation`'s docstring has the settings).
# Beside each sampler: the sampling error of one round measured by the engine (a round
# of FedAvg from $x_0$ with exact gradients and one local step) against the closed form.

# %%
doc = participation.run(common.Settings(quick=True))
print(participation.summary_text(doc))
participation.figure(doc)

# %% [markdown]
# A straggler completes on average $(Q + 1)/2$ of its $Q$ steps: less progress per round
# at the same stepsize, and, once the runs settle, a lower noise floor (at the full
# scale's $T = 20000$ on problem (27) the stragglers' final gap is the lowest). The full
# scale is `fedjax-abc compare --participation`; its results are in
# `docs/results/participation.json`.
