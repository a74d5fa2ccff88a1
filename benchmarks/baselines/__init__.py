"""Baselines for the throughput benchmarks, independent of ``fedjax_abc``.

- :func:`numpy_all`, :func:`numpy_sampled`: plain NumPy, float64, vectorised over trials
  and clients, Python loops over rounds and local steps (all n virtual trajectories, or
  only the S sampled clients).
- :func:`jax_naive`: straightforward JAX (a key split per local step, sampling by
  ``jax.random.permutation``, ``vmap`` over clients and trials, ``scan`` over steps and
  rounds, one ``jit``). Imported lazily, so the NumPy baselines do not load JAX.

All run Algorithm 1 of the paper on the problems of :mod:`benchmarks.baselines.problems`
and return x_T with shape (trials, d).

- :func:`numba_all`, :func:`numba_sampled` (:mod:`benchmarks.baselines.numba_impl`): problem
  (27) compiled with Numba (optional, imported when first used), float64 or float32,
  threads over blocks of trials, the trial loop vectorised.
- :func:`numpy_softmax`, :func:`jax_softmax`, :func:`torch_softmax`
  (:mod:`benchmarks.baselines.learning`): softmax regression with mini-batch SGD on federated
  data (:class:`SoftmaxData`), NumPy, straightforward JAX or PyTorch (optional, imported
  when called).
- :func:`~benchmarks.baselines.robust.numpy_robust`,
  :func:`~benchmarks.baselines.robust.byzfl_robust` (:mod:`benchmarks.baselines.robust`,
  imported by name): Byzantine-robust rounds (Median, TrimmedMean, Krum under SignFlip, IPM,
  ALIE) on diagonal quadratics, our NumPy loop over the trials and ByzFL's own rule and
  attack objects (optional) one trajectory at a time.
"""

from benchmarks.baselines.learning import SoftmaxData, jax_softmax, numpy_softmax, torch_softmax
from benchmarks.baselines.numpy_impl import numpy_all, numpy_sampled
from benchmarks.baselines.problems import HuberOffsets, Quadratics, SoftplusHuber

__all__ = ["HuberOffsets", "Quadratics", "SoftmaxData", "SoftplusHuber", "jax_naive", "jax_softmax",
           "numba_all",
           "numba_sampled", "numpy_all", "numpy_sampled", "numpy_softmax", "torch_softmax"]


def __getattr__(name):
    if name == "jax_naive":
        from benchmarks.baselines.jax_impl import jax_naive

        return jax_naive
    if name in ("numba_all", "numba_sampled"):
        from benchmarks.baselines import numba_impl

        return getattr(numba_impl, name)
    raise AttributeError(name)
