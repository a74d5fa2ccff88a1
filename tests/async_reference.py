"""An event-driven reference of asynchronous FedBuff and FedAsync in plain NumPy.

Written from the papers (Nguyen et al. 2022, Algorithm 1; Xie et al. 2019, Algorithm 1),
one trial at a time, with a heap of arrival events; nothing of the package's asynchronous
engine is used. It is fed the package's random words (a trial's counter streams) so that
both make the same draws:

- the clients dispatched at server version u: the free clients (not in flight) with the
  smallest words of stream 0 under k_u (their upper 31 bits), ties by index;
- client i's duration: Q s_i E_i + m with E_i = -mean log(1 - u_i), u_i from its first word
  of stream 4 under k_u (an exponential step time), m a constant communication time;
- the local steps: Q exact gradient steps of the diagonal quadratic
  f_i(x) = (1/2) sum_j a_ij (x_j - c_ij)^2.

Arrivals are popped by (time, slot); a replacement takes the slot of the arrival it
replaces, the earliest arrival's slot going to the chosen client with the smallest word.
"""

from __future__ import annotations

import heapq
from typing import Callable, NamedTuple

import jax
import numpy as np

from fedjax_abc._engine._random import (SAMPLER_STREAM, TIME_STREAM, client_words, round_keys,
                                        stream_words)
from fedjax_abc._engine._threefry import fold_in_data


class Trial(NamedTuple):
    times: np.ndarray       # (T,) the time of each server step
    xs: np.ndarray          # (T + 1, d) the model after each server step (x_0 first)
    staleness: np.ndarray   # (T, K) the staleness of each step's arrivals, in arrival order
    clients: np.ndarray     # (T, K) who arrived, in arrival order
    dispatched: list        # the clients dispatched at versions 0, 1, ..., T


def _unit(words: np.ndarray) -> np.ndarray:
    return (np.asarray(words, np.float64) + 0.5) * 2.0 ** -32


def _choose(k, busy: set, count: int, n: int) -> list:
    words = np.asarray(stream_words(k, SAMPLER_STREAM, n))
    free = sorted((int(words[i]) >> 1, i) for i in range(n) if i not in busy)
    return [i for _, i in free[:count]]


def _local(a: np.ndarray, c: np.ndarray, i: int, x: np.ndarray, Q: int, alpha: float):
    y = x.copy()
    for _ in range(Q):
        y = y - alpha * a[i] * (y - c[i])
    return y


class PackageDraws:
    """The package's words of one trial: what the engine draws."""

    def __init__(self, key, trial: int, n: int):
        self.tkey = fold_in_data(jax.random.key_data(key), np.uint32(trial))
        self.n = n

    def choose(self, version: int, busy: set, count: int) -> list:
        return _choose(round_keys(self.tkey, version), busy, count, self.n)

    def step_time(self, version: int, i: int, step_mean: float) -> float:
        k = round_keys(self.tkey, version)
        word = np.asarray(client_words(k, np.array([i], np.int32), 2, "threefry",
                                       TIME_STREAM))[0, 0]
        return -step_mean * np.log1p(-_unit(word))


class NumpyDraws:
    """NumPy's own generator in their place (for timing the reference alone)."""

    def __init__(self, seed: int, n: int):
        self.rng, self.n = np.random.default_rng(seed), n

    def choose(self, version: int, busy: set, count: int) -> list:
        free = [i for i in range(self.n) if i not in busy]
        return list(self.rng.choice(free, size=count, replace=False))

    def step_time(self, version: int, i: int, step_mean: float) -> float:
        return self.rng.exponential(step_mean)


def run_trial(a, c, *, rule: str, buffer: int, concurrency: int, local_steps: int,
              stepsize: float, steps: int, key, trial: int, x0, step_mean: float,
              communication: float = 0.0, speeds=None, server_stepsize: float = 1.0,
              mixing: float = 0.6, staleness: Callable[[int], float] = lambda tau: 1.0,
              draws=None) -> Trial:
    """One trial of FedBuff (``rule="fedbuff"``) or FedAsync (``"fedasync"``, buffer 1).

    ``draws``: where the random choices come from (default :class:`PackageDraws` of
    ``key`` and ``trial``)."""
    a, c = np.asarray(a, np.float64), np.asarray(c, np.float64)
    n = a.shape[0]
    speeds = np.ones(n) if speeds is None else np.asarray(speeds, np.float64)
    draws = PackageDraws(key, trial, n) if draws is None else draws
    Q = local_steps

    def duration(version, i):
        return Q * speeds[i] * draws.step_time(version, i, step_mean) + communication

    x = np.asarray(x0, np.float64).copy()
    heap, dispatched = [], []
    first = draws.choose(0, set(), concurrency)
    dispatched.append(first)
    for slot, i in enumerate(first):
        finish = duration(0, i)
        heapq.heappush(heap, (finish, slot, i, 0, x.copy(),
                              _local(a, c, i, x, local_steps, stepsize)))
    times, xs, taus, who = [], [x.copy()], [], []
    for u in range(steps):
        arrivals = [heapq.heappop(heap) for _ in range(buffer)]
        now = arrivals[-1][0]
        tau = [u - e[3] for e in arrivals]
        s = np.array([staleness(t) for t in tau])
        if rule == "fedbuff":
            delta = sum(s[j] * (arrivals[j][5] - arrivals[j][4]) for j in range(buffer))
            x = x + server_stepsize * delta / buffer
        else:
            w = mixing * s[0]
            x = (1 - w) * x + w * arrivals[0][5]
        version = u + 1
        busy = {e[2] for e in heap}
        new = draws.choose(version, busy, buffer)
        dispatched.append(new)
        for event, i in zip(arrivals, new):
            finish = now + duration(version, i)
            heapq.heappush(heap, (finish, event[1], i, version, x.copy(),
                                  _local(a, c, i, x, local_steps, stepsize)))
        times.append(now)
        xs.append(x.copy())
        taus.append(tau)
        who.append([e[2] for e in arrivals])
    return Trial(np.array(times), np.array(xs), np.array(taus), np.array(who), dispatched)
