"""``python -m fedjax_abc``: the ``fedjax-abc`` command itself (its entry point, so that an
interrupted run ends its process right after its message, as the command's does)."""

import sys

from fedjax_abc_cli import main

sys.exit(main())
