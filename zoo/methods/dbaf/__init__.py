"""DBAF: "Disentangle Before Anonymize: A Two-stage Framework for Attribute-preserved and
Occlusion-robust De-identification" (Zhu, Chen, Wei, Wang, Gao).

* :mod:`.modules` - the paper's modules: CID, KRIA, MAAR;
* :mod:`.method` - :class:`DBAF` (the paper's model on e4e + StyleGAN2), :class:`DBAFDemo` (the demo
  checkpoint's keyed identity edit), :class:`DBAFReconstruction`;
* :mod:`.convert` - the authors' released weights -> a zoo checkpoint
  (``python -m zoo.methods.dbaf convert-official ...``).
"""

from .convert import convert_dbaf_cid, convert_dbaf_kria, convert_dbaf_maar, convert_official_dbaf
from .method import DBAF, DBAFDemo, DBAFReconstruction
from .modules import CID, KRIA, MAAR

__all__ = [
    "DBAF",
    "DBAFDemo",
    "DBAFReconstruction",
    "CID",
    "KRIA",
    "MAAR",
    "convert_dbaf_cid",
    "convert_dbaf_maar",
    "convert_dbaf_kria",
    "convert_official_dbaf",
]
