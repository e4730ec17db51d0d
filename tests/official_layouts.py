"""Key -> shape tables of official checkpoint layouts, written from the architecture descriptions.

Shared by the converter tests so each table exists once (independently of the modules under test).
"""

from __future__ import annotations


def bn_shapes(prefix: str, c: int) -> dict[str, tuple[int, ...]]:
    """A BatchNorm's state-dict entries (weight, bias, running stats, counter)."""
    return {
        f"{prefix}.weight": (c,),
        f"{prefix}.bias": (c,),
        f"{prefix}.running_mean": (c,),
        f"{prefix}.running_var": (c,),
        f"{prefix}.num_batches_tracked": (),
    }


def irse_stem_and_body_shapes(units, chans, input_nc: int = 3) -> dict[str, tuple[int, ...]]:
    """``input_layer.*`` + ``body.*`` of an IR-SE backbone (pSp/e4e encoders, TreB1eN's ArcFace): SE reduction 16."""
    s: dict[str, tuple[int, ...]] = {"input_layer.0.weight": (chans[0], input_nc, 3, 3)}
    s.update(bn_shapes("input_layer.1", chans[0]))
    s["input_layer.2.weight"] = (chans[0],)
    i, in_c = 0, chans[0]
    for n, d in zip(units, chans):
        for _ in range(n):
            p = f"body.{i}"
            if in_c != d:
                s[f"{p}.shortcut_layer.0.weight"] = (d, in_c, 1, 1)
                s.update(bn_shapes(f"{p}.shortcut_layer.1", d))
            s.update(bn_shapes(f"{p}.res_layer.0", in_c))
            s[f"{p}.res_layer.1.weight"] = (d, in_c, 3, 3)
            s[f"{p}.res_layer.2.weight"] = (d,)
            s[f"{p}.res_layer.3.weight"] = (d, d, 3, 3)
            s.update(bn_shapes(f"{p}.res_layer.4", d))
            s[f"{p}.res_layer.5.fc1.weight"] = (d // 16, d, 1, 1)
            s[f"{p}.res_layer.5.fc2.weight"] = (d, d // 16, 1, 1)
            i, in_c = i + 1, d
    return s
