"""Sampled next views are views the game can show: never more other agents than the game has,
placed as the model's own distribution conditioned on that says, and seeded."""

import numpy as np
import torch

from rpg_worldmodel.models.sampling import ViewSampler, sample_cells, sample_view

AGENT, C, V = 5, 6, 9


def _probs(n: int, agent_mass: float, seed: int = 0) -> torch.Tensor:
    """(n, V, V, C) random per-cell distributions with ``agent_mass`` on the agent kind everywhere."""
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(n, V, V, C, generator=g)
    p[..., AGENT] = 0
    p = p / p.sum(-1, keepdim=True) * (1 - agent_mass)
    p[..., AGENT] = agent_mass
    p[:, V // 2, V // 2] = 0
    p[:, V // 2, V // 2, AGENT] = 1  # the centre is the agent itself
    return p


def test_never_more_other_agents_than_the_game_has():
    probs = _probs(500, agent_mass=0.3)  # independent sampling would give ~24 agents a view
    independent = sample_cells(probs, torch.Generator().manual_seed(0))
    assert (independent == AGENT).sum((1, 2)).float().mean() > 10
    for others in (1, 2):
        kinds = sample_view(probs, torch.Generator().manual_seed(0), AGENT, others)
        off_centre = (kinds == AGENT).sum((1, 2)) - (kinds[:, V // 2, V // 2] == AGENT).long()
        assert int(off_centre.max()) == others  # the constraint binds, and is never exceeded
        assert (kinds[:, V // 2, V // 2] == AGENT).all()


def test_one_other_agent_is_placed_as_the_conditioned_distribution_says():
    # Two candidate cells with agent probability 0.5 and 0.2, none elsewhere: conditioned on at
    # most one agent, P(a) : P(b) : P(nobody) = 1 : 0.25 : 1 (odds p / (1 - p), and 1).
    probs = torch.zeros(20000, V, V, C)
    probs[..., 0] = 1.0
    a, b = (1, 1), (7, 2)
    probs[:, a[0], a[1]] = torch.tensor([0.5, 0, 0, 0, 0, 0.5])
    probs[:, b[0], b[1]] = torch.tensor([0.8, 0, 0, 0, 0, 0.2])
    kinds = sample_view(probs, torch.Generator().manual_seed(1), AGENT, 1)
    at_a, at_b = kinds[:, a[0], a[1]] == AGENT, kinds[:, b[0], b[1]] == AGENT
    np.testing.assert_allclose([float(at_a.float().mean()), float(at_b.float().mean())],
                               [1 / 2.25, 0.25 / 2.25], atol=0.015)
    assert not (at_a & at_b).any()
    # a cell that is not an agent takes its other kinds' distribution: here always empty
    assert (kinds[:, a[0], a[1]][kinds[:, a[0], a[1]] != AGENT] == 0).all()


def test_a_world_that_draws_nobody_places_no_further_agent():
    # One candidate cell with agent probability 0.5 and room for two others: the constraint does
    # not bind, so the cell is an agent half the time (a second draw after "nobody" would make it
    # three quarters).
    probs = torch.zeros(20000, V, V, C)
    probs[..., 0] = 1.0
    probs[:, 1, 1] = torch.tensor([0.5, 0, 0, 0, 0, 0.5])
    kinds = sample_view(probs, torch.Generator().manual_seed(2), AGENT, 2)
    assert abs(float((kinds[:, 1, 1] == AGENT).float().mean()) - 0.5) < 0.015


def test_no_agent_probability_places_no_agent_and_sampling_is_seeded():
    probs = _probs(64, agent_mass=0.0, seed=3)
    kinds = sample_view(probs, torch.Generator().manual_seed(5), AGENT, 1)
    assert int((kinds == AGENT).sum()) == 64  # the centres only
    again = sample_view(probs, torch.Generator().manual_seed(5), AGENT, 1)
    assert torch.equal(kinds, again)


def test_the_sampler_follows_the_games_vocabulary():
    sampler = ViewSampler.for_game(["empty", "wall", "gem", "bone", "food", "agent"], {"num_agents": 3})
    assert (sampler.agent, sampler.others) == (5, 2)
    alone = ViewSampler.for_game(["empty", "wall"], {})
    probs = torch.full((2, V, V, 2), 0.5)
    assert alone.agent is None and alone(probs, torch.Generator().manual_seed(0)).shape == (2, V, V)


def test_the_centre_is_always_the_agent_itself():
    probs = _probs(200, agent_mass=0.1, seed=4)
    probs[:, V // 2, V // 2] = torch.tensor([0.3, 0.3, 0.1, 0.1, 0.1, 0.1])  # a model unsure of it
    kinds = sample_view(probs, torch.Generator().manual_seed(2), AGENT, 1)
    assert (kinds[:, V // 2, V // 2] == AGENT).all()
