"""The Threefry-2x32 hash written out as plain array arithmetic, from
:mod:`fedjax_abc._problems._hash`, where the samplers' layer finds it too."""

from fedjax_abc._problems._hash import fold_in_data, threefry2x32

__all__ = ["threefry2x32", "fold_in_data"]
