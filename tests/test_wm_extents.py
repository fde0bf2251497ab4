"""The extent prior: how far each cell of the next view lies from where each kind was seen since the
start, by dead reckoning (`rpg_worldmodel.models.steps`, `rpg_worldmodel.models.heads.ExtentPrior`),
and how checkpoints written before it load."""

from __future__ import annotations

import json
import shutil

import numpy as np
import torch

from rpg_worldmodel.checkpoint import load_checkpoint
from rpg_worldmodel.config import ModelConfig
from rpg_worldmodel.models.extents import (
    UNSEEN,
    empty_extents,
    extents_step,
    game_extents,
    view_extents,
    window_extents,
)
from rpg_worldmodel.models.heads import ExtentPrior
from rpg_worldmodel.models.motion import SHIFTS
from rpg_worldmodel.models.steps import Steps, store_extents
from rpg_worldmodel.models.world_model import WorldModel

FLOOR, WALL, ITEM = 0, 1, 2
RIGHT, STAY = SHIFTS.index((0, 1)), SHIFTS.index((0, 0))


def _room_walk() -> tuple[torch.Tensor, torch.Tensor]:
    """Three 5 x 5 views (kinds) of a walk right along a room whose wall is column 0 of the first
    view: the wall leaves the view as the agent steps right twice, then the agent stands still."""
    kinds = torch.full((1, 3, 5, 5), FLOOR)
    kinds[0, 0, :, 0] = WALL
    kinds[0, 2, 1, 4] = ITEM
    return kinds, torch.tensor([[RIGHT, RIGHT, STAY]])


def test_a_view_gives_each_kinds_rows_and_columns_from_its_centre():
    kinds, _ = _room_walk()
    ends = view_extents(kinds[0, 0], 3)  # (K, 4): lowest row, highest row, lowest col, highest col
    assert ends[WALL].tolist() == [-2, 2, -2, -2]
    assert ends[FLOOR].tolist() == [-2, 2, -1, 2]
    assert ends[ITEM].tolist() == [UNSEEN, -UNSEEN, UNSEEN, -UNSEEN]  # not in this view


def test_extents_follow_the_agent_by_dead_reckoning_and_keep_what_left_the_view():
    kinds, shifts = _room_walk()
    ends = window_extents(kinds, shifts, 3)[0]  # (S, K, 4) in the frame of view t+1
    # The wall, two columns left of the first view's centre, is 3 then 4 columns left of the next
    # views' centres, though no later view shows it.
    assert ends[:, WALL, 2:].tolist() == [[-3, -3], [-4, -4], [-4, -4]]
    # Floor seen so far spans world columns -1 .. 2, then -1 .. 3, then -1 .. 4.
    assert ends[:, FLOOR, 2:].tolist() == [[-2, 1], [-3, 1], [-3, 2]]
    assert ends[2, ITEM].tolist() == [-1, -1, 2, 2] and ends[0, ITEM, 0] >= UNSEEN - 10


def test_a_window_starts_from_what_the_games_earlier_views_left():
    """A window cut from step 1 on, given the extents views 0 .. 0 left (`game_extents`), holds the
    extents the whole game's window holds from step 1 on."""
    kinds, shifts = _room_walk()
    whole = window_extents(kinds, shifts, 3)
    before = game_extents(kinds[0], shifts[0, :-1], 3)  # (L, K, 4): before each view
    assert torch.equal(before[0], torch.tensor([[UNSEEN, -UNSEEN] * 2] * 3))
    assert torch.equal(before[1:], whole[0, :-1])
    cut = window_extents(kinds[:, 1:], shifts[:, 1:], 3, before=before[1][None])
    assert torch.equal(cut, whole[:, 1:])
    # without what came before, the wall (seen only in view 0) is unseen in the cut window
    assert window_extents(kinds[:, 1:], shifts[:, 1:], 3)[0, 0, WALL, 0] >= UNSEEN - 10


def test_imagination_keeps_the_same_extents_one_step_at_a_time():
    kinds, shifts = _room_walk()
    state = empty_extents(1, 3, kinds.device)
    for t in range(3):
        ends, state = extents_step(state, kinds[:, t], shifts[:, t], 3)
        assert torch.equal(ends, window_extents(kinds, shifts, 3)[:, t])


def test_the_prior_adds_a_learned_logit_by_cells_inside_each_seen_end():
    cfg = ModelConfig(view_size=5, num_channels=3, num_actions=4)
    prior = ExtentPrior(cfg)
    with torch.no_grad():
        prior.table.weight.zero_()
        width = 2 * prior.reach + 1
        # (axis column, its lowest end, the wall, 4 cells inside it) -> +5 on the wall's logit
        slot = 2 * prior.num_kinds + WALL
        prior.table.weight[slot * width + prior.reach + 4, WALL] = 5.0
    kinds, shifts = _room_walk()
    extents = window_extents(kinds, shifts, prior.num_kinds)[:, :1]  # the wall 3 columns left
    logits = prior.logits(extents)[0, 0]  # (C, V, V)
    expected = torch.zeros(3, 5, 5)
    expected[WALL, :, 3] = 5.0  # column offset +1 is 1 - (-3) = 4 cells inside the wall's end
    assert torch.equal(logits, expected)
    # Kinds never seen add nothing, whatever their table says.
    with torch.no_grad():
        prior.table.weight.fill_(1.0)
    nothing_seen = empty_extents(1, prior.num_kinds, kinds.device)[0][:, None]
    assert torch.equal(prior.logits(nothing_seen), torch.zeros(1, 1, 3, 5, 5))


def test_the_prior_is_a_view_prior_of_the_default_model_and_reads_the_steps():
    model = WorldModel(ModelConfig(view_size=5, patch_size=5, num_channels=3, num_actions=4, width=24,
                                   num_heads=2, sample_rounds=8))
    assert model.extent_prior in model.view_priors
    kinds, shifts = _room_walk()
    views = torch.nn.functional.one_hot(kinds, 3).permute(0, 1, 4, 2, 3).float()
    extents = window_extents(kinds, shifts, 4)
    steps = Steps(views, torch.zeros(1, 3, dtype=torch.long), kinds, shifts, None,
                  extents=extents)
    base = torch.zeros(1, 3, 3, 5, 5)
    assert torch.equal(model.extent_prior.add_to(base, steps), model.extent_prior.logits(extents))


def test_a_schema_12_checkpoint_loads_as_a_model_without_the_extent_prior(tiny_world_model, tmp_path):
    """Schema 12 came before the prior: its record does not name it and its weights do not hold it.
    It loads as the model it was, and evaluates as before."""
    run, _ = tiny_world_model
    old = tmp_path / "run"
    shutil.copytree(run, old)
    for meta_file in old.rglob("meta.json"):
        meta = json.loads(meta_file.read_text())
        meta["version"] = 12
        meta["config"]["model"].pop("extent_prior")
        meta_file.write_text(json.dumps(meta))
        weights = meta_file.with_name("model.pt")
        state = torch.load(weights, weights_only=True)
        torch.save({k: v for k, v in state.items() if not k.startswith("extent_prior.")}, weights)
    loaded = load_checkpoint(old)
    assert loaded.model.extent_prior is None and not loaded.config.model.extent_prior
    current = load_checkpoint(run).model
    assert current.extent_prior is not None
    kept = {k: v for k, v in current.state_dict().items() if not k.startswith("extent_prior.")}
    assert all(torch.equal(v, loaded.model.state_dict()[k]) for k, v in kept.items())


def test_recorded_games_extents_never_outgrow_the_room(tiny_world_model):
    """Read off real games (shifts the views tell, the action's usual shift where they tell none),
    the floor seen never spans more than the room's inside (18 cells: 17 between its ends), in any
    game at any step: the dead reckoning a training window starts from is the game's. Each window
    of the training set carries them."""
    from rpg_worldmodel.data.stores import EpisodeStore
    from rpg_worldmodel.data.windows import TrajectoryWindows

    _, data = tiny_world_model
    store = EpisodeStore.load(data, np.arange(30))
    cfg = ModelConfig(num_channels=6, num_actions=4, fixed_cells=(40,))
    tables = store_extents(store, cfg)
    assert [len(t) for t in tables] == store.lengths.tolist()
    every = np.concatenate(tables)  # (steps, K, 4)
    floor = every[:, 0]
    seen = floor[:, 0] <= floor[:, 1]
    assert seen[1:].any() and not seen[0]
    assert (floor[seen, 1] - floor[seen, 0]).max() == 17 and (floor[seen, 3] - floor[seen, 2]).max() == 17
    windows = TrajectoryWindows.of(store, 16)
    windows.extents_before = tables
    batch = windows.get_batch([0, 5, len(windows) - 1])
    rows, starts = windows.plan.rows[[0, 5, -1]], windows.window_start[[0, 5, -1]]
    expected = np.stack([tables[r][s] for r, s in zip(rows, starts, strict=True)])
    assert torch.equal(batch["extents_before"], torch.from_numpy(expected).long())
