"""The peers' published workloads, shaped as they publish them, on synthetic data of the same
shapes (nothing downloaded), on whatever device JAX has.

Run from the repository root::

    python benchmarks/peers.py                       # full shapes: for an accelerator
    python benchmarks/peers.py --reduced             # small shapes: a CPU, a minute or two
    python benchmarks/peers.py --case emnist_cnn --trials 1 8 --json out.json

Cases (each ``fa.simulate`` of FedAvg or FedNova with mini-batch SGD, float32, records at
t = 0 and T only):

- ``emnist_cnn``: FedJAX's EMNIST benchmark (its ``emnist_conv`` model: two 3x3
  convolutions of 32 and 64 channels, 2x2 max-pooling, dense 128, dense 62; dropout left
  out): 3,400 clients of 28 x 28 images, 10 a round, batch 20, 10 local steps.
- ``cifar10_cnn``: pfl-research's CIFAR-10 benchmark shape (a CNN of two 5x5 convolutions
  of 32 and 64 channels with max-pooling, dense 512, dense 10): 1,000 clients of 50
  32 x 32 x 3 images, 50 a round, batch 10, 5 local steps.
- ``fednova``: Flower's FedNova baseline shape: 16 clients of CIFAR-shaped data, all of them
  every round, FedNova with a random number of local steps (uniform on 1..8, as its clients'
  epochs differ), an MLP 3072-256-10, batch 32.

``--reduced`` keeps each case's structure (models, participation, local work) with small
images, few clients and channels: what a CPU runs in a test (``tests/test_benchmark_peers.py``,
with the long checks). Each case reports trajectory-rounds per second (trials x rounds /
run s) at R = 1, 8 and 64 trials, with the problem's set-up and the first call's
compilation apart, as JSON (default ``benchmarks/results/peers_<platform>.json``, beside
the accelerator card of ``benchmarks/gpu.py``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from typing import NamedTuple

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Shape(NamedTuple):
    clients: int
    samples: int       # per client
    side: int          # image side
    channels: int      # image channels
    classes: int
    width: int         # the first convolution's channels (the second has twice), or hidden units
    dense: int
    sampled: int       # clients a round (0: all)
    batch: int
    steps: int         # local steps (the most, for a random number)
    rounds: int


SHAPES = {
    "emnist_cnn": {"full": Shape(3400, 20, 28, 1, 62, 32, 128, 10, 20, 10, 20),
                   "reduced": Shape(60, 8, 8, 1, 10, 4, 16, 4, 4, 2, 4)},
    "cifar10_cnn": {"full": Shape(1000, 50, 32, 3, 10, 32, 512, 50, 10, 5, 20),
                    "reduced": Shape(40, 8, 8, 3, 10, 4, 16, 5, 4, 2, 4)},
    "fednova": {"full": Shape(16, 100, 32, 3, 10, 256, 0, 0, 32, 8, 20),
                "reduced": Shape(6, 8, 8, 3, 10, 16, 0, 0, 4, 3, 4)},
}


def _model(case: str, s: Shape, key):
    """The case's equinox model of one flattened image."""
    import equinox as eqx
    import jax

    class CNN(eqx.Module):
        """conv(w) - conv(2w) - pool - dense - dense (EMNIST, valid 3x3 convolutions) or
        conv - pool - conv - pool - dense - dense (CIFAR-10, 'same' 5x5 convolutions)."""

        convs: tuple
        hidden: eqx.nn.Linear
        out: eqx.nn.Linear
        pool_each: bool = eqx.field(static=True)
        shape: tuple = eqx.field(static=True)

        def __call__(self, row):
            h = row.reshape(self.shape)
            pool = eqx.nn.MaxPool2d(2, 2)
            for conv in self.convs:
                h = jax.nn.relu(conv(h))
                if self.pool_each:
                    h = pool(h)
            if not self.pool_each:
                h = pool(h)
            return self.out(jax.nn.relu(self.hidden(h.reshape(-1))))

    k = jax.random.split(key, 4)
    if case == "fednova":
        return eqx.nn.MLP(s.side * s.side * s.channels, s.classes, s.width, 1,
                          activation=jax.nn.relu, key=k[0])
    emnist = case == "emnist_cnn"
    size, pad = (3, 0) if emnist else (5, "SAME")
    convs = (eqx.nn.Conv2d(s.channels, s.width, size, padding=pad, key=k[0]),
             eqx.nn.Conv2d(s.width, 2 * s.width, size, padding=pad, key=k[1]))
    side = (s.side - 4) // 2 if emnist else s.side // 4  # after the convolutions and pooling
    return CNN(convs, eqx.nn.Linear(2 * s.width * side * side, s.dense, key=k[2]),
               eqx.nn.Linear(s.dense, s.classes, key=k[3]), not emnist,
               (s.channels, s.side, s.side))


def build(case: str, s: Shape):
    """(problem, x0, simulate's keyword arguments) of a case: synthetic N(0, 1) images and
    uniform labels of the case's shapes."""
    import jax
    import numpy as np

    import fedjax_abc as fa

    rng = np.random.default_rng(0)
    p = s.side * s.side * s.channels
    X = [rng.standard_normal((s.samples, p)).astype(np.float32) for _ in range(s.clients)]
    y = [rng.integers(0, s.classes, s.samples) for _ in range(s.clients)]
    model = _model(case, s, jax.random.key(0))
    problem = fa.problems.from_model(model, fa.problems.cross_entropy, X, y, l2=1e-4,
                                     oracle=fa.MinibatchOracle(s.batch), solver_steps=1,
                                     num_classes=s.classes, name=case)
    x0 = problem.loss.model.init(jax.random.key(1))
    kw = dict(rounds=s.rounds, record_every=s.rounds, dtype="float32")
    if case == "fednova":
        kw.update(sampler=fa.FullParticipation(), algorithm=fa.algorithms.FedNova(),
                  local_steps=fa.UniformSteps(s.steps))
    else:
        kw.update(num_sampled=s.sampled, local_steps=s.steps)
    return problem, x0, kw


def run_case(case: str, s: Shape, trials: list) -> dict:
    import jax

    import fedjax_abc as fa

    t = time.perf_counter()
    problem, x0, kw = build(case, s)
    setup = time.perf_counter() - t
    rows = []
    for R in trials:
        sim = fa.Simulation(problem, **kw)

        def go(seed):
            start = time.perf_counter()
            res = sim.run(x0=x0, trials=R, key=jax.random.key(seed), stepsize=0.01)
            res.gap.sum()
            return time.perf_counter() - start

        first = go(1)
        run = go(2)
        rows.append({"trials": R, "run_s": run, "compile_s": max(first - run, 0.0),
                     "trajectory_rounds_per_s": R * s.rounds / run})
        print(f"{case:12s} R={R:3d}: {R * s.rounds / run:9.1f} trajectory-rounds/s "
              f"(run {run:.2f} s, compile {max(first - run, 0.0):.1f} s)", flush=True)
    return {"case": case, "shape": s._asdict(), "dim": problem.dim, "setup_s": setup,
            "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=tuple(SHAPES), action="append")
    ap.add_argument("--trials", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--reduced", action="store_true", help="small shapes, for a CPU")
    ap.add_argument("--json", help="where to write the rows (default benchmarks/results/"
                                   "peers_<platform>.json)")
    args = ap.parse_args(argv)
    import jax

    import fedjax_abc as fa

    jax.config.update("jax_enable_x64", True)  # problems hold f* and x* in float64
    fa.use_cpu_cores()
    scale = "reduced" if args.reduced else "full"
    cases = [run_case(c, SHAPES[c][scale], args.trials) for c in (args.case or SHAPES)]
    device = jax.devices()[0]
    suffix = "_reduced" if args.reduced else ""
    out = args.json or os.path.join(REPO, "benchmarks", "results",
                                    f"peers_{device.platform}{suffix}.json")
    info = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "platform": platform.platform(), "device": device.device_kind,
            "devices": len(jax.devices()), "scale": scale, "jax": jax.__version__}
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"machine": info, "cases": cases}, f, indent=1)
    print("wrote", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
