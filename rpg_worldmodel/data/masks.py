"""Input masks: hide part of the model's input views, as the reference's masking probes do.

A mask is ``none``, ``random_cells`` or the name of a channel of the data (an item or ``wall``,
`rpg_worldmodel.data.kinds.maskable_kinds`): that channel is found by its name in the data's
``channel_names``, so a file with another channel order, or other kinds, is masked right.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

import torch

from rpg_base.errors import InputError
from rpg_base.typed_config.values import ConfigError
from rpg_env.game.constants import vocabulary
from rpg_worldmodel.data.kinds import maskable_kinds

#: Masks any data allows; every other mask names a channel.
NO_MASK, RANDOM_CELLS = "none", "random_cells"


def mask_choices(channel_names: Sequence[str]) -> tuple[str, ...]:
    """Every mask of data with these channels: ``none``, ``random_cells``, then each maskable
    channel (``gem, bone, food, wall`` in the reference game)."""
    return (NO_MASK, RANDOM_CELLS, *maskable_kinds(channel_names))


def check_mask(kind: str, channel_names: Sequence[str], setting: str = "mask") -> None:
    """Raise `ConfigError` naming the valid choices when ``kind`` is no mask of this data
    (``setting`` names where it was given, e.g. ``train.train_mask``)."""
    choices = mask_choices(channel_names)
    if kind not in choices:
        hint = difflib.get_close_matches(kind, choices, n=1)
        raise ConfigError(f"{setting}={kind!r} is not a mask of this data (channels {list(channel_names)}); "
                          f"choose one of {list(choices)}" + (f"; did you mean {hint[0]!r}?" if hint else ""))


def masked_channels(channel_names: Sequence[str]) -> dict[str, int]:
    """``{mask kind: channel index}`` of every whole-channel mask the channel names allow."""
    names = list(channel_names)
    return {kind: names.index(kind) for kind in maskable_kinds(names)}


#: Channel hidden by each whole-channel mask in the game's own vocabulary (what it records).
MASKED_CHANNELS = masked_channels(vocabulary().cell_names)
#: The share of cells the ``random_cells`` mask hides (in training, ``train.train_mask``, and in the
#: evaluation's masking table).
RANDOM_CELLS_SHARE = 0.15


def apply_input_mask(
    views: torch.Tensor,
    kind: str,
    prob: float = RANDOM_CELLS_SHARE,
    generator: torch.Generator | None = None,
    channel_names: Sequence[str] | None = None,
    rows: tuple[int, int] | None = None,
) -> torch.Tensor:
    """Hide part of the input views (returns a new tensor; ``views`` itself for ``"none"``).

    ``views``: (B, T, C, V, V) float one-hot. ``kind``:

    - ``"none"``: unchanged;
    - ``"random_cells"``: every (b, t, y, x) cell independently hidden with probability ``prob``
      (all its channels zeroed, so a hidden cell reads as "unknown", not as some entity);
    - a channel's name (``"gem"``, ``"wall"``...): that channel zeroed everywhere.

    ``channel_names`` (the data's; default the game's vocabulary) places the channel masks.
    ``generator`` makes the random mask reproducible (it must live on ``views``' device).
    ``rows`` ``(first, total)``: ``views`` are rows ``first .. first + B - 1`` of a batch of
    ``total`` (a process's slice of the global batch); the random mask is drawn for all
    ``total`` rows and cut, so the slices are masked exactly as the whole batch would be.
    """
    if views.dim() != 5:
        raise ValueError(f"views must be (B, T, C, V, V), got shape {tuple(views.shape)}")
    if kind == NO_MASK:
        return views
    if kind == RANDOM_CELLS:
        if not 0.0 <= prob <= 1.0:
            raise ValueError(f"prob must be in [0, 1], got {prob}")
        b, t, _, h, w = views.shape
        first, total = rows or (0, b)
        draw = torch.rand((total, t, 1, h, w), generator=generator, device=views.device)
        keep = draw[first : first + b] >= prob
        return views * keep.to(views.dtype)
    names = vocabulary().cell_names if channel_names is None else channel_names
    channels = masked_channels(names)
    if kind not in channels:
        raise InputError(f"unknown mask kind {kind!r}: a mask hides the channel of that name, but the data "
                         f"has channels {list(names)}; choose one of {list(mask_choices(names))}")
    masked = views.clone()
    masked[:, :, channels[kind]] = 0
    return masked
