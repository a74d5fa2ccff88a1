"""``fedjax-abc run GRID.toml``: a grid of simulations described in a file, and its report.

The engine reads and runs the file (``fedjax_abc._engine``: :func:`load_spec` checks it,
``_engine/_grid_spec.py`` lists its keys; :func:`run_parts` runs the grid in parts, one per
combination of the axes that change shapes, saves each to ``parts/<i>.nc``, resumes,
shares the parts among a job array's tasks and joins them into ``result.nc``, the labelled
:class:`~fedjax_abc.SweepResult`). This module is the command's: the default output
folder, and once the parts are joined, the report beside ``result.nc``: ``summary.csv``
(final gap and ||grad f||^2 per grid point with 95% intervals), ``curves.png`` (mean gap
and ||grad f||^2 against rounds with 95% bands, one curve per grid point) and
``final_<axis>.png`` (the final gap against each axis).

Resuming: rerunning the same command skips the saved parts, so an interrupted grid resumes
at the part where it stopped. Each part stores a fingerprint (the engine's digest of the
grid's settings, the part's place in the grid and the environment: the fedjax_abc version
and code, JAX, jaxlib, the device kind): a part written by another grid file, other
settings or another version is refused, never reported under this grid's labels.

Several processes or machines: ``fedjax-abc run GRID.toml --out DIR --part I --of N`` runs
the parts c with c mod N = I (inside a Slurm job array, ``--part`` and ``--of`` default to
the task's index and the array's size); whichever task saves the last part joins them all,
and ``fedjax-abc merge GRID.toml --out DIR`` joins them later (naming the parts not saved
yet, writing nothing then). Every part is computed as in one process, so the joined
result.nc is that process's, bit for bit. A Slurm array over a shared folder::

    #SBATCH --array=0-3 --cpus-per-task=2
    fedjax-abc run GRID.toml --out results/grid --quiet
"""

from __future__ import annotations

import itertools
import os
from typing import Optional

import numpy as np

from fedjax_abc._engine import (SAVE_WAITS, GridSpec, check_name, load_spec, part_count,
                                ranges, run_parts, task_share)

__all__ = ["GridSpec", "load_spec", "part_count", "ranges", "run_grid", "task_share"]


def default_out(spec: GridSpec, results: str = "results") -> str:
    """``results/<name>``, refused (ValueError, one line) where it resolves outside
    ``results`` (a link to another folder): a grid's outputs stay in the folder chosen."""
    out = os.path.join(results, check_name("the grid file", spec.name))
    base, real = os.path.realpath(results), os.path.realpath(out)
    if os.path.commonpath([base, real]) != base or real == base:
        raise ValueError(f"the grid's output folder {out} resolves to {real}, outside "
                         f"{base}: refused; pass --out to write elsewhere")
    return out


def run_grid(spec: GridSpec, out: str, progress=None, part: Optional[int] = None,
             of: Optional[int] = None, merge: bool = False, say=None,
             waits: tuple = SAVE_WAITS) -> dict:
    """Runs (or resumes) a grid and writes its outputs into ``out``: the engine's
    :func:`~fedjax_abc._engine.run_parts`, then, once this call joined the parts, the
    summary and the plots.

    Args:
      spec: from :func:`load_spec`.
      out: output folder (created).
      progress: a :class:`fedjax_abc.repro.common.Progress` or None.
      part, of: run only the parts c with c mod N = I (one task of a job array), and join
        them all once every part is saved.
      merge: run nothing, join the saved parts (ValueError naming the missing ones).
      say: where a message goes while the run waits to save a part again (default:
        stderr).
      waits: seconds between the tries of a part's save that failed.

    Returns:
      dict: as ``run_parts``'s, ``paths`` the files written once joined (result.nc,
      summary.csv and the plots).
    """
    finals = [_final_name(a) for a in spec.doc["grid"]]
    done = run_parts(spec, out, progress=progress, part=part, of=of, merge=merge, say=say,
                     waits=waits, outputs=("summary.csv", "curves.png", *finals))
    if not done["joined"]:
        return done
    result = done["result"]
    paths = done["paths"] + [_summary_csv(result, os.path.join(out, "summary.csv"))]
    return dict(done, paths=paths + plots(result, out, spec.name))


def _final_name(axis: str) -> str:
    """The file of the final gap against a grid axis: ``final_<axis>.png``, the axis's
    name made a plain file name (dots and anything but letters, digits, ``_-=`` as ``_``)."""
    import re

    return "final_" + re.sub(r"[^A-Za-z0-9_=-]", "_", axis) + ".png"


def _summary_csv(result, path: str) -> str:
    from fedjax_abc.repro import common

    rows = []
    for point, res in zip(result.points, result.results):
        row = list(point.values())
        for name in ("gap", "grad_norm_sq"):
            s = res.final(name) if res.num_diverged < res.trials else None
            row += ([float(s.mean), float(s.ci_low), float(s.ci_high)] if s is not None
                    else [float("nan")] * 3)
        row.append(res.num_diverged)
        rows.append(row)
    header = list(result.axes) + ["gap_T", "gap_T_ci_low", "gap_T_ci_high", "grad_norm_sq_T",
                                  "grad_norm_sq_T_ci_low", "grad_norm_sq_T_ci_high", "diverged"]
    return common.write_csv(path, header, rows)


def _point_text(point: dict) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in point.items())


# colour x line style: 8 colours and 3 styles (coprime), so that 24 series are all distinct
# and neighbours differ in both; beyond 24 the curves are not labelled
_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
            "tab:pink", "tab:gray")
_STYLES = [(_COLOURS[i % 8], ("-", "--", ":")[i % 3]) for i in range(24)]


def plots(result, out: str, name: str) -> list:
    """``curves.png`` (gap and ||grad f||^2 with 95% bands) and ``final_<axis>.png``."""
    from fedjax_abc.repro import common

    plt = common.pyplot()
    fig, axs = plt.subplots(1, 2, figsize=(13, 4.2))
    many = len(result.results) > len(_STYLES)
    labelled = False
    for k, (point, res) in enumerate(zip(result.points, result.results)):
        if res.num_diverged == res.trials:
            continue
        colour, dashes = _STYLES[k % len(_STYLES)]
        for ax, q in zip(axs, ("gap", "grad_norm_sq")):
            s = res.summary(q)
            line = common.band(ax, res.rounds, s.mean, s.ci95,
                               None if many else _point_text(point), color=colour)
            line.set_linestyle(dashes)
        labelled = labelled or not many
    for ax, q in zip(axs, ("f(x_t) - f*", "||grad f(x_t)||^2")):
        ax.set_yscale("log")
        ax.set_xlabel("round t")
        ax.set_ylabel(f"{q}, mean and 95% band")
        ax.set_title(f"{name}: {q}")
    if labelled:  # one legend for both panels, outside the data, right of the second
        axs[1].legend(*axs[0].get_legend_handles_labels(), loc="center left",
                      bbox_to_anchor=(1.02, 0.5), fontsize=7, frameon=False)
    paths = [common.save_figure(fig, out, "curves.png")]
    final = result.final("gap") if all(r.num_diverged < r.trials for r in result.results) \
        else None
    if final is None:
        return paths
    for k, axis in enumerate(result.axes):
        fig, ax = plt.subplots(figsize=(5.5, 4.0))
        labels = result.axes[axis]
        numeric = all(isinstance(v, (int, float)) for v in labels)
        xs = np.asarray(labels, dtype=float) if numeric else np.arange(len(labels))
        mean = np.moveaxis(final.mean, k, -1).reshape(-1, len(labels))
        half = np.moveaxis(final.ci95, k, -1).reshape(-1, len(labels))
        others = [a for a in result.axes if a != axis]
        combos = list(itertools.product(*(result.axes[a] for a in others)))
        for m, h, combo in zip(mean, half, combos):
            label = _point_text(dict(zip(others, combo))) or None
            ax.errorbar(xs, m, yerr=h, marker="o", capsize=3, label=label)
        from matplotlib.ticker import NullFormatter

        if numeric and np.all(xs > 0) and xs.max() / xs.min() > 20:
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
        if not numeric:
            ax.set_xticks(xs, [str(v) for v in labels], rotation=20, fontsize=7)
        positive = final.mean[final.mean > 0]
        if positive.size and positive.max() / positive.min() > 20:
            ax.set_yscale("log")
        ax.set_xlabel(axis)
        ax.set_ylabel("f(x_T) - f*, mean and 95% interval")
        if 1 < len(combos) <= 12:
            ax.legend(fontsize=7)
        paths.append(common.save_figure(fig, out, _final_name(axis)))
    return paths
