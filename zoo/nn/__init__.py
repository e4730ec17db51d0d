"""Shared network backbones of the zoo (StyleGAN2, pSp/e4e, ArcFace, BiSeNet, ...).

Import the submodule you need (``from zoo.nn.stylegan2 import Generator``); nothing heavy is
imported here.
"""
