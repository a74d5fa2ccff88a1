"""An independent NumPy / SciPy reference of gossip averaging, from the equations.

Nothing here imports the package: each topology's adjacency (or one-peer matrix) is written
from its definition with plain loops, the weights from their formulas, and a mixing step is a
SciPy CSR product in a Python loop over trials.

- adjacency matrices: :func:`ring`, :func:`torus`, :func:`complete`, :func:`star`,
  :func:`erdos_renyi` (pair (i, j), i < j, in ``triu_indices`` order, an edge when its word
  w < p 2^32);
- weights: :func:`metropolis_hastings` (w_ij = 1 / (1 + max(d_i, d_j))),
  :func:`max_degree` (w_ij = 1 / (1 + d_max)), each with the rest of the row on the diagonal;
- one-peer matrices: :func:`exponential` (W_t = (I + P^(2^(t mod tau))) / 2, Ying et al.
  2021) and :func:`matching` (the nodes sorted by their words, positions 2m and 2m + 1
  averaged);
- :func:`mix_trials`: W_r X_r for every trial r with ``scipy.sparse``;
- :func:`consensus_errors`: ||X_t - Xbar||_F^2 / n along X_{t+1} = W_t X_t.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp


def ring(n: int) -> np.ndarray:
    A = np.zeros((n, n), bool)
    for i in range(n):
        A[i, (i - 1) % n] = A[i, (i + 1) % n] = True
    return A


def torus(rows: int, cols: int) -> np.ndarray:
    n = rows * cols
    A = np.zeros((n, n), bool)
    for r in range(rows):
        for c in range(cols):
            i = r * cols + c
            for rr, cc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
                A[i, (rr % rows) * cols + cc % cols] = True
    return A


def complete(n: int) -> np.ndarray:
    return ~np.eye(n, dtype=bool)


def star(n: int) -> np.ndarray:
    A = np.zeros((n, n), bool)
    A[0, 1:] = A[1:, 0] = True
    return A


def erdos_renyi(n: int, p: float, words) -> np.ndarray:
    """Pair (i, j), i < j, the k-th in row-major upper-triangle order, is an edge when its
    word is below p 2^32."""
    words = np.asarray(words, np.uint64)
    A = np.zeros((n, n), bool)
    k = 0
    for i in range(n):
        for j in range(i + 1, n):
            A[i, j] = A[j, i] = float(words[k]) < p * 2.0 ** 32
            k += 1
    return A


def metropolis_hastings(A: np.ndarray) -> np.ndarray:
    d = A.sum(axis=1)
    W = np.where(A, 1.0 / (1.0 + np.maximum(d[:, None], d[None, :])), 0.0)
    return W + np.diag(1.0 - W.sum(axis=1))


def max_degree(A: np.ndarray) -> np.ndarray:
    W = np.where(A, 1.0 / (1.0 + A.sum(axis=1).max()), 0.0)
    return W + np.diag(1.0 - W.sum(axis=1))


def exponential(n: int, t: int) -> np.ndarray:
    """Node i averages with node i + 2^(t mod tau) (mod n), tau = ceil(log2 n)."""
    tau = max(1, math.ceil(math.log2(n)))
    shift = 2 ** (t % tau)
    W = 0.5 * np.eye(n)
    for i in range(n):
        W[i, (i + shift) % n] += 0.5
    return W


def matching(n: int, words) -> np.ndarray:
    """The nodes in the order of their words (stable), pairs at positions (2m, 2m + 1)."""
    order = np.argsort(np.asarray(words, np.uint32), kind="stable")
    W = np.eye(n)
    for m in range(n // 2):
        i, j = order[2 * m], order[2 * m + 1]
        W[i, i] = W[j, j] = W[i, j] = W[j, i] = 0.5
    return W


def mix_trials(Ws, Xs) -> np.ndarray:
    """W_r X_r for every trial r (Ws: one matrix for all, or one a trial), as CSR products
    in a loop over the trials."""
    Xs = np.asarray(Xs, np.float64)
    shared = not isinstance(Ws, (list, tuple)) and np.ndim(Ws) == 2
    csr = [sp.csr_matrix(Ws)] * len(Xs) if shared else [sp.csr_matrix(W) for W in Ws]
    return np.stack([csr[r] @ Xs[r] for r in range(len(Xs))])


def consensus_errors(Ws, X0, t: int) -> np.ndarray:
    """||X_s - Xbar||_F^2 / n for s = 0..t along X_{s+1} = W_s X_s (Ws: one matrix, or a
    function s -> W_s)."""
    X = np.asarray(X0, np.float64)
    n = X.shape[0]
    mean = X.mean(axis=0)
    out = [np.sum((X - mean) ** 2) / n]
    for s in range(t):
        W = Ws(s) if callable(Ws) else Ws
        X = sp.csr_matrix(W) @ X
        out.append(np.sum((X - mean) ** 2) / n)
    return np.array(out)
