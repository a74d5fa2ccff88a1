"""The ``fedjax-abc`` command's entry point.

It lives outside the ``fedjax_abc`` package because importing that package imports JAX
(its ``__init__`` switches on float64), which takes a second or more: asked for ``--help``
(``-h``), this loads the command's option parser, ``fedjax_abc/cli.py``, on its own, which
imports only the standard library, and prints the help without importing JAX or any other
module of the package. Anything else runs :func:`fedjax_abc.cli.main`.
"""

import importlib.util
import os
import sys

__all__ = ["main"]


def _standalone_cli():
    """``fedjax_abc/cli.py`` as a module of its own, without importing the package."""
    package = importlib.util.find_spec("fedjax_abc")  # finds, does not import
    folder = next(iter(package.submodule_search_locations))
    spec = importlib.util.spec_from_file_location("_fedjax_abc_cli_options",
                                                  os.path.join(folder, "cli.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


INTERRUPTED = 130  # the exit status after Ctrl-C


def _interrupted_at_start(signum, frame):
    """Ctrl-C while the command starts (imports JAX; nothing computed, nothing to save):
    the process ends at once with the message and status of an interrupted command. A
    KeyboardInterrupt raised inside those imports could be dropped by them (the command
    would go on) or break a compiled module's start."""
    sys.stdout.flush()
    sys.stderr.write("fedjax-abc: interrupted\n")
    sys.stderr.flush()
    os._exit(INTERRUPTED)


def main(argv=None) -> int:
    """Entry point of ``fedjax-abc``; returns the exit status.

    As the command (``argv`` None), an interrupted run ends its process at once after its
    message (``os._exit``, the output flushed): the interpreter's clean-up would otherwise
    race with the threads XLA may still run and could end in a segmentation fault. A
    Ctrl-C before the command's own handler is in place (its first second or two, while
    JAX is imported) ends it so too.
    """
    command = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in argv):
        return _standalone_cli().main(argv)
    if command:
        import signal

        signal.signal(signal.SIGINT, _interrupted_at_start)
    from fedjax_abc.cli import main as run

    status = run(argv)
    if command and status == INTERRUPTED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status
