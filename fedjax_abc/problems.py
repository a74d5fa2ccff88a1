"""The paper's problems, each with its oracle, and a d-dimensional family.

- :func:`softplus_huber`: eq. (25) with oracle (26), Section IV-A (n = 16).
- :func:`huber_offsets`: eq. (27) with the sign oracle of Section IV-B (n Huber clients).
- :func:`bgd_counterexample`: the two clients of Theorem 1 (smooth, lower bounded, not BGD).
- :func:`quadratics`: heterogeneous diagonal quadratics in R^d with a Gaussian ABC oracle.
- :func:`huber`: the Huber function of eq. (25).

Build your own with :func:`fedjax_abc.make_problem`.
"""

from fedjax_abc._problems._paper import (
    bgd_counterexample,
    huber,
    huber_offsets,
    quadratics,
    softplus_huber,
)

__all__ = [
    "bgd_counterexample",
    "huber",
    "huber_offsets",
    "quadratics",
    "softplus_huber",
]
