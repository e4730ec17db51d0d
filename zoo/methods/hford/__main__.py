"""``python -m zoo.methods.hford``: the method's own commands."""

from ..stylegan_identity import cli
from .method import HFORD

cli(HFORD)
