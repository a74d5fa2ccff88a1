"""Lemmas 4-8 on the paper's problems: where the slack of inequalities (15)-(19) comes from.

``fedjax-abc reproduce lemmas`` (the paper runs no such experiment): for problem (27) with the
paper's offsets at Table II's settings (``paper.LEMMAS``: n = 40, Dmax in {20, 50, 100, 200},
S in {4, 20, 40}, Q = 10, x0 = x* + 10) and problem (25)-(26) at Fig. 1's (n = 16,
S in {1, 4, 8, 16}, Q = 5, x0 = 10):

1. the constants from the package's theory functions: L = ``theory.smoothness_estimate`` on
   a grid over all the clients' kinks, (C, D) = ``theory.abc_constants`` on a wide interval,
   sigma_f* from the problem;
2. one run of Algorithm 1 at the paper's stepsize (``simulate(record_x=True)``, T rounds)
   and its iterates at t = 0, T/2 and T (``theory.run_points``);
3. at these points, ``theory.lemma_diagnostics`` (M replicates of one round) at three
   stepsizes: the paper's, alpha_8 = 1/(8 Q (L + C)) (the largest inside every lemma's
   condition) and 4 alpha_8 (outside Lemma 8's, inside Lemmas 4 and 6's).

Per inequality, point and stepsize it records lhs (standard error), rhs, the slack rhs/lhs,
whether it holds within 3 standard errors, whether alpha is inside the lemma's condition,
the right side's terms and the largest positive one besides f(x_t) - f* (the dominant term);
and, since Lemma 1 (12) feeds (17) and (18), both sides of (12) at the points.
``--set`` changes problem (27)'s settings (alpha, Q, S, Dmax, x0, n); problem (25) stays
at Fig. 1's. ``--trials`` sets M, ``--rounds`` T; ``--quick`` also keeps Dmax in {20, 200}
and S = 4 only (``paper.LEMMAS_QUICK``).
"""

from __future__ import annotations

import math
import os

import numpy as np

from fedjax_abc.repro import common, paper
from fedjax_abc.repro import offsets as offs

LEMMAS = (4, 5, 6, 7, 8)
EQUATION = {4: "(15)", 5: "(16)", 6: "(17)", 7: "(18)", 8: "(19)"}


def dominant(terms, names, equation: str) -> str:
    """The largest right-side term besides the shared f(x_t) - f* of (15) and (19).

    Example:
      >>> dominant([1.0, -0.5, 0.2, 0.3], ("f(x_t)-f*", "-g", "a", "b"), "(15)")
      'b'
    """
    skip = 1 if equation in ("(15)", "(19)") else 0
    vals = np.asarray(terms, float)[skip:]
    return names[skip + int(np.argmax(vals))]


def cases(cfg: dict, S25=None) -> list[dict]:
    """The problems with their settings: (27) per Dmax (``cfg``), then (25)-(26) (Fig. 1's;
    S25 replaces its S list)."""
    import fedjax_abc as fa

    out = []
    for d_max in cfg["d_max"]:
        d = offs.paper_offsets(d_max, cfg["n"])
        p = fa.problems.huber_offsets(offsets=d)
        out.append(dict(label=f"(27), Dmax = {d_max:g}", problem=p, S=cfg["S"], Q=cfg["Q"],
                        alpha=cfg["alpha"], x0=np.asarray(p.x_star) + cfg["x0_offset"],
                        kinks=(float(d.min()) - 2.0, float(d.max()) + 2.0),
                        domain=(float(d.min()) - 50.0, float(d.max()) + 50.0), tag=int(d_max)))
    f1 = paper.FIG1
    out.append(dict(label=f"(25)-(26), n = {f1['n']}", problem=fa.problems.softplus_huber(f1["n"]),
                    S=f1["S"] if S25 is None else S25, Q=f1["Q"], alpha=f1["alpha"], x0=np.array([f1["x0"]]),
                    kinks=(-2.0, f1["n"] + 2.0), domain=(-50.0, 50.0), tag=25))
    return out


def constants(case: dict) -> dict:
    """L, C, D and sigma_f* of a case from the package's theory functions."""
    import fedjax_abc.theory as theory

    grid = np.linspace(*case["kinks"], 2001)[:, None]
    L = theory.smoothness_estimate(case["problem"], grid).L
    abc = theory.abc_constants(case["problem"], domain=case["domain"])
    return dict(L=float(L), C=float(abc.C), D=max(float(abc.D), 0.0),
                sigma_f_star=theory.sigma_f_star(case["problem"]))


def _check_json(ch, j: int) -> dict:
    eq = ch.equation
    return {"lemma": j, "equation": eq, "lhs": ch.lhs, "lhs_stderr": ch.lhs_stderr, "rhs": ch.rhs,
            "rhs_stderr": ch.rhs_stderr, "diff_stderr": ch.diff_stderr, "ratio": ch.ratio,
            "holds": ch.holds, "shift": ch.shift, "terms": ch.terms, "term_names": list(ch.term_names),
            "dominant": [dominant(t, ch.term_names, eq) for t in ch.terms],
            "stepsize_limit": ch.stepsize_limit, "stepsize_ok": ch.stepsize_ok}


def run(settings: common.Settings, progress: common.Progress) -> dict:
    import fedjax_abc as fa
    import fedjax_abc.theory as theory

    cfg = common.experiment_settings(settings, "lemmas")
    q = paper.LEMMAS_QUICK
    M, T, scale = settings.scale(paper.LEMMAS["M"], paper.LEMMAS["T"], q["M"], q["T"])
    fractions = paper.LEMMAS["fractions"]
    S25 = None
    if settings.quick:  # fewer Dmax and S values (each S compiles), unless set explicitly
        given = common.applied_overrides(settings, "lemmas")
        cfg.update({k: q[k] for k in ("d_max", "S") if k not in given})
        S25 = q["S25"]
    all_cases = cases(cfg, S25)
    progress.plan(sum(len(c["S"]) for c in all_cases))
    rows = []
    for c in all_cases:
        p, Q = c["problem"], c["Q"]
        k = constants(c)
        alpha8 = theory.lemma_stepsize_limits(k["L"], k["C"], Q)[8]
        steps = [("paper", c["alpha"]), ("alpha_8", alpha8), ("4 alpha_8", 4 * alpha8)]
        for S in c["S"]:
            desc = f"{c['label']} S={S}"
            callback = progress.task(desc, 1.0)
            res = fa.simulate(p, num_sampled=S, local_steps=Q, stepsize=c["alpha"], rounds=T,
                              x0=c["x0"], trials=1, key=common.run_key(settings.seed, "lemmas", c["tag"], S),
                              record_every=common.record_every(T, 100),
                              mode="gather" if S < p.num_clients else "mask", progress=callback)
            pts, rounds = theory.run_points(res, fractions)
            dissim, _ = theory.gradient_dissimilarity(p, pts)  # Lemma 1 (12) at x_t
            for s, (name, alpha) in enumerate(steps):
                r = theory.lemma_diagnostics(
                    common.run_key(settings.seed, "lemmas", c["tag"], S, 1000 + s), p, pts,
                    stepsize=alpha, num_sampled=S, local_steps=Q, L=k["L"], C=k["C"], D=k["D"],
                    num_replicates=M)
                gap = r.constants.gap
                rows.append({"case": c["label"], "S": S, "Q": Q, "stepsize_name": name,
                             "stepsize": alpha, "rounds": rounds,
                             "points": pts[:, 0] if pts.shape[1] == 1 else pts,
                             "gap": gap, "grad_norm_sq": r.constants.grad_sq,
                             "I_S": theory.sampling_factor(p.num_clients, S), **k,
                             "lemma1": {"lhs": dissim, "rhs": 2 * k["L"] * (gap + k["sigma_f_star"])},
                             "quantities": {n_: {"mean": e.mean, "stderr": e.stderr}
                                            for n_, e in r.quantities.items()},
                             "checks": [_check_json(ch, j) for j, ch in zip(LEMMAS, r.checks)]})
            progress.finish_task()
    config = common.base_config(settings, "lemmas", M, T, scale)
    config.update(replicates=M, fractions=list(fractions),
                  problem27=dict(n=cfg["n"], d_max=cfg["d_max"], S=cfg["S"], Q=cfg["Q"],
                                 alpha=cfg["alpha"], x0=f"x* + {cfg['x0_offset']:g}"),
                  problem25=dict(n=paper.FIG1["n"], S=all_cases[-1]["S"], Q=paper.FIG1["Q"],
                                 alpha=paper.FIG1["alpha"], x0=paper.FIG1["x0"]),
                  stepsizes="paper's alpha; alpha_8 = 1/(8 Q (L + C)); 4 alpha_8",
                  holds_rule="mean(lhs - rhs) <= 3 paired standard errors",
                  constants_from="L: theory.smoothness_estimate on a grid over the kinks; (C, D): "
                                 "theory.abc_constants on a wide interval; sigma_f*: eq. (11)",
                  key_tags="(experiment, Dmax or 25, S) for the run; + 1000 + stepsize index "
                           "for the diagnostics",
                  functions=["fedjax_abc.theory.lemma_diagnostics", "fedjax_abc.theory.run_points",
                             "fedjax_abc.theory.lemma_stepsize_limits"])
    from fedjax_abc.repro import controls

    checks = controls.run(common.run_key(settings.seed, "lemmas", 0))  # about 15 s
    config.update(controls="fedjax_abc.repro.controls.run(run_key(seed, 'lemmas', 0)): cases "
                           "where each check is nearly tight, with correct and wrong inputs")
    return {"experiment": "lemmas", "config": config, "rows": rows, "controls": checks}


def summary(doc: dict) -> list[dict]:
    """Per (case, stepsize, lemma): points x S that hold, slack range (with the relative
    standard error of each ratio rhs/lhs, both sides' errors combined as if independent),
    the dominant terms."""
    out = {}
    for r in doc["rows"]:
        for ch in r["checks"]:
            key = (r["case"], r["stepsize_name"], ch["lemma"])
            s = out.setdefault(key, {"case": r["case"], "stepsize_name": r["stepsize_name"],
                                     "lemma": ch["lemma"], "equation": ch["equation"],
                                     "stepsizes": set(), "stepsize_ok": True, "held": 0,
                                     "count": 0, "ratios": [], "ratio_rel_se": [], "dominant": {},
                                     "changes": []})
            s["stepsizes"].add(r["stepsize"])
            s["stepsize_ok"] &= bool(ch["stepsize_ok"])
            s["held"] += sum(bool(h) for h in ch["holds"])
            s["count"] += len(ch["holds"])
            s["ratios"] += [v for v in ch["ratio"] if v is not None]
            s["ratio_rel_se"] += [math.hypot(le / lhs, re / rhs) for v, lhs, le, rhs, re in
                                  zip(ch["ratio"], ch["lhs"], ch["lhs_stderr"], ch["rhs"],
                                      ch["rhs_stderr"]) if v is not None and lhs and rhs]
            for dname in ch["dominant"]:
                s["dominant"][dname] = s["dominant"].get(dname, 0) + 1
            for lhs, rhs, sh in zip(ch["lhs"], ch["rhs"], ch["shift"]):
                if ch["equation"] in ("(15)", "(19)"):
                    s["changes"].append((lhs - sh, rhs - sh))
    return list(out.values())


def write(doc: dict, out: str) -> list[str]:
    paths = [common.write_json(os.path.join(out, "lemmas.json"), doc)]
    header = ["case", "S", "stepsize_name", "stepsize", "round", "x_t", "gap", "lemma", "equation",
              "stepsize_ok", "lhs", "lhs_stderr", "rhs", "ratio", "holds", "dominant"]
    lines = []
    for r in doc["rows"]:
        for ch in r["checks"]:
            for k in range(len(r["rounds"])):
                x = r["points"][k]
                lines.append([r["case"], r["S"], r["stepsize_name"], r["stepsize"], r["rounds"][k],
                              ";".join(f"{v:.10g}" for v in np.atleast_1d(np.asarray(x, float))), r["gap"][k],
                              ch["lemma"], ch["equation"], ch["stepsize_ok"], ch["lhs"][k],
                              ch["lhs_stderr"][k], ch["rhs"][k], ch["ratio"][k], ch["holds"][k],
                              ch["dominant"][k]])
    paths.append(common.write_csv(os.path.join(out, "lemmas.csv"), header, lines))
    return paths
