"""The W+ encoder (zoo.nn.wplus_encoder) and its training data augmentation."""

import numpy as np
import pytest
import torch

from zoo.nn.mobilestylegan import NUM_SLOTS, STYLE_DIM
from zoo.nn.wplus_encoder import SLOT_LEVELS, WPlusEncoder


def test_encoder_starts_at_the_average_face_and_has_the_wplus_shape():
    enc = WPlusEncoder().eval()
    enc.w_avg.copy_(torch.randn(STYLE_DIM))
    with torch.no_grad():
        w = enc(torch.rand(2, 3, 256, 256) * 2 - 1)
    assert w.shape == (2, NUM_SLOTS, STYLE_DIM) and len(SLOT_LEVELS) == NUM_SLOTS
    assert torch.allclose(w, enc.w_avg.expand_as(w))  # untrained: every slot is w_avg


@pytest.mark.slow  # 7 s: a short training run
def test_encoder_learns_a_latent():
    torch.manual_seed(0)
    enc = WPlusEncoder()
    x = torch.rand(4, 3, 128, 128) * 2 - 1
    target = torch.randn(4, NUM_SLOTS, STYLE_DIM) * 0.1
    opt = torch.optim.Adam(enc.parameters(), lr=1e-3)
    first = None
    for _ in range(30):
        loss = ((enc(x) - target) ** 2).mean()
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.5 * first


def test_augmentation_keeps_shape_and_changes_pixels():
    from training.wplus_encoder import augment

    img = np.random.default_rng(0).integers(0, 256, (3, 3, 64, 64), dtype=np.uint8)
    out = augment(img, np.random.default_rng(1))
    assert out.shape == img.shape and out.dtype == np.uint8
    assert np.abs(out.astype(int) - img).mean() > 1
