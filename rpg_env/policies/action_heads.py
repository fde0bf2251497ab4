"""`ActionHeads`: a policy's actions over one `Discrete` or a flat `MultiDiscrete` space, as one
categorical per action dimension over its slice of the logits (as seed 002 does)."""

from __future__ import annotations

import numpy as np
import torch

from rpg_env.policies.base import sample_actions


class ActionHeads:
    """One categorical per action dimension, each over its slice of the logits ``(B, sum(dims))``;
    actions are ``(B, K)`` int64 (K dimensions; K = 1 for a Discrete space)."""

    def __init__(self, dims: tuple[int, ...]) -> None:
        self.dims = tuple(dims)

    def split(self, logits: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.split(logits, self.dims, dim=1)

    def log_prob(self, logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``(B,)`` log-probability of ``actions`` (B, K): the sum over dimensions."""
        parts = [torch.log_softmax(part, dim=1).gather(1, actions[:, i:i + 1])[:, 0]
                 for i, part in enumerate(self.split(logits))]
        return torch.stack(parts, dim=1).sum(dim=1)

    def entropy(self, logits: torch.Tensor) -> torch.Tensor:
        """``(B,)`` entropy of the joint (independent) distribution."""
        parts = []
        for part in self.split(logits):
            log_p = torch.log_softmax(part, dim=1)
            parts.append(-(log_p.exp() * log_p).sum(dim=1))
        return torch.stack(parts, dim=1).sum(dim=1)

    def sample(self, logits: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """``(B, K)`` actions drawn with ``generator``."""
        return torch.stack([torch.multinomial(torch.softmax(part, dim=1), 1, generator=generator)[:, 0]
                            for part in self.split(logits)], dim=1)

    def greedy(self, logits: torch.Tensor) -> torch.Tensor:
        """``(B, K)`` the likeliest choice of each dimension."""
        return torch.stack([part.argmax(dim=1) for part in self.split(logits)], dim=1)

    def sample_numpy(self, logits: torch.Tensor, rng: np.random.Generator) -> np.ndarray:
        """``(B, K)`` actions drawn with a numpy generator (`sample_actions`, as every policy here)."""
        return np.stack([sample_actions(torch.softmax(part, dim=1).numpy().astype(np.float64), rng)
                         for part in self.split(logits)], axis=1)
