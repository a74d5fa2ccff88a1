"""Loading ByzFL's aggregators, pre-aggregators and attacks without ``byzfl/__init__.py``.

ByzFL's package ``__init__`` imports its benchmark and federated-training framework, which
import torchvision; the rules themselves need only NumPy, SciPy and torch. :func:`load_byzfl`
registers a bare package module named ``byzfl`` whose ``__path__`` is the installed package
folder (found with ``importlib.util.find_spec``, which does not execute the package), then
imports ``byzfl.aggregators`` (its ``aggregators`` and ``preaggregators`` modules) and
``byzfl.attacks.attacks``.

Usage in a test::

    byzfl, reason = load_byzfl()
    if byzfl is None:
        pytest.skip(reason)
    byzfl.aggregators.Krum(f=2)(x)
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

_CACHE: list = []


def load_byzfl():
    """``(modules, reason)``: ``modules`` a namespace with ByzFL's ``aggregators``,
    ``preaggregators`` and ``attacks`` modules and its ``version``, or None when ByzFL or
    torch cannot be imported, with ``reason`` saying why (else the empty string)."""
    if _CACHE:
        return _CACHE[0]
    result = _load()
    _CACHE.append(result)
    return result


def _load():
    try:
        spec = importlib.util.find_spec("byzfl")
    except (ImportError, ValueError) as e:
        return None, f"byzfl cannot be located: {e}"
    if spec is None or not spec.submodule_search_locations:
        return None, "byzfl is not installed (pip install byzfl)"
    try:
        if importlib.util.find_spec("torch") is None:
            return None, "torch is not installed (ByzFL's rules import it)"
        import torch  # noqa: F401
    except Exception as e:  # a broken torch install
        return None, f"torch cannot be imported: {type(e).__name__}: {e}"
    try:
        from importlib.metadata import version

        ver = version("byzfl")
    except Exception:
        ver = "unknown"

    existing = sys.modules.get("byzfl")
    if existing is None:
        package = types.ModuleType("byzfl")
        package.__path__ = list(spec.submodule_search_locations)
        package.__file__ = spec.origin
        package.__package__ = "byzfl"
        package.__spec__ = spec
        sys.modules["byzfl"] = package
    try:
        aggregators = importlib.import_module("byzfl.aggregators.aggregators")
        preaggregators = importlib.import_module("byzfl.aggregators.preaggregators")
        attacks = importlib.import_module("byzfl.attacks.attacks")
    except Exception as e:
        if existing is None:  # leave no half-made package behind
            for name in [n for n in sys.modules if n == "byzfl" or n.startswith("byzfl.")]:
                del sys.modules[name]
        return None, f"byzfl {ver} cannot be imported: {type(e).__name__}: {e}"
    modules = types.SimpleNamespace(
        aggregators=aggregators, preaggregators=preaggregators, attacks=attacks, version=ver
    )
    return modules, ""
