"""The memory map and the shifts it follows: dead reckoning by each step's shift re-draws a static
world exactly, hidden cells stay unknown, a learned gate decides how much of the map each cell
takes, the motion prior and the map follow the motion head's shift (a blocked move: no shift), and
a model with the map stays causal and imagines step by step exactly as its window does."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rpg_base.typed_config.values import ConfigError
from rpg_worldmodel.config import MAP_SIZE, ModelConfig, load_world_model_config
from rpg_worldmodel.models.motion import SHIFTS, STAY
from rpg_worldmodel.models.steps import HIDDEN, cell_kinds, memory_canvas, window_steps
from rpg_worldmodel.models.world_model import WorldModel

#: The walk's own moves (the test's world; the model is given no table, only each step's shift).
DELTAS = torch.tensor([[-1, 0], [1, 0], [0, -1], [0, 1]])  # up, down, left, right
EMPTY, WALL, AGENT, V = 0, 1, 5, 9


def _walk(steps: int, seed: int, side: int = 40):
    """A static world (walls, items) and a random walk in it: (world, positions, views, actions);
    ``views`` (1, S, C, V, V) one-hot egocentric crops with the agent at the centre."""
    rng = np.random.default_rng(seed)
    world = rng.choice([EMPTY, WALL, 2, 3, 4], size=(side, side), p=[0.55, 0.2, 0.1, 0.1, 0.05])
    world[:V, :] = world[-V:, :] = world[:, :V] = world[:, -V:] = WALL
    pos = np.array([side // 2, side // 2])
    world[tuple(pos)] = EMPTY
    positions, codes, actions = [], [], []
    for _ in range(steps):
        view = world[pos[0] - V // 2: pos[0] + V // 2 + 1, pos[1] - V // 2: pos[1] + V // 2 + 1].copy()
        view[V // 2, V // 2] = AGENT
        action = int(rng.integers(4))
        positions.append(pos.copy())
        codes.append(view)
        actions.append(action)
        target = pos + DELTAS[action].numpy()
        if world[tuple(target)] != WALL:
            pos = target
    positions.append(pos.copy())
    views = F.one_hot(torch.as_tensor(np.stack(codes)), 6).permute(0, 3, 1, 2).float()[None]
    return world, np.stack(positions), views, torch.tensor(actions)[None]


def _shifts(positions: np.ndarray) -> torch.Tensor:
    """The true shift of each step of a walk, (1, S) long: its displacement as an index into `SHIFTS`."""
    return torch.tensor([[SHIFTS.index(tuple(int(x) for x in d)) for d in np.diff(positions, axis=0)]])


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_the_map_redraws_a_static_world_at_each_next_frame(seed):
    """Each cell of view t+1's frame."""
    world, positions, views, _ = _walk(30, seed)
    reach = 7
    kind, age = memory_canvas(cell_kinds(views), _shifts(positions), reach, queries=30)
    assert kind.shape == (1, 30, V, V)
    r = V // 2
    for t in range(30):
        top_left = positions[t + 1] - r  # the frame of view t+1
        for y in range(kind.shape[2]):
            for x in range(kind.shape[3]):
                cell = top_left + (y, x)
                # the latest step in reach whose view held this world cell
                sightings = [s for s in range(max(0, t - reach + 1), t + 1)
                             if np.all(np.abs(cell - positions[s]) <= r)]
                if not sightings:
                    assert kind[0, t, y, x] == HIDDEN and age[0, t, y, x] == reach
                    continue
                s = max(sightings)
                assert age[0, t, y, x] == t - s
                expected = AGENT if np.all(cell == positions[s]) else world[tuple(cell)]  # where it stood
                assert kind[0, t, y, x] == expected, (t, y, x)


def test_hidden_cells_are_not_remembered_and_queries_take_the_last_steps():
    _, positions, views, _ = _walk(12, 3)
    kinds, shifts = cell_kinds(views), _shifts(positions)
    full_kind, full_age = memory_canvas(kinds, shifts, 5, queries=12)
    last_kind, last_age = memory_canvas(kinds, shifts, 5, queries=3)
    assert torch.equal(last_kind, full_kind[:, -3:]) and torch.equal(last_age, full_age[:, -3:])
    hidden = torch.zeros_like(views)  # every cell hidden (a masked input): nothing is known, not
    kind, age = memory_canvas(cell_kinds(hidden), shifts, 5, queries=12)  # even the centre's
    assert (kind == HIDDEN).all() and (age == 5).all()
    # A view with only its centre shown: the map holds where the agent stood, placed by the shifts.
    centre = torch.zeros_like(views)
    centre[..., V // 2, V // 2] = views[..., V // 2, V // 2]
    kind, _ = memory_canvas(cell_kinds(centre), shifts, 5, queries=12)
    r = V // 2
    for t in range(12):
        expected = np.full((V, V), HIDDEN)
        for s in range(max(0, t - 5 + 1), t + 1):
            at = positions[s] - positions[t + 1] + r
            if (at >= 0).all() and (at < V).all():
                expected[tuple(at)] = AGENT
        assert np.array_equal(kind[0, t].numpy(), expected), t


def _memory_model(**kw):
    torch.manual_seed(0)
    cfg = ModelConfig(width=24, num_heads=2, num_frames=5, memory_map=True, reward_values=(-1.0, 0.0, 1.0),
                      **kw)
    return WorldModel(cfg).eval()


def _taught_the_walk(model: WorldModel) -> WorldModel:
    """``model`` with its motion head set by hand to the walk's moves, as training teaches it:
    each action's shift, and no shift where the cell it enters holds a wall or an agent."""
    with torch.no_grad():
        linear = model.motion.linear
        linear.weight.zero_()
        weight = linear.weight.view(4, len(SHIFTS), 6, V, V)
        bias = linear.bias.view(4, len(SHIFTS))
        bias.zero_()
        for action, (dr, dc) in enumerate(DELTAS.tolist()):
            bias[action, SHIFTS.index((dr, dc))] = 1.0
            for blocking in (WALL, AGENT):
                weight[action, STAY, blocking, V // 2 + dr, V // 2 + dc] = 2.0
    return model


@pytest.mark.parametrize("memory_steps", [0, 8, 1000])
def test_a_model_with_the_map_imagines_step_by_step_as_its_window_predicts(memory_steps):
    model = _taught_the_walk(_memory_model(memory_steps=memory_steps))
    with torch.no_grad():
        model.memory_map.prior.weight.normal_(0, 1.0)  # make the map's part of the logits large
        model.memory_map.gate.uniform_(0.5, 1.5)
    _, _, views, actions = _walk(24, 4)
    with torch.no_grad():
        reference = model(views, actions)  # the map re-drawn from the whole history
        state, steps = None, []
        for i in range(views.shape[1]):
            out, state = model.imagine_step(views[:, i], actions[:, i], state)
            steps.append(out.view)
    assert all(x.shape[1:] == (MAP_SIZE, MAP_SIZE) for x in state.canvas[:2])  # what is kept does not grow
    torch.testing.assert_close(torch.cat(steps, 1), reference.view, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("seed", [0, 5])
def test_the_canvas_keeps_every_cell_seen_for_a_whole_game(seed):
    """100 steps on the canvas: each cell of each next frame is what the world holds there, as
    last seen, however long ago (the window's map, reaching 5 steps, forgets most of them)."""
    from rpg_worldmodel.models.steps import canvas_step, empty_canvas

    steps = 100
    world, positions, views, _ = _walk(steps, seed)
    shifts = _shifts(positions)
    kinds = cell_kinds(views)[0]
    canvas, r = empty_canvas(1, kinds.device), V // 2
    remembered = forgotten = 0
    window_kind, _ = memory_canvas(kinds[None], shifts, 5, queries=steps)
    for t in range(steps):
        (kind, age), canvas = canvas_step(canvas, kinds[t:t + 1], shifts[:, t], t)
        top_left = positions[t + 1] - r
        for y in range(V):
            for x in range(V):
                cell = top_left + (y, x)
                sightings = [s for s in range(t + 1) if np.all(np.abs(cell - positions[s]) <= r)]
                if not sightings:
                    assert kind[0, y, x] == HIDDEN
                    continue
                s = max(sightings)
                assert age[0, y, x] == t - s
                expected = AGENT if np.all(cell == positions[s]) else world[tuple(cell)]
                assert kind[0, y, x] == expected, (t, y, x)
                remembered += 1
                forgotten += int(window_kind[0, t, y, x] == HIDDEN)
    assert forgotten > 50  # the walk comes back to cells the window's map had lost


def test_the_map_is_causal():
    model = _memory_model()
    with torch.no_grad():
        model.memory_map.prior.weight.normal_(0, 1.0)
    _, _, views, actions = _walk(5, 5)
    changed_views, changed_actions = views.clone(), actions.clone()
    changed_views[:, 3:] = changed_views[:, 3:].roll(1, dims=-1)
    changed_actions[:, 3:] = (changed_actions[:, 3:] + 1) % 4
    with torch.no_grad():
        a, b = model(views, actions).view, model(changed_views, changed_actions).view
    torch.testing.assert_close(a[:, :3], b[:, :3])
    assert not torch.allclose(a[:, 3:], b[:, 3:])


def test_the_model_is_given_no_movement_table():
    """Any action space builds (a fifth action needs nothing declared), and the settings that told
    the model the game's moves are refused in one line unless they say nothing."""
    model = WorldModel(ModelConfig(width=24, num_heads=2, num_actions=5, memory_map=True))
    assert not hasattr(model, "moves") and model.motion.linear.out_features == 5 * len(SHIFTS)
    for key, value in (("move_deltas", "[-1,0,1,0,0,-1,0,1]"), ("blocking_kinds", "[1,5]"),
                       ("move_rules", "true"), ("entered_rewards", "[0,-1,10,-10,5,0]")):
        with pytest.raises(ConfigError, match=f"model.{key}=.* can no longer be set: model.{key} was "
                                              f"removed .*movement table") as refused:
            load_world_model_config(None, [f"model.{key}={value}"])
        assert "\n" not in str(refused.value)
    said_nothing = load_world_model_config(None, ["model.move_rules=false", "model.move_deltas=[]",
                                                  "model.blocking_kinds=[]", "model.entered_rewards=[]"])
    assert said_nothing.model == ModelConfig()


def test_the_map_is_gated_per_cell_by_a_learned_scale():
    """Nothing tells the map that the next view's centre is the agent whatever the map holds: a
    gate per cell, open at first, learns how much each cell takes (trained, without weight decay)."""
    model = _memory_model()
    gate = model.memory_map.gate
    assert gate.shape == (1, 1, 1, V, V) and (gate == 1).all()
    assert all(p is not gate for p in model.param_groups(0.1)[0]["params"])
    with torch.no_grad():
        model.memory_map.prior.weight.normal_(0, 1.0)
    world, positions, views, _ = _walk(9, 6)
    kinds, shifts = cell_kinds(views), _shifts(positions)
    logits = model.memory_map(kinds, shifts, 9)  # (1, 9, C, V, V)
    assert torch.count_nonzero(logits) > logits.numel() * 0.99  # open: the map speaks at every cell
    with torch.no_grad():
        gate[..., V // 2, V // 2] = 0.0
    closed = model.memory_map(kinds, shifts, 9)
    assert torch.count_nonzero(closed[..., V // 2, V // 2]) == 0
    centre = torch.zeros(V, V, dtype=torch.bool)
    centre[V // 2, V // 2] = True
    torch.testing.assert_close(closed[..., ~centre], logits[..., ~centre], rtol=0, atol=0)
    batch = {"views": views, "actions": torch.zeros(1, 9, dtype=torch.long), "rewards": torch.zeros(1, 9)}
    model.train().loss(batch)[0].backward()
    assert gate.grad is not None and gate.grad.abs().sum() > 0


def test_the_steps_shift_is_the_motion_heads_and_a_blocked_move_is_no_shift():
    model = _taught_the_walk(_memory_model())
    view = torch.zeros(1, 4, 6, V, V)
    view[..., EMPTY, :, :] = 1
    view[0, :, :, 4, 3] = F.one_hot(torch.tensor(WALL), 6).float()  # left: a wall
    view[0, :, :, 3, 4] = F.one_hot(torch.tensor(AGENT), 6).float()  # up: the co-player
    view[0, :, :, 5, 4] = F.one_hot(torch.tensor(2), 6).float()  # down: a gem
    view[0, :, :, 4, 5] = 0  # right: hidden (a masked input)
    actions = torch.tensor([[0, 1, 2, 3]])
    steps = window_steps(view, actions, model.motion, model.cfg, model.fixed_cells)
    assert steps.shifts.tolist() == [[STAY, SHIFTS.index((1, 0)), STAY, SHIFTS.index((0, 1))]]
    assert torch.equal(steps.shifts, model.motion(view, actions).argmax(-1))


def test_a_blocked_move_uses_the_kernel_of_no_shift():
    model = _taught_the_walk(_memory_model())
    view = torch.zeros(1, 2, 6, V, V)
    view[:, :, EMPTY] = 1
    view[:, :, :, 4, 3] = 0
    view[:, :, WALL, 4, 3] = 1  # a wall to the left of the agent in both steps
    actions = torch.tensor([[2, 3]])  # left (blocked), right (free)
    conv = model.action_conv
    assert conv.out_channels == len(SHIFTS) * 6  # one kernel per shift, none per action
    with torch.no_grad():
        base = model(view, actions).view
        conv.bias.view(-1, 6)[STAY] += 1.0  # only the kernel of no shift
        shifted = model(view, actions).view
    torch.testing.assert_close(shifted[:, 0] - base[:, 0], torch.ones_like(base[:, 0]))
    torch.testing.assert_close(shifted[:, 1], base[:, 1])


def test_old_sightings_fall_in_doubling_bins_up_to_the_training_window():
    from rpg_worldmodel.models.heads import MemoryMap, age_bins

    cfg = ModelConfig(num_frames=5, train_window=16)
    assert age_bins(cfg) == 7  # 0..4 one by one, then 5-9 and 10-15 (the oldest a window shows)
    assert age_bins(ModelConfig(num_frames=5, train_window=0)) == 5  # windows of num_frames: as before
    memory = MemoryMap(cfg)
    ages = torch.tensor([0, 4, 5, 9, 10, 15, 16, 99, 999])
    assert memory.age_bin(ages).tolist() == [0, 4, 5, 5, 6, 6, 6, 6, 6]
    assert memory.prior.num_embeddings == 7 * 7 + 1  # (bins x (the channels' kinds + fixed cells)) + unseen


def test_a_long_window_trains_every_step_with_attention_sliding_along_it():
    model = _memory_model(train_window=12)
    _, _, views, actions = _walk(13, 1)
    batch = {"views": views, "actions": actions, "rewards": torch.zeros(1, 13)}
    loss, stats = model.train().loss(batch)
    loss.backward()
    assert torch.isfinite(loss) and model.memory_map.prior.weight.grad.abs().sum() > 0
    with torch.no_grad():  # 12 predictions, each the forward's over the whole history
        torch.testing.assert_close(stats["view_ce"], torch.nn.functional.cross_entropy(
            model(views[:, :12], actions[:, :12]).view.transpose(1, 2),
            views[:, 1:].argmax(2)).detach())
