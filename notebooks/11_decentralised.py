# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Decentralised training: gossip over graphs, D-SGD against FedAvg, edge servers
#
# Without a server, every node keeps its own model and a round of gossip replaces the
# models X (a row a node) by W X, with W a doubly stochastic mixing matrix whose nonzeros
# follow the graph. The average is kept, and the deviation from it shrinks by the second
# eigenvalue: $\|W^t X - \bar X\|_F \le \lambda_2^t \|X - \bar X\|_F$ with
# $\lambda_2 = \|W - 11^\top/n\|_2$. `fa.decentral.Gossip(topology)` is a schedule of
# `fa.simulate`: each round, Q local steps at every node, then one gossip step
# (D-SGD of Koloskova et al., ICML 2020, adapt-then-combine); the runs record the gap of
# the nodes' average and the consensus error $\frac1n \sum_i \|x_i - \bar x\|^2$.
#
# This notebook, with n = 64 nodes:
#
# 1. $\lambda_2$, the spectral gap and Koloskova et al.'s mixing parameter p of a ring, an
#    8 x 8 torus, Erdos-Renyi graphs (drawn per trial) and the one-peer exponential graph;
# 2. pure gossip: the consensus error against the exact $\|W^t(X - \bar X)\|_F^2/n$
#    computed in NumPy and against the rate $\lambda_2^{2t}$ from `fa.theory`;
# 3. D-SGD on the ring, the torus and the exponential graph against FedAvg with full
#    participation, with the same Q, stepsize and rounds, 64 trials, 95% bands;
# 4. `fa.decentral.Hierarchical`: G edge servers, E edge rounds per cloud round, the edge
#    servers' spread, and G = 1 against FedAvg.
#
# Statements about results are printed by the code from this run's numbers.
#
# *This notebook is kept as the plain Python file of the same name (jupytext py:percent), paired with this executed copy; edit the `.py` file and rerun it (see `notebooks/README.md`).*

# %%
import os
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import scipy.stats

import fedjax_abc as fa
from fedjax_abc import decentral as dc

jax.config.update("jax_enable_x64", True)  # float64, as the comparisons with theory need
fa.use_cpu_cores()  # one CPU device per core, over which the trials are sharded

# %matplotlib inline
plt.rcParams.update({"figure.dpi": 80, "axes.grid": True, "grid.alpha": 0.3, "font.size": 9})
np.set_printoptions(precision=4)
print("fedjax_abc", fa.__version__, "| jax", jax.__version__, "| float64:",
      jax.config.jax_enable_x64)
start_wall, start_cpu = time.perf_counter(), time.process_time()

# %% [markdown]
# ## 1. Mixing matrices and their spectra
#
# Metropolis-Hastings weights (the default) on a ring, an 8 x 8 torus and Erdos-Renyi
# graphs G(64, 0.2); the one-peer exponential graph of Ying et al. (NeurIPS 2021) averages
# node i with node i + 2^(t mod 6) in round t (weights 1/2). `fa.theory.mixing_matrix`
# writes a round's W out; `second_eigenvalue` is $\|W - 11^\top/n\|_2$ (for the
# exponential graph's W_t, which is not symmetric, the largest singular value);
# `mixing_parameter` is p of Koloskova et al.'s Assumption 4 over a period of tau rounds,
# $1 - \|W_{\tau-1}\cdots W_0 - 11^\top/n\|_2^2$. An Erdos-Renyi trial draws its graph
# once from the trial's random stream; the table gives $\lambda_2$ of 256 graphs drawn
# independently from the same law (median and 5%-95% range). The complete graph
# (W = 11^T/n) is D-SGD's FedAvg.

# %%
n = 64
P_ER = 0.2
topologies = {"ring": dc.Ring(), "torus 8x8": dc.Torus(8, 8),
              f"Erdos-Renyi p={P_ER}": dc.ErdosRenyi(P_ER), "exponential": dc.Exponential()}
W = {name: fa.theory.mixing_matrix(top, None, n) for name, top in topologies.items()
     if not top.num_trial_words(n)}
tau = dc.Exponential().period(n)
W_exp = np.stack([fa.theory.mixing_matrix(dc.Exponential(), None, n, t=s) for s in range(tau)])
er_words = np.asarray(jax.random.bits(jax.random.key(5), (256, n * (n - 1) // 2), jnp.uint32))
lam_er = np.array([fa.theory.second_eigenvalue(fa.theory.mixing_matrix(
    topologies[f"Erdos-Renyi p={P_ER}"], None, n, trial_words=w)) for w in er_words])
lam2 = {name: float(np.median(lam_er)) if name not in W else fa.theory.second_eigenvalue(W[name])
        for name in topologies}
lam2["complete"] = fa.theory.second_eigenvalue(fa.theory.mixing_matrix(dc.Complete(), None, n))
mixing_p = {name: (fa.theory.mixing_parameter(W_exp), tau) if name == "exponential" else
            (1 - lam2[name] ** 2, 1) for name in lam2}

print(f"{'topology':>20} {'degree':>6} {'lambda_2':>9} {'1 - lambda_2':>12} {'p':>8} {'tau':>4}")
degree = {"ring": 2, "torus 8x8": 4, f"Erdos-Renyi p={P_ER}": f"~{P_ER * (n - 1):.1f}",
          "exponential": 1, "complete": n - 1}
for name in lam2:
    p, t_p = mixing_p[name]
    print(f"{name:>20} {degree[name]:>6} {lam2[name]:9.4f} {1 - lam2[name]:12.4f} {p:8.4f} "
          f"{t_p:4d}")
print(f"Erdos-Renyi lambda_2 over 256 draws: 5% {np.quantile(lam_er, 0.05):.3f}, median "
      f"{np.median(lam_er):.3f}, 95% {np.quantile(lam_er, 0.95):.3f}; disconnected draws "
      f"(lambda_2 = 1): {int(np.sum(lam_er > 1 - 1e-12))}")
print(f"exponential graph: one round's lambda_2 = {lam2['exponential']:.4f}, but the product "
      f"of its tau = log2 {n} = {tau} rounds is 11^T/n: max |W_5...W_0 - 11^T/n| = "
      f"{np.abs(np.linalg.multi_dot(W_exp[::-1]) - 1 / n).max():.1e}")

# %% [markdown]
# ## 2. Pure gossip: the consensus error against the spectral prediction
#
# Quadratics with every curvature 1 ($f_i(x) = \frac12\|x - c_i\|^2$ in
# $\mathbb{R}^{10}$, $c_i \sim N(0, I)$): from $x_0 = 0$, one local step of size 1 in
# round 0 takes node i to its centre $c_i$ (plus the oracle's noise), which spreads the
# nodes; every later round has a stepsize of 1e-300 (a stepsize must be > 0), far below
# the models' rounding, so its local step leaves the models as they are and the round is
# one gossip step. After round 0 (the spread, then one mix) the models are $X_1$, and
# $X_t = W^{t-1} X_1$ (for the exponential graph, $W_{t-1} \cdots W_1 X_1$). 32 trials,
# every round recorded with every node's model (`record_clients=True`).
#
# Solid lines: the simulated consensus error, mean over trials. Circles:
# `fa.theory.consensus_error`, the exact $\|W^{t-1}(X_1 - \bar X_1)\|_F^2/n$ from the
# recorded $X_1$ (stacked over trials). Dashed: the rate $\lambda_2^{2(t-1)}$ times the
# error at t = 1 (`fa.theory.consensus_bound`); for Erdos-Renyi, the median $\lambda_2$ of
# the independent draws, with the 5%-95% range shaded: each trial has its own graph and
# rate, and the mean over trials follows, late on, the trials whose graphs mix slowest.

# %%
T1, TRIALS1 = 200, 32
spread_problem = fa.problems.quadratics(jax.random.key(0), n=n, d=10, curvature=(1.0, 1.0))
spread_then_gossip = np.concatenate([[1.0], np.full(T1 - 1, 1e-300)])
gossip_runs = {}
for name, top in topologies.items():
    t0 = time.perf_counter()
    gossip_runs[name] = fa.simulate(
        spread_problem, local_steps=1, stepsize=spread_then_gossip, rounds=T1,
        trials=TRIALS1, key=jax.random.key(1), x0=jnp.zeros(10), record_every=1,
        record_clients=True, schedule=dc.Gossip(top))
    print(f"{name:>20}: {time.perf_counter() - t0:4.1f} s (compiles and runs)")

# gossip steps after X_1 at which the exact error is computed (every step of the first 12
# for the exponential graph, whose error reaches its rounding after 5)
steps = {name: np.arange(12) if name == "exponential" else np.arange(0, T1, 5)
         for name in topologies}
exact, bound = {}, {}
for name, res in gossip_runs.items():
    if name.startswith("Erdos"):
        continue
    X1 = np.moveaxis(res.client_x[:, 1], 0, 1).reshape(n, -1)  # (n, trials * d)
    if name != "exponential":  # lambda_2^(2(t-1)) e_1 (one exponential round's is 0.9988)
        bound[name] = np.array([fa.theory.consensus_bound(W[name], X1, s)
                                for s in range(T1)]) / TRIALS1
    Ws = np.roll(W_exp, -1, axis=0) if name == "exponential" else W[name]  # rounds 1, 2, ...
    exact[name] = np.array([fa.theory.consensus_error(Ws, X1, s) for s in steps[name]]) / TRIALS1
    measured = res.metrics["consensus"].mean(0)[1 + steps[name]]
    e1 = measured[0]
    above = exact[name] > 1e-10 * e1
    print(f"{name:>20}: simulated vs exact NumPy, max |difference| / e_1 = "
          f"{np.max(np.abs(measured - exact[name])) / e1:.1e}; max relative difference "
          f"where the error is above 1e-10 e_1: "
          f"{np.max(np.abs(measured - exact[name])[above] / exact[name][above]):.1e}")

# %%
fig, ax = plt.subplots(figsize=(7.5, 4.2))
t = np.arange(1, T1 + 1)
for name, res in gossip_runs.items():
    e = res.metrics["consensus"].mean(0)[1:]
    shown = 3 * tau if name == "exponential" else T1  # the exponential graph: rounding after tau
    line, = ax.plot(t[:shown], e[:shown], lw=1.5, label=name)
    c = line.get_color()
    if name in exact:
        ax.plot(1 + steps[name], exact[name], "o", ms=3, mfc="none", color=c)
    if name == "exponential":
        continue
    if name.startswith("Erdos"):  # the median lambda_2 of the draws, and their 5%-95% range
        lo, hi = np.quantile(lam_er, [0.05, 0.95])
        ax.fill_between(t, e[0] * lo ** (2 * (t - 1)), e[0] * hi ** (2 * (t - 1)), color=c,
                        alpha=0.15, lw=0)
        bound[name] = e[0] * lam2[name] ** (2 * (t - 1))
    ax.plot(t, bound[name], "--", lw=1, color=c)
ax.axvline(tau, color="k", lw=0.8, ls=":")
ax.text(3 * tau, gossip_runs["exponential"].metrics["consensus"].mean(0)[tau],
        f"  exponential graph: the exact average\n  at t = log2 n = {tau}, then rounding",
        fontsize=8, va="center")
ax.set_yscale("log")
ax.set_ylim(1e-34, 30)
ax.set_xlabel("round t (round 0 spreads the nodes, every later round one gossip step)")
ax.set_ylabel("consensus error (1/n) sum_i ||x_i - x_bar||^2")
ax.set_title(f"pure gossip, n = {n}: simulated (lines), exact NumPy (circles), "
             f"lambda_2^(2t) (dashed)")
ax.legend(fontsize=8, loc="lower right")
plt.show()

# %% [markdown]
# The measured rate: the error's contraction per round over the last 20 rounds before it
# reaches 1e-20 of its value at t = 1 (about where the rounding of the models, 1e-16,
# starts to show in it), against $\lambda_2^2$. Erdos-Renyi: each trial's rate against
# the distribution of $\lambda_2^2$ over the independent draws.

# %%
def late_rate(e, window=20, floor=1e-20):
    """(e_t2 / e_(t2 - window))^(1/window), t2 the last record above floor * e_1."""
    t2 = int(np.nonzero(e > floor * e[1])[0][-1])
    return (e[t2] / e[t2 - window]) ** (1 / window), t2


print(f"{'topology':>20} {'lambda_2^2':>11} {'measured':>9} {'ratio':>7}  window end")
for name in ("ring", "torus 8x8"):
    rate, t2 = late_rate(gossip_runs[name].metrics["consensus"].mean(0))
    print(f"{name:>20} {lam2[name] ** 2:11.5f} {rate:9.5f} {rate / lam2[name] ** 2:7.4f}  t = {t2}")
er = gossip_runs[f"Erdos-Renyi p={P_ER}"].metrics["consensus"]
stuck = int(np.sum(er[:, -1] > 1e-10 * er[:, 1]))
er_rates = np.array([late_rate(e)[0] for e in er if e[-1] <= 1e-10 * e[1]])
q = [0.05, 0.25, 0.5, 0.75, 0.95]
print(f"Erdos-Renyi, {len(er_rates)} trials' measured rates, quantiles {q}: "
      f"{np.round(np.quantile(er_rates, q), 4)}")
print(f"Erdos-Renyi, lambda_2^2 of 256 independent draws, same quantiles:      "
      f"{np.round(np.quantile(lam_er ** 2, q), 4)}; two-sample Kolmogorov-Smirnov "
      f"p = {scipy.stats.ks_2samp(er_rates, lam_er ** 2).pvalue:.2f}")
print(f"Erdos-Renyi trials whose error did not fall below 1e-10 e_1 (a disconnected graph): "
      f"{stuck} of {TRIALS1}")
e_exp = gossip_runs["exponential"].metrics["consensus"].mean(0)
print(f"exponential graph: consensus error at t = 1 .. {tau + 1}: "
      f"{np.array2string(e_exp[1:tau + 2], precision=2)}; after the {tau} mixes of rounds "
      f"0..{tau - 1} it is {e_exp[tau]:.1e}, "
      f"{e_exp[tau] / e_exp[1]:.1e} of e_1 (rounding)")

# %% [markdown]
# ## 3. D-SGD against FedAvg at equal communication
#
# Heterogeneous quadratics, n = 64 clients in $\mathbb{R}^{10}$, curvatures
# $a_{ij} \sim U[0.1, 1]$, centres $c_{ij} \sim N(0, 1)$, the Gaussian oracle of variance
# $(f_i(x) - f_i^\star) + 0.1$; Q = 5 local steps of size 0.05, T = 200 rounds from
# $x_0 = x^\star + 1$, 64 trials with the same key (every node draws the oracle's noise of
# the client of the same index in FedAvg, so the differences below are paired). A round is
# one communication round everywhere: FedAvg's 64 clients each send one model to the
# server and get one back; a D-SGD node sends its model to its neighbours (2 on the ring,
# 4 on the torus, 1 on the exponential graph) and no server is involved. The gap is that
# of the nodes' average $\bar x$.
#
# The curvatures differ between nodes on purpose: with one Hessian for all nodes, the mean
# of the nodes' (linear) gradients is the gradient at their mean, and with exact gradients
# $\bar x$ would move exactly as FedAvg's model, whatever the nodes' disagreement.

# %%
problem = fa.problems.quadratics(jax.random.key(2), n=n, d=10, curvature=(0.1, 1.0))
Q, STEPSIZE, T, TRIALS = 5, 0.05, 200, 64
run_kw = dict(local_steps=Q, stepsize=STEPSIZE, rounds=T, trials=TRIALS, record_every=1,
              key=jax.random.key(3), x0=problem.x_star + 1.0)
compared = {"FedAvg (all 64 clients)": fa.simulate(problem, num_sampled=None, **run_kw)}
for name in ("ring", "torus 8x8", "exponential"):
    compared[f"D-SGD, {name}"] = fa.simulate(problem, schedule=dc.Gossip(topologies[name]),
                                             **run_kw)

fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
for name, res in compared.items():
    s = res.summary("gap")
    line, = axes[0].plot(res.rounds, s.mean, lw=1.2, label=name)
    axes[0].fill_between(res.rounds, s.ci_low, s.ci_high, color=line.get_color(), alpha=0.2,
                         lw=0)
    if "consensus" in res.metrics:
        c = res.summary("consensus")
        axes[1].plot(res.rounds[1:], c.mean[1:], lw=1.2, color=line.get_color(), label=name)
        axes[1].fill_between(res.rounds[1:], c.ci_low[1:], c.ci_high[1:],
                             color=line.get_color(), alpha=0.2, lw=0)
axes[0].set(yscale="log", xlabel="round t", ylabel="f(x_bar_t) - f*  (mean, 95% band)",
            title=f"gap of the average, {TRIALS} trials")
axes[1].set(yscale="log", xlabel="round t", ylabel="(1/n) sum_i ||x_i - x_bar||^2",
            title="consensus error of D-SGD")
axes[0].legend(fontsize=8)
plt.tight_layout()
plt.show()

# %%
base = compared["FedAvg (all 64 clients)"]
graphs = ("ring", "torus 8x8", "exponential")


def p_text(p):
    return "p < 1e-300" if p < 1e-300 else f"p = {p:.2g}"


for t_rec in (20, T):
    print(f"gap at t = {t_rec} (mean +- 95%), D-SGD minus FedAvg (paired, 95% interval), "
          "and D-SGD / FedAvg:")
    base_mean = fa.summarize(base.gap[:, t_rec]).mean
    for name, res in compared.items():
        g = fa.summarize(res.gap[:, t_rec])
        line = f"{name:>24}: {g.mean:.3e} +- {g.ci95:.1e}"
        if res is not base:
            diff = fa.stats.paired_difference(res, base, record=t_rec)
            line += (f"   {diff.mean:+.2e} [{diff.ci_low:+.2e}, {diff.ci_high:+.2e}], "
                     f"{p_text(diff.p_value)}, ratio {g.mean / base_mean:.2f}")
        print(line)
print("consensus error at t = T (mean +- 95%), its range over the last tau rounds, and "
      "Koloskova et al.'s tau / p:")
for name in graphs:
    res = compared[f"D-SGD, {name}"]
    c, last = res.final("consensus"), res.metrics["consensus"].mean(0)[-tau:]
    p, t_p = mixing_p[name]
    print(f"{name:>24}: {c.mean:.3f} +- {c.ci95:.3f}  (from {last.min():.3f} to "
          f"{last.max():.3f})   tau / p = {t_p / p:.1f}")
apart = [name for name, res in compared.items() if res is not base and
         fa.stats.paired_difference(res, base).p_value < 0.05]
print(f"final gap different from FedAvg's at the 5% level (paired): {apart or 'none'}")


def order(value):
    return " < ".join(sorted(graphs, key=value))


print(f"order of the final gap:              "
      f"{order(lambda g: compared[f'D-SGD, {g}'].final('gap').mean)}")
print(f"order of the final consensus error:  "
      f"{order(lambda g: compared[f'D-SGD, {g}'].final('consensus').mean)}")
print(f"order of tau / p:                    {order(lambda g: mixing_p[g][1] / mixing_p[g][0])}")

# %% [markdown]
# What the figure and the lines above show, for this problem, Q and stepsize: with as many
# rounds, each of the three graphs ends with a larger gap of the average than FedAvg with
# every client, the ring by far the largest; the consensus error settles within a few
# dozen rounds, at levels in the order of Koloskova et al.'s $\tau/p$ (the exponential
# graph's oscillates with its period of 6 rounds). The consensus error does not decide
# the gap alone: of the torus and the exponential graph, the torus ends with the smaller
# consensus error but the larger gap, and early on (t = 20) the torus is ahead of FedAvg.
# This is one problem at one stepsize; Koloskova et al.'s bound orders the consensus
# term, it does not predict these ratios.

# %% [markdown]
# ## 4. Edge servers: `Hierarchical`
#
# `fa.decentral.Hierarchical.contiguous(n, G, edge_rounds=E)` puts the 64 clients under G
# edge servers of 64/G consecutive clients. A round is an edge round: each edge server runs
# a round of FedAvg with S of its own clients (here S = 16/G, so 16 clients work every
# round whatever G); every E = 5 edge rounds the cloud averages the edge models (HierFAVG,
# Liu et al., ICC 2020). The records read the edge models' average and their spread
# $\frac1G\sum_g \|x_g - \bar x\|^2$ (`edge_spread`), 0 right after a cloud round. With
# G = 1, the one edge server holds every client and makes the draws of a synchronous
# round: FedAvg with S = 16, bit for bit. Same problem and settings as above, T = 100.

# %%
E, T_H = 5, 100
hier_kw = dict(run_kw, rounds=T_H)
hier = {G: fa.simulate(problem, num_sampled=16 // G,
                       schedule=dc.Hierarchical.contiguous(n, G, edge_rounds=E), **hier_kw)
        for G in (1, 4, 16)}
fedavg16 = fa.simulate(problem, num_sampled=16, **hier_kw)
print(f"G = 1 against FedAvg with S = 16: max |gap difference| = "
      f"{np.max(np.abs(hier[1].gap - fedavg16.gap)):.1e}, max |x difference| = "
      f"{np.max(np.abs(hier[1].x - fedavg16.x)):.1e}")

fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
for G, res in hier.items():
    s = res.summary("gap")
    line, = axes[0].plot(res.rounds, s.mean, lw=1.2, label=f"G = {G}, S = {16 // G} per edge")
    axes[0].fill_between(res.rounds, s.ci_low, s.ci_high, color=line.get_color(), alpha=0.2, lw=0)
    sp = res.summary("edge_spread")
    axes[1].plot(res.rounds[:41], sp.mean[:41], lw=1.2, color=line.get_color(), label=f"G = {G}")
    axes[1].fill_between(res.rounds[:41], sp.ci_low[:41], sp.ci_high[:41],
                         color=line.get_color(), alpha=0.2, lw=0)
axes[0].set(yscale="log", xlabel="edge round t", ylabel="f(x_bar_t) - f*  (mean, 95% band)",
            title=f"Hierarchical, E = {E}, {TRIALS} trials")
axes[1].set(xlabel="edge round t", ylabel="(1/G) sum_g ||x_g - x_bar||^2",
            title="spread of the edge models (cloud average every E rounds)")
axes[0].legend(fontsize=8)
axes[1].legend(fontsize=8)
plt.tight_layout()
plt.show()

before_cloud = np.arange(E - 1, T_H, E)  # t = 4, 9, ...: E - 1 edge rounds after a cloud round
apart = [G for G in (4, 16) if fa.stats.paired_difference(hier[G], hier[1]).p_value < 0.05]
print(f"final gap different from G = 1's at the 5% level (paired): {apart or 'none'}")
for G, res in hier.items():
    g = res.final("gap")
    line = f"G = {G:>2}: final gap {g.mean:.3e} +- {g.ci95:.1e}"
    if G != 1:
        diff = fa.stats.paired_difference(res, hier[1])
        line += f", minus G = 1: {diff.mean:+.2e} ({p_text(diff.p_value)})"
    spread = res.metrics["edge_spread"]
    line += (f"; edge spread {E - 1} rounds after a cloud round "
             f"{spread[:, before_cloud].mean():.3e}, right after one at most "
             f"{np.abs(spread[:, before_cloud + 1]).max():.1e}")
    print(line)

# %%
wall, cpu = time.perf_counter() - start_wall, time.process_time() - start_cpu
print(f"this notebook: {wall:.0f} s wall clock, {cpu:.0f} s of CPU time in its kernel, "
      f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
