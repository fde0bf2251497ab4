"""Sampling next views from the model's per-cell distributions.

The model predicts each cell of the next view as its own distribution over kinds. A model with a
cell refiner (`rpg_worldmodel.models.refiner`) draws the cells of a view as one joint sample, so
the cells agree with each other (a co-player whose next cell is uncertain appears in one of its
possible cells, not in several); without one, each cell is drawn on its own. No placement rule
is added: where the agents stand is what the model learned. What a joint draw is held to is read
off the training views (``model.kind_limits``): no view holds more cells of a kind than the most
any training view held.

Used by the imagined env (`rpg_worldmodel.envs.imagination`) and by the sampled open-loop
rollouts of the evaluation (`rpg_worldmodel.evaluation.rollouts`), so both imagine alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from rpg_worldmodel.models.refiner import SAMPLE_DOUBT, CellRefiner, joint_sample

if TYPE_CHECKING:
    from rpg_worldmodel.models.world_model import WorldModel


def sample_cells(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One class per cell from ``probs`` ``(..., K)`` (inverse CDF with uniforms from ``generator``)."""
    uniform = torch.rand(probs.shape[:-1] + (1,), generator=generator, device=probs.device)
    return (uniform > probs.cumsum(-1)).sum(-1).clamp_max(probs.shape[-1] - 1)


@dataclass(frozen=True)
class ViewSampler:
    """How next views are drawn: with a cell ``refiner`` one joint draw in at most ``rounds``
    rounds of at most ``doubt`` each, no kind below ``floor`` drawn and no kind in more cells than
    ``limits`` (C,) allows (None: any number; `joint_sample`); without it each cell on its own."""

    refiner: CellRefiner | None = None
    rounds: int = 1
    doubt: float = 0.0
    floor: float = 0.0
    limits: torch.Tensor | None = None

    @classmethod
    def of(cls, model: WorldModel) -> ViewSampler:
        """How ``model`` draws at its own settings, as the imagined env does by default:
        ``model.sample_rounds`` rounds of `SAMPLE_DOUBT` each, ``model.sample_floor`` and its kind
        limits."""
        return cls(model.refiner, model.cfg.sample_rounds, SAMPLE_DOUBT, model.cfg.sample_floor,
                   model.kind_limits)

    def __call__(self, logits: torch.Tensor, generator: torch.Generator,
                 temperature: float = 1.0) -> torch.Tensor:
        """``logits`` (N, V, V, C) of the next views -> kinds (N, V, V) long, each distribution
        softened by ``temperature``."""
        if self.refiner is not None:
            return joint_sample(self.refiner, logits, generator, self.rounds, temperature,
                                doubt=self.doubt, floor=self.floor, limits=self.limits)
        return sample_cells(torch.softmax(logits / temperature, -1), generator)

    def likeliest(self, logits: torch.Tensor) -> torch.Tensor:
        """``logits`` (N, V, V, C) -> the likeliest next views (N, V, V) long: with a refiner decided
        jointly, in the rounds a draw takes, each round's cells their likeliest kinds given the cells
        before (`joint_sample`'s ``greedy``); without one each cell's own arg-max."""
        if self.refiner is not None:
            return joint_sample(self.refiner, logits, None, self.rounds, doubt=self.doubt, floor=self.floor,
                                limits=self.limits, greedy=True)
        return logits.argmax(-1)
