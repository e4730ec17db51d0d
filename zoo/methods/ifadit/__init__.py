"""iFADIT (Yuan et al., "iFADIT: Invertible Face Anonymization via Disentangled Identity Transform").

* :mod:`.modules` - the paper's networks: SIF, the mapper M_map, ICL, KeyGen;
* :mod:`.method` - :class:`IFADIT` (the paper's model: frozen E_ID, pSp E_Attr, StyleGAN2, refinement);
* :mod:`.demo` - :class:`IFADITDemo` (the demo checkpoint: SIF on the W+ / DCGAN demo backbone);
* :mod:`.convert` - the authors' released weights -> a zoo checkpoint.
"""

from ...nn.identity_encoder import embedding_dim, load_identity_encoder
from ...nn.ops import gaussian_blur
from .convert import assemble_official, convert_ifadit_icl, convert_ifadit_mapper, convert_ifadit_sif
from .demo import IFADITDemo
from .method import IFADIT
from .modules import ICL, SIF, IdentityCompensation, LatentMapper, keygen_vectors

__all__ = [
    "IFADIT",
    "IFADITDemo",
    "SIF",
    "ICL",
    "IdentityCompensation",
    "LatentMapper",
    "load_identity_encoder",
    "embedding_dim",
    "keygen_vectors",
    "gaussian_blur",
    "convert_ifadit_sif",
    "convert_ifadit_mapper",
    "convert_ifadit_icl",
    "assemble_official",
]
