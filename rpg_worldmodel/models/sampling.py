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

Used by the imagined env (`rpg_worldmodel.envs.imagination`) and by the sampled open-loop
rollouts of the evaluation (`rpg_worldmodel.evaluation.rollouts`), so both imagine alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


def sample_cells(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One class per cell from ``probs`` ``(..., K)`` (inverse CDF with uniforms from ``generator``)."""
    uniform = torch.rand(probs.shape[:-1] + (1,), generator=generator, device=probs.device)
    return (uniform > probs.cumsum(-1)).sum(-1).clamp_max(probs.shape[-1] - 1)


def sample_view(probs: torch.Tensor, generator: torch.Generator, agent: int, others: int) -> torch.Tensor:
    """Kinds ``(N, V, V)`` sampled from per-cell ``probs`` ``(N, V, V, C)``: the centre holds the
    ``agent`` kind, and at most ``others`` other cells do."""
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
    rest = flat + 1e-12  # a cell that was all agent becomes uniform over the other kinds
    rest[..., agent] = 0
    cells = sample_cells(rest / rest.sum(-1, keepdim=True), generator)
    return torch.where(is_agent, agent, cells).view(n, v, v)


@dataclass(frozen=True)
class ViewSampler:
    """How next views are drawn for a game: `sample_view` with its agent kind and number of other
    agents, or each cell alone when the game has no agent kind."""

    agent: int | None
    others: int

    @classmethod
    def for_game(cls, channel_names: Sequence[str], env_kwargs: dict[str, Any]) -> ViewSampler:
        """From a trajectory file's (or checkpoint's) ``channel_names`` and ``env_kwargs``."""
        names = list(channel_names)
        return cls(names.index("agent") if "agent" in names else None,
                   int(env_kwargs.get("num_agents", 2)) - 1)

    def __call__(self, probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """``probs`` (N, V, V, C) -> kinds (N, V, V) long."""
        if self.agent is None:
            return sample_cells(probs, generator)
        return sample_view(probs, generator, self.agent, self.others)
