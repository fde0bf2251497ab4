"""The memory map and the movement table: dead reckoning re-draws a static world exactly, hidden
cells stay unknown, the centre is left to the model, a blocked move is its own choice, and a
model with the map stays causal and imagines step by step exactly as its window does."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rpg_base.typed_config.values import ConfigError
from rpg_worldmodel.config import MAP_SIZE, ModelConfig
from rpg_worldmodel.models.heads import memory_canvas
from rpg_worldmodel.models.steps import HIDDEN, cell_kinds, game_moves
from rpg_worldmodel.models.world_model import WorldModel

DELTAS = torch.tensor([[-1, 0], [1, 0], [0, -1], [0, 1]])  # up, down, left, right (the game's table)
BLOCKING = torch.tensor([1, 5])  # wall, agent
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


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_the_map_redraws_a_static_world_at_each_next_frame(seed):
    """Each cell of view t+1's frame."""
    world, positions, views, actions = _walk(30, seed)
    reach = 7
    kind, age = memory_canvas(cell_kinds(views), actions, DELTAS, BLOCKING, reach, queries=30)
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
                expected = 6 if np.all(cell == positions[s]) else world[tuple(cell)]  # 6: where it stood
                assert kind[0, t, y, x] == expected, (t, y, x)


def test_hidden_cells_are_not_remembered_and_queries_take_the_last_steps():
    _, _, views, actions = _walk(12, 3)
    kinds = cell_kinds(views)
    full_kind, full_age = memory_canvas(kinds, actions, DELTAS, BLOCKING, 5, queries=12)
    last_kind, last_age = memory_canvas(kinds, actions, DELTAS, BLOCKING, 5, queries=3)
    assert torch.equal(last_kind, full_kind[:, -3:]) and torch.equal(last_age, full_age[:, -3:])
    hidden = torch.zeros_like(views)  # every cell hidden (a masked input): nothing is known
    kind, age = memory_canvas(cell_kinds(hidden), actions, DELTAS, BLOCKING, 5, queries=12)
    # ... but the cells the agent stood on in reach, placed by its actions alone (no wall is
    # seen, so no move is known to be blocked)
    reckoned = np.concatenate([[[0, 0]], np.cumsum(DELTAS[actions[0]].numpy(), 0)])
    r = V // 2
    for t in range(12):
        expected = np.full((V, V), HIDDEN)
        for s in range(max(0, t - 5 + 1), t + 1):
            at = reckoned[s] - reckoned[t + 1] + r
            if (at >= 0).all() and (at < V).all():
                expected[tuple(at)] = 6  # C: where the agent stood
        assert np.array_equal(kind[0, t].numpy(), expected), t


def _memory_model(**kw):
    torch.manual_seed(0)
    cfg = ModelConfig(width=24, num_heads=2, num_frames=5, memory_map=True,
                      move_deltas=(-1, 0, 1, 0, 0, -1, 0, 1), blocking_kinds=(1, 5),
                      reward_values=(-1.0, 0.0, 1.0), **kw)
    return WorldModel(cfg).eval()


@pytest.mark.parametrize("memory_steps", [0, 8, 1000])
def test_a_model_with_the_map_imagines_step_by_step_as_its_window_predicts(memory_steps):
    model = _memory_model(memory_steps=memory_steps)
    with torch.no_grad():
        model.memory_map.prior.weight.normal_(0, 1.0)  # make the map's part of the logits large
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
    from rpg_worldmodel.models.steps import MoveRules, canvas_step, empty_canvas

    steps = 100
    world, positions, views, actions = _walk(steps, seed)
    rules = MoveRules(ModelConfig(move_deltas=tuple(DELTAS.flatten().tolist()), blocking_kinds=(1, 5)))
    kinds = cell_kinds(views)[0]
    canvas, r = empty_canvas(1, kinds.device), V // 2
    remembered = forgotten = 0
    window_kind, _ = memory_canvas(kinds[None], actions, DELTAS, BLOCKING, 5, queries=steps)
    for t in range(steps):
        (kind, age), canvas = canvas_step(canvas, kinds[t:t + 1], actions[:, t], t, rules)
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
                expected = 6 if np.all(cell == positions[s]) else world[tuple(cell)]
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


def test_the_games_moves_by_default_and_other_action_spaces_refused_with_what_to_set():
    assert game_moves() == ((-1, 0, 1, 0, 0, -1, 0, 1), (1, 5))
    assert game_moves(["left", "up"], ["agent", "empty", "wall"]) == ((0, -1, -1, 0), (0, 2))
    model = WorldModel(ModelConfig(width=24, num_heads=2, memory_map=True))
    assert model.moves.deltas.tolist() == DELTAS.tolist()
    assert model.moves.blocking.tolist() == [1, 5]
    with pytest.raises(ConfigError, match="give model.move_deltas and model.blocking_kinds"):
        WorldModel(ModelConfig(width=24, num_heads=2, num_actions=5, memory_map=True))
    with pytest.raises(ConfigError, match="a \\(row, col\\) pair per action"):
        ModelConfig(memory_map=True, move_deltas=(1, 0, 0)).validate()
    with pytest.raises(ConfigError, match="blocking_kinds must be channel indices"):
        ModelConfig(memory_map=True, blocking_kinds=(9,)).validate()


def test_the_map_says_nothing_about_the_centre_where_the_agent_always_is():
    # After a blocked move the map holds the agent's own cell at the centre, after a move the cell
    # it entered; either way the next view's centre is the agent, which the map must not contradict.
    model = _memory_model()
    with torch.no_grad():
        model.memory_map.prior.weight.normal_(0, 1.0)
    _, _, views, actions = _walk(9, 6)
    logits = model.memory_map(cell_kinds(views), actions, 9, model.moves)  # (1, 9, C, V, V)
    assert torch.count_nonzero(logits[..., V // 2, V // 2]) == 0
    off_centre = logits.clone()
    off_centre[..., V // 2, V // 2] = 1.0
    assert torch.count_nonzero(off_centre == 0) < off_centre.numel() // 100


def test_move_outcomes_follow_the_games_table():
    from rpg_worldmodel.models.steps import MoveRules

    rules = MoveRules(ModelConfig(move_deltas=(-1, 0, 1, 0, 0, -1, 0, 1), blocking_kinds=(1, 5)))
    view = torch.zeros(1, 1, 6, V, V)
    view[..., EMPTY, :, :] = 1
    view[0, 0, :, 4, 3] = F.one_hot(torch.tensor(WALL), 6).float()  # left: a wall
    view[0, 0, :, 3, 4] = F.one_hot(torch.tensor(AGENT), 6).float()  # up: the co-player
    view[0, 0, :, 5, 4] = F.one_hot(torch.tensor(2), 6).float()  # down: a gem
    view[0, 0, :, 4, 5] = 0  # right: hidden (a masked input)
    kinds = cell_kinds(view).expand(1, 4, V, V)
    entered, outcome = rules.outcome(kinds, torch.tensor([[0, 1, 2, 3]]))
    assert entered.tolist() == [[AGENT, 2, WALL, HIDDEN]]
    assert outcome.tolist() == [[4, 1, 4, 3]]  # up into the co-player and left into the wall: blocked


def test_a_blocked_move_chooses_its_own_convolution():
    model = _memory_model()
    view = torch.zeros(1, 2, 6, V, V)
    view[:, :, EMPTY] = 1
    view[:, :, :, 4, 3] = 0
    view[:, :, WALL, 4, 3] = 1  # a wall to the left of the agent in both steps
    actions = torch.tensor([[2, 3]])  # left (blocked), right (free)
    conv = model.action_conv
    with torch.no_grad():
        base = model(view, actions).view
        conv.bias.view(-1, 6)[model.cfg.num_actions] += 1.0  # only the blocked choice's bias
        shifted = model(view, actions).view
    torch.testing.assert_close(shifted[:, 0] - base[:, 0], torch.ones_like(base[:, 0]))
    torch.testing.assert_close(shifted[:, 1], base[:, 1])


def test_the_reward_prior_starts_at_the_games_rule_and_trains_without_decay(tiny_world_model):
    from rpg_worldmodel.checkpoint import load_checkpoint
    from rpg_worldmodel.models.heads import RULE_LOGIT

    loaded = load_checkpoint(tiny_world_model[0])
    cfg = loaded.config.model
    assert cfg.entered_rewards == (0.0, -1.0, 10.0, -10.0, 5.0, 0.0)  # filled from the file: a wall costs 1
    model = WorldModel(cfg)
    prior = model.reward_prior.weight
    wall_row = prior[WALL + 1]
    assert wall_row[list(cfg.reward_values).index(-1.0)] == RULE_LOGIT and wall_row.abs().sum() == RULE_LOGIT
    assert prior[0].abs().sum() == 0  # a hidden cell: no prior
    decay, _ = model.param_groups(0.1)
    assert all(p is not prior for p in decay["params"])
    with pytest.raises(ConfigError, match="one value per channel"):
        ModelConfig(entered_rewards=(0.0, -1.0)).validate()
    with pytest.raises(ConfigError, match="must be among model.reward_values"):
        ModelConfig(entered_rewards=(0.0, -3.0, 10.0, -10.0, 5.0, 0.0),
                    reward_values=(-10.0, -1.0, 0.0, 5.0, 10.0)).validate()


def test_old_sightings_fall_in_doubling_bins_up_to_the_training_window():
    from rpg_worldmodel.models.heads import MemoryMap, age_bins
    from rpg_worldmodel.models.steps import MoveRules

    cfg = ModelConfig(num_frames=5, train_window=16)
    assert age_bins(cfg) == 7  # 0..4 one by one, then 5-9 and 10-15 (the oldest a window shows)
    assert age_bins(ModelConfig(num_frames=5, train_window=0)) == 5  # windows of num_frames: as before
    memory = MemoryMap(cfg, MoveRules(cfg))
    ages = torch.tensor([0, 4, 5, 9, 10, 15, 16, 99, 999])
    assert memory.age_bin(ages).tolist() == [0, 4, 5, 5, 6, 6, 6, 6, 6]
    assert memory.prior.num_embeddings == 7 * 7 + 1  # (bins x kinds with the agent's own) + unseen


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
