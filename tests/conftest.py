"""One compilation cache for the whole test session.

Many tests run the same programs in other processes: the pytest workers (``-n``), and the
subprocesses of the command-line, notebook, README and multi-device tests. They share one
persistent XLA compilation cache in a temporary folder, made here before any of them starts
and removed when the session ends, so each program is compiled once per session. A cached
program is the same executable: no number changes. A cache folder of the caller's own
(``JAX_COMPILATION_CACHE_DIR``) is used as it is and kept.

On a GPU, JAX would let each worker take most of the device's memory at start; the workers
allocate as they need instead (unless the caller set ``XLA_PYTHON_CLIENT_PREALLOCATE``).
"""

import os
import shutil
import tempfile

_OWN = "FEDJAX_ABC_TEST_JIT_CACHE"

if "JAX_COMPILATION_CACHE_DIR" not in os.environ:  # set before JAX is imported
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="fedjax-abc-jit-")
    os.environ[_OWN] = os.environ["JAX_COMPILATION_CACHE_DIR"]
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # several workers, one GPU


def pytest_unconfigure(config):
    """The session's own cache folder goes when the session (not a worker) ends."""
    own = os.environ.get(_OWN)
    if own and not hasattr(config, "workerinput") and own == os.environ.get(
            "JAX_COMPILATION_CACHE_DIR"):
        shutil.rmtree(own, ignore_errors=True)
