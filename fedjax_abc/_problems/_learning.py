"""Learning problems: models trained on federated data, x the model's parameters flattened.

Client i holds (X_i, y_i) with m_i samples and f_i is its mean loss, l2-regularised:

    f_i(x) = w_i ( (1/m_i) sum_j ell(x; X_ij, y_ij) + (l2/2) ||x||^2 ),

and the global objective is the paper's f = (1/n) sum_i f_i (eq. 1). The weights w_i choose
how the clients count, explicitly:

- ``weighting="uniform"`` (the paper's): w_i = 1, f = (1/n) sum_i F_i with F_i the client's
  mean loss;
- ``weighting="samples"``: w_i = n m_i / m (m = sum_i m_i), so f = sum_i (m_i / m) F_i, the
  mean loss over all m samples. f_i* = w_i F_i* and sigma_f* (eq. 11) is then
  f* - sum_i (m_i / m) F_i*, and ``Problem.value``/``grad`` give the sample-weighted f.

The simulator's Algorithm 1 averages the sampled clients' models uniformly (line 13); with
``"samples"`` it runs on the scaled f_i, so client i's local steps are those of F_i with
stepsize alpha n m_i / m. This is not McMahan et al.'s FedAvg, which averages the local
models with weights m_i (a sampler whose slot weights are m_i would give that; the paper's
theory is for uniform averaging). With one local step and full participation the two agree.

f_i*, f* and x* are computed in float64 the first time they are asked for (reading
``problem.f_star``, a theory function, a run's ``SimResult.gap``; building the problem and
training on it need none of them): by Newton's method for the convex models (softmax and
logistic regression with l2 > 0), to float64 precision; by L-BFGS for the MLP, whose values
are the best found, not certified infima (``Problem.certified`` is False). Then the problem
keeps them.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_abc._problems import _data
from fedjax_abc._problems._args import check_count, check_flag, check_key, check_real, real_array
from fedjax_abc._problems._models import (MLP, AbstractModel, ClientData, DatasetGrad,
                                          DatasetLoss, EquinoxModel, LogisticRegression,
                                          PooledData, SoftmaxRegression, model_of)
from fedjax_abc._problems._minima import DeferredMinima, Solver
from fedjax_abc._problems._oracles import AbstractOracle, ExactOracle
from fedjax_abc._problems._problem import Problem
from fedjax_abc._problems._solve import solve_clients_and_global

__all__ = [
    "with_flipped_labels",
    "Evaluation",
    "HeldOut",
    "evaluate",
    "from_model",
    "held_out_metrics",
    "learning_problem",
    "logistic_regression",
    "mlp",
    "softmax_regression",
    "synthetic",
]

WEIGHTINGS = ("uniform", "samples")


def _client_arrays(features, labels, num_classes: Optional[int]):
    """Checked float64 features and int32 labels per client, and K (ValueError, one line)."""
    for name, value in (("features", features), ("labels", labels)):
        if isinstance(value, (np.ndarray, jax.Array, dict, str, bytes)) or not hasattr(value, "__len__"):
            raise ValueError(f"{name} must be a list of n per-client arrays, got "
                             f"{type(value).__name__}")
    if len(features) != len(labels):
        raise ValueError(f"features has {len(features)} clients and labels {len(labels)}: "
                         "give one array of each per client")
    if len(features) == 0:
        raise ValueError("features and labels must hold at least one client")
    Xs, ys = [], []
    p = None
    for i, (X, y) in enumerate(zip(features, labels)):
        try:
            X = np.asarray(X, dtype=np.float64) if not isinstance(X, (str, bytes)) else None
        except (TypeError, ValueError):
            X = None
        if X is None:
            raise ValueError(f"client {i}: features must be an array of numbers (m_i, p)")
        y = np.asarray(y)
        if X.ndim != 2:
            raise ValueError(f"client {i}: features must have shape (m_i, p), got {X.shape}")
        if y.ndim != 1:
            raise ValueError(f"client {i}: labels must have shape (m_i,), got {y.shape}")
        if X.shape[0] != y.shape[0]:
            raise ValueError(f"client {i}: {X.shape[0]} rows of features but {y.shape[0]} labels")
        if y.shape[0] == 0:
            raise ValueError(f"client {i} has no samples (m_i = 0): every client needs data")
        if p is None:
            p = X.shape[1]
        elif X.shape[1] != p:
            raise ValueError(f"client {i}: {X.shape[1]} features, client 0 has {p}")
        if not np.all(np.isfinite(X)):
            raise ValueError(f"client {i}: features must be finite")
        if not (np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.bool_)
                or (np.issubdtype(y.dtype, np.floating) and np.all(y == np.round(y)))):
            raise ValueError(f"client {i}: labels must be integers, got dtype {y.dtype}")
        Xs.append(X)
        ys.append(y.astype(np.int64))
    top = max(int(y.max()) for y in ys)
    K = top + 1 if num_classes is None else check_count("num_classes (K)", num_classes, low=2)
    for i, y in enumerate(ys):
        bad = (y < 0) | (y >= K)
        if bad.any():
            raise ValueError(f"client {i}: label {int(y[np.argmax(bad)])} outside [0, K={K})")
    if num_classes is None:
        present = np.unique(np.concatenate(ys))
        if present.size < K:
            raise ValueError(f"labels take {present.size} values in 0..{top}, which makes "
                             f"K={K} classes: remap them to 0..{present.size - 1} (e.g. "
                             "numpy.unique(labels, return_inverse=True)) or pass num_classes")
    return Xs, [y.astype(np.int32) for y in ys], K


def _model_of(problem_or_model):
    """The model of a learning problem (or the model itself)."""
    if isinstance(problem_or_model, Problem):
        return model_of(problem_or_model.loss)
    return problem_or_model


def _test_data(model, features, labels):
    """Checked (m, p) test features and (m,) int32 labels in [0, K) (ValueError, one line)."""
    if not isinstance(model, AbstractModel):
        raise ValueError(f"evaluate and held_out_metrics take a learning problem or its model "
                         f"(fa.problems.softmax_regression, ...), got {model!r}"[:200])
    features = real_array("features", features)
    labels = np.asarray(labels)
    if features.ndim != 2 or labels.ndim != 1 or features.shape[0] != labels.shape[0]:
        raise ValueError(f"features (m, p) and labels (m,) must match, got {features.shape} "
                         f"and {labels.shape}")
    if features.shape[0] == 0:
        raise ValueError("features and labels hold no test samples (m = 0)")
    if features.shape[1] != model.num_features:
        raise ValueError(f"features have {features.shape[1]} columns; the model takes "
                         f"p={model.num_features}")
    if not np.all(np.isfinite(features)):
        raise ValueError("features must be finite")
    if not (np.issubdtype(labels.dtype, np.integer) or np.issubdtype(labels.dtype, np.bool_)):
        raise ValueError(f"labels must be integers, got {labels.dtype}")
    K = model.num_classes
    if labels.size:
        bad = (labels < 0) | (labels >= K)
        if bad.any():
            raise ValueError(f"test label {labels[np.argmax(bad)].item()!r} outside [0, K={K}) "
                             f"of the model's {K} classes")
    return features, labels.astype(np.int32)


def _client_weights(sizes: np.ndarray, weighting: str) -> np.ndarray:
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting ({weighting!r}) must be one of {WEIGHTINGS}")
    if weighting == "uniform":
        return np.ones(sizes.shape[0])
    return sizes.shape[0] * sizes / sizes.sum()


def _padded(Xs, ys, weights, l2) -> ClientData:
    n, M, p = len(ys), max(len(y) for y in ys), Xs[0].shape[1]
    X = np.zeros((n, M, p))
    y = np.zeros((n, M), np.int32)
    for i, (Xi, yi) in enumerate(zip(Xs, ys)):
        X[i, : len(yi)], y[i, : len(yi)] = Xi, yi
    count = np.array([len(yi) for yi in ys], np.int32)
    return ClientData(jnp.asarray(X), jnp.asarray(y), jnp.asarray(count),
                      jnp.asarray(weights, jnp.float64), jnp.full((n,), float(l2), jnp.float64))


def _pooled(model, Xs, ys, weights, l2) -> PooledData:
    n = len(ys)
    coef = np.concatenate([np.full(len(y), w / (n * len(y))) for y, w in zip(ys, weights)])
    return PooledData(model, jnp.asarray(np.concatenate(Xs)), jnp.asarray(np.concatenate(ys)),
                      jnp.asarray(coef), jnp.asarray(l2 * np.mean(weights), jnp.float64))


def learning_problem(model, features, labels, *, l2: float = 1e-3, weighting: str = "uniform",
                     oracle: Optional[AbstractOracle] = None, x0=None, solver_steps: int = 500,
                     name: Optional[str] = None) -> Problem:
    """A :class:`~fedjax_abc.Problem` whose clients hold data and whose x is ``model``'s parameters.

    Args:
      model: an :class:`~fedjax_abc._problems._models.AbstractModel`: ``SoftmaxRegression``,
        ``LogisticRegression``, ``MLP``, or a user's module (:func:`from_model`).
      features: n arrays (m_i, p), one per client.
      labels: n integer arrays (m_i,), in [0, K).
      l2: the l2 coefficient (>= 0; > 0 for the convex models, so that minimisers exist).
      weighting: "uniform" (w_i = 1, the paper's f) or "samples" (w_i = n m_i / m).
      oracle: default :class:`~fedjax_abc.ExactOracle` (the full-batch gradient); e.g.
        ``fedjax_abc.MinibatchOracle(b)``.
      x0: where the solver starts (default: ``model.init``); for the MLP also the point the
        best values are searched from.
      solver_steps: L-BFGS steps for the nonconvex model.
      name: a label.

    Returns:
      A Problem with ``params`` a :class:`ClientData` (leaves with leading axis n, padded to
      max_i m_i rows) and ``loss`` a ``DatasetLoss``.

    Raises:
      ValueError: in one line: mismatched feature and label counts, an empty client, labels
        out of range or not integers, bad l2 or weighting, a batch larger than a client's
        data (``MinibatchOracle`` without replacement).
    """
    if not isinstance(model, AbstractModel):
        raise ValueError("model must be a fedjax_abc.problems.SoftmaxRegression, "
                         f"LogisticRegression, MLP or EquinoxModel, got {model!r}"[:200])
    Xs, ys, K = _client_arrays(features, labels, model.num_classes)
    if Xs[0].shape[1] != model.num_features:
        raise ValueError(f"the model takes {model.num_features} features, the data has "
                         f"{Xs[0].shape[1]}")
    l2 = check_real("l2", l2, low=0.0)
    solver_steps = check_count("solver_steps", solver_steps)
    if model.convex and l2 <= 0:
        raise ValueError(f"l2 ({l2}) must be > 0 for {type(model).__name__}: without it f_i may "
                         "have no minimiser (separable data)")
    sizes = np.array([len(y) for y in ys])
    weights = _client_weights(sizes, weighting)
    oracle = ExactOracle() if oracle is None else oracle
    if not isinstance(oracle, AbstractOracle):
        raise ValueError(f"oracle must be a fedjax_abc.AbstractOracle, got {type(oracle).__name__}")
    start = np.asarray(model.init(jax.random.key(0)) if x0 is None else x0, np.float64)
    if start.shape != (model.dim,):
        raise ValueError(f"x0 must have shape (d={model.dim},), got {start.shape}")
    minima = DeferredMinima(_solver(model, Xs, ys, weights, l2, start, solver_steps),
                            num_clients=len(ys), d=model.dim)
    label = name or (f"{type(model).__name__}(n={len(ys)}, d={model.dim}, l2={l2:g}, "
                     f"{weighting})")
    problem = Problem(loss=DatasetLoss(model), params=_padded(Xs, ys, weights, l2),
                      minima=minima, oracle=oracle, grad_fn=DatasetGrad(model), name=label,
                      certified=bool(model.convex), pooled=_pooled(model, Xs, ys, weights, l2))
    oracle.validate(problem)  # e.g. a mini-batch larger than a client's data
    return problem


def with_flipped_labels(problem: Problem) -> Problem:
    """``problem`` with every client's labels y replaced by K - 1 - y (ByzFL's label
    flipping; Tolpegin et al., ESORICS 2020): the same features, weights and l2, the
    problem's own f_i*, f*, x* kept (an oracle that reads f_i* reads the original ones).

    Raises:
      ValueError: where the problem's clients hold no labels (not a learning problem).
    """
    if not isinstance(problem.params, ClientData) or not isinstance(problem.loss, DatasetLoss):
        raise ValueError(f"label flipping needs a learning problem, whose clients hold labels; "
                         f"{problem.name or type(problem.loss).__name__} has none")
    K = problem.loss.model.num_classes
    return eqx.tree_at(lambda p: p.params.labels, problem, K - 1 - problem.params.labels)


def _solver(model, Xs, ys, weights, l2: float, start: np.ndarray, steps: int) -> Solver:
    """The computation of a learning problem's f_i*, f*, x*, for when they are first asked
    for (see :func:`~fedjax_abc._problems._solve.solve_clients_and_global`)."""
    n, d, m = len(ys), model.dim, sum(len(y) for y in ys)
    if model.convex:  # about a dozen Newton steps: Cholesky factors and Hessians
        how = f"Newton's method, {n + 1} objectives of d = {d}"
        flops = 12 * ((n + 1) * d ** 3 / 3 + 4 * m * d * d)
    else:  # L-BFGS: a forward and backward pass over all rows a step, for f_i and for f
        how = f"{steps} L-BFGS steps, {n + 1} objectives of d = {d}"
        flops = steps * 12 * m * d

    def solve():
        local_f, _, f_star, x_star, _ = solve_clients_and_global(model, Xs, ys, weights, l2,
                                                                 start, steps=steps)
        return local_f, f_star, x_star

    return Solver(solve, f"f*, x* and the {n} clients' f_i* ({how})", flops)


def from_model(model, loss, features, labels, *, l2: float = 1e-3, weighting: str = "uniform",
               oracle: Optional[AbstractOracle] = None, convex: bool = False,
               num_classes: Optional[int] = None, solver_steps: int = 500,
               name: Optional[str] = None) -> Problem:
    """A learning problem of your own ``equinox.Module`` and loss.

    x is the module's floating array leaves flattened (d of them; the pytree is unravelled
    inside the loss), f_i the client's mean loss plus (l2 / 2) ||x||^2 over all leaves, as
    for the built-in models. f_i*, f* and x* are found from the module's own parameters:
    by Newton's method (autodiff Hessians) and certified where ``convex=True`` is declared,
    else by ``solver_steps`` of L-BFGS (the best values found).

    Args:
      model: an ``equinox.Module`` mapping one row of features (p,) to K logits; its
        parameters as given are where the solvers start.
      loss: ``loss(module, X, y)``, the mean loss over the rows of X (m, p) with labels
        (m,); e.g. :func:`cross_entropy`.
      features, labels: per-client lists, as for :func:`softmax_regression`.
      l2, weighting, oracle, solver_steps, name: as for :func:`learning_problem`.
      convex: whether every per-sample loss is convex in the parameters (your claim: it
        makes f_i* and f* certified minima).
      num_classes: K (default: from the module's output on a row).

    Example:
      >>> import equinox as eqx, jax, numpy as np, fedjax_abc as fa
      >>> X = [np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([[1.0, 1.0], [0.0, 0.5]])]
      >>> y = [np.array([0, 1]), np.array([1, 0])]
      >>> p = fa.problems.from_model(eqx.nn.Linear(2, 2, key=jax.random.key(0)),
      ...                            fa.problems.cross_entropy, X, y, l2=0.1, convex=True)
      >>> p.dim, p.certified
      (6, True)

      The model's own parameters, flattened, are a starting point (x0 of shape (d,)), and
      ``problem.loss.model.unravel(x)`` is the module at any point x:

      >>> x0 = p.loss.model.init(jax.random.key(1))
      >>> res = fa.simulate(p, num_sampled=2, local_steps=2, stepsize=0.1, rounds=10, x0=x0,
      ...                   key=jax.random.key(2), trials=4)
      >>> x0.shape, res.x_final.shape, type(p.loss.model.unravel(res.x_final[0])).__name__
      ((6,), (4, 6), 'Linear')
    """
    if not isinstance(model, eqx.Module):
        raise ValueError(f"model must be an equinox.Module, got {type(model).__name__}")
    if not callable(loss):
        raise ValueError(f"loss must be a function loss(module, X, y), got {loss!r}"[:200])
    convex = check_flag("convex", convex)
    try:
        p = int(np.shape(features[0])[-1])
    except (TypeError, IndexError, KeyError):
        _client_arrays(features, labels, num_classes)  # its one-line error
        raise ValueError("features must be a list of (m_i, p) arrays") from None
    if not jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_inexact_array)):
        raise ValueError("model has no floating array leaves: nothing to train")
    try:
        out = eqx.filter_eval_shape(model, jax.ShapeDtypeStruct((p,), jnp.float64))
    except Exception as e:  # noqa: BLE001 - a user's module: say what went wrong in one line
        raise ValueError(f"model(row) failed on a row of {p} features: {type(e).__name__}: "
                         f"{e}".splitlines()[0][:200]) from None
    if not (hasattr(out, "shape") and len(out.shape) == 1 and out.shape[0] >= 2):
        raise ValueError(f"model must map a row of {p} features to K >= 2 logits, got "
                         f"{getattr(out, 'shape', out)}")
    K = out.shape[0] if num_classes is None else check_count("num_classes (K)", num_classes, 2)
    if K != out.shape[0]:
        raise ValueError(f"num_classes ({K}) differs from the model's {out.shape[0]} logits")
    Xs, ys, _ = _client_arrays(features, labels, K)
    wrapped = EquinoxModel.of(model, loss, p, K, convex)
    try:
        value = jax.eval_shape(wrapped.sample_losses, jax.ShapeDtypeStruct((wrapped.dim,),
                                                                           jnp.float64),
                               jnp.asarray(Xs[0][:1]), jnp.asarray(ys[0][:1]))
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"loss(module, X, y) failed: {type(e).__name__}: {e}".splitlines()[0][:200]) \
            from None
    if value.shape != (1,):
        raise ValueError(f"loss(module, X, y) must return one number (the mean over rows), got "
                         f"shape {value.shape[1:]}")
    return learning_problem(wrapped, features, labels, l2=l2, weighting=weighting, oracle=oracle,
                            solver_steps=solver_steps,
                            name=name or f"{type(model).__name__} (d={wrapped.dim}, l2={l2:g})")


def softmax_regression(features, labels, *, l2: float = 1e-3, weighting: str = "uniform",
                       num_classes: Optional[int] = None, oracle: Optional[AbstractOracle] = None,
                       name: Optional[str] = None) -> Problem:
    """Multinomial logistic regression on federated data (convex, l2 > 0).

    x = ravel((W, b)) with W (p, K), b (K,), d = (p + 1) K; f_i(x) = w_i (mean cross-entropy
    of softmax(X_i W + b) + (l2/2) ||x||^2). f_i*, f*, x* by Newton's method in float64.

    Args:
      features: n arrays (m_i, p). labels: n integer arrays (m_i,) in [0, K).
      l2: > 0. weighting: "uniform" or "samples" (see the module docstring).
      num_classes: K (default: the largest label + 1).
      oracle: default the full-batch gradient; ``fedjax_abc.MinibatchOracle(b)`` for SGD.
      name: a label.

    Returns:
      A :class:`~fedjax_abc.Problem`.

    Example:
      >>> import numpy as np, fedjax_abc as fa
      >>> X = [np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([[1.0, 1.0], [0.0, 0.0], [2.0, 1.0]])]
      >>> y = [np.array([0, 1]), np.array([1, 0, 2])]
      >>> p = fa.problems.softmax_regression(X, y, l2=0.1)
      >>> p.dim, p.num_clients, bool(p.sigma_f_star > 0)
      (9, 2, True)
    """
    Xs, _, K = _client_arrays(features, labels, num_classes)
    return learning_problem(SoftmaxRegression(Xs[0].shape[1], K), features, labels, l2=l2,
                            weighting=weighting, oracle=oracle, name=name)


def logistic_regression(features, labels, *, l2: float = 1e-3, weighting: str = "uniform",
                        oracle: Optional[AbstractOracle] = None,
                        name: Optional[str] = None) -> Problem:
    """Binary logistic regression (labels 0/1) on federated data; x = (w, b), d = p + 1.

    f_i(x) = w_i (mean of log(1 + e^{z}) - y z, z = X_i w + b, + (l2/2) ||x||^2).

    Example:
      >>> import numpy as np, fedjax_abc as fa
      >>> X = [np.array([[0.0], [1.0]]), np.array([[2.0], [3.0], [1.5]])]
      >>> y = [np.array([0, 1]), np.array([1, 1, 0])]
      >>> fa.problems.logistic_regression(X, y, l2=0.1).dim
      2
    """
    Xs, _, _ = _client_arrays(features, labels, 2)
    return learning_problem(LogisticRegression(Xs[0].shape[1]), features, labels, l2=l2,
                            weighting=weighting, oracle=oracle, name=name)


def mlp(key, features, labels, *, width: int = 32, depth: int = 1, l2: float = 1e-3,
        weighting: str = "uniform", num_classes: Optional[int] = None,
        oracle: Optional[AbstractOracle] = None, solver_steps: int = 500,
        name: Optional[str] = None) -> Problem:
    """A tanh MLP (``equinox.nn.MLP``, ``depth`` hidden layers of ``width``) on federated data.

    Nonconvex: ``local_minima``, ``f_star`` and ``x_star`` are the best values and point that
    ``solver_steps`` full-batch L-BFGS steps from the initialisation drawn with ``key`` found,
    upper bounds on the infima, not certified ones (``problem.certified`` is False); a run can
    find lower values, so its gap f(x_t) - f* may be negative, and sigma_f* computed from them
    is an estimate.

    Args:
      key: draws the initialisation (``x0`` of the search; also a natural x0 for a run:
        ``problem.loss.model.init(key)``).
      features, labels, width, depth, l2, weighting, num_classes, oracle, name: as in
        :func:`softmax_regression`.
      solver_steps: L-BFGS steps per client and for f.

    Example:
      >>> import jax, numpy as np, fedjax_abc as fa
      >>> X = [np.eye(3), np.eye(3)[::-1]]
      >>> y = [np.array([0, 1, 2]), np.array([0, 1, 2])]
      >>> p = fa.problems.mlp(jax.random.key(0), X, y, width=4, solver_steps=50)
      >>> p.dim, p.certified
      (31, False)
    """
    check_key("key", key)
    Xs, _, K = _client_arrays(features, labels, num_classes)
    model = MLP(Xs[0].shape[1], K, width, depth)
    return learning_problem(model, features, labels, l2=l2, weighting=weighting, oracle=oracle,
                            x0=model.init(key), solver_steps=solver_steps, name=name)


def synthetic(key, alpha: float, beta: float, num_clients: int = 30, *, l2: float = 1e-3,
              weighting: str = "uniform", oracle: Optional[AbstractOracle] = None,
              max_samples: Optional[int] = None) -> Problem:
    """Softmax regression on Synthetic(alpha, beta) of Li et al. 2020 (60 features, 10 classes).

    The data of ``fedjax_abc.data.synthetic_data(key, alpha, beta, num_clients)`` (its
    training part; the same call gives the test set), d = 610.

    Example:
      >>> import jax, fedjax_abc as fa
      >>> p = fa.problems.synthetic(jax.random.key(0), 0.0, 0.0, num_clients=4)
      >>> p.dim, p.num_clients
      (610, 4)

    Reference: T. Li et al., "Federated optimization in heterogeneous networks", MLSys 2020.
    """
    data = _data.synthetic_data(key, alpha, beta, num_clients, max_samples=max_samples)
    return softmax_regression(data.features, data.labels, l2=l2, weighting=weighting,
                              num_classes=data.num_classes, oracle=oracle,
                              name=f"synthetic({alpha:g},{beta:g}) softmax, n={num_clients}")


class Evaluation(NamedTuple):
    """Held-out metrics of models x, each with x's leading shape.

    Attributes:
      accuracy: the share of test samples whose predicted class is the label.
      loss: the mean cross-entropy over the test samples (without the l2 term).
    """

    accuracy: np.ndarray
    loss: np.ndarray


def evaluate(problem_or_model, x, features, labels) -> Evaluation:
    """Test accuracy and loss of the model at x (shape (d,) or (..., d), e.g. ``SimResult.x``).

    Args:
      problem_or_model: a learning :class:`~fedjax_abc.Problem` or its model.
      x: parameters, (d,) or any leading shape (trials, records, d) for instance.
      features: (m, p) test features. labels: (m,) integer test labels in [0, K).in [0, K).

    Returns:
      An :class:`Evaluation` with arrays of shape x.shape[:-1].

    Example:
      >>> import numpy as np, fedjax_abc as fa
      >>> X = [np.array([[0.0], [1.0]]), np.array([[2.0], [3.0], [1.5]])]
      >>> y = [np.array([0, 1]), np.array([1, 1, 0])]
      >>> p = fa.problems.logistic_regression(X, y, l2=0.1)
      >>> ev = fa.problems.evaluate(p, p.x_star, np.array([[0.0], [3.0]]), np.array([0, 1]))
      >>> float(ev.accuracy)
      1.0
    """
    model = _model_of(problem_or_model)
    features, labels = _test_data(model, features, labels)
    features = jnp.asarray(features)
    x = np.asarray(x, np.float64)
    if x.shape[-1] != model.dim:
        raise ValueError(f"x must end in d={model.dim}, got shape {x.shape}")
    flat = jnp.asarray(x.reshape(-1, model.dim))
    acc, loss = _evaluate(model, flat, features, jnp.asarray(labels, jnp.int32))
    shape = x.shape[:-1]
    return Evaluation(np.asarray(acc).reshape(shape), np.asarray(loss).reshape(shape))


class HeldOut(eqx.Module):
    """A held-out metric of the model at x, for ``simulate(..., metrics=...)``.

    The test data are array fields, so a new test set of the same shapes compiles nothing.
    Calling it on x of shape (d,) gives the accuracy or the mean loss on the data.
    """

    model: object = eqx.field(static=True)
    features: jax.Array
    labels: jax.Array
    kind: str = eqx.field(static=True)

    def __call__(self, x):
        accuracy, loss = _evaluate_one(self.model, x, self.features.astype(x.dtype), self.labels)
        return accuracy if self.kind == "accuracy" else loss


def held_out_metrics(problem_or_model, features, labels) -> dict:
    """Held-out accuracy and loss as metrics recorded inside a run.

    Args:
      problem_or_model: a learning :class:`~fedjax_abc.Problem` or its model.
      features: (m, p) test features. labels: (m,) integer test labels in [0, K).

    Returns:
      ``{"test_accuracy": ..., "test_loss": ...}``, for ``simulate(..., metrics=...)``;
      ``SimResult.metrics["test_accuracy"]`` is then (trials, records), the numbers of
      :func:`evaluate` on ``SimResult.x``.

    Example:
      >>> import jax, numpy as np, fedjax_abc as fa
      >>> X = [np.array([[0.0], [1.0]]), np.array([[2.0], [3.0], [1.5]])]
      >>> y = [np.array([0, 1]), np.array([1, 1, 0])]
      >>> p = fa.problems.logistic_regression(X, y, l2=0.1)
      >>> res = fa.simulate(p, local_steps=2, stepsize=0.1, rounds=20, x0=np.zeros(p.dim),
      ...                   trials=2, key=jax.random.key(0), record_every=10,
      ...                   metrics=fa.problems.held_out_metrics(p, [[0.0], [3.0]], [0, 1]))
      >>> res.metrics["test_accuracy"].shape
      (2, 3)
    """
    model = _model_of(problem_or_model)
    features, labels = _test_data(model, features, labels)
    data = (jnp.asarray(features), jnp.asarray(labels, jnp.int32))
    return {"test_accuracy": HeldOut(model, *data, "accuracy"),
            "test_loss": HeldOut(model, *data, "loss")}


def _evaluate_one(model, x, features, labels):
    pred = model.predict(x, features)
    return (jnp.mean((pred == labels).astype(x.dtype)),
            jnp.mean(model.sample_losses(x, features, labels)))


@functools.partial(jax.jit, static_argnums=0)
def _evaluate(model, flat, features, labels):
    return jax.lax.map(lambda x: _evaluate_one(model, x, features, labels), flat, batch_size=64)
