"""The tests' JAX settings, one compilation cache for the session, and shared helpers.

Many tests run the same programs in other processes: the pytest workers (``-n``), and the
subprocesses of the command-line, notebook, README and multi-device tests. They share one
persistent XLA compilation cache in a temporary folder, made here before any of them starts
and removed when the session ends, so each program is compiled once per session. A cached
program is the same executable: no number changes. A cache folder of the caller's own
(``JAX_COMPILATION_CACHE_DIR``) is used as it is and kept.

On a GPU, JAX would let each worker take most of the device's memory at start; the workers
allocate as they need instead (unless the caller set ``XLA_PYTHON_CLIENT_PREALLOCATE``).

The JAX settings the package's results assume are made here, as the README's first block
makes them (importing the package makes none): JAX's 64-bit mode (``JAX_ENABLE_X64``, which
the subprocesses of the tests inherit) and one CPU device per core (``fa.use_cpu_cores``,
before any JAX computation). Tests of what happens without them start a process without.
"""

import contextlib
import os
import shutil
import tempfile

import pytest

_OWN = "FEDJAX_ABC_TEST_JIT_CACHE"

if "JAX_COMPILATION_CACHE_DIR" not in os.environ:  # set before JAX is imported
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="fedjax-abc-jit-")
    os.environ[_OWN] = os.environ["JAX_COMPILATION_CACHE_DIR"]
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # several workers, one GPU
os.environ["JAX_ENABLE_X64"] = "1"  # float64, here and in the tests' subprocesses

import fedjax_abc as fa  # noqa: E402  (after the environment above, read when JAX starts)

fa.use_cpu_cores()  # every core a CPU device, as the README's first block

import jax  # noqa: E402

# JAX's events of compiling a program: its trace, and the backend's compilation
TRACE = "/jax/core/compile/jaxpr_trace_duration"
COMPILE = "/jax/core/compile/backend_compile_duration"


@contextlib.contextmanager
def count_compilations(kinds=(COMPILE, TRACE)):
    """Counts JAX's events of the given kinds (default: backend compilation and tracing for
    jit) inside the block: ``with count_compilations() as events: ...; assert events == []``."""
    events = []

    def listener(name, *args, **kwargs):
        if name in kinds:
            events.append(name)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield events
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


def count_backend_compilations():
    """:func:`count_compilations` of backend compilations only (a trace is not counted)."""
    return count_compilations(kinds=(COMPILE,))


_LONG_CHECKS = frozenset(
    line.strip() for line in open(os.path.join(os.path.dirname(__file__), "long_checks.txt"))
    if line.strip() and not line.startswith("#"))


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config, items):
    """The checks listed in ``long_checks.txt`` carry the ``slow`` marker: the default
    ``pytest`` leaves them out, ``pytest -m slow`` runs them with the other long ones."""
    for item in items:
        if item.nodeid in _LONG_CHECKS:
            item.add_marker(pytest.mark.slow)


def pytest_unconfigure(config):
    """The session's own cache folder goes when the session (not a worker) ends."""
    own = os.environ.get(_OWN)
    if own and not hasattr(config, "workerinput") and own == os.environ.get(
            "JAX_COMPILATION_CACHE_DIR"):
        shutil.rmtree(own, ignore_errors=True)
