"""``python -m zoo.methods.ifadit convert-official ...``."""

from .convert import main

main()
