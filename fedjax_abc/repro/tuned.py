"""Tuned comparison: every algorithm at its own best stepsize, reported on fresh keys.

``fedjax-abc compare --tuned`` runs this module.

For each problem, :func:`fedjax_abc.tune` runs every (algorithm, stepsize) of a grid on
tuning keys, picks each algorithm's stepsize by the lowest mean final gap (a stepsize with
a diverged trial is out), and runs every algorithm at its pick on one fresh key (paired
trials). Problems: (27) with the paper's offsets (Dmax = 20, n = 40, S = 4, Q = 10,
x0 = x* + 10, the sign oracle) and softmax regression on Synthetic(1, 1) (n = 30, at most
400 rows a client, S = 5, Q = 5, mini-batches of 10, x0 = 0). Algorithms: FedAvg, FedAvgM
(server momentum 0.9, lr 1), FedAdam (lr 0.01 on (27), 0.03 on Synthetic), FedProx (mu = 0.1),
SCAFFOLD, FedNova, FedDyn (a = 0.1), FedExP (eps = 1e-3) and MimeLite (beta = 0.9); only the
client stepsize is tuned, the other hyperparameters are fixed as stated. (Scaffnew needs
its own law of local steps and is left out of this table.)
"""

from __future__ import annotations

import os

import numpy as np

from fedjax_abc.repro import common
from fedjax_abc.repro import offsets as offs

SETTINGS = {
    "huber": dict(n=40, d_max=20.0, S=4, Q=10, T=5_000, R=32, x0_offset=10.0,
                  stepsizes=[3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1], adam_lr=0.01),
    "synthetic": dict(n=30, S=5, Q=5, T=200, R=16, batch=10, max_samples=400,
                      stepsizes=[0.003, 0.01, 0.03, 0.1, 0.3], adam_lr=0.03),
}
QUICK = {"huber": dict(T=1_000, R=8), "synthetic": dict(T=50, R=4)}


def algorithms(adam_lr: float) -> dict:
    import fedjax_abc as fa

    A = fa.algorithms
    return {"FedAvg": A.FedAvg(), "FedAvgM": A.FedAvgM(1.0, momentum=0.9),
            "FedAdam": A.FedAdam(adam_lr), "FedProx": A.FedProx(0.1), "SCAFFOLD": A.Scaffold(),
            "FedNova": A.FedNova(), "FedDyn": A.FedDyn(0.1), "FedExP": A.FedExP(1e-3),
            "MimeLite": A.MimeLite(0.9)}


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


def run(settings: common.Settings, progress: common.Progress | None = None) -> dict:
    """Tunes and evaluates on both problems; returns the document of ``tuned.json``."""
    import warnings

    import fedjax_abc as fa

    progress = common.Progress("tuned", enabled=False) if progress is None else progress
    doc = {"experiment": "tuned", "problems": {}}
    for i, pid in enumerate(SETTINGS):
        P = SETTINGS[pid]
        R, T, scale = settings.scale(P["R"], P["T"], QUICK[pid]["R"], QUICK[pid]["T"])
        problem, x0 = _problem(pid, settings)
        algs = algorithms(P["adam_lr"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fa.DivergenceWarning)
            out = fa.tune(problem, algs, P["stepsizes"],
                          tune_key=common.run_key(settings.seed, "tuned", i, 0),
                          eval_key=common.run_key(settings.seed, "tuned", i, 1), trials=R,
                          rounds=T, x0=x0, local_steps=P["Q"], num_sampled=P["S"],
                          mode="gather", record_every=common.record_every(T, 50),
                          record_x=False, dtype=settings.precision)
        rows = []
        for name, t in out.algorithms.items():
            d = t.vs_reference
            rows.append({"algorithm": name, "label": t.result.config["algorithm"],
                         "stepsize": t.stepsize,
                         "at_grid_edge": t.stepsize in (min(P["stepsizes"]),
                                                        max(P["stepsizes"])),
                         "tuning": {f"{s:g}": v for s, v in t.tuning.items()},
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
        criterion="the lowest mean final gap f(x_T) - f* on the tuning key; a stepsize with "
                  "a diverged tuning trial is out; ties to the smaller stepsize",
        comparison="paired: final gap of the algorithm minus FedAvg's, trial by trial on "
                   "the evaluation key; mean with a normal 95% interval")
    doc["config"] = config
    return doc


def summary_text(doc: dict) -> str:
    """Each problem's table."""
    out = []
    for p in doc["problems"].values():
        s = p["settings"]
        out += [f"{p['label']}: S = {s['S']}, Q = {s['Q']}, T = {s['T']}, R = {s['R']} "
                f"(stepsizes {s['stepsizes']})", p["table"]]
        edge = [r["algorithm"] for r in p["rows"] if r["at_grid_edge"]]
        if edge:
            out.append("picked at the grid's edge (the best may lie outside it): "
                       + ", ".join(edge))
        out.append("")
    return "\n".join(out)


def write(doc: dict, out: str) -> list[str]:
    """tuned.json and tuned.csv."""
    paths = [common.write_json(os.path.join(out, "tuned.json"), doc)]
    header = ["problem", "algorithm", "stepsize", "gap_mean", "gap_ci95", "minus_fedavg_mean",
              "minus_fedavg_ci_low", "minus_fedavg_ci_high"]
    rows = []
    for pid, p in doc["problems"].items():
        for r in p["rows"]:
            d = r["vs_fedavg"] or {}
            rows.append([pid, r["algorithm"], r["stepsize"], r["gap"]["mean"], r["gap"]["ci95"],
                         d.get("mean"), d.get("ci_low"), d.get("ci_high")])
    paths.append(common.write_csv(os.path.join(out, "tuned.csv"), header, rows))
    return paths
