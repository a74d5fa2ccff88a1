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
# # Reproducing Section IV at reduced scale
#
# The three experiments of Section IV of *On Federated Averaging with Partial
# Participation under a General Variance Condition* and the counterexample of Theorem 1,
# each with the paper's claim stated beside it and a computed check of whether this run
# shows it. The runs here are smaller than the paper's (fewer trials, some with fewer
# rounds or fewer values of $Q$) so that the notebook runs in about a minute on two CPU
# cores. Verdicts are printed by the code; where a run at this scale cannot settle a
# claim, the check says so rather than the text.
#
# The paper's settings are read from the modules behind the `fedjax-abc reproduce`
# command (`fedjax_abc.repro`), so this notebook and the command use the same
# numbers. How to run at full scale is at the end.
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

from fedjax_abc.repro import fig3, offsets, paper
Z95 = 1.959963984540054
SEED = 0
verdicts = []  # (experiment, claim, verdict) for the summary at the end


def z_step(a, b):
    """(mean_a - mean_b) / sqrt(se_a^2 + se_b^2) for two independent fa.Summary values."""
    return float((a.mean - b.mean) / np.hypot(a.stderr, b.stderr))


def ordering(summaries, decreasing=True):
    """Whether the means fall (or rise) along the list; z > 0 is the claimed direction."""
    z = [z_step(a, b) if decreasing else z_step(b, a) for a, b in zip(summaries, summaries[1:])]
    if all(v > Z95 for v in z):
        verdict = "yes (every step significant at 95%)"
    elif all(v > 0 for v in z):
        verdict = "direction only (some step not significant)"
    elif any(v < -Z95 for v in z):
        verdict = "no (some step significantly reversed)"
    else:
        verdict = "no (some step reversed, not significantly)"
    return verdict, z


def plot_band(ax, rounds, summary, label, **kw):
    floor = summary.mean[summary.mean > 0].min() * 1e-2
    line, = ax.plot(rounds, np.maximum(summary.mean, floor), label=label, lw=1.2, **kw)
    ax.fill_between(rounds, np.maximum(summary.ci_low, floor), np.maximum(summary.ci_high, floor),
                    color=line.get_color(), alpha=0.2, lw=0)
    return line


# %% [markdown]
# ## 1. Fig. 1: the participation level $S$ (Section IV-A)
#
# **Paper.** Problem (25): $n = 16$, $f_1$ the Huber function,
# $f_i(x) = \ln(1 + e^{x - i + 1})$ for $i = 2, \dots, 16$, with oracle (26)
# ($\nabla f_i \pm \sqrt{|x|}$ for client 1, $\nabla f_i \pm \sqrt{f_i(x)}$ for the
# others), so $L = 1$, $C = 1$, $D = 1/2$. FedAvg with $T = 50000$, $Q = 5$,
# $\alpha = 0.001$, $x_0 = 10$, $S \in \{1, 4, 8, 16\}$, averaged over 100 trials.
# Claim: *"The full-participation case $S = 16$ gives the smallest function value gap,
# while smaller values of $S$ lead to larger objective gaps."*
#
# **Here.** The same problem, oracle, $Q$, $\alpha$ and $x_0$, with $T = 25000$ rounds
# and 32 trials per $S$: by then the curves have left their common deterministic
# descent and separated by $S$ (see the plot). The check
# compares the last-iterate gap $f(x_T) - f^\star$ and, less noisy, each trial's mean gap
# over the last 5000 rounds. $f^\star$ comes from an exact one-dimensional convex
# minimisation (the paper used a fine grid search).

# %%
P1 = paper.FIG1
F1 = dict(T=25_000, R=32, window=5_000, record_every=100)
p25 = fa.problems.softplus_huber(P1["n"])
print(f"{p25.name}: x* = {float(p25.x_star[0]):.6f}, f* = {float(p25.f_star):.6f}")
print(f"paper: T = {P1['T']}, R = {P1['R']} | here: T = {F1['T']}, R = {F1['R']}")

start = time.perf_counter()
fig1_runs = {}
for S in P1["S"]:
    fig1_runs[S] = fa.simulate(
        p25, num_sampled=S, local_steps=P1["Q"], stepsize=P1["alpha"], rounds=F1["T"],
        x0=P1["x0"], trials=F1["R"], key=jax.random.fold_in(jax.random.key(SEED + 1), S),
        record_every=F1["record_every"], mode="gather" if S < P1["n"] else "mask",
        record_x=False)
print(f"{len(P1['S'])} runs in {time.perf_counter() - start:.1f} s")

fig, ax = plt.subplots(figsize=(6, 3.6))
for S, r in fig1_runs.items():
    plot_band(ax, r.rounds, r.summary("gap"), f"S = {S}")
ax.set(yscale="log", xlabel="communication round t", ylabel="$f(x_t) - f^\\star$",
       title=f"Fig. 1 at reduced scale: Q = {P1['Q']}, alpha = {P1['alpha']:g}, "
             f"R = {F1['R']} (band: 95%)")
ax.legend()
plt.show()

# %%
last = [fig1_runs[S].final("gap") for S in P1["S"]]
tail = [fa.summarize(r.gap[:, r.rounds > F1["T"] - F1["window"]].mean(axis=1))
        for r in fig1_runs.values()]
print(f"{'S':>3} {'I_S':>6} {'f(x_T) - f*':>12} {'stderr':>9}   "
      f"{'mean over last ' + str(F1['window']):>20} {'stderr':>9}")
for S, a, b in zip(P1["S"], last, tail):
    print(f"{S:>3} {fa.theory.sampling_factor(P1['n'], S):6.3f} {a.mean:12.3e} {a.stderr:9.1e}"
          f"   {b.mean:20.3e} {b.stderr:9.1e}")
v_last, z_last = ordering(last)
v_tail, z_tail = ordering(tail)
print("\nclaim: the gap falls as S grows, smallest at S = 16")
print(f"  last iterate:  {v_last}; z of consecutive steps {np.round(z_last, 1)}")
print(f"  last {F1['window']} rounds: {v_tail}; z of consecutive steps {np.round(z_tail, 1)}")
verdicts.append(("Fig. 1", "gap falls as S grows (last iterate)", v_last))
verdicts.append(("Fig. 1", f"gap falls as S grows (mean of last {F1['window']} rounds)", v_tail))

# %% [markdown]
# ## 2. Table II and Fig. 2: $\sigma_f^\star$ against the BGD constants (Section IV-B)
#
# **Paper.** Problem (27): $n = 40$ Huber clients centred at $d_1 = d_2 = 0$,
# $d_3, \dots, d_{40} \sim U[0, D_{\max}]$, $D_{\max} \in \{20, 50, 100, 200\}$,
# oracle $\nabla f_i + \varepsilon\sqrt{f_i - f_i^\star}$ ($L = 1$, $C = 1$, $D = 0$).
# FedAvg with $S \in \{4, 20, 40\}$, $Q = 10$, $\alpha = 10^{-4}$, $T = 50000$,
# $x_0 = x^\star + 10$, 100 runs. Claims:
# 1. *"As $D_{\max}$ increases from 20 to 200, $\sigma_f^\star$ grows from 4.8 to 52.7,
#    whereas the optimized BGD sum stays almost unchanged between 0.956 and 0.998."*
# 2. *"the last-iterate gap increases with $D_{\max}$ for every $S$"*.
# 3. *"Increasing $S$ from 4 to 40 lowers the residual for every $D_{\max}$."*
#
# Table II also prints the last-iterate gaps themselves.
#
# **Here.** The paper does not say how its offsets were drawn; the package identified a
# draw (NumPy's legacy generator, seed 42) that reproduces all four printed
# $\sigma_f^\star$ to three decimals (`offsets.paper_offsets`). The optimized BGD
# sum $\zeta^2 + \psi^2$ is `fa.theory.bgd_sum`, the smallest pair for which (3) holds at
# every point of a grid covering the offsets with a margin of 5. Runs use the paper's
# $T = 50000$, since the claims are about the gap at $T$, with 16 trials per
# configuration. Beside them, a noise-free reference: exact gradients and full
# participation from the same $x_0$, a deterministic trajectory that shows how far these
# $\alpha$, $Q$ and $T$ can move the iterate at all.

# %%
P2 = paper.TABLE2
F2 = dict(T=P2["T"], R=16, record_every=500, bgd_points=20_001)
start = time.perf_counter()
table2 = {}
for d_max in P2["d_max"]:
    offs = offsets.paper_offsets(d_max, P2["n"])  # see the print below
    prob = fa.problems.huber_offsets(offsets=offs)
    x0 = np.asarray(prob.x_star) + P2["x0_offset"]
    bgd = fa.theory.bgd_sum(prob, domain=(offs.min() - 5.0, offs.max() + 5.0),
                            num_points=F2["bgd_points"])
    runs = {S: fa.simulate(prob, num_sampled=S, local_steps=P2["Q"], stepsize=P2["alpha"],
                           rounds=F2["T"], x0=x0, trials=F2["R"],
                           key=jax.random.fold_in(jax.random.fold_in(
                               jax.random.key(SEED + 2), int(d_max)), S),
                           record_every=F2["record_every"],
                           mode="gather" if S < P2["n"] else "mask", record_x=False)
            for S in P2["S"]}
    noise_free = fa.simulate(prob, local_steps=P2["Q"], stepsize=P2["alpha"], rounds=F2["T"],
                             x0=x0, trials=1, key=jax.random.key(0), oracle=fa.ExactOracle(),
                             record_every=F2["record_every"], record_x=False)
    table2[d_max] = dict(sigma=fa.theory.sigma_f_star(prob), bgd=bgd.total, runs=runs,
                         noise_free=noise_free, delta_f=float(prob.gap(jnp.asarray(x0))))
print(f"{len(P2['d_max']) * (len(P2['S']) + 1)} runs in {time.perf_counter() - start:.1f} s")
print("offsets d_3..d_n:", offsets.PAPER_DRAW.description)

print(f"\n{'Dmax':>5} | {'sigma_f*':>8} {'paper':>7} | {'BGD sum':>7} {'paper':>6} | "
      + " | ".join(f"{'gap S=' + str(S):>19} {'paper':>8}" for S in P2["S"])
      + f" | {'noise-free':>10}")
for d_max, row in table2.items():
    cells = []
    for S in P2["S"]:
        g = row["runs"][S].final("gap")
        cells.append(f"{g.mean:9.2e} +- {g.stderr:6.1e} {paper.TABLE2_GAP[d_max][S]:8.2e}")
    print(f"{d_max:5.0f} | {row['sigma']:8.3f} {paper.TABLE2_SIGMA[d_max]:7.3f} | "
          f"{row['bgd']:7.3f} {paper.TABLE2_BGD[d_max]:6.3f} | " + " | ".join(cells)
          + f" | {row['noise_free'].gap[0, -1]:10.2e}")
print("(gaps: f(x_T) - f*, mean +- standard error over", F2["R"], "trials; noise-free: exact "
      "gradients, full participation, same x0)")

# %%
d_list, S_list = P2["d_max"], P2["S"]
sig_ok = all(abs(table2[d]["sigma"] - paper.TABLE2_SIGMA[d]) <= 5e-4 for d in d_list)
bgd_ok = all(abs(table2[d]["bgd"] - paper.TABLE2_BGD[d]) <= 5e-4 for d in d_list)
sig = [table2[d]["sigma"] for d in d_list]
bgds = [table2[d]["bgd"] for d in d_list]
print(f"claim 1: sigma_f* from {sig[0]:.3f} to {sig[-1]:.3f} ({sig[-1] / sig[0]:.1f}x); "
      f"BGD sum between {min(bgds):.3f} and {max(bgds):.3f}")
print(f"  sigma_f* equals the printed values to 3 decimals: {sig_ok}; "
      f"BGD sum equals the printed values to 3 decimals: {bgd_ok}")
verdicts.append(("Table II", "sigma_f* grows 4.8 -> 52.7 (printed values)", "yes" if sig_ok else "no"))
verdicts.append(("Table II", "BGD sum stays in 0.956..0.998 (printed values)", "yes" if bgd_ok else "no"))

gap = {d: {S: table2[d]["runs"][S].final("gap") for S in S_list} for d in d_list}
free = {d: float(table2[d]["noise_free"].gap[0, -1]) for d in d_list}
track = {d: {S: gap[d][S].mean / free[d] for S in S_list} for d in d_list}
free_rises = all(free[a] < free[b] for a, b in zip(d_list, d_list[1:]))
TAG = " [noisy ~ noise-free]"
print(f"{TAG.strip()}: every noisy mean gap within 25% of the noise-free gap at T, so the "
      "gap is set by the deterministic approach, not by noise or sampling")

print("\nclaim 2: the last-iterate gap increases with Dmax, for every S")
print(f"  (the noise-free gap at T increases with Dmax: {free_rises})")
for S in S_list:
    v, z = ordering([gap[d][S] for d in d_list], decreasing=False)
    tag = TAG if free_rises and all(0.8 < track[d][S] < 1.25 for d in d_list) else ""
    print(f"  S = {S:>2}: {v}; z {np.round(z, 1)}{tag}")
    verdicts.append(("Table II", f"gap increases with Dmax at S = {S}", v + tag))

print("\nclaim 3: increasing S from 4 to 40 lowers the gap, for every Dmax")
for d in d_list:
    v, z = ordering([gap[d][S] for S in S_list])
    tag = TAG if all(0.8 < track[d][S] < 1.25 for S in S_list) else ""
    print(f"  Dmax = {d:>3.0f}: {v}; z {np.round(z, 1)}{tag}")
    verdicts.append(("Table II", f"gap falls as S grows at Dmax = {d:.0f}", v + tag))

print("\nthe printed gaps: this run's mean gap over the paper's value (1 = agreement) "
      "and over the noise-free gap")
for d in d_list:
    above = sum(free[d] > paper.TABLE2_GAP[d][S] for S in S_list)
    print(f"  Dmax = {d:>3.0f}: over paper "
          + ", ".join(f"S={S} {gap[d][S].mean / paper.TABLE2_GAP[d][S]:7.1f}" for S in S_list)
          + " | over noise-free " + ", ".join(f"{track[d][S]:.2f}" for S in S_list)
          + f" | noise-free gap above the printed gap for {above} of {len(S_list)} S")
agree = all(0.5 < gap[d][S].mean / paper.TABLE2_GAP[d][S] < 2 for d in d_list for S in S_list)
unreachable = sum(free[d] > paper.TABLE2_GAP[d][S] for d in d_list for S in S_list)
print(f"printed gaps reproduced within a factor 2: {agree}; printed gaps below the noise-free "
      f"gap at T: {unreachable} of {len(d_list) * len(S_list)}")
verdicts.append(("Table II", "printed gaps reproduced within a factor 2", "yes" if agree else
                 f"no ({unreachable} of {len(d_list) * len(S_list)} below the noise-free gap)"))

# %% [markdown]
# How to read this. Where the noise-free run ends above a printed gap, the stated
# $\alpha$, $Q$, $T$ and $x_0$ do not bring the iterate that close to $x^\star$ even
# without noise. Where, in addition, the noisy runs end close to the noise-free gap
# (the tag above), the gap at $T$ is set by the deterministic approach to $x^\star$ (a
# wider spread of offsets makes $f$ flatter near $x^\star$, so the approach is slower),
# not by the oracle noise or by client sampling: orderings seen in such runs are not
# evidence for the mechanism the paper describes, and the printed gaps are not what
# the stated settings produce in this simulation, which suggests that some setting of
# the paper's runs differs from what the text states. Fig. 2's trajectories, with the
# noise-free run dashed:

# %%
fig, axes = plt.subplots(1, len(S_list), figsize=(11, 3.4), sharey=True)
for ax, S, tag in zip(axes, S_list, "abc"):
    for d_max, row in table2.items():
        r = row["runs"][S]
        line = plot_band(ax, r.rounds, r.summary("gap"), f"Dmax = {d_max:.0f}")
        ax.plot(r.rounds, row["noise_free"].gap[0], "--", lw=0.8, color=line.get_color())
    ax.set(yscale="log", xlabel="round t", title=f"({tag}) S = {S}")
axes[0].set_ylabel("$f(x_t) - f^\\star$")
axes[0].legend(fontsize=7)
fig.suptitle(f"Fig. 2 at reduced scale: n = {P2['n']}, Q = {P2['Q']}, alpha = {P2['alpha']:g}, "
             f"R = {F2['R']}; dashed: noise-free, full participation", fontsize=9)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 3. Fig. 3: the number of local updates $Q$ at fixed $\alpha Q$ (Section IV-C)
#
# **Paper.** Problem (27) with $D_{\max} = 200$, $S \in \{4, 40\}$,
# $Q \in \{3, 5, 8, \dots, 200\}$ (16 values), $\alpha = \gamma / Q$ with
# $\gamma = 10^{-2}$, $T = 100000$, 100 trials. Claims:
# 1. *"the residual $R_S(Q) := \mathbb{E}\|\nabla f(x_T)\|^2$ decreases with increasing
#    $Q$ for both participation levels"*;
# 2. *"partial participation ($S = 4$) consistently yields a larger terminal residual
#    than full participation ($S = n = 40$)"*;
# 3. the scaled residual of eq. (28),
#    $D_Q = (\sqrt{S} R_S(Q) - \sqrt{n} R_n(Q)) \sqrt{T} /
#    (L (\Delta_f + \sqrt{\Delta_f \sigma_f^\star}) \sqrt{I_S})$,
#    should be approximately constant in $Q$ if the sampling term carries no extra $Q$
#    factor, as in Theorem 2; the paper reports that $D_Q$ *"does not follow the
#    $\sqrt{Q}$ trend"*.
#
# (The extracted text of (28) lost its square roots; this is the reading the package's
# `fig3.scaled_residual` implements, with its standard error.)
#
# **Here.** $Q \in \{3, 10, 30\}$, $T = 50000$, 16 trials per point, $x_0 = x^\star + 10$
# as in Section IV-B. The trend test fits $D_Q = c$ and $D_Q = c\sqrt{Q}$ by weighted
# least squares and reports each fit's $\chi^2$ and p-value: the claim that $D_Q$ does not
# follow $\sqrt{Q}$ is shown when that trend is rejected, and "roughly constant" is
# consistent when the constant is not.

# %%
from scipy import stats

P3 = paper.FIG3
F3 = dict(T=50_000, R=16, Q=[3, 10, 30], record_every=500)
offs = offsets.paper_offsets(P3["d_max"], P3["n"])
p27 = fa.problems.huber_offsets(offsets=offs)
x0 = np.asarray(p27.x_star) + P3["x0_offset"]
delta_f, sigma = float(p27.gap(jnp.asarray(x0))), fa.theory.sigma_f_star(p27)
start = time.perf_counter()
resid = {S: [] for S in P3["S"]}
for Q in F3["Q"]:
    for S in P3["S"]:
        r = fa.simulate(p27, num_sampled=S, local_steps=Q, stepsize=P3["gamma"] / Q,
                        rounds=F3["T"], x0=x0, trials=F3["R"],
                        key=jax.random.fold_in(jax.random.fold_in(jax.random.key(SEED + 3), S), Q),
                        record_every=F3["record_every"],
                        mode="gather" if S < P3["n"] else "mask", record_x=False)
        resid[S].append(r.final("grad_norm_sq"))
print(f"{len(F3['Q']) * len(P3['S'])} runs in {time.perf_counter() - start:.1f} s; "
      f"Delta_f = {delta_f:.4f}, sigma_f* = {sigma:.3f}")

S_part, n = min(P3["S"]), P3["n"]
dq, dq_se, _ = fig3.scaled_residual(
    S_part, n, F3["T"], P3["L"], delta_f, sigma,
    [s.mean for s in resid[S_part]], [s.stderr for s in resid[S_part]],
    [s.mean for s in resid[n]], [s.stderr for s in resid[n]])
print(f"\n{'Q':>4} {'R_4(Q)':>10} {'stderr':>8} {'R_40(Q)':>10} {'stderr':>8} {'D_Q':>9} {'stderr':>8}")
for j, Q in enumerate(F3["Q"]):
    a, b = resid[S_part][j], resid[n][j]
    print(f"{Q:>4} {a.mean:10.3e} {a.stderr:8.1e} {b.mean:10.3e} {b.stderr:8.1e} "
          f"{dq[j]:9.3f} {dq_se[j]:8.3f}")

# %%
print("claim 1: R_S(Q) decreases with Q")
for S in P3["S"]:
    v, z = ordering(resid[S])
    print(f"  S = {S:>2}: {v}; z {np.round(z, 1)}")
    verdicts.append(("Fig. 3", f"R_S(Q) decreases with Q at S = {S}", v))

z_gap = [z_step(a, b) for a, b in zip(resid[S_part], resid[n])]
v2 = ("yes (significant at every Q)" if all(z > Z95 for z in z_gap) else
      "direction only" if all(z > 0 for z in z_gap) else "no")
print(f"claim 2: R_4(Q) > R_40(Q) at every Q: {v2}; z {np.round(z_gap, 1)}")
verdicts.append(("Fig. 3", "R_4(Q) > R_40(Q) at every Q", v2))

qs = np.asarray(F3["Q"], float)
w = 1.0 / np.asarray(dq_se) ** 2
fits = {}
for name, h in (("constant", np.ones_like(qs)), ("sqrt(Q)", np.sqrt(qs))):
    c = np.sum(w * dq * h) / np.sum(w * h * h)
    chi2 = float(np.sum(w * (dq - c * h) ** 2))
    fits[name] = (c, chi2, float(stats.chi2.sf(chi2, len(qs) - 1)))
    print(f"  D_Q = c * {name:>8}: c = {c:8.3f}, chi2 = {chi2:6.2f} on {len(qs) - 1} dof, "
          f"p = {fits[name][2]:.3f}")
sqrt_rejected = fits["sqrt(Q)"][2] < 0.05
const_rejected = fits["constant"][2] < 0.05
z_ends = float((dq[-1] - dq[0]) / np.hypot(dq_se[-1], dq_se[0]))
v3 = ("yes (sqrt(Q) trend rejected at 5%)" if sqrt_rejected
      else "not shown (sqrt(Q) trend not rejected at this scale)")
v4 = ("consistent (constant not rejected at 5%)" if not const_rejected
      else "no (constant rejected at 5%)")
print(f"claim 3: D_Q does not follow sqrt(Q): {v3}")
print(f"         D_Q roughly constant in Q: {v4}")
print(f"  D_Q at Q = {F3['Q'][-1]} minus D_Q at Q = {F3['Q'][0]}: z = {z_ends:.1f} "
      "(> 0: grows with Q, < 0: falls)")
print(f"  every D_Q significantly > 0: {bool(np.all(dq - Z95 * np.asarray(dq_se) > 0))}")
verdicts.append(("Fig. 3", "D_Q does not follow sqrt(Q)", v3))
verdicts.append(("Fig. 3", "D_Q roughly constant in Q", v4))

fig, (ax_a, ax_b) = plt.subplots(1, 2, figsize=(10, 3.5))
for S in P3["S"]:
    m = np.array([s.mean for s in resid[S]])
    e = Z95 * np.array([s.stderr for s in resid[S]])
    ax_a.errorbar(qs, m, yerr=e, marker="o", ms=3, capsize=2,
                  label=f"S = {S}" + (" (full)" if S == n else ""))
ax_a.set(xscale="log", yscale="log", xlabel="local updates Q",
         ylabel="$R_S(Q) = E\\|\\nabla f(x_T)\\|^2$", title="(a) terminal residual")
ax_a.legend()
ax_b.errorbar(qs, dq, yerr=Z95 * np.asarray(dq_se), marker="o", ms=3, capsize=2, color="k",
              label="$D_Q$ (eq. 28)")
for name, style in (("constant", "--"), ("sqrt(Q)", ":")):
    h = np.ones_like(qs) if name == "constant" else np.sqrt(qs)
    ax_b.plot(qs, fits[name][0] * h, style, label=f"fit $\\propto$ {name}")
ax_b.axhline(0.0, color="0.5", lw=0.6)
ax_b.set(xscale="log", xlabel="local updates Q", ylabel="$D_Q$", title="(b) scaled residual")
for ax in (ax_a, ax_b):
    ax.set_xticks(qs, [str(q) for q in F3["Q"]])
    ax.set_xticks([], minor=True)
ax_b.legend(fontsize=8)
fig.suptitle(f"Fig. 3 at reduced scale: Dmax = {P3['d_max']:g}, alpha Q = {P3['gamma']:g}, "
             f"T = {F3['T']}, R = {F3['R']} (bars: 95%)", fontsize=9)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 4. Theorem 1: smooth, lower bounded, and not BGD
#
# **Paper.** $n = 2$, $d = 1$, $r(x) = \sqrt{1 + x^2}$,
# $f_{1,2}(x) = r(x) \pm \tfrac12 r(x) \sin\sqrt{r(x)}$ (the square roots lost in the
# extracted text restored as the proof requires). Claims: $f_1, f_2$ satisfy
# Assumption 1 with $L = 9/4$, $\sigma_f^\star \le 1/2$, and for any $\zeta, \psi \ge 0$
# the BGD condition (3) fails somewhere. The proof: along
# $x_k = \sqrt{(2k\pi)^4 - 1}$ the left-hand side of (3) is at least $(k\pi)^2/8$,
# while $\|\nabla f\|^2 = |r'|^2 < 1$, so no finite $\zeta^2 + \psi^2$ covers all $x$.
#
# **Here.** `fa.theory.theorem1_values` checks the constants on $[-1000, 1000]$ (which
# holds $x_1, \dots, x_5$), and `fa.theory.bgd_sum` computes the smallest
# $\zeta^2 + \psi^2$ valid on growing intervals $[-X, X]$.

# %%
p1 = fa.problems.bgd_counterexample()
v = fa.theory.theorem1_values(ks=(1, 2, 3, 4, 5), domain=(-1000.0, 1000.0),
                              num_points=100_001, problem=p1)
print(f"max |f_i''| on [-1000, 1000] = {v.max_abs_second_derivative:.4f} (L = {v.L_bound})")
print(f"f_1* = {v.f1_star:.6f}, f_2* = {v.f2_star:.6f}, sigma_f* = {v.sigma_f_star:.2e} (<= 1/2)")
print(f"{'k':>2} {'x_k':>9} {'BGD lhs':>9} {'(k pi)^2/8':>11}")
for row in zip(v.ks, v.x_k, v.bgd_lhs, v.lower_bound):
    print(f"{row[0]:>2} {row[1]:9.2f} {row[2]:9.3f} {row[3]:11.3f}")
widths = [50.0, 200.0, 1000.0]
sums = [fa.theory.bgd_sum(p1, domain=(-X, X), num_points=40_001).total for X in widths]
print("smallest zeta^2 + psi^2 valid on [-X, X]:",
      ", ".join(f"X = {X:g}: {s:.2f}" for X, s in zip(widths, sums)))

smooth_ok = v.max_abs_second_derivative <= v.L_bound
sigma_ok = v.sigma_f_star <= 0.5
lhs_ok = bool(np.all(v.bgd_lhs >= v.lower_bound) and np.all(np.diff(v.bgd_lhs) > 0))
grows = bool(np.all(np.diff(sums) > 0))
print(f"\nL = 9/4 bounds |f''|: {smooth_ok} | sigma_f* <= 1/2: {sigma_ok} | "
      f"lhs >= (k pi)^2/8 and growing: {lhs_ok} | BGD sum grows with the interval: {grows}")
for claim, ok in (("L = 9/4 bounds |f_i''|", smooth_ok), ("sigma_f* <= 1/2", sigma_ok),
                  ("BGD lhs >= (k pi)^2/8 along x_k, growing", lhs_ok),
                  ("smallest BGD sum grows with the interval", grows)):
    verdicts.append(("Theorem 1", claim, "yes" if ok else "no"))

xs = np.linspace(0.0, 1000.0, 20_001)
dissim, gns = fa.theory.gradient_dissimilarity(p1, xs[:, None])
fig, ax = plt.subplots(figsize=(6, 3.4))
ax.plot(xs, dissim, lw=0.6, label="$\\frac{1}{2}\\sum_i |f_i'(x) - f'(x)|^2$ (lhs of 3)")
ax.plot(xs, gns, lw=1.0, label="$|f'(x)|^2$")
ax.plot(v.x_k, v.lower_bound, "s", ms=4, label="$(k\\pi)^2/8$ at $x_k$")
ax.set(yscale="log", ylim=(1e-4, None), xlabel="x", title="Theorem 1: the BGD left-hand side is unbounded")
ax.legend(fontsize=7)
plt.show()

# %% [markdown]
# ## Second edition: which reading of Section IV-B reproduces Table II, and Remark 4
#
# `fedjax-abc reproduce table2_hypotheses` reruns Table II with one setting changed at a
# time and tests each alternative against the twelve printed gaps (chi-square, max |z|,
# the S-ordering); `remark4` sets the sampling term of (24) against that of [10] as Q
# grows. Below: the paper-scale results committed in `docs/results` (a table read from
# the JSON), then the leading alternative rerun here at reduced scale, then Remark 4.

# %%
import json
import pathlib

results = pathlib.Path(fa.__file__).resolve().parents[1] / "docs" / "results"  # this checkout's
hyp = json.loads((results / "table2_hypotheses.json").read_text())
print(f"{'alternative':<22} {'chi2':>10} {'dof':>4} {'p':>9} {'max|z|':>8}  verdict")
for a in hyp["alternatives"]:
    label = "as stated" if a["value"] is None else f"{a['setting']} = {a['value']}"
    print(f"{label:<22} {a['chi2']:10.3g} {a['dof']:4d} {a['p_value']:9.2g} "
          f"{a['max_abs_z']:8.3g}  {a['verdict']}")

# %%
# The stated alpha = 1e-4 against the alternative alpha = 1e-3 (the stepsize of Fig. 1 and
# of Fig. 3 at Q = 10), Dmax = 20, S in {4, 40}, at 20 trials: which is nearer the paper?
P2 = paper.TABLE2
d20 = fa.problems.huber_offsets(offsets=offsets.paper_offsets(20.0, P2["n"]))
for alpha in (P2["alpha"], 1e-3):
    row = []
    for S in (4, 40):
        res = fa.simulate(d20, num_sampled=S, local_steps=P2["Q"], stepsize=alpha,
                          rounds=P2["T"], x0=d20.x_star + P2["x0_offset"], trials=20,
                          key=jax.random.key(S), mode="gather" if S < P2["n"] else "mask",
                          record_x=False)
        g = res.final("gap")
        row.append(f"S={S}: {g.mean:.2e} +- {g.stderr:.1e} (paper {paper.TABLE2_GAP[20.0][S]:.2e}, "
                   f"z = {(g.mean - paper.TABLE2_GAP[20.0][S]) / g.stderr:+.1f})")
    print(f"alpha = {alpha:g}: " + "; ".join(row))

# %%
r4 = json.loads((results / "remark4.json").read_text())
fig, ax = plt.subplots(figsize=(6, 3.5))
for row in r4["rows"]:
    line, = ax.loglog(r4["Q"], row["ours"], label=f"(24), Dmax = {row['d_max']:g}")
    ax.loglog(r4["Q"], row["yang2021"], "--", color=line.get_color())
ax.set_xlabel("local steps Q")
ax.set_ylabel("sampling term")
ax.set_title("sampling term of (24) (solid) against [10]'s (dashed)")
ax.legend(fontsize=7)
plt.show()
for row in r4["rows"]:
    slope_ours = np.polyfit(np.log(r4["Q"]), np.log(row["ours"]), 1)[0]
    slope_yang = np.polyfit(np.log(r4["Q"]), np.log(row["yang2021"]), 1)[0]
    print(f"Dmax = {row['d_max']:g}: slope in Q of (24)'s term {slope_ours:+.2f}, of [10]'s "
          f"{slope_yang:+.2f}; [10]'s is larger from Q = {row['crossover_Q']:.0f}")

# %% [markdown]
# ## Lemmas 4-8: where the bound's slack comes from
#
# `fa.theory.lemma_diagnostics` estimates both sides of (15)-(19) at given points x_t by
# Monte Carlo over one round (every virtual trajectory and the sampled set). Here on
# problem (27) with Dmax = 20, S = 4, at x* + 10 and near x*, at the paper's stepsize and at
# alpha_8 = 1/(8 Q (L + C)), the largest that meets every lemma's condition (500
# replicates). `fedjax-abc reproduce lemmas` runs the full table of `docs/reproduction.md`.

# %%
from fedjax_abc.repro import lemmas as repro_lemmas

case = repro_lemmas.cases(dict(paper.TABLE2, d_max=[20.0], S=[4]))[0]
k = repro_lemmas.constants(case)
alpha8 = 1.0 / (8 * case["Q"] * (k["L"] + k["C"]))
pts = np.asarray(case["problem"].x_star)[None] + np.array([[10.0], [0.5]])
print(f"L = {k['L']:.3g}, C = {k['C']:.3g}, D = {k['D']:.3g}, sigma_f* = {k['sigma_f_star']:.3g}")
print(f"{'alpha':>9} {'x_t - x*':>8} " + " ".join(f"{e:>13}" for e in
                                               ("(15)", "(16)", "(17)", "(18)", "(19)")))
slack = {}
for alpha in (case["alpha"], alpha8):
    diag = fa.theory.lemma_diagnostics(jax.random.key(7), case["problem"], pts, stepsize=alpha,
                                       num_sampled=4, local_steps=case["Q"], L=k["L"], C=k["C"],
                                       D=k["D"], num_replicates=500)
    slack[alpha] = np.array([c.ratio for c in diag.checks])  # (5 inequalities, 2 points)
    for j, off in enumerate((10.0, 0.5)):
        cells = [f"{c.ratio[j]:8.3g} {'ok' if c.holds[j] else 'NO':>4}" for c in diag.checks]
        print(f"{alpha:9.2e} {off:8g} " + " ".join(f"{x:>13}" for x in cells))
    verdicts.append(("Lemmas", f"(15)-(19) hold at alpha = {alpha:.2g}",
                     "yes" if all(c.holds.all() for c in diag.checks) else "no"))

fig, ax = plt.subplots(figsize=(6, 3.2))
for i, (alpha, r) in enumerate(slack.items()):
    ax.bar(np.arange(5) + 0.4 * i - 0.2, r[:, 0], width=0.4,
           label=f"alpha = {alpha:.2g}, x_t = x* + 10")
ax.set_xticks(range(5), ["(15)", "(16)", "(17)", "(18)", "(19)"])
ax.set_yscale("log")
ax.set_ylabel("slack rhs / lhs")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Summary of the checks
#
# Every verdict below was computed above from this run. "direction only" means the
# means are ordered as claimed but not every step is significant at this number of
# trials; more trials (full scale) are the way to settle it.

# %%
width = max(len(c) for _, c, _ in verdicts)
for exp, claim, verdict in verdicts:
    print(f"{exp:<10} {claim:<{width}}  {verdict}")

# %% [markdown]
# ## Full scale
#
# The command line runs every experiment at the paper's scale (100 trials, the paper's
# $T$, all 16 values of $Q$ in Fig. 3) and writes `<name>.json`, `.csv` and `.png`
# into `--out`, printing its progress and the time left on stderr:
#
# ```bash
# fedjax-abc reproduce all --out results            # fig1, table2, fig3, thm1, thm2, thm3
# fedjax-abc reproduce fig3 --trials 20 --out results   # one experiment, fewer trials
# fedjax-abc reproduce all --quick --out results    # reduced scale, not comparable with the paper
# fedjax-abc report --results results --out docs/reproduction.md
# ```
#
# `python -m fedjax_abc` is the same command. Every run records its configuration,
# the seed and a command that repeats it in its JSON file.
