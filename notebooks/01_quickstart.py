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
# # Quickstart: FedAvg with partial participation, many trials in one call
#
# `fedjax_abc` simulates Algorithm 1 of *On Federated Averaging with Partial Participation
# under a General Variance Condition* (Wang, Huang, Johansson, Pu): in every round the
# server samples $S$ of the $n$ clients uniformly without replacement, each runs $Q$
# stochastic gradient steps with stepsize $\alpha$ from the current model $x_t$, and the
# server averages their local models. Hundreds of independent trials run as one compiled
# XLA program.
#
# This notebook: define a problem, run 200 trials in one call, plot the mean gap
# $f(x_t) - f^\star$ with a 95% band, change $S$ and watch the curve move, then write a
# problem and a stochastic gradient oracle of your own.
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

# %% [markdown]
# ## 1. A problem
#
# Problem (27) of the paper (Section IV-B): $n = 40$ clients with Huber losses
# $f_i(x) = \mathrm{Huber}(x - d_i)$, offsets $d_1 = d_2 = 0$ and
# $d_3, \dots, d_n \sim U[0, D_{\max}]$, and the oracle
# $g_i(x; \varepsilon) = \nabla f_i(x) + \varepsilon \sqrt{f_i(x) - f_i^\star}$ with
# $\varepsilon = \pm 1$ equally likely. Its variance is $f_i(x) - f_i^\star$: the ABC
# condition (4) with $C = 1$, $D = 0$. A `fa.Problem` carries the losses, the local
# infima $f_i^\star$, $f^\star$ and a minimiser $x^\star$ (computed in float64 when it is
# built) and its oracle.

# %%
problem = fa.problems.huber_offsets(jax.random.key(0), n=40, d_max=20.0)
print(problem.name)
print("clients n =", problem.num_clients, "| dimension d =", problem.dim)
print(f"x* = {float(problem.x_star[0]):.6f}, f* = {float(problem.f_star):.6f}")
print(f"sigma_f* = f* - mean_i f_i* = {float(problem.sigma_f_star):.6f}  (eq. 11)")
print("oracle:", type(problem.oracle).__name__)

# %% [markdown]
# ## 2. 200 trials in one call
#
# $S = 4$ clients per round, $Q = 10$ local steps, $\alpha = 10^{-3}$, $T = 6000$
# rounds from $x_0 = x^\star + 10$, 200 trials, the gap recorded every 20 rounds. Trial
# $r$ uses the key `fold_in(key, r)`, so its result does not depend on how many trials
# run beside it. Everything runs in float64 unless `dtype="float32"` is asked for.

# %%
settings = dict(local_steps=10, stepsize=1e-3, rounds=6000, x0=problem.x_star + 10.0,
                trials=200, record_every=20)
start = time.perf_counter()
res = fa.simulate(problem, num_sampled=4, key=jax.random.key(1), **settings)
print(f"{res.trials} trials x {settings['rounds']} rounds: {time.perf_counter() - start:.1f} s, "
      "compilation included")
print("res.gap", res.gap.shape, "| res.grad_norm_sq", res.grad_norm_sq.shape,
      "| res.x", res.x.shape, "| res.x_final", res.x_final.shape)
fin = res.final("gap")  # mean over trials at t = T, standard error, normal 95% interval
print(f"f(x_T) - f*: mean {fin.mean:.3e}, stderr {fin.stderr:.1e}, "
      f"95% interval [{fin.ci_low:.3e}, {fin.ci_high:.3e}]")


# %% [markdown]
# `res.summary("gap")` gives the same per recorded round. The band is
# mean $\pm$ 1.96 standard errors over the trials (clipped at a small positive value for
# the log axis).

# %%
def plot_band(ax, result, label, field="gap"):
    s = result.summary(field)
    floor = s.mean[s.mean > 0].min() * 1e-2
    line, = ax.plot(result.rounds, s.mean, label=label, lw=1.3)
    ax.fill_between(result.rounds, np.maximum(s.ci_low, floor), s.ci_high,
                    color=line.get_color(), alpha=0.25, lw=0)
    return line


fig, ax = plt.subplots(figsize=(6, 3.4))
plot_band(ax, res, "S = 4")
ax.set(yscale="log", xlabel="round t", ylabel="$f(x_t) - f^\\star$",
       title=f"{problem.name}: Q = 10, alpha = 1e-3, {res.trials} trials")
ax.legend()
plt.show()

# %% [markdown]
# ## 3. Change S and watch the curve move
#
# $S = n = 40$ is full participation. Theorem 2's bound (21) has a noise term that falls
# like $1/S$ and a client-sampling term proportional to $I_S / S$, with
# $I_S = (n - S)/(n - 1)$, which vanishes at $S = n$; so we expect fewer sampled clients
# to leave a higher floor. The same key is used for every $S$: the noise of client $i$ in
# round $t$ depends only on the trial, $t$ and $i$, so the runs share their random
# numbers as far as the algorithm allows. `mode="gather"` computes only the sampled
# clients (the default `"mask"` runs all $n$ virtual trajectories of Section II-A and
# averages the sampled ones; same key, same result).

# %%
runs = {4: res}
for S in (1, 40):
    runs[S] = fa.simulate(problem, num_sampled=S, key=jax.random.key(1),
                          mode="gather" if S < problem.num_clients else "mask", **settings)

fig, ax = plt.subplots(figsize=(6, 3.4))
for S in sorted(runs):
    plot_band(ax, runs[S], f"S = {S}" + (" (full participation)" if S == 40 else ""))
ax.set(yscale="log", xlabel="round t", ylabel="$f(x_t) - f^\\star$",
       title="the same problem, Q = 10, alpha = 1e-3, 200 trials per S")
ax.legend()
plt.show()

# %% [markdown]
# Where the curves end up: each trial's mean gap over the last third of the run
# ($t \ge 4000$), averaged over trials, and whether a curve is still falling there (mean
# over $5000 < t \le 6000$ against $4000 \le t \le 5000$).

# %%
window = res.rounds >= 4000
early, late = window & (res.rounds <= 5000), res.rounds > 5000
levels = {S: fa.summarize(runs[S].gap[:, window].mean(axis=1)) for S in sorted(runs)}
print(f"{'S':>3} {'I_S':>6} {'mean gap, t >= 4000':>20} {'stderr':>9} {'late / early':>13}")
for S, lv in levels.items():
    g = runs[S].summary("gap").mean
    print(f"{S:>3} {fa.theory.sampling_factor(40, S):6.3f} {lv.mean:20.3e} {lv.stderr:9.1e} "
          f"{g[late].mean() / g[early].mean():13.2f}")
order = sorted(levels)
falls = all(levels[a].ci_low > levels[b].ci_high for a, b in zip(order, order[1:]))
print("the gap over t >= 4000 falls as S grows, 95% intervals disjoint:", falls)
print(f"S = 1 over S = 40: {levels[1].mean / levels[40].mean:.0f}x "
      "(a late / early ratio well below 1 means that curve is still falling at T)")


# %% [markdown]
# ## 4. A problem and an oracle of your own
#
# `fa.make_problem(loss, params, oracle)` takes one client's loss
# `loss(params_i, x) -> f_i(x)` and the per-client parameters (every leaf with leading
# axis $n$). Gradients come from `jax.grad` unless a closed form `grad_fn` is given.
# Whatever of $f_i^\star$, $f^\star$, $x^\star$ is not given is found numerically in
# float64 (multi-start L-BFGS-B in `search_box` for $d > 1$); give closed forms when you
# know them.
#
# An oracle subclasses `fa.AbstractOracle` with two methods: `noise` draws everything one
# client needs for its $Q$ local steps of one round (shape `(Q, d)`), and `gradient`
# turns one step's slice of it into $g_i(x; \xi)$. Below: $n = 6$ clients in
# $\mathbb{R}^2$ with $f_i(x) = \log(1 + \|x - c_i\|^2)$ (smooth, nonconvex,
# $f_i^\star = 0$), and Laplace noise scaled so that
# $\mathbb{E}\|g_i - \nabla f_i\|^2 = C (f_i(x) - f_i^\star) + D$, the ABC bound (4)
# with equality.

# %%
class LaplaceABC(fa.AbstractOracle):
    """g_i = grad f_i + z sqrt((C (f_i - f_i*) + D) / d), z i.i.d. Laplace with variance 1."""

    C: float
    D: float

    def noise(self, key, shape, dtype):  # shape (Q, d): all local steps of one round
        return jax.random.laplace(key, shape, dtype) / jnp.sqrt(2.0)

    def gradient(self, problem, client, x, z):  # one local step, z = that step's noise
        f, g = problem.local_value_and_grad(client, x)  # autodiff of the loss
        return g + z * jnp.sqrt((self.C * (f - client.local_min) + self.D) / x.shape[-1])


def cauchy_loss(centre, x):
    return jnp.log1p(jnp.sum((x - centre) ** 2))


centres = jnp.array([[-2.0, 0.0], [0.0, 1.5], [3.0, -1.0], [1.0, 2.0], [-1.0, -2.0],
                     [2.5, 2.5]])
custom = fa.make_problem(cauchy_loss, centres, LaplaceABC(C=1.0, D=0.1), dim=2,
                         local_minima=jnp.zeros(len(centres)), search_box=(-5.0, 5.0),
                         name="log(1 + |x - c_i|^2), n = 6, d = 2")
print(custom.name)
print("x* =", np.asarray(custom.x_star), f"| f* = {float(custom.f_star):.6f}",
      f"| sigma_f* = {float(custom.sigma_f_star):.6f}")

# %% [markdown]
# Check the oracle before trusting a simulation: `fa.theory.oracle_variance` estimates
# $\mathbb{E}\|g_i(x) - \nabla f_i(x)\|^2$ by Monte Carlo for every client at given
# points; it should match $C(f_i - f_i^\star) + D$ within its standard error.

# %%
points = np.asarray(jax.random.uniform(jax.random.key(2), (16, 2), minval=-4.0, maxval=4.0))
var = fa.theory.oracle_variance(custom, domain=points, key=jax.random.key(3), num_samples=4096)
target = 1.0 * var.gap + 0.1
z = (var.variance - target) / var.stderr
print(f"{var.variance.size} (point, client) pairs; Monte Carlo variance / target: "
      f"{np.min(var.variance / target):.3f} .. {np.max(var.variance / target):.3f}")
print(f"largest |z| = {np.max(np.abs(z)):.2f} (of {z.size} roughly normal z-scores)")

# %%
cres = fa.simulate(custom, num_sampled=2, local_steps=5, stepsize=0.02, rounds=1000,
                   x0=[4.0, -4.0], trials=200, key=jax.random.key(4), record_every=10,
                   mode="gather")
xf = cres.final("x_final")
print("f(x_T) - f*:", f"{cres.final('gap').mean:.3e} (stderr {cres.final('gap').stderr:.1e})")
print("mean x_T:", xf.mean, "| x*:", np.asarray(custom.x_star))

grid = np.linspace(-4.5, 4.5, 121)
xx, yy = np.meshgrid(grid, grid)
ff = jax.vmap(custom.value)(jnp.stack([xx.ravel(), yy.ravel()], axis=1)).reshape(xx.shape)
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6))
plot_band(ax1, cres, "S = 2 of n = 6")
ax1.set(yscale="log", xlabel="round t", ylabel="$f(x_t) - f^\\star$",
        title="custom problem, Q = 5, alpha = 0.02, 200 trials")
ax1.legend()
ax2.contour(xx, yy, np.asarray(ff), levels=20, linewidths=0.6)
ax2.scatter(*np.asarray(centres).T, marker="x", color="k", label="centres $c_i$")
ax2.scatter(*cres.x_final.T, s=5, alpha=0.5, label="$x_T$ of each trial")
ax2.scatter(*np.asarray(custom.x_star), marker="*", s=120, color="r", label="$x^\\star$")
ax2.scatter([4.0], [-4.0], marker="o", color="g", label="$x_0$")
ax2.set(aspect="equal", title="level sets of f")
ax2.legend(fontsize=7, loc="upper left")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## Next
#
# - `02_reproduce_paper.ipynb`: the experiments of Section IV and Theorem 1 at reduced
#   scale, each claim of the paper checked against the numbers.
# - `03_theory_explorer.ipynb`: $\sigma_f^\star$ against the BGD constants, the bound of
#   Theorem 2 against simulation, Remark 3, and the effect of $Q$ at fixed $\alpha Q$.
# - `fedjax-abc reproduce all` runs the paper's experiments at full scale.
