"""``python -m zoo``: see :mod:`zoo.cli`."""

import sys

from .cli import main

sys.exit(main())
