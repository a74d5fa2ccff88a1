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
# # Personalised and fair federated learning against closed forms
#
# Personalisation gives every client a model of its own; fairness methods weigh the
# clients so that none is left with a large loss. `fa.algorithms` holds Ditto, pFedMe,
# Per-FedAvg (Hessian-free and first-order), APFL, FedRep, FedPer, IFCA, q-FFL, AFL and
# `FineTuned` (any algorithm's clients evaluated after local fine-tuning). A run with
# `record_clients=True` records every client's own model, `SimResult.client_x`
# (trials, records, n, d), and its loss $f_i$ there, `SimResult.client_loss`
# (trials, records, n); `fa.stats.fairness` summarises those losses across the clients
# (worst, best, mean, variance, Gini coefficient, 10% quantile) with 95% intervals over
# trials. On quadratic clients every one of these methods has a closed-form fixed point
# in `fa.theory`, derived in its docstring.
#
# This notebook:
#
# 1. with exact gradients and every client in every round, each method's distance to its
#    closed-form fixed point, round by round, down to rounding; and a deliberately wrong
#    assertion, the first-order Per-FedAvg run against the Hessian-free point, which misses
#    by the first-order bias;
# 2. with noisy gradients and 4 of 8 clients a round, over 64 trials: the personal models'
#    distance to the fixed point (a noise floor), and the mean over trials of the personal
#    models against the fixed point;
# 3. softmax regression on a small Synthetic(1, 1): each client's held-out accuracy with
#    its own model under FedAvg, FedAvg with fine-tuning, Ditto and APFL, with the
#    fairness summaries across the clients.
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

A, T = fa.algorithms, fa.theory
jax.config.update("jax_enable_x64", True)  # float64: the exact runs go down to rounding
fa.use_cpu_cores()  # one CPU device per core, over which the trials are sharded

# %matplotlib inline
plt.rcParams.update({"figure.dpi": 80, "axes.grid": True, "grid.alpha": 0.3, "font.size": 9})
np.set_printoptions(precision=4)
print("fedjax_abc", fa.__version__, "| jax", jax.__version__, "| float64:",
      jax.config.jax_enable_x64)
start_wall, start_cpu = time.perf_counter(), time.process_time()

# %% [markdown]
# ## 1. Every method at its closed-form fixed point
#
# n = 8 clients $f_i(x) = \frac12 \sum_j a_{ij}(x_j - b_{ij})^2$ in $\mathbb{R}^3$ with
# curvatures $a_{ij} \sim U[0.5, 2]$ and centres $b_{ij} \sim N(0, 1)$, the first
# coordinate shifted by $-4$ for clients 0-3 and by $+4$ for clients 4-7: two separated
# clusters, for IFCA. The closed forms of q-FFL and AFL are for two clients of scalar
# curvature: they run on $a = (1, 3)$, $b_1 = (0, 1, 0)$, $b_2 = (2, -1, 1)$. Every run:
# exact gradients (`oracle=fa.ExactOracle()`), every client in every round, Q = 3 local
# steps of size $\eta = 0.2$, T = 300 rounds from $x_0 = (3, -2, 1)$. In the table $a_i$
# stands for client i's curvatures (the formulas hold coordinate by coordinate) and
# $c_i = 1 - (1 - \eta a_i)^Q$.
#
# | method | its fixed point (`fa.theory`) |
# | --- | --- |
# | `Ditto(lam=0.7)` | $v_i^\star = (a_i b_i + \lambda w^\star)/(a_i + \lambda)$, $w^\star$ FedAvg's (`ditto_fixed_point`) |
# | `PFedMe(lam=1, inner_steps=3, inner_stepsize=0.2, beta=0.8)` | FedAvg's point on curvatures $a_i\lambda(1 - \rho_i^K)/(a_i + \lambda)$, personal $\theta_i(x^\star)$ (`pfedme_fixed_point`) |
# | `PerFedAvg(0.2, "hf")` (central differences, exact on quadratics), `PerFedAvg(0.2, "fo")` | curvatures $a_i(1 - \alpha a_i)^2$ (HF) and $a_i(1 - \alpha a_i)$ (FO), personal $x^\star - \alpha \nabla f_i(x^\star)$ (`perfedavg_fixed_point`) |
# | `APFL(0.7)` | the mixture $\alpha v_i^\star + (1 - \alpha) w^\star$ (`apfl_fixed_point`) |
# | `FineTuned(FedAvg(), steps=5, stepsize=0.3)` | $b_i + (1 - \gamma a_i)^K (w^\star - b_i)$ (`fine_tuned_personal`) |
# | `FedRep(head, head_steps=1)`, `FedPer(head)`, head = the last coordinate | head at $b_i$'s, body at FedAvg's point with Q - 1 (FedRep) or Q (FedPer) steps (`body_head_fixed_point`) |
# | `IFCA(2, offsets)` | each cluster's FedAvg point over its members (`ifca_fixed_point`) |
# | `QFFL(q=1, lipschitz=1/eta)`, two clients | on the segment, $\|w - b_1\|/\|b_2 - w\| = (a_2^q c_2 / (a_1^q c_1))^{1/(2q+1)}$ (`qffl_two_clients`) |
# | `AFL(lambda_stepsize=0.02)`, two clients | the minimax point, where $f_1 = f_2$ (`afl_minimax`) |
#
# The distance of a run to its fixed point at round t is
# $\max_i \|v_{i,t} - v_i^\star\|$, $v_{i,t}$ client i's own model (`client_x`: the
# cluster's model for IFCA, the global model for q-FFL and AFL).

# %%
def quadratic_clients(a, b, oracle):
    """f_i(x) = (1/2) sum_j a_ij (x_j - b_ij)^2 with closed-form gradients and minima."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    x_star = (a * b).sum(0) / a.sum(0)
    f_star = float(np.mean(0.5 * np.sum(a * (x_star - b) ** 2, axis=1)))
    return fa.make_problem(lambda p, x: 0.5 * jnp.sum(p[0] * (x - p[1]) ** 2),
                           (jnp.asarray(a), jnp.asarray(b)), oracle, dim=b.shape[1],
                           local_minima=np.zeros(len(a)), f_star=f_star, x_star=x_star,
                           grad_fn=lambda p, x: p[0] * (x - p[1]), name="quadratics")


n, d = 8, 3
rng = np.random.default_rng(0)
cluster = np.repeat([0, 1], n // 2)
a = rng.uniform(0.5, 2.0, (n, d))
b = rng.normal(0.0, 1.0, (n, d))
b[:, 0] += np.where(cluster == 0, -4.0, 4.0)
problem = quadratic_clients(a, b, fa.GaussianOracle(0.5, 0.2))  # the noise of section 2
a2, b2 = np.array([1.0, 3.0]), np.array([[0.0, 1.0, 0.0], [2.0, -1.0, 1.0]])
two = quadratic_clients(a2[:, None] * np.ones((2, d)), b2, fa.GaussianOracle(0.5, 0.2))

ETA, Q, ROUNDS, EVERY = 0.2, 3, 300, 5
LAM, ALPHA_PF, ALPHA_APFL, K_FT, GAMMA_FT = 0.7, 0.2, 0.7, 5, 0.3
x0 = np.array([3.0, -2.0, 1.0])
head = np.array([False, False, True])
w_fedavg = T.fedavg_fixed_point(a, b, ETA, Q)
ifca_point = T.ifca_fixed_point(a, b, cluster, stepsize=ETA, local_steps=Q)
qffl_point = T.qffl_two_clients(a2, b2, 1.0, local_steps=Q, stepsize=ETA)
afl_point = T.afl_minimax(a2, b2, local_steps=Q, stepsize=ETA)
methods = {  # name -> (problem, algorithm, every client's model at the fixed point (n, d))
    "Ditto": (problem, A.Ditto(LAM), T.ditto_fixed_point(a, b, LAM, ETA, Q).personal),
    "pFedMe": (problem, A.PFedMe(1.0, 3, 0.2, beta=0.8),
               T.pfedme_fixed_point(a, b, 1.0, 3, 0.2, ETA, Q).personal),
    "Per-FedAvg HF": (problem, A.PerFedAvg(ALPHA_PF, "hf"),
                      T.perfedavg_fixed_point(a, b, ALPHA_PF, ETA, Q, "hf").personal),
    "Per-FedAvg FO": (problem, A.PerFedAvg(ALPHA_PF, "fo"),
                      T.perfedavg_fixed_point(a, b, ALPHA_PF, ETA, Q, "fo").personal),
    "APFL": (problem, A.APFL(ALPHA_APFL),
             T.apfl_fixed_point(a, b, ALPHA_APFL, ETA, Q).personal),
    "FedAvg + fine-tuning": (problem, A.FineTuned(A.FedAvg(), steps=K_FT, stepsize=GAMMA_FT),
                             T.fine_tuned_personal(a, b, w_fedavg, K_FT, GAMMA_FT)),
    "FedRep": (problem, A.FedRep(head, head_steps=1),
               T.body_head_fixed_point(a, b, head, stepsize=ETA, body_steps=Q - 1)),
    "FedPer": (problem, A.FedPer(head),
               T.body_head_fixed_point(a, b, head, stepsize=ETA, body_steps=Q)),
    "IFCA": (problem, A.IFCA(2, offsets=[[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]),
             ifca_point.models[cluster]),
    "q-FFL": (two, A.QFFL(1.0, lipschitz=1 / ETA), np.tile(qffl_point, (2, 1))),
    "AFL": (two, A.AFL(0.02, num_clients=2), np.tile(afl_point.x, (2, 1))),
}
print(f"IFCA's assignment of the two clusters is a fixed point (each client's loss lowest "
      f"at its own cluster's model): {ifca_point.consistent}")


def distance(client_x, point):
    """max_i ||v_i - v_i*|| over the clients, for every trial and record."""
    return np.linalg.norm(np.asarray(client_x) - point, axis=-1).max(axis=-1)


exact, dist = {}, {}
t0 = time.perf_counter()
for name, (p, algorithm, point) in methods.items():
    exact[name] = fa.simulate(p, algorithm=algorithm, oracle=fa.ExactOracle(), local_steps=Q,
                              stepsize=ETA, rounds=ROUNDS, x0=x0, trials=1,
                              key=jax.random.key(0), record_every=EVERY, record_clients=True)
    dist[name] = distance(exact[name].client_x[0], point)
rounds = exact["Ditto"].rounds
print(f"{len(methods)} exact runs in {time.perf_counter() - t0:.1f} s")
print(f"{'method':>21}  {'distance at t = 0':>17}  {'at T = 300':>10}  first round below 1e-12")
for name, dst in dist.items():
    below = rounds[np.argmax(dst < 1e-12)] if np.any(dst < 1e-12) else "-"
    print(f"{name:>21}  {dst[0]:17.3g}  {dst[-1]:10.2e}  {below}")
print(f"largest final distance: {max(dst[-1] for dst in dist.values()):.1e}")

# %% [markdown]
# ### A deliberately wrong assertion
#
# The first-order variant drops the Hessian term $-\alpha H_i u$ of the local step. Its
# run asserted against the Hessian-free fixed point (what a test of Per-FedAvg would
# assert if it did not tell the variants apart) must fail, and it must miss by the
# first-order bias $x^\star_{FO} - x^\star_{HF}$ (`perfedavg_first_order_bias`).

# %%
hf = T.perfedavg_fixed_point(a, b, ALPHA_PF, ETA, Q, "hf")
bias = T.perfedavg_first_order_bias(a, b, ALPHA_PF, ETA, Q)
fo_x = exact["Per-FedAvg FO"].x_final[0]
try:
    np.testing.assert_allclose(fo_x, hf.x, rtol=0, atol=1e-8)
    print("the first-order run sits at the Hessian-free point")
except AssertionError as err:
    print("assert_allclose(first-order run's x_T, Hessian-free x*, atol=1e-8) fails:")
    print("\n".join(line for line in str(err).splitlines() if "Max absolute" in line
                    or "Mismatched" in line))
print(f"first-order bias x*_FO - x*_HF = {bias}, norm {np.linalg.norm(bias):.4f}")
print(f"the run's x_T - x*_HF          = {fo_x - hf.x}; it differs from the bias by "
      f"{np.abs(fo_x - hf.x - bias).max():.1e}")
wrong = distance(exact["Per-FedAvg FO"].client_x[0], hf.personal)
print(f"the first-order run's personal models against the Hessian-free ones: "
      f"max_i ||v_i - v_i*|| = {wrong[-1]:.4f} at T = {ROUNDS}")

fig, ax = plt.subplots(figsize=(9.5, 4.2))
for name, dst in dist.items():
    ax.plot(rounds, dst, lw=1.2, label=name, ls="--" if name in ("q-FFL", "AFL") else "-")
ax.plot(rounds, wrong, color="k", lw=1.5, ls=":", label="Per-FedAvg FO vs the HF point (wrong)")
ax.set_yscale("log")
ax.set_xlabel("round t")
ax.set_ylabel(r"$\max_i \|v_{i,t} - v_i^\star\|$")
ax.set_title(f"exact gradients, every client each round, Q = {Q}, eta = {ETA} "
             "(q-FFL and AFL: two clients)")
ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 2. Noise and partial participation, 64 trials
#
# The same eight clients with the Gaussian oracle of variance $0.5 (f_i(x) - f_i^\star) +
# 0.2$, S = 4 clients drawn uniformly without replacement in each round (only they take
# local steps and update their client states), T = 300 rounds, 64 trials. For the methods
# below a round is affine in the server's model and the clients' states, the gradient
# noise has mean zero and the draw of the participants is independent of the state: the
# expectation over trials then follows the exact recursion of section 1, so the mean of
# the personal models over trials tends to the same fixed point, while each trial's
# models keep a spread around it. (IFCA's cluster choice, q-FFL's powers of the losses
# and AFL's projection are not affine: their mean over noisy trials need not sit at the
# exact fixed point, and they are left out here.)
#
# Left: the mean over trials of the root mean square over the clients of
# $\|v_{i,t} - v_i^\star\|$, with 95% bands. Right: the distance of the trials' mean
# personal models to the fixed point, $\max_i \|\bar v_{i,t} - v_i^\star\|$. Below, the
# test: each trial's personal models averaged over rounds 150 to 300 (31 records, after
# the start is forgotten; the average has the same expectation and less noise than one
# record), then each of the n x d = 24 coordinates of their mean over trials against the
# closed form, $z = (\bar v - v^\star) / \mathrm{se}$, se from the spread over the 64
# independent trials. Where the closed form holds, the largest of the 24 $|z|$ exceeds
# the $1 - 0.025/24$ quantile of Student's t with 63 degrees of freedom (3.21) with
# probability at most about 5%. The same test of the first-order runs against the
# Hessian-free point is the negative control: it must fail.

# %%
NOISY = ["Ditto", "pFedMe", "Per-FedAvg HF", "Per-FedAvg FO", "APFL", "FedAvg + fine-tuning",
         "FedRep"]
S, T_NOISY, TRIALS, SETTLED = 4, 300, 64, 150
noisy = {}
t0 = time.perf_counter()
for name in NOISY:
    p, algorithm, point = methods[name]
    noisy[name] = fa.simulate(p, algorithm=algorithm, num_sampled=S, local_steps=Q,
                              stepsize=ETA, rounds=T_NOISY, x0=x0, trials=TRIALS,
                              key=jax.random.key(1), record_every=EVERY, record_clients=True,
                              generator="splitmix")
print(f"{len(NOISY)} runs of {TRIALS} trials in {time.perf_counter() - t0:.1f} s")

z_limit = scipy.stats.t.ppf(1 - 0.025 / (n * d), TRIALS - 1)


def settled(r):
    """Each trial's personal models averaged over the records from round SETTLED on."""
    return np.asarray(r.client_x)[:, r.rounds >= SETTLED].mean(axis=1)  # (trials, n, d)


def max_z(v, point):
    """The largest |mean over trials - v*| / standard error over the n x d coordinates."""
    se = v.std(axis=0, ddof=1) / np.sqrt(len(v))
    return np.max(np.abs(v.mean(axis=0) - point) / se)


fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
print(f"{'method':>21}  {'RMS distance at T':>19}  {'mean of trials: distance':>24}  max |z|")
for name in NOISY:
    r, point = noisy[name], methods[name][2]
    cx = np.asarray(r.client_x)
    rms = fa.summarize(np.sqrt(np.mean(np.sum((cx - point) ** 2, axis=-1), axis=-1)))
    of_mean = np.linalg.norm(cx.mean(axis=0) - point, axis=-1).max(axis=-1)
    line, = axes[0].plot(r.rounds, rms.mean, lw=1.2, label=name)
    axes[0].fill_between(r.rounds, rms.ci_low, rms.ci_high, color=line.get_color(), alpha=0.2,
                         lw=0)
    axes[1].plot(r.rounds, of_mean, lw=1.2, color=line.get_color())
    print(f"{name:>21}  {rms.mean[-1]:10.3f} +- {rms.ci95[-1]:.3f}  {of_mean[-1]:24.3f}  "
          f"{max_z(settled(r), point):7.2f}")
axes[0].set(yscale="log", xlabel="round t", ylabel=r"RMS$_i \|v_{i,t} - v_i^\star\|$ (95% band)",
            title=f"{TRIALS} trials, S = {S} of n = {n}, noisy gradients")
axes[1].set(yscale="log", xlabel="round t", ylabel=r"$\max_i \|\bar v_{i,t} - v_i^\star\|$",
            title="the mean over trials against the fixed point")
axes[0].legend(fontsize=7)
plt.tight_layout()
plt.show()

zs = {name: max_z(settled(noisy[name]), methods[name][2]) for name in NOISY}
print(f"largest |z| above {z_limit:.2f} (the 5% level for {n * d} coordinates): "
      f"{[name for name, z in zs.items() if z > z_limit] or 'none'}")
z_wrong = max_z(settled(noisy["Per-FedAvg FO"]), hf.personal)
print(f"negative control, the first-order runs against the Hessian-free personal models: "
      f"max |z| = {z_wrong:.1f}, {'above' if z_wrong > z_limit else 'not above'} {z_limit:.2f}")

# %% [markdown]
# ## 3. Personalised accuracy and fairness on federated data
#
# Softmax regression (`fa.problems.softmax_regression`, $\ell_2 = 10^{-3}$) on a
# Synthetic(1, 1) of Li et al. with 20 clients, 10 features, 5 classes and at most 100
# samples a client. Each client labels its data with its own random weights, so the
# clients disagree and one global model serves them unequally. The pooled test set of
# `synthetic_data` does not say whose a sample is; here every client keeps the last 25%
# of its (shuffled) samples as its own held-out set (12 to 25 samples) and trains on the
# rest. Mini-batches of 10, S = 10 of 20 clients a round, Q = 5, $\eta = 0.1$, T = 100
# rounds, 32 trials, for:
#
# - FedAvg (every client's model is the global model);
# - FedAvg + fine-tuning, `FineTuned(FedAvg(), steps=10, stepsize=0.1)`: the same
#   training, each client's model the global model after 10 full-batch gradient steps on
#   its own training data;
# - Ditto with $\lambda = 0.1$ and APFL with $\alpha = 0.5$ (fixed): their personal models
#   are trained in the rounds a client takes part in.
#
# A client's held-out accuracy is that of its own model on its own held-out samples,
# computed here with NumPy from `client_x` (logits $X W + b$, $x = $ ravel$(W, b)$).
# `fa.stats.fairness` summarises the clients' training losses $f_i$ at their own models
# (`client_loss`) and, given the array of held-out error rates (1 - accuracy, trials x
# clients), those too: the worst client and the Gini coefficient across clients, each
# the mean over trials with its 95% interval.

# %%
C, P, K = 20, 10, 5
data = fa.data.synthetic_data(jax.random.key(5), 1.0, 1.0, num_clients=C, num_features=P,
                              num_classes=K, max_samples=100, train_fraction=1.0)
cut = [int(0.75 * m) for m in data.sizes]
train_x = [x[:c] for x, c in zip(data.features, cut)]
train_y = [y[:c] for y, c in zip(data.labels, cut)]
test_x = [x[c:] for x, c in zip(data.features, cut)]
test_y = [y[c:] for y, c in zip(data.labels, cut)]
learn = fa.problems.softmax_regression(train_x, train_y, l2=1e-3, num_classes=K,
                                       oracle=fa.MinibatchOracle(10))
print(f"training samples per client {min(cut)}-{max(cut)}, held-out "
      f"{min(len(y) for y in test_y)}-{max(len(y) for y in test_y)}; d = {learn.dim}")


def held_out_accuracy(client_x):
    """Each client's accuracy on its own held-out samples: (..., C, d) -> (..., C)."""
    x = np.asarray(client_x)
    W = x[..., :P * K].reshape(x.shape[:-1] + (P, K))
    bias = x[..., P * K:]
    return np.stack([np.mean(np.argmax(test_x[i] @ W[..., i, :, :] + bias[..., i, None, :],
                                       axis=-1) == test_y[i], axis=-1)
                     for i in range(C)], axis=-1)


learners = {"FedAvg": A.FedAvg(),
            "FedAvg + fine-tuning": A.FineTuned(A.FedAvg(), steps=10, stepsize=0.1),
            "Ditto": A.Ditto(0.1), "APFL": A.APFL(0.5)}
learn_kw = dict(num_sampled=10, local_steps=5, stepsize=0.1, rounds=100, record_every=10,
                x0=np.zeros(learn.dim), trials=32, key=jax.random.key(6), generator="splitmix",
                record_clients=True)
learned, acc, fair_loss, fair_err = {}, {}, {}, {}
t0 = time.perf_counter()
for name, algorithm in learners.items():
    learned[name] = r = fa.simulate(learn, algorithm=algorithm, **learn_kw)
    acc[name] = held_out_accuracy(r.client_x[:, -1])  # (trials, clients)
    fair_loss[name] = fa.stats.fairness(r)  # per record
    fair_err[name] = fa.stats.fairness(1 - acc[name])  # at T
print(f"{len(learners)} runs of 32 trials in {time.perf_counter() - t0:.1f} s")


def pm(s, i=None):
    """'mean +- ci95' of a Summary (at record i)."""
    m, c = (s.mean, s.ci95) if i is None else (s.mean[i], s.ci95[i])
    return f"{float(m):.3f} +- {float(c):.3f}"


print("at T = 100, means over 32 trials with 95% intervals")
print(f"{'':>21} | {'held-out accuracy':^36} | {'training loss f_i at own model':^54}")
print(f"{'method':>21} | {'mean client':>16} {'worst client':>16} | {'mean client':>16} "
      f"{'worst client':>16} {'Gini':>16}  | {'Gini of errors':>16}")
for name in learners:
    mean_acc, worst_acc = fa.summarize(acc[name].mean(axis=1)), fa.summarize(acc[name].min(axis=1))
    f = fair_loss[name]
    print(f"{name:>21} | {pm(mean_acc):>16} {pm(worst_acc):>16} | {pm(f.mean, -1):>16} "
          f"{pm(f.worst, -1):>16} {pm(f.gini, -1):>16}  | {pm(fair_err[name].gini):>16}")

# %%
fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
order = np.argsort(acc["FedAvg"].mean(axis=0))
for j, (name, r) in enumerate(learned.items()):
    s = fa.summarize(acc[name])
    axes[0].errorbar(np.arange(C) + 0.15 * (j - 1.5), s.mean[order], yerr=s.ci95[order],
                     fmt="o", ms=3, lw=0.8, label=name)
    for ax, field in zip(axes[1:], ("worst", "gini")):
        f = getattr(fair_loss[name], field)
        line, = ax.plot(r.rounds, f.mean, lw=1.2, label=name)
        ax.fill_between(r.rounds, f.ci_low, f.ci_high, color=line.get_color(), alpha=0.2, lw=0)
axes[0].set(xlabel="client (sorted by FedAvg's accuracy)", ylabel="held-out accuracy at T",
            title="each client's own model (32 trials, 95% bars)")
axes[0].set_xticks(np.arange(C), order, fontsize=6)
axes[1].set(yscale="log", xlabel="round t", ylabel=r"worst client's $f_i$ (95% band)",
            title="worst training loss across clients")
axes[2].set(xlabel="round t", ylabel="Gini coefficient of the $f_i$ (95% band)",
            title="spread of the training losses")
axes[0].legend(fontsize=7)
plt.tight_layout()
plt.show()


def compare(name, field, label):
    """A statement on name's value against FedAvg's, from the 95% intervals at T."""
    if field == "worst accuracy":
        x, y = fa.summarize(acc[name].min(axis=1)), fa.summarize(acc["FedAvg"].min(axis=1))
        x, y = (float(x.mean), float(x.ci_low), float(x.ci_high)), \
            (float(y.mean), float(y.ci_low), float(y.ci_high))
    else:
        fx, fy = getattr(fair_loss[name], field), getattr(fair_loss["FedAvg"], field)
        x, y = (fx.mean[-1], fx.ci_low[-1], fx.ci_high[-1]), (fy.mean[-1], fy.ci_low[-1],
                                                               fy.ci_high[-1])
    verdict = "higher than" if x[1] > y[2] else "lower than" if x[2] < y[1] else \
        "not separated from"
    print(f"{label}, {name}: {x[0]:.3f}, {verdict} FedAvg's {y[0]:.3f} (95% intervals)")


for name in list(learners)[1:]:
    compare(name, "worst accuracy", "worst client's held-out accuracy")
    compare(name, "worst", "worst client's training loss")
    compare(name, "gini", "Gini coefficient of the training losses")
clients_up = {name: int(np.sum(acc[name].mean(axis=0) > acc["FedAvg"].mean(axis=0)))
              for name in list(learners)[1:]}
print(f"clients whose mean held-out accuracy is above FedAvg's: {clients_up} of {C}")

# %% [markdown]
# The Gini coefficient is the clients' mean absolute difference of losses over twice
# their mean: scaling every loss by the same factor leaves it as it is, and lowering the
# small losses by more than the large ones raises it, whatever the worst client's loss
# does. The worst client and the Gini coefficient answer different questions; the table
# holds both.

# %%
wall, cpu = time.perf_counter() - start_wall, time.process_time() - start_cpu
print(f"this notebook: {wall:.0f} s wall clock, {cpu:.0f} s of CPU time in its kernel, "
      f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
