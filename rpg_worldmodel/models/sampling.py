"""Sampling next views from the model's per-cell distributions, as views the game can show.

The model predicts each cell of the next view as its own distribution over kinds. Sampled one
cell at a time, a co-player whose next cell is uncertain appears in several cells at once (each
of its possible cells draws "agent" on its own), and the memory map then remembers every copy:
imagined views fill with agents that no game state gives. `sample_view` puts the agent itself at
the centre (where an egocentric view always has it), places the other agents, at most as many as
the game has, then draws every other cell without the agent kind. The
placement is the model's own factorised distribution conditioned on that constraint: exact for
one other agent (cell i alone, with odds ``p_i / (1 - p_i)``, or nobody, with odds 1); for more,
one draw after another without replacement until a draw gives nobody, which approximates it.

A model with a cell refiner (`rpg_worldmodel.models.refiner`) draws the other cells as one joint
sample instead, the agents placed as above and the agent kind left out of the rest.

Used by the imagined env (`rpg_worldmodel.envs.imagination`) and by the sampled open-loop
rollouts of the evaluation (`rpg_worldmodel.evaluation.rollouts`), so both imagine alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rpg_worldmodel.models.refiner import CellRefiner, joint_sample


def sample_cells(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One class per cell from ``probs`` ``(..., K)`` (inverse CDF with uniforms from ``generator``)."""
    uniform = torch.rand(probs.shape[:-1] + (1,), generator=generator, device=probs.device)
    return (uniform > probs.cumsum(-1)).sum(-1).clamp_max(probs.shape[-1] - 1)


def place_agents(probs: torch.Tensor, generator: torch.Generator, agent: int, others: int) -> torch.Tensor:
    """Which cells of views with per-cell ``probs`` ``(N, V, V, C)`` hold an agent, (N, V * V) bool:
    the centre, and at most ``others`` more drawn from the model's odds of the ``agent`` kind."""
    n, v, _, c = probs.shape
    centre = (v // 2) * v + v // 2
    flat = probs.reshape(n, v * v, c)
    is_agent = torch.zeros(n, v * v, dtype=torch.bool, device=probs.device)
    odds = flat[..., agent] / (1 - flat[..., agent]).clamp_min(1e-6)
    odds[:, centre] = 0
    open_ = torch.ones(n, dtype=torch.bool, device=probs.device)  # rows that have not drawn "nobody"
    for _ in range(others):
        weights = torch.cat([odds.masked_fill(is_agent, 0), torch.ones_like(odds[:, :1])], 1)
        pick = sample_cells(weights / weights.sum(1, keepdim=True), generator)  # v * v: nobody
        placed = (pick < v * v) & open_
        open_ &= placed
        if not bool(open_.any()):
            break
        is_agent[placed.nonzero()[:, 0], pick[placed]] = True
    is_agent[:, centre] = True
    return is_agent


def sample_view(probs: torch.Tensor, generator: torch.Generator, agent: int, others: int) -> torch.Tensor:
    """Kinds ``(N, V, V)`` sampled from per-cell ``probs`` ``(N, V, V, C)``: the centre holds the
    ``agent`` kind, and at most ``others`` other cells do (`place_agents`)."""
    n, v, _, c = probs.shape
    is_agent = place_agents(probs, generator, agent, others)
    rest = probs.reshape(n, v * v, c) + 1e-12  # a cell that was all agent: uniform over the other kinds
    rest[..., agent] = 0
    cells = sample_cells(rest / rest.sum(-1, keepdim=True), generator)
    return torch.where(is_agent, agent, cells).view(n, v, v)


@dataclass(frozen=True)
class ViewSampler:
    """How next views are drawn for a game: the ``agent`` kind at the centre and at most ``others``
    other agents (`place_agents`), then the other cells: with a cell ``refiner`` one joint draw in
    at most ``rounds`` rounds of at most ``doubt`` each, no kind below ``floor`` drawn
    (`joint_sample`), without it each cell on its own. ``agent`` None: no placement rule, every
    cell drawn by the model alone."""

    agent: int | None
    others: int
    refiner: CellRefiner | None = None
    rounds: int = 1
    doubt: float = 0.0
    floor: float = 0.0

    @classmethod
    def for_game(cls, channel_names: Sequence[str], env_kwargs: dict[str, Any],
                 refiner: CellRefiner | None = None, rounds: int = 1, doubt: float = 0.0,
                 floor: float = 0.0) -> ViewSampler:
        """From a trajectory file's (or checkpoint's) ``channel_names`` and ``env_kwargs``."""
        names = list(channel_names)
        return cls(names.index("agent") if "agent" in names else None,
                   int(env_kwargs.get("num_agents", 2)) - 1, refiner, rounds, doubt, floor)

    def __call__(self, logits: torch.Tensor, generator: torch.Generator,
                 temperature: float = 1.0) -> torch.Tensor:
        """``logits`` (N, V, V, C) of the next views -> kinds (N, V, V) long, each distribution
        softened by ``temperature``."""
        probs = torch.softmax(logits / temperature, -1)
        if self.refiner is not None:
            if self.agent is None:
                return joint_sample(self.refiner, logits, generator, self.rounds, temperature,
                                    doubt=self.doubt, floor=self.floor)
            is_agent = place_agents(probs, generator, self.agent, self.others).view(probs.shape[:3])
            fixed = torch.where(is_agent, self.agent, probs.shape[-1])
            return joint_sample(self.refiner, logits, generator, self.rounds, temperature, fixed,
                                banned=self.agent, doubt=self.doubt, floor=self.floor)
        if self.agent is None:
            return sample_cells(probs, generator)
        return sample_view(probs, generator, self.agent, self.others)
