"""``python -m fedjax_abc``: the same as the ``fedjax-abc`` command."""

import sys

from fedjax_abc.cli import main

sys.exit(main())
