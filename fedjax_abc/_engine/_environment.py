"""What a run's numbers depend on besides its settings: the code and the software under it.

:func:`environment` is the package's one record of it. A grid's saved part carries it in its
fingerprint (a part computed by other code, another JAX or on another kind of device is not
taken), and the reproduction's results print it in their config block.
"""

from __future__ import annotations

import hashlib
import os

__all__ = ["__version__", "environment", "library_digest"]

__version__ = "0.2.0"  # the package's version (``fedjax_abc.__version__``, pyproject's)


def environment() -> dict:
    """The fedjax_abc version and source files (:func:`library_digest`), the JAX and jaxlib
    versions, the kind of device and JAX's 64-bit mode: what rounds otherwise on another
    node's software, a GPU or a local change of the code.

    Example:
      >>> from fedjax_abc._engine import environment
      >>> sorted(environment())
      ['fedjax_abc', 'fedjax_abc code', 'jax', 'jaxlib', 'platform', 'x64']
    """
    import jax
    import jaxlib

    return {"fedjax_abc": __version__, "fedjax_abc code": library_digest(),
            "jax": jax.__version__, "jaxlib": jaxlib.__version__,
            "platform": jax.default_backend(), "x64": bool(jax.config.jax_enable_x64)}


def library_digest() -> str:
    """SHA-256 of the package's own source files (their paths and bytes): a checkpoint or a
    grid's part written by other code of fedjax_abc (another release, a local change, whose
    numbers may differ) is neither resumed nor merged. About 3 ms."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(folder, name)
            h.update(os.path.relpath(path, root).replace(os.sep, "/").encode() + b"\0")
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()
