"""The cached state of imagined worlds between two `WorldModel.imagine_step` calls."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import torch


def _map(value: Any, fn) -> Any:
    """``fn`` applied to every tensor in ``value`` (a tensor, None, or nested tuples of them)."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return fn(value)
    return tuple(_map(v, fn) for v in value)


def _zip_map(mine: Any, theirs: Any, fn) -> Any:
    """``fn(a, b)`` over the paired tensors of two values of the same nesting."""
    if mine is None:
        return None
    if isinstance(mine, torch.Tensor):
        return fn(mine, theirs)
    return tuple(_zip_map(a, b, fn) for a, b in zip(mine, theirs, strict=True))


@dataclass(frozen=True)
class Imagination:
    """The cached state of N imagined worlds between two `WorldModel.imagine_step` calls.

    ``past``: per layer, the global block's keys and values (N, H, 2W, hd) of the last W <
    num_frames steps (``model.layer="srwm"``: its matrices ``(weights,)``, (N, H, R, dh));
    ``step``: the index of the next step (its rotary position); ``prev_patches``: the final patch
    tokens (N, P, D) of the step before, which the view head reads; ``recent_views``: the views
    before the current one that the action head's frame stack reads (N, action_frames - 2, C, V,
    V), oldest first; ``canvas``: the memory map's (`rpg_worldmodel.models.steps.Canvas`; None
    without a map); ``extents``: the extent prior's (`rpg_worldmodel.models.steps.Extents`; None
    without one). A model with learned positions (`rpg_worldmodel.models.legacy`) keeps its last
    steps in ``window`` instead and recomputes them (its positions are absolute, so keys cannot be
    cached).
    """

    past: tuple[tuple[torch.Tensor, torch.Tensor], ...] = ()
    step: int = 0
    prev_patches: torch.Tensor | None = None
    recent_views: torch.Tensor | None = None
    canvas: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    extents: tuple[torch.Tensor, torch.Tensor] | None = None
    window: tuple[torch.Tensor, torch.Tensor] | None = None

    def _tensor_fields(self) -> list[str]:
        return [f.name for f in fields(self) if f.name != "step"]

    def rows(self, index: torch.Tensor) -> Imagination:
        """The state of the worlds ``index`` only."""
        return replace(self, **{name: _map(getattr(self, name), lambda x: x[index])
                                for name in self._tensor_fields()})

    def with_rows(self, index: torch.Tensor, other: Imagination) -> Imagination:
        """A copy in which the worlds ``index`` take ``other``'s state (same step, same shapes)."""
        if other.step != self.step:
            raise ValueError(f"cannot splice worlds at step {other.step} into worlds at step {self.step}")

        def put(mine: torch.Tensor, theirs: torch.Tensor) -> torch.Tensor:
            out = mine.clone()
            out[index] = theirs
            return out

        return replace(self, **{name: _zip_map(getattr(self, name), getattr(other, name), put)
                                for name in self._tensor_fields()})
