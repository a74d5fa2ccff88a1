"""Tuned comparison: every algorithm at its own best stepsize and hyperparameters, reported on
fresh keys.

``fedjax-abc compare`` runs this module.

For each problem, :func:`fedjax_abc.tune` runs every algorithm's grid (its stepsizes times
its hyperparameters' values, :data:`HYPERPARAMETERS`, or its variants) on tuning keys,
picks each algorithm's point by the lowest mean final gap (a point with a diverged trial is
out), and runs every algorithm at its pick on one fresh key (paired trials). Problems: (27)
with the paper's offsets (Dmax = 20, n = 40, S = 4, Q = 10, x0 = x* + 10, the sign oracle)
and softmax regression on Synthetic(1, 1) (n = 30, at most 400 rows a client, S = 5,
Q = 5, mini-batches of 10, x0 = 0). Algorithms: FedAvg, FedAvgM (server momentum 0.9),
FedAdam, FedYogi and FedAdagrad (each over its server learning rates, :data:`SERVER_LRS`),
FedProx (mu), SCAFFOLD, FedNova, FedDyn (a), FedExP (eps), MimeLite and MIME (beta), and
Scaffnew with p = 1/Q, so that its expected local work per round is the others' Q
(Geometric(1/Q) iterations, at most 5Q, one count for all clients). Scaffnew's analysis
assumes full participation, and it runs with every client in every round (S = n: n / S
times the others' client work a round); with the table's S its clients' control
variates, updated at their next participation, drift and the runs diverge on (27).
"""

from __future__ import annotations

import os

import numpy as np

from fedjax_abc.repro import common
from fedjax_abc.repro import offsets as offs

SETTINGS = {
    "huber": dict(n=40, d_max=20.0, S=4, Q=10, T=5_000, R=32, x0_offset=10.0,
                  stepsizes=[1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1]),
    "synthetic": dict(n=30, S=5, Q=5, T=200, R=16, batch=10, max_samples=400,
                      stepsizes=[0.001, 0.003, 0.01, 0.03, 0.1, 0.3]),
}
QUICK = {"huber": dict(T=1_000, R=8), "synthetic": dict(T=50, R=4)}


SCAFFNEW = "Scaffnew, S = n"
HYPERPARAMETERS = {"FedProx": {"mu": [0.01, 0.1, 1.0]}, "FedDyn": {"alpha": [0.1, 1.0, 10.0]},
                   "FedExP": {"eps": [1e-4, 1e-3, 1e-2, 1e-1]},
                   "MimeLite": {"beta": [0.0, 0.5, 0.9]}, "MIME": {"beta": [0.0, 0.5, 0.9]}}
SERVER_LRS = {"FedAvgM": [0.1, 0.3, 1.0], "FedAdam": [0.01, 0.03, 0.1, 0.3],
              "FedYogi": [0.01, 0.03, 0.1, 0.3], "FedAdagrad": [0.01, 0.03, 0.1, 0.3]}


def algorithms(Q: int) -> dict:
    """name -> the algorithm, or its variants by label (the server learning rates), for
    Q local steps (Scaffnew's p = 1/Q)."""
    import fedjax_abc as fa

    A = fa.algorithms
    return {"FedAvg": A.FedAvg(),
            "FedAvgM": {f"lr={lr:g}": A.FedAvgM(lr, momentum=0.9) for lr in SERVER_LRS["FedAvgM"]},
            "FedAdam": {f"lr={lr:g}": A.FedAdam(lr) for lr in SERVER_LRS["FedAdam"]},
            "FedYogi": {f"lr={lr:g}": A.FedYogi(lr) for lr in SERVER_LRS["FedYogi"]},
            "FedAdagrad": {f"lr={lr:g}": A.FedAdagrad(lr) for lr in SERVER_LRS["FedAdagrad"]},
            "FedProx": A.FedProx(0.1), "SCAFFOLD": A.Scaffold(), "FedNova": A.FedNova(),
            "FedDyn": A.FedDyn(0.1), "FedExP": A.FedExP(1e-3), "MimeLite": A.MimeLite(0.9),
            "MIME": A.Mime(0.9), SCAFFNEW: A.Scaffnew(1.0 / Q)}


def settings_of(Q: int, n: int) -> dict:
    """Scaffnew's law of local steps (Geometric(1/Q), at most 5Q, one count for all) and its
    full participation."""
    import fedjax_abc as fa

    law = fa.algorithms.Scaffnew(1.0 / Q).local_steps(5 * Q)
    return {SCAFFNEW: {"local_steps": law, "num_sampled": n}}


def _problem(pid: str, settings: common.Settings):
    import fedjax_abc as fa

    P = SETTINGS[pid]
    if pid == "huber":
        p = fa.problems.huber_offsets(offsets=offs.paper_offsets(P["d_max"], P["n"]))
        return p, np.asarray(p.x_star) + P["x0_offset"]
    p = fa.problems.synthetic(common.run_key(settings.seed, "tuned", 99), 1.0, 1.0,
                              num_clients=P["n"], oracle=fa.MinibatchOracle(P["batch"]),
                              max_samples=P["max_samples"])
    return p, np.zeros(p.dim)


def run(settings: common.Settings, progress: common.Progress | None = None,
        problems=tuple(SETTINGS)) -> dict:
    """Tunes and evaluates on ``problems`` (keys of :data:`SETTINGS`; default both);
    returns the document of ``tuned.json``. A problem's keys do not depend on which others
    run, so ``problems=["huber"]`` gives that problem's rows of the full document."""
    import warnings

    import fedjax_abc as fa

    if isinstance(problems, str) or not problems or any(p not in SETTINGS for p in problems):
        raise ValueError(f"problems must be a non-empty list of names from {list(SETTINGS)}, "
                         f"got {problems!r}")
    progress = common.Progress("tuned", enabled=False) if progress is None else progress
    doc = {"experiment": "tuned", "problems": {}}
    for i, pid in enumerate(SETTINGS):
        if pid not in problems:
            continue
        P = SETTINGS[pid]
        R, T, scale = settings.scale(P["R"], P["T"], QUICK[pid]["R"], QUICK[pid]["T"])
        problem, x0 = _problem(pid, settings)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fa.DivergenceWarning)
            out = fa.tune(problem, algorithms(P["Q"]), P["stepsizes"],
                          hyperparameters=HYPERPARAMETERS,
                          settings=settings_of(P["Q"], problem.num_clients),
                          tune_key=common.run_key(settings.seed, "tuned", i, 0),
                          eval_key=common.run_key(settings.seed, "tuned", i, 1), trials=R,
                          rounds=T, x0=x0, local_steps=P["Q"], num_sampled=P["S"],
                          mode="gather", record_every=T,  # the final gap is all it uses
                          record_x=False, dtype=settings.precision)
        rows = []
        for name, t in out.algorithms.items():
            d = t.vs_reference
            rows.append({"algorithm": name, "label": t.result.config["algorithm"],
                         "stepsize": t.stepsize, "hyperparameters": t.hyperparameters,
                         "at_grid_edge": _at_edge(name, t, P["stepsizes"]),
                         "tuning": {_point(k): v for k, v in t.tuning.items()},
                         "gap": {"mean": float(t.final.mean), "ci95": float(t.final.ci95)},
                         "vs_fedavg": None if d is None else {
                             "mean": float(d.mean), "ci_low": float(d.ci_low),
                             "ci_high": float(d.ci_high)}})
        doc["problems"][pid] = {
            "label": ("problem (27), paper offsets, Dmax = 20" if pid == "huber"
                      else "softmax regression, Synthetic(1, 1)"),
            "settings": dict(P, T=T, R=R, scale=scale), "rows": rows,
            "table": out.table()}
    P0 = SETTINGS["huber"]
    R0, T0, scale0 = settings.scale(P0["R"], P0["T"], QUICK["huber"]["R"], QUICK["huber"]["T"])
    config = common.base_config(settings, "tuned", R0, T0, scale0)
    config.update(
        criterion="the lowest mean final gap f(x_T) - f* on the tuning key; a grid point "
                  "with a diverged tuning trial is out; ties to the first point of the grid",
        hyperparameters={**HYPERPARAMETERS, **{f"{k} server lr": v for k, v in
                                              SERVER_LRS.items()}},
        comparison="paired: final gap of the algorithm minus FedAvg's, trial by trial on "
                   "the evaluation key; mean with a normal 95% interval")
    doc["config"] = config
    return doc


def _point(key) -> str:
    """A tuning grid point as text: "0.003" or "0.003, mu=0.1"."""
    return f"{key:g}" if isinstance(key, float) else ", ".join(
        f"{v:g}" if isinstance(v, float) else str(v) for v in key)


def _at_edge(name: str, t, stepsizes) -> bool:
    """Whether the pick lies at an end of a grid axis of more than one value."""
    axes = [list(stepsizes)] + [list(v) for v in HYPERPARAMETERS.get(name, {}).values()]
    picked = [t.stepsize] + [v for k, v in t.hyperparameters.items() if k != "variant"]
    if name in SERVER_LRS:
        axes.append([f"lr={lr:g}" for lr in SERVER_LRS[name]])
        picked.append(t.hyperparameters["variant"])
    return any(len(a) > 1 and v in (a[0], a[-1]) for a, v in zip(axes, picked))


def summary_text(doc: dict) -> str:
    """Each problem's table."""
    out = []
    for p in doc["problems"].values():
        s = p["settings"]
        out += [f"{p['label']}: S = {s['S']}, Q = {s['Q']}, T = {s['T']}, R = {s['R']} "
                f"(stepsizes {s['stepsizes']})", p["table"]]
        edge = [r["algorithm"] for r in p["rows"] if r["at_grid_edge"]]
        if edge:
            out.append("picked at an end of a grid axis (the best may lie outside it): "
                       + ", ".join(edge))
        out.append("")
    return "\n".join(out)


def write(doc: dict, out: str) -> list[str]:
    """tuned.json and tuned.csv."""
    paths = [common.write_json(os.path.join(out, "tuned.json"), doc)]
    header = ["problem", "algorithm", "stepsize", "hyperparameters", "gap_mean", "gap_ci95",
              "minus_fedavg_mean", "minus_fedavg_ci_low", "minus_fedavg_ci_high"]
    rows = []
    for pid, p in doc["problems"].items():
        for r in p["rows"]:
            d = r["vs_fedavg"] or {}
            hyper = "; ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                              for k, v in r["hyperparameters"].items())
            rows.append([pid, r["algorithm"], r["stepsize"], hyper, r["gap"]["mean"],
                         r["gap"]["ci95"],
                         d.get("mean"), d.get("ci_low"), d.get("ci_high")])
    paths.append(common.write_csv(os.path.join(out, "tuned.csv"), header, rows))
    return paths
