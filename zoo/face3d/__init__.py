"""Parametric head models for IDEudemon's Step I (fit a face, perturb its identity code, re-render).

* :class:`ParametricHeadModel` (:mod:`zoo.face3d.base`): ``fit(images) -> (id_code, app_code, cam_code)``,
  ``render(id_code, app_code, cam_code) -> (image, mask)``.
* ``mesh`` backend, :class:`MeshHeadModel` (:mod:`zoo.face3d.mesh`): dlib 68-point mesh, learned
  identity shape space (:mod:`zoo.face3d.shape_space`) and identity texture space in the mesh's frame
  (:mod:`zoo.face3d.texture_space`), piecewise-affine renderer (:mod:`zoo.face3d.warp`). Works offline.
* ``headnerf`` backend, :class:`~zoo.face3d.headnerf.HeadNeRFHeadModel`: the paper's parametric NeRF
  (:mod:`zoo.nn.headnerf`); needs the converted HeadNeRF weights.

Commands::

    python -m zoo.face3d build-shape-space --n 2000 --seed 0 --out zoo/face3d/data/mesh_shape_space.safetensors
    python -m zoo.face3d build-texture-space --n 2000 --seed 0 --out zoo/face3d/data/mesh_texture_space.safetensors
    python -m benchmarks.ideudemon_dial --n 64 --out benchmarks/results/ideudemon_dial.md
"""

from .base import ParametricHeadModel, as_image_batch
from .mesh import MeshAppearance, MeshHeadModel
from .shape_space import DEFAULT_SHAPE_SPACE, ShapeSpace, build_shape_space, load_shape_space
from .texture_space import DEFAULT_TEXTURE_SPACE, TextureSpace, build_texture_space, load_texture_space

__all__ = [
    "ParametricHeadModel",
    "as_image_batch",
    "MeshAppearance",
    "MeshHeadModel",
    "ShapeSpace",
    "DEFAULT_SHAPE_SPACE",
    "build_shape_space",
    "load_shape_space",
    "TextureSpace",
    "DEFAULT_TEXTURE_SPACE",
    "build_texture_space",
    "load_texture_space",
    "get_head_model",
]


def get_head_model(backend: str = "mesh", **kwargs) -> ParametricHeadModel:
    """A Step-I backend by name: ``"mesh"`` (kwargs: space, feather, work_size, texture) or ``"headnerf"``
    (kwargs: net = a :class:`zoo.nn.headnerf.HeadNeRF`, ...)."""
    if backend == "mesh":
        return MeshHeadModel(**kwargs)
    if backend == "headnerf":
        from .headnerf import HeadNeRFHeadModel

        return HeadNeRFHeadModel(**kwargs)
    raise ValueError(f"unknown head-model backend {backend!r} (mesh | headnerf)")
