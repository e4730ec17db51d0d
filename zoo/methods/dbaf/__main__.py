"""``python -m zoo.methods.dbaf convert-official ...``: the method's own commands."""

from ..stylegan_identity import cli
from .convert import add_convert_command
from .method import DBAF

cli(DBAF, extra=add_convert_command)
