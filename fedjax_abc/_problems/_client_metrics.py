"""Per-client metrics recorded inside a run: how the server's model does on each client's own
data, summarised across the clients (the worst, quantiles, the spread) at every record.

Client i's loss is the mean per-sample loss on its training rows, F_i(x) (without the l2
term or the weight w_i), or on its own held-out rows when they are given (``features`` and
``labels``, e.g. from :func:`fedjax_abc.data.client_holdout`); its accuracy the share of
those rows predicted right. At a record
the n values are reduced to numbers (``simulate`` records scalars): ``client_loss_worst``
(the largest F_i), ``client_loss_q10`` ... (quantiles over the clients), ``client_loss_std``
(the spread across clients), and the same for the accuracy (the worst is the smallest).
Across trials, ``SimResult.summary`` gives their mean and interval, and the DataFrame and
xarray results carry them as metrics.
"""

from __future__ import annotations

from typing import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_abc._problems._learning import _padded, _test_data
from fedjax_abc._problems._models import AbstractModel, ClientData, model_of
from fedjax_abc._problems._problem import Problem

__all__ = ["ClientSpread", "client_metrics", "per_client"]

KINDS = ("loss", "accuracy")


def per_client(model: AbstractModel, data: ClientData, x) -> tuple:
    """(F_i(x), accuracy_i(x)) of every client, shapes (n,) each, over its valid rows."""
    def one(features, labels, count):
        valid = jnp.arange(labels.shape[0]) < count
        share = valid.astype(x.dtype) / count.astype(x.dtype)
        losses = model.sample_losses(x, features.astype(x.dtype), labels)
        right = (model.predict(x, features.astype(x.dtype)) == labels).astype(x.dtype)
        return jnp.sum(jnp.where(valid, losses, 0) * share), jnp.sum(right * share)

    return jax.vmap(one)(data.features, data.labels, data.count)


class ClientSpread(eqx.Module):
    """One summary over the clients of their loss or accuracy at x (a metric of ``simulate``).

    Attributes:
      model: the problem's model (static). data: its clients' data.
      kind: "loss" or "accuracy" (static). statistic: "worst", "std" or a quantile q in
        [0, 1] (static).
    """

    model: AbstractModel = eqx.field(static=True)
    data: ClientData
    kind: str = eqx.field(static=True)
    statistic: object = eqx.field(static=True)

    def __call__(self, x):
        loss, accuracy = per_client(self.model, self.data, x)
        values = loss if self.kind == "loss" else accuracy
        if self.statistic == "worst":
            return jnp.max(values) if self.kind == "loss" else jnp.min(values)
        if self.statistic == "std":
            return jnp.std(values)
        return jnp.quantile(values, float(self.statistic))


def client_metrics(problem: Problem, quantiles: Sequence[float] = (0.1, 0.5, 0.9), *,
                   features=None, labels=None) -> dict:
    """Per-client loss and accuracy, summarised over the clients, as ``simulate`` metrics.

    Args:
      problem: a learning problem (``softmax_regression``, ``from_model``, ...).
      quantiles: the quantiles over the clients to record, each in [0, 1].
      features, labels: each client's own held-out rows, two lists of n arrays (m_i', p)
        and (m_i',), every m_i' >= 1; None (the default) evaluates each client on its
        training rows.

    Returns:
      ``{"client_loss_worst", "client_loss_std", "client_loss_q10", ...,
      "client_accuracy_worst", ...}``: name -> :class:`ClientSpread`, for
      ``simulate(..., metrics=...)`` (merge with ``held_out_metrics`` by ``{**a, **b}``);
      on held-out rows the names begin ``client_heldout_`` instead (both can be recorded).

    Example:
      >>> import jax, numpy as np, fedjax_abc as fa
      >>> X = [np.array([[0.0], [1.0]]), np.array([[2.0], [3.0], [1.5]])]
      >>> y = [np.array([0, 1]), np.array([1, 1, 0])]
      >>> p = fa.problems.logistic_regression(X, y, l2=0.1)
      >>> m = fa.problems.client_metrics(p, quantiles=(0.5,))
      >>> sorted(m)[:3]
      ['client_accuracy_q50', 'client_accuracy_std', 'client_accuracy_worst']
      >>> float(m["client_accuracy_worst"](np.zeros(p.dim)))  # x = 0 predicts class 0
      0.3333333333333333
    """
    model = model_of(problem.loss) if isinstance(problem, Problem) else None
    if not isinstance(model, AbstractModel) or not isinstance(problem.params, ClientData):
        what = f"the problem {problem.name!r}" if isinstance(problem, Problem) else \
            type(problem).__name__
        raise ValueError("client_metrics takes a learning problem (fa.problems.softmax_regression, "
                         f"from_model, ...) with its clients' rows, got {what}"[:200])
    qs = []
    for q in quantiles:
        q = float(q)
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantiles must lie in [0, 1], got {q}")
        qs.append(q)
    data, prefix = problem.params, "client"
    if features is not None or labels is not None:
        data, prefix = _held_out(model, problem.num_clients, features, labels), "client_heldout"
    out = {}
    for kind in KINDS:
        for statistic in ["worst", "std"] + qs:
            label = statistic if isinstance(statistic, str) else f"q{round(100 * statistic):02d}"
            name = f"{prefix}_{kind}_{label}"
            if name in out:
                raise ValueError(f"quantiles {quantiles} give the name {name!r} twice")
            out[name] = ClientSpread(model, data, kind, statistic)
    return out


def _held_out(model: AbstractModel, n: int, features, labels) -> ClientData:
    """The clients' held-out rows as padded :class:`ClientData` (checked like a test set)."""
    if features is None or labels is None:
        raise ValueError("client_metrics takes held-out features and labels together")
    if isinstance(features, np.ndarray) or isinstance(labels, np.ndarray) or not (
            len(features) == len(labels) == n):
        raise ValueError(f"held-out features and labels must be two lists of n = {n} "
                         "per-client arrays")
    Xs, ys = [], []
    for i, (X, y) in enumerate(zip(features, labels)):
        try:
            X, y = _test_data(model, X, y)
        except ValueError as e:
            raise ValueError(f"client {i}'s held-out rows: {e}") from None
        Xs.append(X)
        ys.append(y)
    return _padded(Xs, ys, np.ones(n), 0.0)

