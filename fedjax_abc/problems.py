"""The paper's problems, each with its oracle, a d-dimensional family, and learning problems.

The paper's:

- :func:`softplus_huber`: eq. (25) with oracle (26), Section IV-A (n = 16).
- :func:`huber_offsets`: eq. (27) with the sign oracle of Section IV-B (n Huber clients).
- :func:`bgd_counterexample`: the two clients of Theorem 1 (smooth, lower bounded, not BGD).
- :func:`quadratics`: heterogeneous diagonal quadratics in R^d with a Gaussian ABC oracle.
- :func:`huber`: the Huber function of eq. (25).

Learning problems (x = a model's parameters flattened, clients holding data; pair them with
``fedjax_abc.MinibatchOracle`` for mini-batch SGD, data from :mod:`fedjax_abc.data`):

- :func:`softmax_regression`, :func:`logistic_regression` (convex, l2 > 0; f_i*, f*, x* by
  Newton's method in float64) and :func:`mlp` (an equinox MLP; best values found);
- :func:`synthetic`: softmax regression on Synthetic(alpha, beta) of Li et al. 2020;
- :func:`from_model`: your own ``equinox.Module`` and loss (:func:`cross_entropy` for a
  classifier);
- :func:`learning_problem`: any :class:`AbstractModel` on per-client data;
- :func:`evaluate`: held-out accuracy and loss of models x (e.g. ``SimResult.x``);
  :func:`held_out_metrics`: the same recorded inside a run (``simulate(metrics=...)``);
  :func:`client_metrics`: each client's loss and accuracy on its own data, summarised over
  the clients (worst, quantiles, spread) inside a run.

Build your own with :func:`fedjax_abc.make_problem`.
"""

from fedjax_abc._problems._client_metrics import ClientSpread, client_metrics
from fedjax_abc._problems._learning import (
    Evaluation,
    HeldOut,
    evaluate,
    from_model,
    held_out_metrics,
    learning_problem,
    logistic_regression,
    mlp,
    softmax_regression,
    synthetic,
)
from fedjax_abc._problems._models import (
    MLP,
    AbstractModel,
    ClientData,
    DatasetLoss,
    EquinoxModel,
    LogisticRegression,
    SoftmaxRegression,
    cross_entropy,
)
from fedjax_abc._problems._paper import (
    bgd_counterexample,
    huber,
    huber_offsets,
    quadratics,
    softplus_huber,
)

__all__ = [
    "ClientSpread",
    "client_metrics",
    "MLP",
    "AbstractModel",
    "EquinoxModel",
    "cross_entropy",
    "from_model",
    "ClientData",
    "DatasetLoss",
    "Evaluation",
    "HeldOut",
    "LogisticRegression",
    "SoftmaxRegression",
    "bgd_counterexample",
    "evaluate",
    "held_out_metrics",
    "huber",
    "huber_offsets",
    "learning_problem",
    "logistic_regression",
    "mlp",
    "quadratics",
    "softmax_regression",
    "softplus_huber",
    "synthetic",
]
