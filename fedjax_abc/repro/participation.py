"""FedAvg under six participation models, with the sampling error measured and predicted.

``fedjax-abc compare --participation`` runs this module.

Two problems: (27) with the paper's offsets (Dmax = 20, n = 40, the sign oracle, Q = 10,
alpha = 1e-3, x0 = x* + 10), and softmax regression on Synthetic(1, 1) (n = 30 clients of
unequal sizes, at most 400 rows each, mini-batches of 10, Q = 5, alpha = 0.05, x0 = 0). Each runs FedAvg with
about S participants a round under:

- uniform: the paper's sampler, S without replacement;
- importance: S draws with replacement, p_i proportional to ||grad f_i(x0)|| (the optimal
  probabilities of Horvath & Richtarik for one round at x0), Hansen-Hurwitz weights;
- Poisson: each client with p_i = S/n, Horvitz-Thompson weights 1 / (n p_i);
- cyclic: four groups of consecutive clients, group t mod 4 in round t, S of it;
- Markov: each client leaves with probability 0.2 and returns with 0.1 a round
  (stationary availability 1/3), S of the available;
- stragglers: uniform S, each client completing K ~ uniform{1..Q} of its local steps.

Every setting gets the same key (paired trials). The curves are the mean gap with its 95%
band. **Sampling error, measured and predicted**: one round of FedAvg from x0 with exact
gradients and one local step gives x_1 = x0 - alpha A, A = sum_i M_i grad f_i(x0) the
sampler's aggregate; the mean over many trials of ||(x0 - x_1)/alpha - grad f(x0)||^2 is
the measured E||A - grad f(x0)||^2, beside ``fa.theory.sampling_error`` (Lemma 3 for the
sampler; the cyclic sampler's first round is group 0's). The stragglers' selection is
uniform's (their local work does not enter a one-step round), so they are not probed.
"""

from __future__ import annotations

import os

import numpy as np

from fedjax_abc.repro import common
from fedjax_abc.repro import offsets as offs

ORDER = ("uniform", "importance", "poisson", "cyclic", "markov", "stragglers")
SETTINGS = {
    "huber": dict(n=40, d_max=20.0, S=4, Q=10, alpha=1e-3, T=20_000, R=100, x0_offset=10.0,
                  probe=20_000),
    "synthetic": dict(n=30, S=5, Q=5, alpha=0.05, T=300, R=16, batch=10, probe=2_000,
                      max_samples=400),
}
QUICK = {"huber": dict(T=2_000, R=32, probe=4_000), "synthetic": dict(T=100, R=8, probe=400)}
PROBE_CHUNK = 100  # trials at once in a probe: a learning problem's full gradients are large


def local_gradients(problem, x) -> np.ndarray:
    """grad f_i(x) of every client, shape (n, d)."""
    import jax
    import jax.numpy as jnp

    x = jnp.asarray(x)
    g = jax.vmap(lambda i: problem.local_grad(problem.client(i), x))(
        jnp.arange(problem.num_clients))
    return np.asarray(g, np.float64)


def samplers(grads: np.ndarray, S: int) -> dict:
    """{name: (sampler, local_steps law or None)} of the comparison for gradients at x0."""
    import fedjax_abc as fa

    n = grads.shape[0]
    norms = np.linalg.norm(grads, axis=1) + 1e-12
    return {
        "uniform": fa.UniformWithoutReplacement(S),
        "importance": fa.ImportanceSampler(norms / norms.sum(), S),
        "poisson": fa.Poisson(np.full(n, S / n)),
        "cyclic": fa.Cyclic(4, S),
        "markov": fa.MarkovAvailability(0.2, 0.1, S),
        "stragglers": fa.UniformWithoutReplacement(S),
    }


def probe(problem, sampler, x0, alpha: float, trials: int, key) -> dict:
    """Measured E||A - grad f(x0)||^2 of one round (mean, stderr) beside the prediction."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    import fedjax_abc as fa

    x0 = np.asarray(x0, np.float64).reshape(-1)

    @eqx.filter_jit  # the problem and x0 as arguments: XLA does not fold their data
    def rounds(problem, sampler, x, keys):
        def one(k):  # Algorithm 1's round 0 of one trial (a stateful sampler's first round)
            return fa.fedavg_round(problem, fa.ExactOracle(), sampler, x, 0, alpha, k,
                                   local_steps=1, mode="gather")
        return jax.lax.map(one, keys, batch_size=PROBE_CHUNK)

    x1 = rounds(problem, sampler, jnp.asarray(x0), jax.random.split(key, trials))
    grads = local_gradients(problem, x0)
    A = (x0[None] - np.asarray(x1)) / alpha
    err = np.sum((A - grads.mean(0)) ** 2, axis=1)
    predicted = fa.theory.sampling_error(sampler, grads, round=0)
    m = common.mean_se(err)
    z = (m["mean"] - predicted.mse) / m["stderr"] if m["stderr"] > 0 else 0.0
    return {"measured": float(m["mean"]), "stderr": float(m["stderr"]),
            "predicted": predicted.mse, "z": float(z)}


def _problems(settings: common.Settings):
    import fedjax_abc as fa

    h = SETTINGS["huber"]
    huber = fa.problems.huber_offsets(offsets=offs.paper_offsets(h["d_max"], h["n"]))
    s = SETTINGS["synthetic"]
    synth = fa.problems.synthetic(common.run_key(settings.seed, "participation", 99), 1.0, 1.0,
                                  num_clients=s["n"], oracle=fa.MinibatchOracle(s["batch"]),
                                  max_samples=s["max_samples"])
    return {"huber": (huber, np.asarray(huber.x_star) + h["x0_offset"]),
            "synthetic": (synth, np.zeros(synth.dim))}


def run(settings: common.Settings, progress: common.Progress | None = None) -> dict:
    """Runs both problems and returns the document of ``participation.json``."""
    import warnings

    import fedjax_abc as fa

    progress = common.Progress("participation", enabled=False) if progress is None else progress
    plans = {}
    for name, P in SETTINGS.items():
        R, T, scale = settings.scale(P["R"], P["T"], QUICK[name]["R"], QUICK[name]["T"])
        plans[name] = (R, T, scale)
    progress.plan(sum(len(ORDER) * common.work_units(P["n"], P["S"], P["Q"], plans[k][1],
                                                     plans[k][0])
                      for k, P in SETTINGS.items()))
    doc = {"experiment": "participation", "problems": {}}
    for pid, (problem, x0) in _problems(settings).items():
        P = SETTINGS[pid]
        R, T, scale = plans[pid]
        probe_R = (QUICK[pid] if settings.quick else P)["probe"]
        grads = local_gradients(problem, x0)
        models = samplers(grads, P["S"])
        key = common.run_key(settings.seed, "participation", list(SETTINGS).index(pid))
        k = common.record_every(T, 250 if pid == "huber" else 25)  # f on all data: costly
        curves, table = {}, []
        for name in ORDER:
            sampler = models[name]
            steps = fa.UniformSteps(P["Q"]) if name == "stragglers" else P["Q"]
            callback = progress.task(f"{pid} {name}",
                                     common.work_units(P["n"], P["S"], P["Q"], T, R))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", fa.DivergenceWarning)
                res = fa.simulate(problem, sampler=sampler, local_steps=steps,
                                  stepsize=P["alpha"], rounds=T, x0=x0, trials=R, key=key,
                                  record_every=k, mode="gather", record_x=False,
                                  progress=callback, dtype=settings.precision)
            progress.finish_task()
            common.note_result(progress, f"{pid} {name}", res)
            gap = res.summary("gap")
            curves[name] = {"mean": gap.mean, "ci95": gap.ci95}
            final = res.final("gap")
            row = {"sampler": name, "class": type(sampler).__name__,
                   "gap": {"mean": final.mean, "ci95": final.ci95}}
            if name != "stragglers":
                row["sampling_error"] = probe(problem, sampler, x0, P["alpha"], probe_R,
                                              common.run_key(settings.seed, "participation",
                                                             7, ORDER.index(name)))
            table.append(row)
        doc["problems"][pid] = {
            "label": ("problem (27), paper offsets, Dmax = 20" if pid == "huber"
                      else "softmax regression, Synthetic(1, 1)"),
            "settings": dict(P, T=T, R=R, scale=scale, record_every=k, probe=probe_R),
            "rounds": res.rounds, "curves": curves, "table": table}
    R0, T0, scale0 = plans["huber"]
    config = common.base_config(settings, "participation", R0, T0, scale0)
    config.update(bands="mean +- 1.96 stderr over trials",
                  probe="one round from x0, exact gradients, Q = 1: "
                        "E||(x0 - x_1)/alpha - grad f(x0)||^2 against "
                        "fa.theory.sampling_error(sampler, grads(x0), round=0)")
    doc["config"] = config
    doc["verdicts"] = verdicts(doc)
    return doc


def verdicts(doc: dict) -> list[str]:
    """One line per probed sampler: measured within 4 standard errors of the prediction."""
    out = []
    for pid, p in doc["problems"].items():
        for row in p["table"]:
            se = row.get("sampling_error")
            if se is None:
                continue
            word = "agrees" if abs(se["z"]) <= 4 else "DISAGREES"
            out.append(f"{pid} {row['sampler']}: measured sampling error {se['measured']:.4g} "
                       f"+- {se['stderr']:.2g}, predicted {se['predicted']:.4g} "
                       f"(z = {se['z']:+.1f}): {word}")
    return out


def summary_text(doc: dict) -> str:
    """The final gaps and the sampling-error verdicts as plain text."""
    lines = []
    for pid, p in doc["problems"].items():
        s = p["settings"]
        lines.append(f"{p['label']}: FedAvg, S = {s['S']}, Q = {s['Q']}, alpha = {s['alpha']:g}, "
                     f"T = {s['T']}, R = {s['R']}")
        for row in p["table"]:
            g = row["gap"]
            lines.append(f"  {row['sampler']:11s} final gap {g['mean']:.4g} +- {g['ci95']:.2g}")
    return "\n".join(lines + [""] + doc["verdicts"])


def figure(doc: dict):
    """The mean gap with 95% bands per sampler, one panel per problem."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2))
    axes = fig.subplots(1, len(doc["problems"]), squeeze=False)[0]
    for ax, (pid, p) in zip(axes, doc["problems"].items()):
        rounds = np.asarray(p["rounds"])
        for name in ORDER:
            c = p["curves"][name]
            common.band(ax, rounds, c["mean"], c["ci95"], name)
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(p["label"], fontsize=10)
        ax.set_xlabel("communication round t")
    axes[0].set_ylabel(r"$f(x_t) - f^\star$")
    axes[0].legend(fontsize=8)
    return fig


def write(doc: dict, out: str) -> list[str]:
    """participation.json, participation.csv and participation.png."""
    paths = [common.write_json(os.path.join(out, "participation.json"), doc)]
    header = ["problem", "sampler", "class", "gap_mean", "gap_ci95", "sampling_error_measured",
              "sampling_error_stderr", "sampling_error_predicted", "z"]
    rows = []
    for pid, p in doc["problems"].items():
        for row in p["table"]:
            se = row.get("sampling_error") or {}
            rows.append([pid, row["sampler"], row["class"], row["gap"]["mean"],
                         row["gap"]["ci95"], se.get("measured"), se.get("stderr"),
                         se.get("predicted"), se.get("z")])
    paths.append(common.write_csv(os.path.join(out, "participation.csv"), header, rows))
    paths.append(common.save_figure(figure(doc), out, "participation.png"))
    return paths
