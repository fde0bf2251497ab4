"""Sampled next views are the model's own draws, seeded: each cell from its distribution (or, with a
cell refiner, one joint draw), with no rule of the game added: no agent placed at the centre, no cap
on how many agents a view holds."""

import dataclasses

import numpy as np
import torch

from rpg_worldmodel.config import ModelConfig
from rpg_worldmodel.models.refiner import CellRefiner, joint_sample
from rpg_worldmodel.models.sampling import ViewSampler, sample_cells

AGENT, C, V = 5, 6, 9


def _probs(n: int, agent_mass: float, seed: int = 0) -> torch.Tensor:
    """(n, V, V, C) random per-cell distributions with ``agent_mass`` on the agent kind everywhere."""
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(n, V, V, C, generator=g)
    p[..., AGENT] = 0
    p = p / p.sum(-1, keepdim=True) * (1 - agent_mass)
    p[..., AGENT] = agent_mass
    return p


def test_each_cell_is_drawn_from_its_own_distribution():
    probs = torch.zeros(20000, V, V, C)
    probs[..., 0] = 1.0
    probs[:, 1, 1] = torch.tensor([0.5, 0.1, 0, 0.2, 0, 0.2])
    kinds = sample_cells(probs, torch.Generator().manual_seed(1))
    assert kinds.shape == (20000, V, V) and kinds.dtype == torch.long
    drawn = torch.bincount(kinds[:, 1, 1], minlength=C).float() / len(kinds)
    np.testing.assert_allclose(drawn.numpy(), probs[0, 1, 1].numpy(), atol=0.015)
    assert (kinds[:, 0, 0] == 0).all()  # a sure cell is what it is sure of


def test_no_rule_caps_the_agents_or_fixes_the_centre():
    """What the game allows (one agent at the centre, at most num_agents - 1 others) is for the
    model to learn: the sampler draws what the distributions say."""
    probs = _probs(500, agent_mass=0.3)
    probs[:, V // 2, V // 2] = torch.tensor([0.3, 0.3, 0.1, 0.1, 0.1, 0.1])  # a model unsure of it
    sampler = ViewSampler()
    fields = ["refiner", "rounds", "doubt", "floor", "limits"]
    assert [f.name for f in dataclasses.fields(ViewSampler)] == fields
    kinds = sampler(probs.log(), torch.Generator().manual_seed(0))
    assert (kinds == AGENT).sum((1, 2)).float().mean() > 10  # ~24 a view, as the cells say
    centre = kinds[:, V // 2, V // 2]
    assert (centre != AGENT).float().mean() > 0.8 and len(centre.unique()) == C


def test_a_sampler_without_refiner_draws_cells_from_the_softened_logits_and_is_seeded():
    logits = _probs(64, agent_mass=0.1, seed=3).log()
    sampler = ViewSampler()
    kinds = sampler(logits, torch.Generator().manual_seed(5))
    assert torch.equal(kinds, sampler(logits, torch.Generator().manual_seed(5)))
    assert torch.equal(kinds, sample_cells(torch.softmax(logits, -1), torch.Generator().manual_seed(5)))
    hot = sampler(logits, torch.Generator().manual_seed(5), temperature=0.5)
    assert torch.equal(hot, sample_cells(torch.softmax(logits / 0.5, -1), torch.Generator().manual_seed(5)))
    cold = sampler(logits, torch.Generator().manual_seed(5), temperature=1e-4)
    assert (cold == logits.argmax(-1)).float().mean() > 0.99  # near zero: each cell's likeliest kind


def test_a_sampler_with_a_refiner_makes_one_joint_draw_with_its_settings():
    torch.manual_seed(0)
    refiner = CellRefiner(ModelConfig(refiner_layers=1)).eval()
    sampler = ViewSampler(refiner, rounds=4, doubt=0.2, floor=0.01)
    logits = _probs(8, agent_mass=0.2, seed=6).log()
    kinds = sampler(logits, torch.Generator().manual_seed(2), temperature=0.8)
    want = joint_sample(refiner, logits, torch.Generator().manual_seed(2), 4, 0.8, doubt=0.2, floor=0.01)
    assert kinds.shape == (8, V, V) and torch.equal(kinds, want)
    assert torch.equal(kinds, sampler(logits, torch.Generator().manual_seed(2), temperature=0.8))


def test_a_joint_draw_holds_no_kind_in_more_cells_than_the_training_views_did():
    """``limits`` (``model.kind_limits``, read off the training views, not the game): a kind that
    reached its count is drawn in no further cell, and cells that would pass it together are drawn
    again; without limits the same model draws as many as its cells say."""
    torch.manual_seed(0)
    refiner = CellRefiner(ModelConfig(refiner_layers=1)).eval()
    logits = _probs(64, agent_mass=0.4, seed=7).log()
    limits = torch.tensor([81, 81, 81, 81, 81, 2])
    for rounds, doubt in ((1, 0.0), (4, 0.2), (32, 0.2)):
        held = ViewSampler(refiner, rounds, doubt, limits=limits)(logits, torch.Generator().manual_seed(1))
        free = ViewSampler(refiner, rounds, doubt)(logits, torch.Generator().manual_seed(1))
        assert ((held >= 0) & (held < C)).all()  # every cell drawn, the ones a limit sent back too
        assert (held == AGENT).sum((1, 2)).max() <= 2 < (free == AGENT).sum((1, 2)).max()
        assert (held == AGENT).sum((1, 2)).min() == 2  # as many as the distributions and the limit allow


def test_the_views_tell_the_fixed_cells_and_the_most_cells_of_each_kind(tmp_path):
    from rpg_env.record import record
    from rpg_worldmodel.data.shards import DataFiles, view_statistics

    data = tmp_path / "games.h5"
    record("random", data, 8, seed=0, num_envs=4, mode="w", progress=False)
    files = DataFiles.open(str(data))
    fixed, most = view_statistics(files, np.arange(len(files)), chunk=3)
    assert fixed == (V * V // 2,)  # the viewer, the one cell no view changes
    assert len(most) == C and most[AGENT] == 2 and most[0] <= V * V and most[1] >= 9
    views = np.concatenate([files.store(np.arange(len(files)), stream=False).gather(
        np.array([i]), np.zeros(1, dtype=np.int64), 100)[0][0] for i in range(len(files))])
    assert tuple(int(x) for x in views.reshape(len(views), C, -1).sum(2).max(0)) == most
