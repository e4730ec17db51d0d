"""IDEudemon (Wen et al., "Divide and Conquer: a Two-Step Method for High Quality Face De-identification
with Model Explainability").

* :mod:`.modules` - Step I's keyed identity noise (eq. 3) and the visual similarity assistance (VSA, Sec. 3.3);
* :mod:`.restorer` - Step II's restorer: its identity-perceptual loss network and export;
* :mod:`.method` - :class:`IDEudemon` (Step I on the parametric head model, then Step II) and
  :class:`IDEudemonStepOne` (Step I with VSA only).
"""

from .method import IDEudemon, IDEudemonStepOne
from .modules import FACE_CLASSES, NOISE_CONTEXT, STEP_ONE_LABEL, STYLING_CLASSES, hybrid_image, id_noise
from .restorer import SFacePerceptual, export_restorer

__all__ = [
    "IDEudemon",
    "IDEudemonStepOne",
    "STEP_ONE_LABEL",
    "NOISE_CONTEXT",
    "id_noise",
    "hybrid_image",
    "STYLING_CLASSES",
    "FACE_CLASSES",
    "SFacePerceptual",
    "export_restorer",
]
