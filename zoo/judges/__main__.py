"""``python -m zoo.judges``: see :mod:`zoo.judges.cli`."""

from .cli import main

raise SystemExit(main())
