"""Utility against communication and against privacy: FedAvg and SCAFFOLD with compressed and
with differentially private updates.

``fedjax-abc compare --tradeoffs`` runs this module.

Problem: softmax regression on Synthetic(1, 1) (n = 200 clients, at most 200 rows each,
d = 610, mini-batches of 10, l2 = 1e-3), x0 = 0, the paper's sampler with S = 40, Q = 5,
alpha = 0.03 (the tuned pick of both algorithms in ``compare --tuned``), T = 200 rounds,
R = 16 trials on one key (paired across settings). Held-out accuracy on the pooled test set
is recorded inside the runs.

- **Bits**: each client's update Delta_i goes through one compressor: 32-bit floats (the
  baseline), QSGD with 4 levels, natural compression, RandK and error-feedback TopK with
  k = d / 10, and error-feedback Sign. The cumulative bits sent by all participants are
  counted exactly for each encoding (``SimResult.metrics["bits"]``). SCAFFOLD's
  Delta c_i = -c - Delta_i / (Q alpha) is computed from the compressed Delta_i, so the server
  forms it from the message itself: its bits are Delta_i's.
- **Privacy**: DP-FedAvg's transform (each update clipped to c = 0.3 and N(0, z^2 c^2 I)
  on the sum) for noise multipliers z, beside clipping alone (z = 0) and adaptive clipping
  (Andrew et al. 2021: c_t follows the median norm from c_0 = c; z = 2 split with the
  count's noise sigma_b = 2); the share of clipped updates is recorded. epsilon at
  delta = 1e-5 by RDP for sampling without replacement (``fa.theory.dp_epsilon``), recorded
  along each run (``SimResult.with_metrics``). SCAFFOLD's control variates follow from the
  clipped and noised Delta_i, and the server's c from the noised sum (post-processing), so
  the same epsilon holds for it.

Curves and bars: means over trials with 95% intervals (1.96 standard errors).
"""

from __future__ import annotations

import os

import numpy as np

from fedjax_abc.repro import common

SETTINGS = dict(n=200, S=40, Q=5, T=200, R=16, batch=10, max_samples=200, stepsize=0.03,
                clip=0.3, delta=1e-5, multipliers=[0.5, 1.0, 2.0, 4.0, 8.0],
                adaptive=dict(z=2.0, count_stddev=2.0, quantile=0.5, learning_rate=0.2),
                levels=4, k_fraction=0.1, records=20)
QUICK = dict(n=20, S=5, T=20, R=2, max_samples=60, multipliers=[1.0, 4.0], records=4)
ALGORITHMS = ("FedAvg", "SCAFFOLD")
COMPRESSORS = ("32-bit floats", "QSGD(4)", "natural", "RandK(d/10)", "EF TopK(d/10)", "EF sign")


def settings_of(settings: common.Settings) -> dict:
    """The settings of this run: SETTINGS, with QUICK's smaller problem for ``--quick``; the
    trials and rounds of ``--trials`` / ``--rounds``."""
    P = dict(SETTINGS, **(QUICK if settings.quick else {}))
    R, T, scale = settings.scale(SETTINGS["R"], SETTINGS["T"], QUICK["R"], QUICK["T"])
    return dict(P, R=R, T=T, scale=scale)


def compressors(d: int, levels: int, k_fraction: float) -> dict:
    """{name: transform} of the communication part, in COMPRESSORS' order."""
    import fedjax_abc as fa

    T = fa.transforms
    k = max(1, int(round(k_fraction * d)))
    return {"32-bit floats": T.NoCompression(), "QSGD(4)": T.QSGD(levels),
            "natural": T.Natural(), "RandK(d/10)": T.RandK(k),
            "EF TopK(d/10)": T.ErrorFeedback(T.TopK(k)), "EF sign": T.ErrorFeedback(T.Sign())}


def _algorithm(name: str):
    import fedjax_abc as fa

    return fa.algorithms.FedAvg() if name == "FedAvg" else fa.algorithms.Scaffold()


def _problem(settings: common.Settings, P: dict):
    import fedjax_abc as fa

    data = fa.data.synthetic_data(common.run_key(settings.seed, "tradeoffs", 99), 1.0, 1.0,
                                  P["n"], max_samples=P["max_samples"])
    problem = fa.problems.softmax_regression(data.features, data.labels,
                                             num_classes=data.num_classes,
                                             oracle=fa.MinibatchOracle(P["batch"]),
                                             name="synthetic(1,1) softmax")
    return problem, fa.problems.held_out_metrics(problem, data.test_features, data.test_labels)


def _curves(res, updates: int) -> dict:
    """What the document keeps of a run: mean curves with 95% half-widths, and finals;
    ``updates``: how many client updates the run sends (T S)."""
    out = {}
    for name in ["gap", "test_accuracy"] + [m for m in ("bits", "epsilon") if m in res.metrics]:
        s = res.summary(name)
        f = res.final(name)
        out[name] = {"mean": s.mean, "ci95": s.ci95, "final": float(f.mean),
                     "final_ci95": float(f.ci95)}
    if "clipped" in res.metrics:  # the share of the participants' updates that were clipped
        out["clipped_share"] = float(res.final("clipped").mean) / updates
    out["diverged"] = res.num_diverged
    gap = np.asarray(out["gap"]["mean"])
    out["unstable"] = _growing(gap)
    return out


def _growing(gap: np.ndarray) -> bool:
    """The mean gap ends above its start and above twice its value at mid-run (a noise
    floor levels off; a loop with a gain above 1 grows without bound)."""
    end, mid = gap[-1], gap[len(gap) // 2]
    return bool(not (end <= gap[0] or end <= 2 * mid))


def run(settings: common.Settings, progress: common.Progress | None = None) -> dict:
    """Runs both parts and returns the document of ``tradeoffs.json``."""
    import warnings

    import fedjax_abc as fa

    progress = common.Progress("tradeoffs", enabled=False) if progress is None else progress
    P = settings_of(settings)
    n, S, Q, T, R = P["n"], P["S"], P["Q"], P["T"], P["R"]
    problem, metrics = _problem(settings, P)
    sampler = fa.UniformWithoutReplacement(S)
    zs = [0.0] + list(P["multipliers"])
    work = common.work_units(n, S, Q, T, R)
    progress.plan(work * len(ALGORITHMS) * (len(COMPRESSORS) + len(zs) + 1))
    kw = dict(sampler=sampler, local_steps=Q, stepsize=P["stepsize"], rounds=T,
              x0=np.zeros(problem.dim), trials=R, key=common.run_key(settings.seed, "tradeoffs"),
              record_every=common.record_every(T, P["records"]), record_x=False,
              metrics=metrics, mode="gather", dtype=settings.precision)

    def epsilon(z, rounds):
        return fa.theory.dp_epsilon(z, sampler, rounds, P["delta"], num_clients=n,
                                    accountant="rdp")

    doc = {"experiment": "tradeoffs", "bits": {}, "privacy": {}}
    rounds = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fa.DivergenceWarning)
        for alg in ALGORITHMS:
            algorithm = _algorithm(alg)
            doc["bits"][alg] = {}
            for name, transform in compressors(problem.dim, P["levels"],
                                               P["k_fraction"]).items():
                callback = progress.task(f"{alg} {name}", work)
                res = fa.simulate(problem, algorithm=algorithm, transform=transform,
                                  progress=callback, **kw)
                progress.finish_task()
                common.note_result(progress, f"{alg} {name}", res)
                rounds = res.rounds
                doc["bits"][alg][name] = _curves(res, T * S)
            c = P["clip"]
            callback = progress.task(f"{alg} DP-FedAvg, {len(zs)} noise multipliers",
                                     work * len(zs))
            # DP-FedAvg as the chain it is, swept over the noise's stddev z c: the
            # published runs' program (a sweep of dp_fedavg's z multiplies z c batched,
            # which agrees to rounding)
            dp = fa.transforms.chain(fa.transforms.Clip(c),
                                     fa.transforms.GaussianNoise(c, shared=True))
            sw = fa.sweep(problem, grid={"transform.transforms.1.stddev": [z * c for z in zs]},
                          algorithm=algorithm, transform=dp, progress=callback, **kw)
            progress.finish_task()
            doc["privacy"][alg] = {}
            for z, res in zip(zs, sw.results):  # z = 0: clipping alone, no epsilon
                res = res.with_metrics(epsilon=epsilon(z, res.rounds)) if z else res
                doc["privacy"][alg][f"{z:g}"] = dict(_curves(res, T * S), z=z,
                                                     kind="fixed clip" if z else "clip only")
            a = P["adaptive"]
            callback = progress.task(f"{alg} adaptive clipping", work)
            res = fa.simulate(problem, algorithm=algorithm, progress=callback,
                              transform=fa.transforms.AdaptiveClipping(
                                  c, target_quantile=a["quantile"],
                                  learning_rate=a["learning_rate"], noise_multiplier=a["z"],
                                  count_stddev=a["count_stddev"]), **kw)
            progress.finish_task()
            res = res.with_metrics(epsilon=epsilon(a["z"], res.rounds))
            doc["privacy"][alg]["adaptive"] = dict(_curves(res, T * S), z=a["z"],
                                                   kind="adaptive")
    doc["rounds"] = rounds
    doc["settings"] = {k: v for k, v in P.items()}
    doc["settings"].update(d=problem.dim, label="softmax regression, Synthetic(1, 1)")
    config = common.base_config(settings, "tradeoffs", R, T, P["scale"])
    config.update(bands="mean +- 1.96 stderr over trials",
                  accountant="dp-accounting RDP, sampling without replacement (replace-one "
                             "neighbours), delta = %g" % P["delta"],
                  notes=["SCAFFOLD's Delta c_i = -c - Delta_i / (Q alpha) follows from the "
                         "transformed Delta_i: the server forms it from the message (no bits "
                         "beyond Delta_i's) and, under DP, the server's c from the noised sum "
                         "(post-processing: the same epsilon)",
                         "bits count the uplink (client to server) only",
                         "epsilon is user-level (a client's whole data), replace-one "
                         "neighbours, by RDP"])
    doc["config"] = config
    return doc


def _row(c: dict, name: str) -> str:
    return f"{c[name]['final']:.4g} +- {c[name]['final_ci95']:.2g}"


def summary_text(doc: dict) -> str:
    """The final gap, held-out accuracy, bits and epsilon of every setting."""
    s = doc["settings"]
    lines = [f"{s['label']}: n = {s['n']}, S = {s['S']}, Q = {s['Q']}, alpha = {s['stepsize']:g}, "
             f"T = {s['T']}, R = {s['R']}", "", "communication (final gap, held-out accuracy, "
             "total Mbit sent by the participants):"]
    for alg, runs in doc["bits"].items():
        base = runs["32-bit floats"]["bits"]["final"]
        for name, c in runs.items():
            mbit = c["bits"]["final"] / 1e6
            lines.append(f"  {alg:8s} {name:14s} gap {_row(c, 'gap'):20s} acc "
                         f"{_row(c, 'test_accuracy'):18s} {mbit:9.1f} Mbit "
                         f"({base / c['bits']['final']:.1f}x fewer)"
                         + ("  UNSTABLE (the gap grows)" if c["unstable"] else ""))
    lines += ["", f"privacy (clip c = {s['clip']:g}; epsilon at delta = {s['delta']:g}, RDP):"]
    for alg, runs in doc["privacy"].items():
        for key, c in runs.items():
            label = f"z = {c['z']:g}" + (" adaptive" if c["kind"] == "adaptive" else "")
            lines.append(f"  {alg:8s} {label:14s} gap {_row(c, 'gap'):20s} acc "
                         f"{_row(c, 'test_accuracy'):18s} epsilon "
                         + (f"{c['epsilon']['final']:.3g}" if "epsilon" in c else
                            "none (clipping alone)")
                         + f", {c['clipped_share']:.0%} clipped"
                         + ("  UNSTABLE (the gap grows)" if c["unstable"] else ""))
    lines += [""] + [f"note: {c}" for c in doc["config"]["notes"]]
    return "\n".join(lines)


def figure(doc: dict):
    """Gap and held-out accuracy against bits (curves) and against epsilon (final values)."""
    from matplotlib.figure import Figure

    from fedjax_abc._engine import plot_band

    fig = Figure(figsize=(11, 8))
    axes = fig.subplots(2, 2)
    styles = {"FedAvg": "-", "SCAFFOLD": "--"}
    off = {"bits": [], "privacy": []}
    for alg, runs in doc["bits"].items():
        for j, (name, c) in enumerate(runs.items()):
            color = f"C{j}"
            x = np.asarray(c["bits"]["mean"]) / 1e6
            keep = x > 0  # t = 0 sent nothing: off the log axis
            if not c["unstable"]:  # named in the panel instead
                common.band(axes[0, 0], x[keep], np.asarray(c["gap"]["mean"])[keep],
                            np.asarray(c["gap"]["ci95"])[keep], f"{alg} {name}",
                            color=color).set_linestyle(styles[alg])
            acc = c["test_accuracy"]
            plot_band(axes[0, 1], x[keep], np.asarray(acc["mean"])[keep],
                      np.asarray(acc["ci95"])[keep], log=False, color=color, lw=1.4,
                      ls=styles[alg])
            if c["unstable"]:
                off["bits"].append(f"{alg} {name}")
    axes[0, 0].set_xscale("log")
    axes[0, 1].set_xscale("log")
    axes[0, 0].set_yscale("log")
    axes[0, 0].set_ylabel(r"$f(x_t) - f^\star$")
    axes[0, 1].set_ylabel("held-out accuracy")
    for ax in axes[0]:
        ax.set_xlabel("Mbit sent by all participants (cumulative)")
    axes[0, 0].legend(fontsize=6, ncol=2)
    for alg, runs in doc["privacy"].items():
        noisy = [c for c in runs.values() if c["kind"] == "fixed clip"]
        eps = [c["epsilon"]["final"] for c in noisy]
        for ax, name in zip(axes[1], ("gap", "test_accuracy")):
            line = ax.errorbar(eps, [c[name]["final"] for c in noisy],
                               yerr=[c[name]["final_ci95"] for c in noisy], fmt="o" +
                               styles[alg], capsize=3, label=f"{alg}, clip c fixed")
            color = line[0].get_color()
            clip_only = runs["0"]
            ax.axhline(clip_only[name]["final"], color=color, ls=":", lw=1,
                       label=f"{alg}, clipping alone (no privacy)")
            a = runs["adaptive"]
            ax.errorbar([a["epsilon"]["final"]], [a[name]["final"]],
                        yerr=[a[name]["final_ci95"]], fmt="s", color=color, mfc="none",
                        capsize=3, label=f"{alg}, adaptive clipping")
        off["privacy"] += [f"{alg} {key}" for key, c in runs.items() if c["unstable"]]
    for ax, part, key in ((axes[0, 0], "bits", "mean"), (axes[1, 0], "privacy", "final")):
        stable = np.concatenate([np.ravel(c["gap"][key]) for runs in doc[part].values()
                                 for c in runs.values() if not c["unstable"]])
        stable = stable[stable > 0]
        if stable.size:
            ax.set_ylim(stable.min() / 2, stable.max() * 3)
        if off[part]:
            ax.text(0.02, 0.02, "off the scale, the gap grows:\n" + "\n".join(
                name.replace(" adaptive", " adaptive clipping") for name in off[part]),
                transform=ax.transAxes, fontsize=6, va="bottom")
    for ax in axes[1]:
        ax.set_xscale("log")
        ax.set_xlabel(r"$\varepsilon$ after T rounds ($\delta$ = %g)" % doc["settings"]["delta"])
    axes[1, 0].set_yscale("log")
    axes[1, 0].set_ylabel(r"final $f(x_T) - f^\star$")
    axes[1, 1].set_ylabel("final held-out accuracy")
    axes[1, 1].legend(fontsize=7)
    for ax in axes.ravel():
        ax.grid(True, which="both", alpha=0.3)
    s = doc["settings"]
    fig.suptitle(f"{s['label']}: n = {s['n']}, S = {s['S']}, Q = {s['Q']}, T = {s['T']}, "
                 f"R = {s['R']} (SCAFFOLD dashed)",
                 fontsize=9)
    return fig


def write(doc: dict, out: str) -> list[str]:
    """tradeoffs.json, tradeoffs.csv and tradeoffs.png."""
    paths = [common.write_json(os.path.join(out, "tradeoffs.json"), doc)]
    header = ["part", "algorithm", "setting", "gap_mean", "gap_ci95", "accuracy_mean",
              "accuracy_ci95", "bits", "epsilon", "diverged"]
    rows = []
    for part in ("bits", "privacy"):
        for alg, runs in doc[part].items():
            for name, c in runs.items():
                rows.append([part, alg, name if part == "bits" else
                             (f"z={c['z']:g}" + (" adaptive" if c["kind"] == "adaptive" else "")),
                             c["gap"]["final"], c["gap"]["final_ci95"],
                             c["test_accuracy"]["final"], c["test_accuracy"]["final_ci95"],
                             c.get("bits", {}).get("final"), c.get("epsilon", {}).get("final"),
                             c["diverged"]])
    paths.append(common.write_csv(os.path.join(out, "tradeoffs.csv"), header, rows))
    paths.append(common.save_figure(figure(doc), out, "tradeoffs.png"))
    return paths
