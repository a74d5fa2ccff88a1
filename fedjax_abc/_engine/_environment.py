"""What a run's numbers depend on besides its settings: the code and the software under it.

:func:`environment` is the package's one record of it. A grid's saved part carries it in its
fingerprint (a part computed by other code, another JAX or on another kind of device is not
taken), and the reproduction's results print it in their config block.
"""

from __future__ import annotations

from fedjax_abc._engine._checkpoint import library_digest

__all__ = ["__version__", "environment"]

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
