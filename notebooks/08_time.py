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
# # Federated training against the clock: stragglers, deadlines, FedBuff and FedAsync
#
# Rounds are not free: a round of synchronous FedAvg lasts as long as its slowest
# participant, and device speeds differ by orders of magnitude. This notebook puts every
# client on a simulated clock, a client's work taking $D_i = Q\,s_i\,c_i + m_i$ (speed
# factors $s_i$ drawn once per trial from a heavy-tailed law, an exponential time $c_i$
# per local step, a constant communication time $m_i$), and compares, against simulated
# wall-clock time with 95% bands over 64 trials:
#
# - synchronous FedAvg that waits for all of its S = 10 clients,
# - the same with a deadline (late clients' work is lost),
# - over-selection (ask 13, keep the first 10 to finish; Bonawitz et al. 2019),
# - FedBuff (Nguyen et al. 2022): 20 clients in flight, a server step per 10 arrivals,
# - FedAsync (Xie et al. 2019): 10 in flight, each arrival mixed in as it comes.
#
# Every configuration is one compiled program over all trials. The deadline's inclusion
# probabilities are checked against their closed form, and the asynchronous runs'
# staleness distributions are shown. Statements about the results are printed by the code
# from its numbers.
#
# *This notebook is kept as the plain Python file of the same name (jupytext py:percent), paired with this executed copy; edit the `.py` file and rerun it (see `notebooks/README.md`).*

# %%
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import fedjax_abc as fa

jax.config.update("jax_enable_x64", True)  # float64, as the comparisons with theory need
fa.use_cpu_cores()  # one CPU device per core, over which the trials are sharded

# %matplotlib inline
plt.rcParams.update({"figure.dpi": 80, "axes.grid": True, "grid.alpha": 0.3, "font.size": 9})
np.set_printoptions(precision=4)
print("fedjax_abc", fa.__version__, "| jax", jax.__version__, "| float64:",
      jax.config.jax_enable_x64)

# %% [markdown]
# ## The problem and the clock
#
# Heterogeneous quadratics with n = 100 clients in $\mathbb{R}^{10}$ and the Gaussian ABC
# oracle; Q = 5 local steps of size 0.05. Speeds: Pareto with shape 1.5 (infinite
# variance), so a few devices in each trial are many times slower than the rest.

# %%
tm = fa.timing
problem = fa.problems.quadratics(jax.random.key(0), n=100, d=10)
Q, STEPSIZE, TRIALS, x0 = 5, 0.05, 64, jnp.ones(10)
clock = tm.Clock(tm.Exponential(1.0), speed=tm.Pareto(1.0, 1.5),
                 communication=tm.Constant(1.0))
key = jax.random.key(1)

words = jax.random.bits(jax.random.key(2), (100_000,), jnp.uint32)
speeds = np.asarray(tm.Pareto(1.0, 1.5).sample(words))
print(f"speed factors: median {np.median(speeds):.2f}, 99th percentile "
      f"{np.quantile(speeds, 0.99):.1f}, largest of 100 000 {speeds.max():.0f}")

# %% [markdown]
# ## Synchronous rounds on the clock
#
# `fa.timing.Timed` wraps the paper's sampler; the run records the simulated time at
# every round (`metrics["time"]`), and `plot(x="time")` puts the trials on a common time
# grid.

# %%
S, T = 10, 200
sync = {
    "wait for all 10": tm.Timed(fa.UniformWithoutReplacement(S), clock, steps=Q),
    "deadline 30": tm.Timed(fa.UniformWithoutReplacement(S), clock, steps=Q, deadline=30.0),
    "ask 13, keep 10": tm.Timed(fa.UniformWithoutReplacement(13), clock, steps=Q, keep=10),
}
results = {}
for name, sampler in sync.items():
    results[name] = fa.simulate(problem, sampler=sampler, local_steps=Q, stepsize=STEPSIZE,
                                rounds=T, trials=TRIALS, key=key, x0=x0)
    t_end = results[name].metrics["time"][:, -1]
    print(f"{name:>16}: {T} rounds take {np.mean(t_end):8.1f} time units on average "
          f"(trials from {t_end.min():.0f} to {t_end.max():.0f})")

# %% [markdown]
# ## Asynchronous aggregation
#
# `fa.timing.simulate_async`: FedBuff with C = 20 clients in flight and K = 10 arrivals a
# server step (staleness weight $1/\sqrt{1+\tau}$), FedAsync with C = 10 and mixing 0.3.
# Both run for about as much simulated time as the synchronous runs.

# %%
asynchronous = {
    "FedBuff C=20, K=10": (tm.FedBuff(buffer=10), 20, 1000),
    "FedAsync C=10": (tm.FedAsync(0.3, tm.PolynomialStaleness(0.5)), 10, 4000),
}
async_out = {}
for name, (rule, C, steps) in asynchronous.items():
    out = tm.simulate_async(problem, rule, clock, concurrency=C, local_steps=Q,
                            stepsize=STEPSIZE, steps=steps, trials=TRIALS, key=key, x0=x0)
    async_out[name] = out
    results[name] = out
    share = tm.staleness_distribution(out)
    print(f"{name:>18}: {steps} server steps take {np.mean(out.metrics['time'][:, -1]):8.1f} "
          f"time units on average; mean staleness {np.sum(share * np.arange(share.size)):.1f}")

# %%
fig, ax = plt.subplots(figsize=(7, 4))
horizon = min(float(np.min(r.metrics["time"][:, -1])) for r in results.values())
grid = np.linspace(0, min(horizon, 1000.0), 200)
for name, res in results.items():
    times, s = res.summary_on_time_grid("gap", times=grid)
    line, = ax.plot(times, s.mean, label=name)
    ax.fill_between(times, np.maximum(s.ci_low, 1e-6), s.ci_high, color=line.get_color(),
                    alpha=0.2, lw=0)
ax.set_yscale("log")
ax.set_ylim(1e-2, None)  # the band of a heavy-tailed mean reaches below 0
ax.set_xlabel("simulated time")
ax.set_ylabel("f(x) - f*  (mean over 64 trials, 95% band)")
ax.set_title("Pareto(1.5) device speeds: loss against wall-clock time")
ax.legend(fontsize=8)
plt.show()

target = 2 * float(np.min([fa.summarize(r.on_time_grid("gap", times=grid).values).mean[-1]
                           for r in results.values()]))
for name, res in results.items():
    mean = fa.summarize(res.on_time_grid("gap", times=grid).values).mean
    hit = np.flatnonzero(mean <= target)
    when = f"at time {grid[hit[0]]:.0f}" if hit.size else "not within the horizon"
    print(f"{name:>18}: mean gap first at or below {target:.2e} {when}")

# %% [markdown]
# ## The deadline's inclusion probabilities
#
# With speeds given per client and exponential step times, client i finishes by the
# deadline with probability $p_i = 1 - e^{-(\delta - m)/(Q s_i)}$, and the paper's sampler
# with a deadline includes it with probability $\pi_i = (S/n)\,p_i$
# (`fa.theory.inclusion_probabilities`); 20 000 drawn rounds agree.

# %%
n = 20
fixed = tm.Clock(tm.Exponential(1.0), speed=np.geomspace(0.5, 8.0, n),
                 communication=tm.Constant(1.0))
deadline = tm.Timed(fa.UniformWithoutReplacement(5), fixed, steps=Q, deadline=20.0)
closed = fa.theory.inclusion_probabilities(deadline, n).first
drawn = fa.theory.monte_carlo_moments(deadline, n, key=jax.random.key(3), draws=20_000).pi
se = np.sqrt(closed * (1 - closed) / 20_000)
fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(np.geomspace(0.5, 8.0, n), closed, "-", label="closed form")
ax.errorbar(np.geomspace(0.5, 8.0, n), drawn, yerr=1.96 * se, fmt="o", ms=3,
            label="20 000 rounds (95% intervals)")
ax.set_xscale("log")
ax.set_xlabel("speed factor s_i (time per step)")
ax.set_ylabel("pi_i")
ax.legend(fontsize=8)
plt.show()
print(f"largest |z| over the {n} clients: {np.max(np.abs(drawn - closed) / se):.2f}")

# %% [markdown]
# ## Staleness
#
# The updates FedBuff and FedAsync apply were computed from models some server steps old.
# With identical exponential durations each in-flight client is among a step's K
# arrivals with probability K/C, independently of the past, and the staleness would be
# geometric, $P(\tau = k) = \frac KC (1-\frac KC)^k$; slow devices here add a long tail.

# %%
fig, axes = plt.subplots(1, 2, figsize=(8, 3))
for ax, (name, out) in zip(axes, async_out.items()):
    share = tm.staleness_distribution(out)
    rule, C, _ = asynchronous[name]
    p = rule.buffer / C
    k = np.arange(share.size - 1)
    ax.bar(np.arange(share.size), share, label="this run")
    ax.plot(k, p * (1 - p) ** k, "k.-", ms=3, label="geometric (equal speeds)")
    ax.set_title(name)
    ax.set_xlabel(f"staleness tau (last bar: tau >= {share.size - 1})")
    ax.legend(fontsize=7)
axes[0].set_ylabel("share of updates")
plt.show()
for name, out in async_out.items():
    share = tm.staleness_distribution(out)
    print(f"{name}: {100 * share[-1]:.1f}% of updates in the last bin (tau >= {share.size - 1})")
