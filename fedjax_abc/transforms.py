"""Transforms of the clients' updates: pass one to ``simulate(..., transform=...)``.

- :class:`AbstractTransform`: subclass it for your own (``init``, ``num_words``, ``apply``),
  :class:`TransformInfo` what ``apply`` knows of the round, :func:`no_info` to apply one by
  hand;
- compressors, each counting the bits it sends: unbiased :class:`RandK`, :class:`QSGD`,
  :class:`Natural`; biased :class:`TopK`, :class:`Sign`; :class:`NoCompression`;
  :class:`AbstractCompressor` for your own;
- memory as client state: :class:`ErrorFeedback`, :class:`EF21`;
- privacy: :class:`Clip`, :class:`GaussianNoise`, :class:`DPFedAvg` and :func:`dp_fedavg` (DP-FedAvg's clipping
  and noise), :class:`AdaptiveClipping` (its clip norm following a quantile of the update
  norms, a state of the server's);
- :func:`chain`: several in order;
- :class:`CompressedOracle`: an oracle whose every estimate is compressed (for the theory).
"""

from fedjax_abc._algorithms._compress import (
    EF21,
    AbstractCompressor,
    CompressedOracle,
    ErrorFeedback,
    Natural,
    NoCompression,
    QSGD,
    RandK,
    Sign,
    TopK,
    index_bits,
)
from fedjax_abc._algorithms._privacy import AdaptiveClipping, DPFedAvg, GaussianNoise, dp_fedavg
from fedjax_abc._algorithms._transforms import (
    AbstractTransform,
    Chain,
    Clip,
    TransformInfo,
    chain,
    no_info,
)

__all__ = ["AbstractCompressor", "AbstractTransform", "AdaptiveClipping", "Chain", "Clip",
           "CompressedOracle", "DPFedAvg", "EF21", "ErrorFeedback", "GaussianNoise", "Natural",
           "NoCompression", "QSGD", "RandK", "Sign", "TopK", "TransformInfo", "chain",
           "dp_fedavg", "index_bits", "no_info"]
