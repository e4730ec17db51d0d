"""Moved to :mod:`zoo.synthetic` (the library needs the synthetic faces too); kept as an alias."""

from zoo.synthetic import *  # noqa: F401,F403
from zoo.synthetic import LATENT_DIM, NATIVE_SIZE, SyntheticFaces, latent_for, load_face_generator, synthetic_faces_uint8  # noqa: F401
