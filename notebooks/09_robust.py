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
# # Byzantine clients and robust aggregation
#
# Some clients may send whatever they like. `fa.robust` holds the aggregation rules that
# resist them (coordinate-wise median, trimmed mean, Krum, the geometric median, nearest
# neighbour mixing before a rule, ...), the attacks of the literature (sign flip, inner
# product manipulation, "a little is enough", mimic, and their optimised versions) and
# `fa.robust.Byzantine`, the set of f clients that lie, drawn anew in every trial. The
# definitions are ByzFL's, and every rule and attack gives ByzFL 0.0.11's output on the
# same input, to rounding (`tests/test_robust_rules.py`). In a run the rule acts on the participants'
# updates (message minus x_t for FedAvg) and the server adds the result to x_t.
#
# This notebook, on heterogeneous quadratics with n = 20 clients:
#
# 1. the heterogeneity constants $G^2, B^2$ of $(G, B)$-gradient dissimilarity and the
#    breakdown fraction $1/(2 + B^2)$ they predict;
# 2. the final error of six rules against the fraction f/n of Byzantine clients under
#    "a little is enough", 64 trials per point, each rule one compiled program for all f;
# 3. a grid of rules x attacks in `fa.sweep`, and each rule's worst attack;
# 4. each rule's empirical robustness coefficient kappa against its published bound;
# 5. a small softmax regression under sign flipping and label flipping, with the mean and
#    the median.
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

import fedjax_abc as fa
from fedjax_abc import robust as rb

jax.config.update("jax_enable_x64", True)  # float64, as the comparisons with theory need
fa.use_cpu_cores()  # one CPU device per core, over which the trials are sharded

# %matplotlib inline
plt.rcParams.update({"figure.dpi": 80, "axes.grid": True, "grid.alpha": 0.3, "font.size": 9})
np.set_printoptions(precision=4)
print("fedjax_abc", fa.__version__, "| jax", jax.__version__, "| float64:",
      jax.config.jax_enable_x64)
start_wall, start_cpu = time.perf_counter(), time.process_time()

# %% [markdown]
# ## 1. The problem, its heterogeneity and the predicted breakdown
#
# $f_i(x) = \frac12 \sum_j a_{ij}(x_j - c_{ij})^2$ in $\mathbb{R}^{10}$ with curvatures
# $a_{ij} \sim U[0.5, 1]$ and centres $c_{ij} \sim N(0, 1)$, and the Gaussian oracle of
# variance $(f_i(x) - f_i^\star) + 0.1$. Under $(G, B)$-gradient dissimilarity,
# $\frac1n \sum_i \|\nabla f_i(x) - \nabla f(x)\|^2 \le G^2 + B^2 \|\nabla f(x)\|^2$ (the
# package's BGD condition, eq. (3), with $\zeta^2 = G^2$, $\psi^2 = B^2$), Allouah et al.
# (NeurIPS 2023) show that no rule keeps the error bounded once f/n reaches
# $1/(2 + B^2)$. `fa.theory.bgd_sum` fits the smallest $\zeta^2 + \psi^2$ on points
# around $x^\star$: here 2000 points at distances up to 3.5 from it (the runs below start
# at distance $\sqrt{10} \approx 3.16$).

# %%
n, d = 20, 10
problem = fa.problems.quadratics(jax.random.key(0), n=n, d=d, curvature=(0.5, 1.0))
x_star = np.asarray(problem.x_star)
directions = jax.random.normal(jax.random.key(1), (2000, d))
directions /= jnp.linalg.norm(directions, axis=1, keepdims=True)
radii = 3.5 * jax.random.uniform(jax.random.key(2), (2000, 1))
points = x_star + radii * directions
bgd = fa.theory.bgd_sum(problem, points)
G_sq, B_sq = bgd.zeta_sq, bgd.psi_sq
breakdown = fa.theory.breakdown_fraction(np.sqrt(B_sq))
print(f"G^2 = zeta^2 = {G_sq:.3f}, B^2 = psi^2 = {B_sq:.4f} on {bgd.num_points} points")
print(f"predicted breakdown fraction 1/(2 + B^2) = {breakdown:.3f}, i.e. f = "
      f"{breakdown * n:.2f} of n = {n}; a rule that needs n > 2f takes f <= {(n - 1) // 2}")

# %% [markdown]
# ## 2. The error against f/n under "a little is enough"
#
# FedAvg with every client participating, Q = 2 local steps of size 0.05, T = 100 rounds
# from $x_0 = x^\star + 1$ (enough to reach the noise floor), 64 trials. In each trial f clients drawn at random are
# Byzantine (`Byzantine(attack, f=f)`) and send, in place of their update,
# $\bar u_H + \tau\, s_H$ (the honest updates' mean plus $\tau$ times their
# coordinate-wise standard deviation: Baruch et al.'s ALIE), with $\tau = 1.5$. Baruch
# et al.'s $z_{\max}$ (`rb.alie_z_max`), printed below, is at most 1.3 for n = 20 and not
# positive for f <= 1, so a fixed $\tau$ is used. ALIE is built to sit inside the spread
# of the honest updates, where a rule cannot tell it from them, while it moves the plain
# mean by only $(f/n)\,\tau\, s_H$. The rules that take f (trimmed mean, Krum, NNM) are
# given the true f.
#
# The f of the rules and of `Byzantine` are integer array leaves: a new f is new data for
# the same compiled program, so each rule compiles once for all its values of f (the
# first call's time below includes the compilation). Krum needs n >= 2f + 3 slots in a
# run (Blanchard et al.'s condition), so it stops at f = 8; the others need n > 2f. The
# runs use the SplitMix64 hash of
# random words (`generator="splitmix"`), which compiles faster than the default
# Threefry; the distributions are the same.

# %%
print("alie_z_max(20, f) for f = 2..9:", np.round([rb.alie_z_max(n, f) for f in range(2, 10)], 3))
TAU, Q, STEPSIZE, T, TRIALS = 1.5, 2, 0.05, 100, 64
run_kw = dict(num_sampled=None, local_steps=Q, stepsize=STEPSIZE, rounds=T, record_every=T,
              x0=x_star + 1.0, trials=TRIALS, key=jax.random.key(3), generator="splitmix")
rules = {  # name -> the rule for f Byzantine clients
    "mean": lambda f: rb.WeightedMean(),
    "median": lambda f: rb.Median(),
    "trimmed mean": lambda f: rb.TrimmedMean(f),
    "Krum": lambda f: rb.Krum(f),
    "NNM + trimmed mean": lambda f: rb.compose(rb.NNM(f), rb.TrimmedMean(f)),
    "geometric median": lambda f: rb.GeometricMedian(nu=1e-8, iterations=20),
}
fs = [0, 1, 3, 5, 7, 8, 9]
f_max = {name: (n - 3) // 2 if name == "Krum" else (n - 1) // 2 for name in rules}
final = {}
for name, rule in rules.items():
    times = []
    for f in [f for f in fs if f <= f_max[name]]:
        t0 = time.perf_counter()
        res = fa.simulate(problem, aggregator=rule(f),
                          byzantine=rb.Byzantine(rb.ALittleIsEnough(TAU), f=f), **run_kw)
        times.append(time.perf_counter() - t0)
        final[name, f] = res.final("gap")
    print(f"{name:>18}: first f {times[0]:4.1f} s (compiles), the other {len(times) - 1} "
          f"{sum(times[1:]):4.1f} s in all")

# %%
fig, ax = plt.subplots(figsize=(7, 4))
for name in rules:
    frac = np.array([f for f in fs if f <= f_max[name]]) / n
    s = [final[name, f] for f in fs if f <= f_max[name]]
    mean = np.array([x.mean for x in s])
    line, = ax.plot(frac, mean, "o-", ms=3, label=name)
    ax.fill_between(frac, np.array([x.ci_low for x in s]), np.array([x.ci_high for x in s]),
                    color=line.get_color(), alpha=0.2, lw=0)
ax.axvline(breakdown, color="k", ls="--", lw=1)
ax.text(breakdown, 0.97, " predicted\n breakdown\n 1/(2+B²)", transform=ax.get_xaxis_transform(),
        va="top", ha="right", fontsize=8)
ax.set_yscale("log")
ax.set_xlim(-0.01, 0.5)
ax.set_xlabel("fraction of Byzantine clients f/n")
ax.set_ylabel("f(x_T) - f*  (mean over 64 trials, 95% band)")
ax.set_title(f"ALIE (tau = {TAU}), n = {n}, T = {T}, Byzantine sets drawn per trial")
ax.legend(fontsize=8)
plt.show()

print("final gap, mean over 64 trials:")
print(f"{'f':>18} " + " ".join(f"{f:>7d}" for f in fs))
for name in rules:
    print(f"{name:>18} " + " ".join(f"{final[name, f].mean:7.3g}" if f <= f_max[name] else
                                    f"{'-':>7}" for f in fs))
for name in ("median", "Krum", "geometric median"):
    print(f"without attack, {name}: final gap {final[name, 0].mean / final['mean', 0].mean:.1f} "
          "times the mean's")
for f in (fs[-2], fs[-1]):
    order = sorted([r for r in rules if f <= f_max[r]], key=lambda r: final[r, f].mean)
    print(f"f = {f} (f/n = {f / n:.2f}): smallest final gap {order[0]} "
          f"({final[order[0], f].mean:.3g} +- {final[order[0], f].ci95:.2g}), largest "
          f"{order[-1]} ({final[order[-1], f].mean:.3g} +- {final[order[-1], f].ci95:.2g})")
beats = [f for f in fs if f and final["NNM + trimmed mean", f].ci_high < final["trimmed mean", f].ci_low]
print(f"NNM + trimmed mean below the trimmed mean alone (95% intervals apart) at f = {beats}")

# %% [markdown]
# ## 3. Rules x attacks, and each rule's worst attack
#
# f = 4 Byzantine clients (f/n = 0.2) drawn per trial; six attacks: inner product
# manipulation (IPM, $-\tau \bar u_H$) with $\tau \in \{0.1, 1, 3\}$ (IPM with
# $\tau = 1$ is the sign flip) and ALIE with $\tau \in \{0.5, 1.5, 3\}$. One `fa.sweep`
# runs the grid: values of the same classes differ in data only and run as one program
# (six rules x two attack classes: twelve programs). `SweepResult.worst("byzantine")`
# picks, for each rule, the attack with the largest mean final gap.

# %%
F = 4
attacks = {"IPM 0.1": rb.InnerProductManipulation(0.1), "sign flip": rb.InnerProductManipulation(1.0),
           "IPM 3": rb.InnerProductManipulation(3.0), "ALIE 0.5": rb.ALittleIsEnough(0.5),
           "ALIE 1.5": rb.ALittleIsEnough(1.5), "ALIE 3": rb.ALittleIsEnough(3.0)}
t0 = time.perf_counter()
grid = fa.sweep(problem, grid={"aggregator": [rule(F) for rule in rules.values()],
                               "byzantine": [rb.Byzantine(a, f=F) for a in attacks.values()]},
                labels={"aggregator": list(rules), "byzantine": list(attacks)}, **run_kw)
print(f"{len(grid)} grid points in {time.perf_counter() - t0:.1f} s")
worst, worst_attack = grid.worst("byzantine")
gaps, high = grid.final().mean, worst.final()
print(f"final gap f(x_T) - f*, mean over {TRIALS} trials, f = {F} of n = {n}")
print(f"{'rule':>18} " + " ".join(f"{a:>9}" for a in attacks) + "  worst attack: gap +- 95%")
for i, name in enumerate(rules):
    print(f"{name:>18} " + " ".join(f"{g:9.3g}" for g in gaps[i])
          + f"  {worst_attack[i]:>9}: {high.mean[i]:.3g} +- {high.ci95[i]:.2g}")
best = int(np.argmin(high.mean))
print(f"smallest worst-case error: {list(rules)[best]} ({high.mean[best]:.3g}); "
      f"largest: {list(rules)[int(np.argmax(high.mean))]} ({high.mean.max():.3g})")

# %% [markdown]
# ## 4. Empirical robustness coefficients against the published bounds
#
# A rule $F$ is $(f, \kappa)$-robust (Allouah et al., AISTATS 2023) when for any inputs and
# any set $H$ of $n - f$ of them $\|F(x) - \bar x_H\|^2 \le \frac{\kappa}{|H|}
# \sum_{i \in H} \|x_i - \bar x_H\|^2$; their Table 1 gives each rule's certified
# $\kappa(n, f)$ (`rule.kappa(n, f)`, None where none is published), and no rule has
# $\kappa < f/(n - 2f)$. `fa.theory.robustness` measures the ratio over drawn rounds;
# its largest value estimates, from below, the coefficient the rule has against that
# attack. Honest inputs: the 16 honest clients' gradients at 300 points drawn around
# $x^\star$ (N(0, 0.3^2 I) offsets), so that the spread is the problem's heterogeneity;
# f = 4.

# %%
pts = x_star + 0.3 * jax.random.normal(jax.random.key(4), (300, d))
honest = jax.vmap(problem.local_grads)(pts)[:, F:, :]  # (rounds, n - f, d)
kappa_attacks = {"sign flip": rb.SignFlip(), "ALIE 1.5": rb.ALittleIsEnough(1.5),
                 "mimic": rb.Mimic(), "opt. IPM": rb.OptimalInnerProductManipulation(),
                 "opt. ALIE": rb.OptimalALittleIsEnough()}
t0 = time.perf_counter()
kappa = {(name, a): fa.theory.robustness(rule(F), attack, honest, F)
         for name, rule in rules.items() for a, attack in kappa_attacks.items()}
print(f"{len(kappa)} measurements in {time.perf_counter() - t0:.1f} s; "
      f"lower bound f/(n - 2f) = {F / (n - 2 * F):.3f}")
print(f"{'rule':>18} " + " ".join(f"{a:>9}" for a in kappa_attacks) + "  published kappa")
within = []
for name in rules:
    row = [kappa[name, a].worst for a in kappa_attacks]
    pub = kappa[name, "sign flip"].published
    print(f"{name:>18} " + " ".join(f"{k:9.3g}" for k in row)
          + f"  {'none' if pub is None else f'{pub:.3g}'}")
    if pub is not None:
        within.append(max(row) <= pub)
print(f"largest measured ratio at most the published kappa for all {len(within)} rules with "
      f"one: {all(within)}")
below = [(r, a) for (r, a), k in kappa.items() if k.worst < F / (n - 2 * F)]
print(f"{len(below)} of {len(kappa)} (rule, attack) pairs stay below f/(n - 2f) on these "
      "inputs: the lower bound is over all inputs, not these attacks")

# %% [markdown]
# The mean has no published coefficient: its ratio grows without bound with the size of
# the Byzantine vectors (the optimised IPM makes it blow up). The measured ratios are
# lower bounds of each rule's coefficient on these inputs; the published values bound
# them over every input.
#
# ## 5. A learning problem under sign flipping and label flipping
#
# Softmax regression (`fa.problems.softmax_regression`) on a small Synthetic(1, 1) of Li
# et al. (20 clients, 10 features, 5 classes, at most 100 samples a client), mini-batches
# of 10, Q = 5, $\alpha = 0.1$, T = 100, 32 trials; f = 4 clients drawn per trial send
# the sign-flipped honest mean (and f = 0 for the runs without attack), or, under label
# flipping (`rb.LabelFlip()`, ByzFL's), the mean of the honest clients' updates computed
# on their data with the labels flipped, y -> K - 1 - y (the run repeats every client's
# local steps on the flipped data). With the mean the sign flip shrinks the step, by
# `fa.theory.ipm_contraction(20, 4, 1)`, and leaves the Byzantine clients' data out; the
# coordinate-wise median ignores how large the flipped updates are, and the runs without
# attack show what its filtering costs on heterogeneous clients. Each client of Synthetic(1, 1) labels its data with its own
# random weights, so one global model's held-out accuracy is low even without attack.

# %%
data = fa.data.synthetic_data(jax.random.key(5), 1.0, 1.0, num_clients=n, num_features=10,
                              num_classes=5, max_samples=100)
learn = fa.problems.softmax_regression(data.features, data.labels, l2=1e-3,
                                       num_classes=data.num_classes, oracle=fa.MinibatchOracle(10))
learn_kw = dict(num_sampled=None, local_steps=5, stepsize=0.1, rounds=100, record_every=10,
                x0=np.zeros(learn.dim), trials=32, key=jax.random.key(6), generator="splitmix",
                mode="gather", metrics=fa.problems.held_out_metrics(
                    learn, data.test_features, data.test_labels))
learned = {}
for rule in ("mean", "median"):
    for f, attack, name in ((0, rb.SignFlip(), "no attack"),  # f = 0: the same program
                            (4, rb.SignFlip(), "sign flip"), (4, rb.LabelFlip(), "label flip")):
        learned[f"{rule}, {name}"] = fa.simulate(
            learn, aggregator=rules[rule](f), byzantine=rb.Byzantine(attack, f=f), **learn_kw)
print(f"ipm_contraction(20, 4, 1) = {fa.theory.ipm_contraction(n, 4, 1.0):.2f}; "
      f"chance accuracy 1/{data.num_classes} = {1 / data.num_classes:.2f}")
for name, r in learned.items():
    g, acc = r.final("gap"), r.final("test_accuracy")
    print(f"{name:>18}: f(x_T) - f* = {g.mean:.4f} +- {g.ci95:.4f}, test accuracy "
          f"{acc.mean:.3f} +- {acc.ci95:.3f}")

fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
for name, r in learned.items():
    for ax, field in zip(axes, ("gap", "test_accuracy")):
        s = r.summary(field)
        line, = ax.plot(r.rounds, s.mean, label=name)
        ax.fill_between(r.rounds, s.ci_low, s.ci_high, color=line.get_color(), alpha=0.2, lw=0)
axes[0].set(yscale="log", xlabel="round t", ylabel="f(x_t) - f*")
axes[1].set(xlabel="round t", ylabel="test accuracy")
axes[0].legend(fontsize=8)
plt.tight_layout()
plt.show()
for a, b in (("median, no attack", "mean, no attack"), ("median, sign flip", "mean, sign flip"),
             ("mean, sign flip", "mean, no attack"), ("median, label flip", "mean, label flip"),
             ("mean, label flip", "mean, no attack")):
    x, y = learned[a].final("test_accuracy"), learned[b].final("test_accuracy")
    z = (x.mean - y.mean) / np.hypot(x.stderr, y.stderr)
    verdict = "higher than" if z > 1.96 else "lower than" if z < -1.96 else \
        "not significantly different from"
    print(f"test accuracy, {a}: {verdict} {b} (z = {z:+.1f})")

# %%
wall, cpu = time.perf_counter() - start_wall, time.process_time() - start_cpu
print(f"this notebook: {wall:.0f} s wall clock, {cpu:.0f} s of CPU time in its kernel, "
      f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
