"""A module's methods called on the host without equinox's wrapper.

Equinox returns a method read from a module instance as a ``BoundMethod``, itself a module,
so that a bound method is a pytree (``jax.jit(model.method)`` works): a module is built at
every read, which on the host costs more than most of the methods it wraps (a count, a
shape check). The checks and sizes that ``simulate`` computes on the host at every call
read their methods with :func:`method`: Python's own bound method, the same function called
on the same object with the same arguments.
"""

from __future__ import annotations

import inspect
import types
from typing import Any, Callable

__all__ = ["method"]

_MISSING = object()


def method(obj: Any, name: str) -> Callable:
    """``obj.name`` bound as Python binds it (a plain bound method, not a pytree); a static
    method, a class method or anything else but a plain function is read as usual.

    Example:
      >>> import fedjax_abc as fa
      >>> method(fa.UniformWithoutReplacement(3), "num_slots")(10)
      3
    """
    # inspect.getattr_static(type(obj), name) finds the first class along the MRO whose
    # __dict__ holds the name; that walk, done here, costs a fraction of its (a call reads
    # about twenty methods this way); a name no class defines goes to it, as before
    for klass in type(obj).__mro__:
        attr = klass.__dict__.get(name, _MISSING)
        if attr is not _MISSING:
            break
    else:
        attr = inspect.getattr_static(type(obj), name)
    if isinstance(attr, types.FunctionType):
        return types.MethodType(attr, obj)
    return getattr(obj, name)
