"""Personalized and invertible face de-identification (Cao et al., ICCV 2021), zoo name ``personal``.

* :mod:`.rotation` - the identity modification M toward the password's reference by g(d) degrees and
  its closed-form inverse (eq. 7, 13-17);
* :mod:`.passwords` - six-digit passwords p and the reference library f(p) (Sec. 4.1);
* :mod:`.method` - :class:`Personal` (E_id, E_attr and the AAD generator, eq. 6-18);
* :mod:`.demo` - :class:`PersonalDemo` (the demo checkpoint: the same rotation on the demo backbone);
* :mod:`.library` - the library's training faces; :mod:`.cli` - ``python -m zoo.methods.personal build-library``.
"""

from .cli import main
from .demo import PersonalDemo
from .method import Personal
from .passwords import (
    PasswordKeyMaterial,
    PasswordReferences,
    SixDigitPassword,
    as_personal_secret,
    build_reference_base,
    mix_identities,
    unrank_combination,
)
from .rotation import orient_reference, privacy_angle, rotate_identity, unrotate_direction, unrotate_identity

__all__ = [
    "PersonalDemo",
    "PasswordReferences",
    "privacy_angle",
    "rotate_identity",
    "orient_reference",
    "unrotate_identity",
    "unrotate_direction",
    "unrank_combination",
    "PasswordKeyMaterial",
    "SixDigitPassword",
    "as_personal_secret",
    "build_reference_base",
    "mix_identities",
    "Personal",
    "main",
]
