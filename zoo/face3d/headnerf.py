"""The ``headnerf`` head model: IDEudemon's own Step-I backend, a fitted HeadNeRF (:mod:`zoo.nn.headnerf`).

``fit`` follows the official single-image fitting (``FittingSingleImage.py``): Adam on offsets of
the identity (100), expression (79) and appearance (127) codes and on a small camera correction
(Euler angles + translation), 300 iterations, learning rates 0.015 / 0.015 / 0.01 / 0.001 / 0.001
decayed by 10x over the run, loss = head-region MSE + background-to-white terms + the official code
regularisers (0.001 identity, 1.0 expression, 0.001 appearance; 0.001 camera). The official run
starts from the codes and camera of a 3DMM fit (``nl3dmm``, IDEudemon eq. 1); that network is not
part of the zoo, so ``fit`` starts from zero codes and the official frontal camera unless
``init_codes`` / ``init_camera`` are given. The official VGG-16 perceptual term is omitted (no
ImageNet weights offline).

Codes: ``id_code`` = the fitted identity code ``[N, 100]`` (not bounded; IDEudemon clips the
*perturbed* code to [-1, 1]); ``app_code`` ``[N, 206]`` = [expression 79, albedo 100, illumination
27] (IDEudemon's z_app); ``cam_code`` :class:`HeadNeRFCamera`. ``render`` returns the HeadNeRF image
resized to the input size in [-1, 1] and the accumulated foreground opacity as the mask. It needs
the released weights: ``python -m zoo.convert headnerf model_Reso32HR.pth DIR``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

from ..nn.headnerf import CODE_DIMS, HeadNeRF, default_camera
from .base import ParametricHeadModel, as_image_batch

__all__ = ["HeadNeRFCamera", "HeadNeRFHeadModel", "euler_to_matrix"]


@dataclass
class HeadNeRFCamera:
    """Camera-to-world rotation ``[N,3,3]``, camera centre ``[N,3,1]``, inverse feature-map intrinsics
    ``[N,3,3]``, and the (H, W) of the fitted images (the render size)."""

    rmats: torch.Tensor
    tvecs: torch.Tensor
    inv_inmats: torch.Tensor
    size: tuple[int, int] | None = None


def euler_to_matrix(angles: torch.Tensor) -> torch.Tensor:
    """``[N, 3]`` Euler angles (x, y, z; radians) -> ``R = Rz Ry Rx`` ``[N, 3, 3]`` (official convention)."""
    cx, cy, cz = torch.cos(angles).unbind(1)
    sx, sy, sz = torch.sin(angles).unbind(1)
    one, zero = torch.ones_like(cx), torch.zeros_like(cx)
    rx = torch.stack([one, zero, zero, zero, cx, -sx, zero, sx, cx], 1).view(-1, 3, 3)
    ry = torch.stack([cy, zero, sy, zero, one, zero, -sy, zero, cy], 1).view(-1, 3, 3)
    rz = torch.stack([cz, -sz, zero, sz, cz, zero, zero, zero, one], 1).view(-1, 3, 3)
    return rz @ ry @ rx


class HeadNeRFHeadModel(ParametricHeadModel):
    """HeadNeRF backend. ``net``: a (converted) :class:`HeadNeRF`; ``head_mask``: optional callable
    ``x [N,3,H,W] -> [N,1,H,W]`` (e.g. a face parser's head region; default: everything is head)."""

    name = "headnerf"
    id_dim = CODE_DIMS["iden"]

    def __init__(self, net: HeadNeRF, iterations: int = 300, lr: float = 0.01, head_mask: Callable[[torch.Tensor], torch.Tensor] | None = None):
        self.net = net.eval().requires_grad_(False)
        self.iterations = int(iterations)
        self.lr = float(lr)
        self.head_mask = head_mask

    def _split(self, app: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        e = CODE_DIMS["expr"]
        return app[:, :e], app[:, e:]

    def _predict(self, iden, expr, appea, cam: HeadNeRFCamera) -> dict[str, torch.Tensor]:
        return self.net(torch.cat([iden, expr], 1), appea, cam.rmats, cam.tvecs, cam.inv_inmats)

    def fit(self, images: Any, init_codes: torch.Tensor | None = None, init_camera: HeadNeRFCamera | None = None):
        """Fit codes and camera to ``images`` by gradient descent (works inside ``torch.inference_mode``)."""
        with torch.inference_mode(False), torch.enable_grad():
            return self._fit(images, init_codes, init_camera)

    def _fit(self, images: Any, init_codes: torch.Tensor | None, init_camera: HeadNeRFCamera | None):
        x, _ = as_image_batch(images)
        x = x.clone()  # a normal tensor even when the caller is in inference mode
        n, size = x.shape[0], self.net.pred_img_size
        dev, dt = x.device, x.dtype
        target = F.interpolate((x + 1) / 2, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
        mask = (
            torch.ones_like(target[:, :1])
            if self.head_mask is None
            else F.interpolate(self.head_mask(x), size=(size, size), mode="bilinear", align_corners=False)
        )
        head = mask >= 0.5
        target = torch.where(head, target, torch.ones_like(target))
        dims = CODE_DIMS
        base = init_codes.clone() if init_codes is not None else torch.zeros(n, sum(dims.values()), device=dev, dtype=dt)
        b_id, b_ex = base[:, : dims["iden"]], base[:, dims["iden"] : dims["iden"] + dims["expr"]]
        b_ap = base[:, dims["iden"] + dims["expr"] :]
        cam0 = init_camera or HeadNeRFCamera(**default_camera(n, self.net.featmap_size, dev, dt))
        off = {k: torch.zeros(n, d, device=dev, dtype=dt, requires_grad=True) for k, d in (("iden", 100), ("expr", 79), ("appea", 127))}
        d_eul = torch.zeros(n, 3, device=dev, dtype=dt, requires_grad=True)
        d_t = torch.zeros(n, 3, 1, device=dev, dtype=dt, requires_grad=True)
        opt = torch.optim.Adam(
            [
                {"params": [off["iden"]], "lr": self.lr * 1.5},
                {"params": [off["expr"]], "lr": self.lr * 1.5},
                {"params": [off["appea"]], "lr": self.lr},
                {"params": [d_eul], "lr": self.lr * 0.1},
                {"params": [d_t], "lr": self.lr * 0.1},
            ],
            betas=(0.9, 0.999),
        )
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda it: 0.1 ** (it / max(self.iterations, 1)))

        def camera() -> HeadNeRFCamera:
            r = euler_to_matrix(d_eul)
            return HeadNeRFCamera(r @ cam0.rmats, r @ cam0.tvecs + d_t, cam0.inv_inmats)

        for _ in range(self.iterations):
            pred = self._predict(b_id + off["iden"], b_ex + off["expr"], b_ap + off["appea"], camera())
            img = pred["image"]
            h3 = head.expand_as(img)
            loss = F.mse_loss(img[h3], target[h3]) if h3.any() else img.sum() * 0
            if (~h3).any():
                loss = loss + ((img[~h3] - 1.0) ** 2).mean()  # outside the head: the white background
            loss = loss + ((pred["bg_image"] - 1.0) ** 2).mean()
            loss = loss + 0.001 * (d_eul**2).mean() + 0.001 * (d_t**2).mean()
            loss = loss + 0.001 * (off["iden"] ** 2).mean() + 1.0 * (off["expr"] ** 2).mean() + 0.001 * (off["appea"] ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        with torch.no_grad():
            cam = camera()
            id_code = (b_id + off["iden"]).detach()
            app = torch.cat([b_ex + off["expr"], b_ap + off["appea"]], 1).detach()
        return id_code, app, HeadNeRFCamera(cam.rmats.detach(), cam.tvecs.detach(), cam.inv_inmats.detach(), tuple(x.shape[-2:]))

    @torch.no_grad()
    def render(self, id_code: torch.Tensor, app_code: torch.Tensor, cam_code: HeadNeRFCamera):
        expr, appea = self._split(app_code)
        pred = self._predict(id_code, expr, appea, cam_code)
        size = cam_code.size or (self.net.pred_img_size,) * 2
        image = F.interpolate(pred["image"], size=size, mode="bilinear", align_corners=False, antialias=True) * 2 - 1
        mask = F.interpolate(pred["alpha"], size=size, mode="bilinear", align_corners=False).clamp(0, 1)
        return image, mask
