"""Per-client metrics recorded inside a run: how the server's model does on each client's own
data, summarised across the clients (the worst, quantiles, the spread) at every record.

Client i's loss is the mean per-sample loss on its training rows, F_i(x) (without the l2
term or the weight w_i); its accuracy the share of its rows predicted right. At a record
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

from fedjax_abc._problems._models import AbstractModel, ClientData
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


def client_metrics(problem: Problem, quantiles: Sequence[float] = (0.1, 0.5, 0.9)) -> dict:
    """Per-client loss and accuracy, summarised over the clients, as ``simulate`` metrics.

    Args:
      problem: a learning problem (``softmax_regression``, ``from_model``, ...).
      quantiles: the quantiles over the clients to record, each in [0, 1].

    Returns:
      ``{"client_loss_worst", "client_loss_std", "client_loss_q10", ...,
      "client_accuracy_worst", ...}``: name -> :class:`ClientSpread`, for
      ``simulate(..., metrics=...)`` (merge with ``held_out_metrics`` by ``{**a, **b}``).

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
    model = getattr(problem.loss, "model", None) if isinstance(problem, Problem) else None
    if not isinstance(model, AbstractModel) or not isinstance(problem.params, ClientData):
        raise ValueError("client_metrics takes a learning problem (fa.problems.softmax_regression, "
                         f"from_model, ...), got {problem!r}"[:200])
    qs = []
    for q in quantiles:
        q = float(q)
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantiles must lie in [0, 1], got {q}")
        qs.append(q)
    out = {}
    for kind in KINDS:
        for statistic in ["worst", "std"] + qs:
            label = statistic if isinstance(statistic, str) else f"q{round(100 * statistic):02d}"
            name = f"client_{kind}_{label}"
            if name in out:
                raise ValueError(f"quantiles {quantiles} give the name {name!r} twice")
            out[name] = ClientSpread(model, problem.params, kind, statistic)
    return out

