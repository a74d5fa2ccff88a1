"""A round's aggregation when it needs all of the round's messages at once.

The default rule, the weighted mean, is added up slot by slot as the messages are computed
(``_round.batched_round``). A robust rule (a median, Krum) or an attack needs the round's
messages side by side: :func:`aggregate` takes the slots' messages (m, R, ...) and the
messages the same clients would send had their local models not moved (their origins),
flattens each slot's message into a vector of D entries, and hands the rule the updates
u_j = message_j - origin_j of every trial (after the attack has replaced the Byzantine
participants' updates); the round's mean message is the participants' mean origin plus
the rule's aggregate. For FedAvg's messages (the local models y_j, origin x_t) this is
x_t + F(y_j - x_t): the rule acts on the updates, as robust rules are defined on
gradients. The random words come from the trial's counter streams (6: the rule's, 7: the
attack's, 8 under k_0: the Byzantine set), so ``mask`` and ``gather`` agree.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
from jaxtyping import Array

from fedjax_abc._engine._components import check_same
from fedjax_abc._engine._random import (AGGREGATOR_STREAM, ATTACK_STREAM, BYZANTINE_STREAM,
                                        round_keys, stream_words)
from fedjax_abc._robust._aggregators import AbstractAggregator
from fedjax_abc._robust._attacks import AttackInfo
from fedjax_abc._robust._byzantine import Byzantine

__all__ = ["Aggregation", "aggregate", "members", "needs_messages"]


class Aggregation(NamedTuple):
    """A round's rule, its Byzantine clients (or None), their mask (n, R) (or None), and
    the problem their attack poisons (``AbstractAttack.poisoned``; None where it poisons
    nothing): every client's local work is then repeated on it."""

    aggregator: AbstractAggregator
    byzantine: Optional[Byzantine] = None
    mask: Optional[Array] = None
    poisoned: Optional[Any] = None


def needs_messages(aggregator: Optional[AbstractAggregator],
                   byzantine: Optional[Byzantine]) -> bool:
    """Whether a round must hold its messages at once (a robust rule, or an attack)."""
    return byzantine is not None or (aggregator is not None and not aggregator.streaming)


def members(byzantine: Byzantine, trial_key_data: Array, n: int, generator: str) -> Array:
    """Each trial's Byzantine clients (n, R) from its key data (2, R): words of stream 8
    under k_0, the same in every round of the trial."""
    R = trial_key_data.shape[1]
    words = stream_words(round_keys(trial_key_data, 0, generator), BYZANTINE_STREAM,
                         byzantine.num_words(n), generator)
    return byzantine.members(words, n, R)


def _flat(tree, lead: int):
    """Leaves with ``lead`` leading axes -> one array (..., D), and how to undo it."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    shapes = [a.shape[lead:] for a in leaves]
    flat = jnp.concatenate([a.reshape(a.shape[:lead] + (-1,)) for a in leaves], axis=-1)

    def unflat(v):  # (..., D) with other leading axes
        out, start = [], 0
        for shape in shapes:
            size = 1
            for s in shape:
                size *= s
            out.append(v[..., start:start + size].reshape(v.shape[:-1] + shape))
            start += size
        return jax.tree_util.tree_unflatten(treedef, out)

    return flat, unflat


def aggregate(aggregation: Aggregation, slot_messages: tuple, idx: Array, w: Array,
              total: Array, key_data: Array, generator: str):
    """The round's mean message of R trials (leaves (R, ...)) from the slots' (message,
    origin[, message on the poisoned problem]) (leaves (m, R, ...)), the slots' clients and
    weights (m, R), the trials' total weights (R,) and round key data k_t (2, R)."""
    messages, origins = slot_messages[:2]
    check_same("the origin message (client_final with y = x_t)", messages, origins)
    flat, unflat = _flat(messages, 2)  # (m, R, D)
    base, _ = _flat(origins, 2)
    updates = flat - base
    poisoned = _flat(slot_messages[2], 2)[0] - base if len(slot_messages) > 2 else updates
    m, R, D = updates.shape
    dtype = updates.dtype
    wf = w.astype(dtype)
    rule = aggregation.aggregator
    rule_words = stream_words(key_data, AGGREGATOR_STREAM, rule.num_words(m), generator)
    if aggregation.byzantine is not None:
        attack = aggregation.byzantine.attack
        bad = jax.vmap(lambda mask_r, i: mask_r[i], in_axes=(1, 1), out_axes=1)(
            aggregation.mask, idx) & (w > 0)  # (m, R): the sampled Byzantine slots
        attack_words = stream_words(key_data, ATTACK_STREAM, attack.num_words(D), generator)

        def lie(u, weights, byz, aw, rw, up):  # one trial: the Byzantine vector
            honest = jnp.where(byz, 0, weights)
            info = AttackInfo(rule, u, weights, byz, rw, up if len(slot_messages) > 2 else None)
            return attack(u, honest, aw, info)

        vector = jax.vmap(lie, in_axes=(1, 1, 1, 1, 1, 1))(updates, wf, bad, attack_words,
                                                          rule_words, poisoned)  # (R, D)
        updates = jnp.where(bad[:, :, None], vector[None], updates)
    agg = jax.vmap(rule, in_axes=(1, 1, 1))(updates, wf, rule_words)  # (R, D)
    return unflat(_mean_origin(base, wf, total) + agg)


def _mean_origin(base: Array, wf: Array, total: Array) -> Array:
    """The participants' weighted mean origin (R, D), as the first participant's origin
    plus the mean difference: exactly the common origin where all are equal (x_t)."""
    first = jnp.argmax(wf > 0, axis=0)  # (R,)
    o = jnp.take_along_axis(base, first[None, :, None], axis=0)[0]  # (R, D)
    safe = jnp.where(total > 0, total, 1).astype(base.dtype)
    return o + jnp.sum(wf[:, :, None] * (base - o[None]), axis=0) / safe[:, None]
