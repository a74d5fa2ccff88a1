"""Transforms of the clients' updates: pass one to ``simulate(..., transform=...)``.

- :class:`AbstractTransform`: subclass it for your own (``init``, ``num_words``, ``apply``).
- :class:`Clip`: the update clipped to a norm.
- :func:`chain`: several in order.
"""

from fedjax_abc._algorithms._transforms import AbstractTransform, Chain, Clip, chain

__all__ = ["AbstractTransform", "Chain", "Clip", "chain"]
