"""What a run records at t = 0, k, 2k, ..., T: the gap, ||grad f||^2 and user metrics.

A user metric is a function of the server's model x (shape (d,), the run's dtype) returning
a number, evaluated inside the compiled program at every record, like diffrax's
``SaveAt(fn=...)``: ``simulate(..., metrics={"test_accuracy": fn})`` gives
``SimResult.metrics["test_accuracy"]`` of shape (trials, records). Functions must be
traceable by JAX; an ``equinox.Module`` with array fields (held-out data, say) is data to
the compiled program, so a new one of the same shapes compiles nothing.
"""

from __future__ import annotations

from typing import Callable, Mapping, Optional

import jax
import jax.numpy as jnp

from fedjax_abc._engine._names import dim_name
from fedjax_abc._engine._round import objective, ordered_sum

__all__ = ["RESERVED", "check_axis_names", "check_metrics", "client_records", "record",
           "record_trials"]

# names a metric may not take: the result's own fields, the labelled results' dimensions and
# the DataFrame's columns (a sweep's grid axes too: check_axis_names)
RESERVED = ("gap", "grad_norm_sq", "x", "x_final", "diverged_at", "diverged", "trial", "round",
            "dim", "rounds", "config", "metrics", "client_x", "client_loss", "client")


def check_metrics(metrics: Optional[Mapping[str, Callable]], dim: int,
                  dtype) -> tuple[tuple[str, ...], tuple[Callable, ...]]:
    """(names, functions) of ``metrics`` after checking each on an x of shape (dim,).

    Raises:
      ValueError: a name that is not an identifier or is taken, a value that is not
        callable, a function that fails on x or does not return a single number.
    """
    if metrics is None:
        return (), ()
    if not isinstance(metrics, Mapping):
        raise ValueError("metrics must be a dict: name -> function of x (shape (d,)) returning "
                         "a number, e.g. {'x_norm': jnp.linalg.norm}")
    names, fns = [], []
    x = jax.ShapeDtypeStruct((dim,), dtype)
    for name, fn in metrics.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"metric name {name!r} must be a Python identifier")
        if name in RESERVED:
            raise ValueError(f"metric name {name!r} is taken; not one of {', '.join(RESERVED)}")
        if not callable(fn):
            raise ValueError(f"metrics[{name!r}] must be a function of x, got "
                             f"{type(fn).__name__}")
        try:
            out = jax.eval_shape(fn, x)
        except Exception as err:  # the user's function: say which and why, in one line
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            raise ValueError(f"metrics[{name!r}] fails on x of shape ({dim},): "
                             f"{type(err).__name__}: {first}") from err
        shape = getattr(out, "shape", None)
        kind = getattr(getattr(out, "dtype", None), "kind", None)
        if shape != () or kind not in ("b", "i", "u", "f"):
            what = f"shape {shape}" if shape != () else f"dtype {getattr(out, 'dtype', None)}"
            raise ValueError(f"metrics[{name!r}] must return one real number for x of shape "
                             f"({dim},), got {what}")
        names.append(name)
        fns.append(fn)
    return tuple(names), tuple(fns)


def check_axis_names(metrics, axes) -> None:
    """Raises ValueError (one line, listing the names taken) if a metric of a sweep is named
    like one of its grid ``axes`` or their dimension in a file ('algorithm.mu' ->
    'algorithm_mu'): the sweep's DataFrame and Dataset label the points with those names."""
    if not isinstance(metrics, Mapping):
        return  # check_metrics says what is wrong
    axes = tuple(axes)
    taken = tuple(dict.fromkeys(axes + tuple(dim_name(a) for a in axes)))
    for name in metrics:
        if name in taken:
            raise ValueError(f"metric name {name!r} is taken by a grid axis of the sweep; not "
                             f"one of {', '.join(RESERVED + taken)}")


def record(problem, metrics: tuple, x) -> tuple:
    """(f(x) - f*, ||grad f(x)||^2, *metrics(x)) of one model x, shape (d,).

    The sums over the clients and over d run in an order fixed by n and d alone
    (:func:`~fedjax_abc._engine._round.ordered_sum`): a reduction left to XLA is ordered by
    the batch's layout, and a trial's records would then change in the last bits with the
    number of trials run beside it or the number of devices.
    """
    if problem.pooled is not None:  # one pass over the pooled rows (record_trials batches it)
        f, g = problem.value_and_grad(x)
        grad_norm_sq = jnp.sum(g * g)
    else:
        n = problem.num_clients
        vals, grads = jax.vmap(lambda i: problem.local_value_and_grad(problem.client(i), x))(
            jnp.arange(n, dtype=jnp.int32))
        f = ordered_sum(vals) / n
        g = ordered_sum(grads) / n
        grad_norm_sq = ordered_sum(g * g)
    return (f - problem.f_star, grad_norm_sq) + tuple(
        jnp.asarray(fn(x)).astype(x.dtype) for fn in metrics)


# trials per batch of a pooled record, so that XLA compiles the same record whatever the
# number of trials
_POOLED_TRIALS = 8


def record_trials(problem, metrics: tuple, x, groups: int = 1):
    """:func:`record` of every trial, x of shape (R, d): a ``vmap`` over the trials.

    With ``problem.pooled`` (a learning problem's data in one array), the trials go 8 at a
    time: a vmap over all of them would let XLA fuse the trials' products with the shared
    data into one matrix product whose order of operations depends on R. So do models with
    several entries: a client's loss sums over them, and XLA vectorises that sum, vmapped
    over all the trials, by their number (quadratics with d = 10, n = 20: the gap of the
    same x_t differed in its last bits between 3 and 21 trials). ``groups``: the
    devices the trials are sharded over; each group of R / groups trials goes 8 at a time on
    its own device (a loop over all R would first gather every device's trials to each).
    One device is one group of the same program (a plain loop there rounded a learning
    problem's float32 records otherwise than two devices did).
    """
    one = lambda xr: record(problem, metrics, xr)  # noqa: E731
    if problem.pooled is None and x.shape[1] == 1:
        return jax.vmap(one)(x)
    return _by_trials(one, x, groups)


def _by_trials(one, args, groups: int):
    """``one`` of every trial of ``args`` (leaves with a leading trials axis R), 8 trials at
    a time within each of ``groups`` device groups (see :func:`record_trials`)."""
    R = jax.tree_util.tree_leaves(args)[0].shape[0]
    if R % (groups * _POOLED_TRIALS):  # unpadded trials (pad_trials=False)
        return jax.lax.map(one, args, batch_size=_POOLED_TRIALS)
    split = jax.tree_util.tree_map(lambda a: a.reshape((groups, R // groups) + a.shape[1:]), args)
    by_group = jax.vmap(lambda g: jax.lax.map(one, g, batch_size=_POOLED_TRIALS))(split)
    return jax.tree_util.tree_map(lambda a: a.reshape((R,) + a.shape[2:]), by_group)


def client_records(problem, algorithm, server, clients, groups: int = 1):
    """Every client's own model and its loss in every trial: ``(models (R, n, d), losses
    (R, n))``, client i's model ``algorithm.personal(server, c_i, objective_i)`` and its
    loss f_i there. ``server``: leaves with a leading trials axis R; ``clients``: every
    client's state, leaves (n, R, ...) (``()`` when stateless). Batched as
    :func:`record_trials`, so that a trial's records do not depend on the trials beside it."""
    n = problem.num_clients
    ids = jnp.arange(n, dtype=jnp.int32)

    def client(server_r, client_ri, i):
        data = problem.client(i)
        model = algorithm.personal(server_r, client_ri, objective(problem, data))
        return model, problem.local_value(data, model)

    def trial(args):
        server_r, clients_r = args
        return jax.vmap(client, in_axes=(None, 0, 0))(server_r, clients_r, ids)

    per_trial = jax.tree_util.tree_map(lambda a: jnp.moveaxis(a, 0, 1), clients)
    return _by_trials(trial, (server, per_trial), groups)
