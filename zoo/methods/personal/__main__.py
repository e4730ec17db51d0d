"""``python -m zoo.methods.personal``: see :mod:`.cli`."""

from .cli import main

main()
