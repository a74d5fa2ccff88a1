"""Closed forms of time-aware training: the staleness of asynchronous aggregation.

With C clients in flight whose durations are independent and exponential (identically
distributed, e.g. ``Clock(Exponential(mean))`` with equal speeds), the remaining times of
the clients in flight are again independent exponentials after every arrival (the law is
memoryless). A server step that takes the K earliest of C arrivals therefore takes each
client in flight with probability K/C, whatever happened before, and the number of server
steps an update waits is geometric.
"""

from __future__ import annotations

import numpy as np

from fedjax_abc._theory._grid import check_int

__all__ = ["exponential_staleness"]


def exponential_staleness(concurrency: int, buffer: int = 1, bins: int = 64) -> np.ndarray:
    """P(tau = k) = (K/C)(1 - K/C)^k, k = 0, ..., bins - 2, and P(tau >= bins - 1) last.

    The staleness law of FedBuff (buffer K) and FedAsync (K = 1) with C clients in flight
    and iid exponential durations; ``fa.timing.staleness_distribution(result)`` estimates the
    same shares from a run (``staleness_bins=bins``).

    Example:
      >>> import fedjax_abc as fa
      >>> fa.theory.exponential_staleness(4, 1, bins=3).tolist()  # 1/4, 3/16, the rest
      [0.25, 0.1875, 0.5625]
    """
    C = check_int("concurrency (C)", concurrency, 1)
    K = check_int("buffer (K)", buffer, 1)
    if K > C:
        raise ValueError(f"buffer (K={K}) must be at most concurrency (C={C})")
    bins = check_int("bins", bins, 2)
    p = K / C
    head = p * (1 - p) ** np.arange(bins - 1)
    return np.append(head, (1 - p) ** (bins - 1))
