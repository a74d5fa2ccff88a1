"""The ``fedjax-abc`` command: reproduce the paper's experiments and write the report.

    fedjax-abc reproduce {fig1,table2,table2_hypotheses,fig3,remark4,lemmas,thm1,thm2,thm3,all} [--trials R] [--rounds T]
                         [--seed K] [--out DIR] [--quick] [--precision {float64,float32}]
                         [--checkpoint DIR | --no-checkpoint] [--set KEY=VALUE ...]
    fedjax-abc report --results DIR [--out FILE] [--reference DIR]
    fedjax-abc compare [--tuned | --fixed | --participation | --tradeoffs] [--out DIR] [--trials R]
                       [--rounds T] [--seed K] [--quick] [--quiet]
    fedjax-abc run GRID.toml [--out DIR] [--trials R] [--rounds T] [--part I --of N] [--quiet]
                   [--submit {slurm,local} [--tasks N] [--wait] [--partition P] [--time-min M] ...]
    fedjax-abc merge GRID.toml [--out DIR] [--trials R] [--rounds T]

Also ``python -m fedjax_abc``. Errors in the options print one line and exit with status 2;
errors while running print one line and exit with status 1.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import Optional, Sequence

EXPERIMENTS = ("fig1", "table2", "table2_hypotheses", "fig3", "remark4", "lemmas", "thm1", "thm2", "thm3",
               "faults")
PROG = "fedjax-abc"


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage block, no traceback)."""

    def error(self, message):
        raise _UsageError(message)


class _Defaults(argparse.ArgumentDefaultsHelpFormatter):
    """Help texts with ``(default: ...)`` added where it says something: not where the text
    states the default itself, nor for a default of None or False (an option not given)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if ("default" in text or action.default is None or action.default is False
                or action.default == [] or action.default is argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)


def _int_at_least(low: int, what: str):
    """An argparse type: an integer >= ``low`` (``what`` names it in the error)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value
    return parse


_positive_int = _int_at_least(1, "a positive integer")
_count_from_zero = _int_at_least(0, "an integer >= 0")


def _trials(text: str) -> int:
    value = _positive_int(text)
    if value < 2:
        raise argparse.ArgumentTypeError("need at least 2 trials for a standard error, got 1")
    return value


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None
    if not 0 <= value < 2 ** 32:
        raise argparse.ArgumentTypeError(f"seed must be in [0, 2^32), got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Reproduce the experiments of 'On Federated Averaging with Partial "
                    "Participation under a General Variance Condition' (Section IV) and "
                    "write a report comparing them with the paper.",
    )
    sub = parser.add_subparsers(dest="command", metavar="{reproduce,report,compare,run,merge}",
                                parser_class=_Parser)
    sub.required = True

    rep = sub.add_parser(
        "reproduce", help="run experiments and write <name>.json/.csv/.png",
        description="Run experiments of Section IV at the paper's settings (R = 100 trials, the "
                    "paper's T, Q, alpha, S and x0) unless told otherwise, and write "
                    "<name>.json, <name>.csv (tables) and <name>.png into --out. Progress goes "
                    "to stderr.",
        formatter_class=_Defaults)
    rep.add_argument("experiment", choices=EXPERIMENTS + ("all",),
                     help="fig1: Fig. 1 (S in {1,4,8,16} on problem 25); table2: Table II and "
                          "Fig. 2 (problem 27, Dmax in {20,50,100,200}); table2_hypotheses: Table II with "
                          "one setting (alpha, Q, T, x0) changed at a time, each tested against "
                          "the printed gaps; fig3: Fig. 3 (Q sweep, "
                          "eq. 28); remark4: the paper's sampling term (24) against that of [10] "
                          "as Q grows (computation only); lemmas: both sides of Lemmas 4-8 "
                          "(15)-(19) by Monte Carlo at iterates of a run on problems 27 and 25 "
                          "(--trials: replicates per point); thm1: Theorem 1's counterexample; thm2/thm3: Theorems 2 and 3 "
                          "against simulation; faults: the report's checks on deliberately "
                          "faulty simulators, scanned over the size of the mistake; all: every "
                          "one in turn")
    rep.add_argument("--trials", type=_trials, default=None, metavar="R",
                     help="independent trials per configuration (default: the paper's 100, or "
                          "the quick value with --quick)")
    rep.add_argument("--rounds", type=_positive_int, default=None, metavar="T",
                     help="communication rounds (default: the paper's T of each experiment: "
                          "50000 for fig1/table2, 100000 for fig3, 10000 for thm2/thm3)")
    rep.add_argument("--seed", type=_seed, default=0, metavar="K",
                     help="base seed; each run's key is jax.random.key(K) folded with the "
                          "experiment and its parameters")
    rep.add_argument("--out", default="results", metavar="DIR", help="output folder")
    rep.add_argument("--quick", action="store_true",
                     help="reduced scale (fewer trials and rounds, fewer Q values in fig3): each "
                          "experiment under a minute on 2 cores; not comparable with the paper")
    rep.add_argument("--precision", choices=("float64", "float32"), default="float64",
                     help="floating point type of the simulation; float32 is faster but biases "
                          "the paper's small gaps")
    rep.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    rep.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                     help="change one of the experiment's settings (repeatable), e.g. --set "
                          "alpha=1e-3 --set S=4,40 --set x0=1; keys: alpha, Q, n, S, x0 (fig1: the "
                          "start; table2, fig3: the offset from x*), Dmax (table2: a list; fig3: "
                          "one value), gamma and L (fig3), p (thm3), T and R (as --rounds and "
                          "--trials); lists are comma-separated. With 'all', a key applies to the "
                          "experiments that have it. Recorded in each result's config "
                          "('overrides') and rerun command")
    ckpt = rep.add_mutually_exclusive_group()
    ckpt.add_argument("--checkpoint", default=None, metavar="DIR",
                      help="folder for checkpoints (default: <out>/checkpoints): every run saves "
                           "its state there (DIR/<experiment>/<run>.npz) every minute and when "
                           "stopped (Ctrl-C); rerunning the same command resumes each experiment "
                           "where it stopped, with the same numbers. The checkpoints are deleted "
                           "once the results are written (of every experiment, for 'all': a "
                           "rerun reads the finished ones back instead of running them); a "
                           "rerun with other settings is refused until they are deleted")
    ckpt.add_argument("--no-checkpoint", action="store_true", help="save no checkpoints")

    rpt = sub.add_parser(
        "report", help="write the reproduction report (Markdown) from the JSON results",
        description="Generate the reproduction report (Markdown) from the JSON files written by "
                    "'reproduce': our numbers beside the paper's, the paper's qualitative claims "
                    "checked, the figures embedded.",
        formatter_class=_Defaults)
    rpt.add_argument("--results", default="results", metavar="DIR",
                     help="folder with the <name>.json files")
    rpt.add_argument("--out", default=None, metavar="FILE",
                     help="Markdown file to write (figures are linked by relative path; default: "
                          "reproduction.md in the results folder)")
    rpt.add_argument("--reference", default=None, metavar="DIR",
                     help="results to compare every number with (default: the repository's "
                          "docs/results, where the package has them; 'none' for no comparison)")

    cmp = sub.add_parser(
        "compare", help="thirteen algorithms, each tuned, on problem 27 and Synthetic(1, 1)",
        description="Compare FedAvg, FedAvgM, FedAdam, FedYogi, FedAdagrad, FedProx, SCAFFOLD, "
                    "FedNova, FedDyn, FedExP, MimeLite, MIME and Scaffnew, each at its best "
                    "stepsize and hyperparameters of a grid (fedjax_abc.tune: picked on tuning "
                    "keys, reported on fresh ones with 95% intervals and paired differences "
                    "against FedAvg), "
                    "on problem (27) with the paper's offsets and on softmax regression over "
                    "Synthetic(1, 1); writes tuned.json and tuned.csv into --out and prints the "
                    "tables. About six minutes on 2 CPU cores at the default scale, four with "
                    "--quick. The other options run another comparison instead. Progress goes "
                    "to stderr.",
        formatter_class=_Defaults)
    cmp.add_argument("--trials", type=_trials, default=None, metavar="R",
                     help="independent trials per run (default: each comparison's own; tuned: "
                          "32 on problem 27 and 16 on Synthetic, 8 and 4 with --quick; "
                          "--fixed: 200, or 32 with --quick)")
    cmp.add_argument("--rounds", type=_positive_int, default=None, metavar="T",
                     help="rounds of the stochastic runs (default: each comparison's own; "
                          "tuned: 5000 and 200, 1000 and 50 with --quick; --fixed: 50000, or "
                          "10000 with --quick, its exact-gradient drift runs keeping their own "
                          "horizon)")
    cmp.add_argument("--seed", type=_seed, default=0, metavar="K",
                     help="base seed; run keys are jax.random.key(K) folded with the "
                          "experiment and the run, the same key for every algorithm")
    cmp.add_argument("--out", default="results", metavar="DIR", help="output folder")
    cmp.add_argument("--quick", action="store_true",
                     help="reduced scale (fewer trials and rounds; with --fixed, fewer Q and "
                          "alpha Q values in the drift part)")
    cmp.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    which = cmp.add_mutually_exclusive_group()
    which.add_argument("--tuned", action="store_true",
                       help="the tuned comparison (what runs without an option)")
    which.add_argument("--fixed", action="store_true",
                     help="instead: FedAvg, FedAvg with server stepsize eta_g = 2, FedProx "
                          "(mu = 1), SCAFFOLD and FedAdam (lr = alpha Q) at one fixed stepsize "
                          "alpha = 1e-3 on problem (27) with the paper's offsets, Dmax in {20, "
                          "200}, S in {4, 40}, Q = 10, x0 = x* + 10; then FedAvg and SCAFFOLD "
                          "with exact gradients and full participation as Q and alpha Q vary "
                          "(client drift); prints each algorithm's paired difference from "
                          "FedAvg with its 95%% interval, Holm-adjusted p-values, the trials "
                          "needed to detect a 1%% difference at 80%% power and the ranking with "
                          "its bootstrap probabilities (fedjax_abc.stats); writes "
                          "compare.json/.csv/.png and compare_drift.png (about two minutes on 2 "
                          "cores)")
    which.add_argument("--participation", action="store_true",
                     help="instead: FedAvg under six participation models (uniform, importance, "
                          "Poisson, cyclic, Markov availability, stragglers) on problem 27 and "
                          "softmax regression on Synthetic(1, 1), with each sampler's measured "
                          "one-round sampling error beside fedjax_abc.theory.sampling_error; "
                          "writes participation.json/.csv/.png (about 90 s on 2 "
                          "cores; --quick: well under a minute)")
    which.add_argument("--tradeoffs", action="store_true",
                     help="instead: FedAvg and SCAFFOLD on Synthetic(1, 1) with compressed "
                          "updates (gap and held-out accuracy against the exact bits sent) and "
                          "with DP-FedAvg's clipping and noise, fixed and adaptive (against "
                          "epsilon from fedjax_abc.theory.dp_epsilon); writes "
                          "tradeoffs.json/.csv/.png")

    grd = sub.add_parser(
        "run", help="run a grid of simulations described in a TOML file",
        description="Run the grid described in GRID.toml (problem, algorithm, sampler, oracle, "
                    "grid axes, trials, rounds, seed; see examples/grids/) with fedjax_abc.sweep, "
                    "and write result.nc (the labelled result, fedjax_abc.load), summary.csv, "
                    "curves.png (gap and ||grad f||^2 with 95% bands) and final_<axis>.png "
                    "into --out. The grid runs in parts (one per combination of the axes that "
                    "change shapes), each saved when done: rerunning the same command after an "
                    "interruption resumes at the part where it stopped. Progress goes to stderr.")
    _grid_arguments(grd, "output folder (default: results/<name of the grid>)",
                    "(default: the file's)")
    grd.add_argument("--part", type=_count_from_zero, default=None, metavar="I",
                     help="run only the parts c with c mod N = I (one task of a job array; "
                          "default in a Slurm job array: its task's index and count); the "
                          "task that saves the last part joins them all")
    grd.add_argument("--of", type=_positive_int, default=None, metavar="N",
                     help="how many tasks share the grid's parts (with --part)")
    grd.add_argument("--submit", choices=("slurm", "local"), default=None,
                     help="run the parts as a job array through submitit (the slurm extra): "
                          "on Slurm, or as local processes; settings from the options below "
                          "or the grid file's [slurm] table")
    grd.add_argument("--tasks", type=_positive_int, default=None, metavar="N",
                     help="array tasks for --submit (default: one per part)")
    grd.add_argument("--wait", action="store_true",
                     help="with --submit slurm: wait for the tasks, report them and join the "
                          "parts (--submit local always waits)")
    for flag, key, kind, what in (
            ("--partition", "partition", str, "the Slurm partition"),
            ("--time-min", "time_min", int, "each task's time limit in minutes (default 60)"),
            ("--cpus-per-task", "cpus_per_task", int, "CPU cores a task asks for"),
            ("--gpus-per-task", "gpus_per_task", int, "GPUs a task asks for"),
            ("--mem-gb", "mem_gb", int, "memory a task asks for, GB"),
            ("--array-parallelism", "array_parallelism", int, "tasks running at once")):
        grd.add_argument(flag, dest=f"slurm_{key}", type=_positive_int if kind is int else str,
                         default=None, metavar=key.split("_")[0].upper(),
                         help=f"with --submit: {what} ([slurm] {key} in the grid file)")
    grd.add_argument("--quiet", action="store_true", help="no progress lines on stderr")

    mrg = sub.add_parser(
        "merge", help="join the saved parts of a grid run by several tasks",
        description="Join the parts of GRID.toml saved in --out by tasks of 'run --part I --of "
                    "N' (each checked to be this grid's, same settings and version) into "
                    "result.nc, summary.csv and the plots: what one process writes, bit for "
                    "bit. Names the parts not saved yet and writes nothing then.")
    _grid_arguments(mrg, "the tasks' output folder (default: results/<name of the grid>)",
                    "(as given to the tasks)")
    return parser


def _grid_arguments(parser, out_help: str, values_help: str) -> None:
    """The grid file, --out, --trials and --rounds of ``run`` and ``merge``."""
    parser.add_argument("grid", metavar="GRID.toml", help="the grid file")
    parser.add_argument("--out", default=None, metavar="DIR", help=out_help)
    parser.add_argument("--trials", type=_trials, default=None, metavar="R",
                        help=f"trials per grid point {values_help}")
    parser.add_argument("--rounds", type=_positive_int, default=None, metavar="T",
                        help=f"rounds {values_help}")


def run_grid(args) -> int:
    from fedjax_abc.repro import common
    from fedjax_abc.repro import grid as grid_module
    spec = grid_module.load_spec(args.grid, trials=args.trials, rounds=args.rounds)
    out = args.out or grid_module.default_out(spec)  # results/<name>, refused outside results/
    merge = args.command == "merge"
    if not merge and args.submit is not None:
        return _submit_grid(args, spec, out)
    part, of = (None, None) if merge else grid_module.task_share(args.part, args.of)
    if not merge:  # a merge writes only where the tasks' parts are
        _output_folder(out)
    progress = common.Progress(spec.name, enabled=not (merge or args.quiet))
    start = time.perf_counter()
    try:
        done = grid_module.run_grid(spec, out, progress, part, of, merge)
    finally:
        progress.close()
    took = f"{time.perf_counter() - start:.1f} s"
    share = f"task {part} of {of}: " if of is not None else ""
    if done["result"] is None:
        print(f"{spec.name}: {share}{done['ran']} parts run in {took}; parts "
              f"{grid_module.ranges(done['missing'])} of {done['parts']} wait for other "
              f"tasks ('{_merge_command(args, out)}' joins them once saved)")
        return 0
    if not done["joined"]:
        print(f"{spec.name}: {share}{len(done['result'])} grid points ({done['parts']} parts) "
              f"already joined in {out}: result.nc holds every part; nothing rewritten")
        return 0
    print(f"{spec.name}: {share}{len(done['result'])} grid points ({done['parts']} parts, "
          f"{done['resumed']} resumed) in {took}; wrote "
          + ", ".join(os.path.relpath(p, out) for p in done["paths"]) + f" into {out}")
    return 0


def _merge_command(args, out: str) -> str:
    """The ``merge`` command that joins this grid's parts: the grid, the folder and the
    trials and rounds the tasks were given (a merge of other values is another grid)."""
    given = "".join(f" --{name} {getattr(args, name)}" for name in ("trials", "rounds")
                    if getattr(args, name) is not None)
    return f"{PROG} merge {args.grid} --out {out}{given}"


def _runner(name: str):
    from fedjax_abc.repro import faults, fig1, fig3, hypotheses, lemmas, remark4, table2, theorems
    return {
        "faults": (faults.run, faults.write),
        "lemmas": (lemmas.run, lemmas.write),
        "remark4": (remark4.run, remark4.write),
        "table2_hypotheses": (hypotheses.run, hypotheses.write),
        "fig1": (fig1.run, fig1.write),
        "table2": (table2.run, table2.write),
        "fig3": (fig3.run, fig3.write),
        "thm1": (theorems.run_thm1, theorems.write_thm1),
        "thm2": (theorems.run_thm2, theorems.write_thm2),
        "thm3": (theorems.run_thm3, theorems.write_thm3),
    }[name]


def _output_folder(path: str):
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise RuntimeError(f"cannot create the output folder {path!r}: {err.strerror}") from None
    if not os.access(path, os.W_OK):
        raise RuntimeError(f"the output folder {path!r} is not writable")


def _overrides(args) -> tuple:
    """Checks ``--set`` against the chosen experiments; moves T and R to rounds and trials."""
    from fedjax_abc.repro import common
    try:
        pairs = common.parse_overrides(args.overrides)
    except ValueError as err:
        raise _UsageError(str(err)) from None
    kept = []
    for key, text in pairs:
        if key in ("T", "R"):
            try:
                value = (_positive_int if key == "T" else _trials)(text)
            except argparse.ArgumentTypeError as err:
                raise _UsageError(f"--set {key}: {err}") from None
            setattr(args, "rounds" if key == "T" else "trials", value)
        else:
            kept.append((key, text))
    names = EXPERIMENTS if args.experiment == "all" else (args.experiment,)
    for key, text in kept:
        if not any(common.canonical_key(name, key) for name in names):
            where = "any experiment" if args.experiment == "all" else args.experiment
            known = sorted({k for name in names for k in common.defaults(name)} | {"T", "R"}
                           | ({"x0", "Dmax"} if any(common.canonical_key(name, "x0") for name in names) else set()))
            raise _UsageError(f"--set {key}: unknown setting for {where} (known: "
                              f"{', '.join(known)})")
    for name in names:
        try:
            common.experiment_settings(common.Settings(overrides=tuple(kept)), name)
        except ValueError as err:
            raise _UsageError(str(err)) from None
    return tuple(kept)


def reproduce(args, argv: Sequence[str]) -> int:
    from fedjax_abc.repro import common
    folder = None if args.no_checkpoint else (
        args.checkpoint or os.path.join(args.out, "checkpoints"))
    settings = common.Settings(trials=args.trials, rounds=args.rounds, seed=args.seed,
                               out=args.out, quick=args.quick, precision=args.precision,
                               argv=tuple(argv), checkpoint=folder,
                               overrides=args.set_pairs)
    _output_folder(args.out)
    names = EXPERIMENTS if args.experiment == "all" else (args.experiment,)
    from fedjax_abc.repro import runtime
    scale = "quick" if args.quick else "paper"
    overall = common.Overall(names, runtime.MEASURED_SECONDS[scale])
    if not args.quiet:
        print(_header(args, names, overall.reference()), file=sys.stderr)
    walls, resumed = {}, False
    for name in names:
        run, write = _runner(name)
        progress = common.Progress(name, enabled=not args.quiet,
                                   overall=overall if len(names) > 1 else None)
        earlier = common.earlier_runs(folder, name)  # a resumed experiment's earlier runs
        start = time.perf_counter()
        overall.begin(name)
        try:
            doc = run(settings, progress)
        except BaseException:  # stopped: its time so far is kept beside its checkpoints
            common.note_run(folder, name, earlier, time.perf_counter() - start,
                            progress.timings)
            raise
        finally:
            progress.close()
        overall.finish(name, progress.computed_share())
        took = time.perf_counter() - start
        # kept until every experiment is written (several: a rerun reads them back)
        runs = common.note_run(folder if len(names) > 1 else None, name, earlier, took,
                               progress.timings)
        doc["config"]["wall_seconds"] = runs["seconds"]  # over every run it took
        doc["config"]["timings"] = runs["timings"]
        if runs["runs"] > 1:
            doc["config"]["runs"] = runs["runs"]
            doc["config"]["wall_seconds_last_run"] = took
            resumed = True
        walls[name] = runs["seconds"]
        paths = write(doc, args.out)
        if folder is not None and len(names) == 1:  # several: kept until all are written,
            _remove_checkpoints(folder, name)  # so that a rerun after a stop resumes them all
        if not args.quiet:
            over = (f" ({common.clock(runs['seconds'])} over its {runs['runs']} runs)"
                    if runs["runs"] > 1 else "")
            print(f"{name}: {took:.1f} s{over}, wrote "
                  + ", ".join(os.path.basename(p) for p in paths), file=sys.stderr)
    if folder is not None and len(names) > 1:
        for name in names:
            _remove_checkpoints(folder, name)
    if len(names) > 1 and not args.quiet:
        total = (f"; {common.clock(sum(walls.values()))} with the earlier runs it resumed"
                 if resumed else "")
        print(f"all {len(names)} experiments: {common.clock(time.perf_counter() - overall.start)}"
              f" in this run{total}", file=sys.stderr)
    if not args.quiet:
        print(f"next: {PROG} report --results {args.out} writes {args.out}/reproduction.md, the "
              "report beside the paper's numbers and the shipped results", file=sys.stderr)
    return 0


def _header(args, names: Sequence[str], reference: float) -> str:
    """The first line of ``reproduce``: the experiments in the order they run and how long
    the reference run of them took (the duration the docs state)."""
    from fedjax_abc.repro import common
    scale = "--quick" if args.quick else "the paper's scale"
    custom = (args.trials is not None or args.rounds is not None or args.set_pairs
              or args.precision != "float64")
    about = (f"about {common.clock(reference)} at {scale} in the reference run (2 CPU cores"
             + ("; your settings differ from its" if custom else "") + ")")
    what = (f"{len(names)} experiments: {', '.join(names)}" if len(names) > 1
            else f"{names[0]}")
    return f"reproduce {what}; {about}"


def compare(args, argv: Sequence[str]) -> int:
    from fedjax_abc.repro import common
    from fedjax_abc.repro import compare as algorithms_part, participation, tradeoffs, tuned
    picked = [name for name in ("fixed", "participation", "tradeoffs") if getattr(args, name)]
    label = {"fixed": "compare"}.get(picked[0], picked[0]) if picked else "tuned"
    module = {"participation": participation, "tuned": tuned, "tradeoffs": tradeoffs,
              "compare": algorithms_part}[label]
    settings = common.Settings(trials=args.trials, rounds=args.rounds, seed=args.seed,
                               out=args.out, quick=args.quick, argv=tuple(argv))
    _output_folder(args.out)
    progress = common.Progress(label, enabled=not args.quiet)
    start = time.perf_counter()
    try:
        doc = module.run(settings, progress)
    finally:
        progress.close()
    doc["config"]["wall_seconds"] = time.perf_counter() - start
    doc["config"]["timings"] = progress.timings
    paths = module.write(doc, args.out)
    print(module.summary_text(doc))
    if not args.quiet:
        print(f"{label}: {time.perf_counter() - start:.1f} s, wrote "
              + ", ".join(os.path.basename(p) for p in paths), file=sys.stderr)
    return 0


def _remove_checkpoints(folder: str, experiment: str) -> None:
    """Deletes an experiment's run checkpoints and the note of its earlier runs' time (its
    results are written), and empty folders."""
    from fedjax_abc.repro import common
    sub = os.path.join(folder, experiment)
    if not os.path.isdir(sub):
        return
    for entry in os.listdir(sub):
        if entry.endswith(".npz") or entry == common.ELAPSED_FILE:
            os.remove(os.path.join(sub, entry))
    for path in (sub, folder):
        try:
            os.rmdir(path)
        except OSError:  # not empty: leave it
            pass


def report(args) -> int:
    from fedjax_abc.repro import report as report_module
    if not os.path.isdir(args.results):
        raise RuntimeError(f"no results folder {args.results!r}; run 'fedjax-abc reproduce' first")
    from fedjax_abc.repro import shipped
    reference = shipped.reference_folder() if args.reference is None else (
        None if args.reference == "none" else args.reference)
    if reference is not None and not os.path.isdir(reference):
        raise RuntimeError(f"no reference results folder {reference!r}")
    out = args.out or os.path.join(args.results, "reproduction.md")
    path = report_module.write_report(args.results, out, reference)
    print(path)
    return 0


def _submit_grid(args, spec, out: str) -> int:
    """``run GRID --submit``: the parts as a job array (see ``fedjax_abc.repro.submit``)."""
    if args.part is not None or args.of is not None:
        raise ValueError("--submit shares the parts among its tasks itself: no --part or --of")
    try:
        from fedjax_abc.repro import submit
    except ImportError:
        raise RuntimeError("--submit needs submitit: pip install -e \".[slurm]\"") from None
    from fedjax_abc.repro import grid as grid_module

    _output_folder(out)
    given = {key[len("slurm_"):]: value for key, value in vars(args).items()
             if key.startswith("slurm_") and value is not None}
    parameters = submit.executor_parameters(dict(spec.slurm, **given))
    parts = grid_module.part_count(spec)
    tasks = min(args.tasks or parts, parts)
    jobs = submit.submit(args.grid, out, args.trials, args.rounds, tasks, args.submit,
                         parameters)
    print(f"{spec.name}: {tasks} tasks submitted ({args.submit}, jobs "
          f"{jobs[0].job_id}..{jobs[-1].job_id}) for {parts} parts into {out}")
    if args.submit == "slurm" and not args.wait:
        print(f"when they are done: {_merge_command(args, out)}")
        return 0
    submit.wait(jobs, lambda line: None if args.quiet else print(line, file=sys.stderr))
    failed = submit.failed_jobs(jobs)
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(jobs)} tasks failed (task "
                           f"{failed[0].job_id}: {submit.failure(failed[0])}); their logs are in "
                           f"{os.path.join(out, 'submitit')}; rerun the same command to run the "
                           "parts not saved")
    done = grid_module.run_grid(spec, out, None, merge=True)
    wrote = ("; wrote " + ", ".join(os.path.relpath(p, out) for p in done["paths"])
             if done["joined"] else ", already joined by a task; nothing rewritten")
    print(f"{spec.name}: {len(done['result'])} grid points from {parts} parts{wrote} into {out}")
    return 0


def _start_up() -> None:
    """See :func:`fedjax_abc.repro.common.start_up`."""
    from fedjax_abc.repro import common
    common.start_up()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``fedjax-abc``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command == "reproduce":
            args.set_pairs = _overrides(args)
    except _UsageError as err:
        print(f"{PROG}: error: {err} (see {PROG} --help)", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    restore = _catch_ctrl_c()
    try:
        _start_up()
        if args.command == "reproduce":
            return reproduce(args, argv)
        if args.command == "compare":
            return compare(args, argv)
        if args.command in ("run", "merge"):
            return run_grid(args)
        return report(args)
    except KeyboardInterrupt:
        folder = None
        if args.command == "reproduce" and not args.no_checkpoint:
            folder = args.checkpoint or os.path.join(args.out, "checkpoints")
        if args.command == "run":
            folder = args.out or "its output folder"
        print(f"{PROG}: interrupted" + (f"; rerun the same command to resume from the "
                                        f"checkpoints in {folder}" if folder else ""),
              file=sys.stderr)
        return 130
    except (ValueError, RuntimeError, OSError) as err:
        message = " ".join(str(err).split())
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return 1
    finally:
        restore()


def _interrupt_once(signum, frame, collecting: bool = False):
    """Ctrl-C: the command stops where Python next runs (checkpoints are saved on the way
    out, and it says how to resume); a second Ctrl-C ends the process at once (SIGINT's
    default action), also inside a compilation that does not return to Python until done.

    Where Python would print and drop the KeyboardInterrupt (it arrived during a garbage
    collection, ``collecting``: in the collector's callbacks, as JAX runs one, in a
    finaliser or a weak reference's callback it calls), the command would go on as if
    nothing was pressed: the same Ctrl-C is sent again a moment later instead."""
    if collecting or _dropped_there(frame):
        import threading

        threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
        return
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    raise KeyboardInterrupt


def _catch_ctrl_c():
    """Makes Ctrl-C :func:`_interrupt_once`, told whether a garbage collection is running
    (the collector's first and last callbacks say when it starts and ends: the others, the
    finalisers and the weak references' callbacks it calls run in between); returns what
    puts things back."""
    import gc

    collecting = [False]

    def starts(phase, info):
        if phase == "start":
            collecting[0] = True

    def ends(phase, info):
        if phase == "stop":
            collecting[0] = False

    def handler(signum, frame):
        _interrupt_once(signum, frame, collecting[0])

    previous = signal.signal(signal.SIGINT, handler)
    gc.callbacks.insert(0, starts)
    gc.callbacks.append(ends)

    def restore():
        signal.signal(signal.SIGINT, previous)
        for callback in (starts, ends):
            if callback in gc.callbacks:
                gc.callbacks.remove(callback)

    return restore


def _dropped_there(frame) -> bool:
    """Whether an exception raised in ``frame`` would be dropped: it runs inside one of the
    garbage collector's callbacks or an object's finaliser."""
    import gc

    callbacks = {getattr(cb, "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        if frame.f_code in callbacks or frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


if __name__ == "__main__":
    sys.exit(main())
