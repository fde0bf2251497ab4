"""Input masks: hide part of the model's input views, as the reference's masking probes do.

Whole-channel masks name a channel (``gem``, ``bone``, ``food``, ``wall``); the channel is
found by that name in the data's ``channel_names``, so a file with another channel order is
masked right.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rpg_base.errors import InputError
from rpg_env.game.constants import vocabulary
from rpg_worldmodel.config import MASK_KINDS

#: Mask kinds that hide one whole channel (the others: ``none``, ``random_cells``).
CHANNEL_MASKS = tuple(k for k in MASK_KINDS if k not in ("none", "random_cells"))


def masked_channels(channel_names: Sequence[str]) -> dict[str, int]:
    """``{mask kind: channel index}`` of every whole-channel mask the channel names allow."""
    names = list(channel_names)
    return {kind: names.index(kind) for kind in CHANNEL_MASKS if kind in names}


#: Channel hidden by each whole-channel mask in the game's own vocabulary (what files record).
MASKED_CHANNELS = masked_channels(vocabulary().cell_names)


def apply_input_mask(
    views: torch.Tensor,
    kind: str,
    prob: float = 0.15,
    generator: torch.Generator | None = None,
    channel_names: Sequence[str] | None = None,
    rows: tuple[int, int] | None = None,
) -> torch.Tensor:
    """Hide part of the input views (returns a new tensor; ``views`` itself for ``"none"``).

    ``views``: (B, T, C, V, V) float one-hot. ``kind``:

    - ``"none"``: unchanged;
    - ``"random_cells"``: every (b, t, y, x) cell independently hidden with probability ``prob``
      (all its channels zeroed, so a hidden cell reads as "unknown", not as some entity);
    - ``"gem" | "bone" | "food" | "wall"``: the channel of that name zeroed everywhere.

    ``channel_names`` (the data's, default the game's vocabulary) places the channel masks.
    ``generator`` makes the random mask reproducible (it must live on ``views``' device).
    ``rows`` ``(first, total)``: ``views`` are rows ``first .. first + B - 1`` of a batch of
    ``total`` (a process's slice of the global batch); the random mask is drawn for all
    ``total`` rows and cut, so the slices are masked exactly as the whole batch would be.
    """
    if kind not in MASK_KINDS:
        raise ValueError(f"unknown mask kind {kind!r}; choose one of {list(MASK_KINDS)}")
    if views.dim() != 5:
        raise ValueError(f"views must be (B, T, C, V, V), got shape {tuple(views.shape)}")
    if kind == "none":
        return views
    if kind == "random_cells":
        if not 0.0 <= prob <= 1.0:
            raise ValueError(f"prob must be in [0, 1], got {prob}")
        b, t, _, h, w = views.shape
        first, total = rows or (0, b)
        draw = torch.rand((total, t, 1, h, w), generator=generator, device=views.device)
        keep = draw[first : first + b] >= prob
        return views * keep.to(views.dtype)
    channels = MASKED_CHANNELS if channel_names is None else masked_channels(channel_names)
    if kind not in channels:
        raise InputError(f"mask {kind!r} hides the channel of that name, but the data has channels "
                         f"{list(channel_names or [])}; choose another mask")
    masked = views.clone()
    masked[:, :, channels[kind]] = 0
    return masked
