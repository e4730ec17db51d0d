"""HFORD: "High-Fidelity and Occlusion-Robust De-identification for Face Privacy Protection"
(Chen, Zhu, Wang, Gao).

* :mod:`.modules` - the paper's modules: IDM, the password cMLPs, ARM;
* :mod:`.method` - :class:`HFORD` (the paper's model on e4e + StyleGAN2), :class:`HFORDDemo` (the demo
  checkpoint's keyed identity edit), :class:`HFORDReconstruction`.
"""

from .method import HFORD, HFORDDemo, HFORDReconstruction
from .modules import ARM, IDM, CMLPs

__all__ = ["HFORD", "HFORDDemo", "HFORDReconstruction", "IDM", "CMLPs", "ARM"]
