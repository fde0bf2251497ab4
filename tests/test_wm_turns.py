"""Views that turn with the viewer (MiniGrid's kind, with the viewer at the bottom of its view): the
turns are read off the views, not told, and a view that never turns gets none; dead reckoning
composes turns and shifts into poses, so the memory map re-draws a static world after any walk, on
the window and on imagination's canvas alike; the extents follow the turns; the motion prior's turn
kernel reads the view turned; a model with turns imagines step by step as its window predicts."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rpg_base.typed_config.values import ConfigError
from rpg_worldmodel.config import ModelConfig
from rpg_worldmodel.models.extents import empty_extents, extents_step, view_extents, window_extents
from rpg_worldmodel.models.heads import MoveConv
from rpg_worldmodel.models.motion import (
    SHIFTS,
    STAY,
    UNKNOWN,
    infer_shifts,
    motion_family,
    read_turns,
)
from rpg_worldmodel.models.steps import HIDDEN, canvas_step, empty_canvas, memory_canvas
from rpg_worldmodel.models.world_model import WorldModel

#: The test's own world: floor, wall, three kinds of item, the viewer. Its moves: turn one way, turn
#: the other, step ahead, stay (the model is told none of them).
FLOOR, WALL, VIEWER, V, KINDS = 0, 1, 5, 7, 6
TURN_A, TURN_B, AHEAD, STAY_PUT = range(4)
FACING = np.array([[-1, 0], [0, 1], [1, 0], [0, -1]])  # north, east, south, west


def _view(world: np.ndarray, pos: np.ndarray, facing: int) -> np.ndarray:
    """The V x V cells ahead of the viewer, the viewer at the bottom middle facing up the view."""
    ahead, right = FACING[facing], FACING[(facing + 1) % 4]
    rows = np.arange(V)[:, None, None]
    cols = np.arange(V)[None, :, None]
    cells = pos + (V - 1 - rows) * ahead + (cols - V // 2) * right  # (V, V, 2) world cells
    view = world[cells[..., 0], cells[..., 1]]
    view[V - 1, V // 2] = VIEWER
    return view, cells


def _walk(steps: int, seed: int, side: int = 40):
    """A static world and a random walk of turns, steps and stays in it: (views (1, S+1, C, V, V),
    actions (1, S), world cells of each view (S+1, V, V, 2), whether each step ahead was blocked)."""
    rng = np.random.default_rng(seed)
    world = rng.choice([FLOOR, WALL, 2, 3, 4], size=(side, side), p=[0.55, 0.2, 0.1, 0.1, 0.05])
    world[:V, :] = world[-V:, :] = world[:, :V] = world[:, -V:] = WALL
    pos, facing = np.array([side // 2, side // 2]), 0
    world[tuple(pos)] = FLOOR
    views, cells, actions = [], [], []
    for _ in range(steps + 1):
        view, where = _view(world, pos, facing)
        views.append(view)
        cells.append(where)
        action = int(rng.integers(4))
        actions.append(action)
        if action == TURN_A:
            facing = (facing + 3) % 4
        elif action == TURN_B:
            facing = (facing + 1) % 4
        elif action == AHEAD and world[tuple(pos + FACING[facing])] != WALL:
            pos = pos + FACING[facing]
    one_hot = F.one_hot(torch.as_tensor(np.stack(views)), KINDS).permute(0, 3, 1, 2).float()[None]
    return one_hot, torch.tensor(actions[:-1])[None], np.stack(cells)


def _kinds(views: torch.Tensor) -> torch.Tensor:
    """The views' kinds, the viewer's own cell (which moves with the view) hidden, as training
    masks a view's fixed cells."""
    kinds = views.argmax(-3)
    kinds[..., V - 1, V // 2] = HIDDEN
    return kinds


def _true_motions(views, actions, turns):
    """Each step's motion, an index into ``motion_family(turns)``, from what the step did: the
    turn each turning action causes (the one the views label it with most), a step ahead's shift,
    none for a stay or a blocked step."""
    family = motion_family(turns)
    told = infer_shifts(_kinds(views), turns)[0]
    motions = []
    for t, action in enumerate(actions[0].tolist()):
        if action in (TURN_A, TURN_B):
            labels = told[actions[0] == action]
            motions.append(int(torch.mode(labels[labels >= len(SHIFTS)]).values))
        elif action == AHEAD and not torch.equal(views[0, t], views[0, t + 1]):
            motions.append(family.index((0, -1, 0)))
        else:
            motions.append(STAY)
    return torch.tensor(motions)[None]


def test_turns_are_read_off_the_views_and_a_view_that_never_turns_has_none():
    views, actions, _ = _walk(600, 0)
    turns = read_turns([(_kinds(views)[0], actions[0])], num_actions=4)
    assert len(turns) == 2 and {q for q, _, _ in turns} == {1, 3}  # a quarter turn each way
    for _, row, col in turns:  # about the viewer's cell, 3 rows below the view's centre
        assert (row, col) in {(3, 3), (3, -3)}
    family = motion_family(turns)
    told = infer_shifts(_kinds(views), turns)[0]
    for action in (TURN_A, TURN_B):
        labels = told[(actions[0] == action) & (told != UNKNOWN)]
        assert len(labels) > 50 and (labels >= len(SHIFTS)).float().mean() > 0.95
    ahead = told[(actions[0] == AHEAD) & (told != UNKNOWN)]  # a step, or none where a wall blocks it
    assert (ahead == family.index((0, -1, 0))).float().mean() > 0.5
    assert ((ahead == family.index((0, -1, 0))) | (ahead == STAY)).all()

    # an action that stays but changes what lies ahead (a door opened, cells beyond it shown) is no
    # turn, though some turn of the view agrees with the few cells it leaves as they were
    rng = np.random.default_rng(2)
    kinds, acts = _kinds(views)[0], actions[0].clone()
    opened = kinds.clone()
    opened[:, :V - 2] = torch.as_tensor(rng.integers(0, 5, size=(len(kinds), V - 2, V)))
    toggles = [(torch.stack([kinds[t], opened[t]]), torch.tensor([STAY_PUT])) for t in range(0, 600, 3)]
    assert read_turns([(kinds, acts), *toggles], num_actions=4) == turns

    # a view centred on its viewer that only shifts (the treasurehunt game's kind): no turn
    rng = np.random.default_rng(1)
    world = rng.choice([FLOOR, WALL, 2], size=(60, 60), p=[0.7, 0.2, 0.1])
    pos, codes, acts = np.array([30, 30]), [], []
    for _ in range(400):
        codes.append(world[pos[0] - 4:pos[0] + 5, pos[1] - 4:pos[1] + 5])
        act = int(rng.integers(4))
        acts.append(act)
        pos = np.clip(pos + FACING[act], 10, 50)
    assert read_turns([(torch.as_tensor(np.stack(codes)), torch.tensor(acts[:-1]))], 4) == ()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_map_redraws_a_static_world_after_turns_and_steps(seed):
    views, actions, cells = _walk(40, seed)
    kinds = _kinds(views)
    turns = read_turns([(kinds[0], actions[0])], 4)
    motions = _true_motions(views, actions, turns)
    reach = 12
    kind, _ = memory_canvas(kinds[:, :-1], motions, reach, queries=40, turns=turns)
    remembered = 0
    for t in range(40):
        seen = {tuple(c) for s in range(max(0, t - reach + 1), t + 1)
                for c, k in zip(cells[s].reshape(-1, 2), kinds[0, s].flatten().tolist(), strict=True)
                if k != HIDDEN}
        for y, x in np.ndindex(V, V):
            where = tuple(cells[t + 1][y, x])
            if where in seen:  # every cell seen in reach is remembered, as it is
                assert kind[0, t, y, x] == views[0, t + 1, :, y, x].argmax() or (y, x) == (V - 1, V // 2)
                remembered += 1
            else:
                assert kind[0, t, y, x] == HIDDEN
    assert remembered > 40 * V * V // 2

    # imagination's canvas keeps the same map, one step at a time
    canvas = empty_canvas(1, kinds.device)
    for t in range(40):
        (step_kind, _), canvas = canvas_step(canvas, kinds[:, t], motions[:, t], t, turns)
        window, _ = memory_canvas(kinds[:, :t + 1], motions[:, :t + 1], 1000, queries=1, turns=turns)
        assert torch.equal(step_kind, window[:, 0])


def test_extents_follow_turns_in_the_window_and_one_step_at_a_time():
    views, actions, cells = _walk(30, 3)
    kinds = _kinds(views)
    turns = read_turns([(kinds[0], actions[0])], 4)
    motions = _true_motions(views, actions, turns)
    ends = window_extents(kinds[:, :-1], motions, KINDS, turns=turns)[0]  # (S, K, 4) in view t+1's frame
    for t in range(30):  # each kind's box of every cell seen so far, read directly in view t+1's frame
        frame = cells[t + 1]
        viewer = frame[V - 1, V // 2]
        ahead, right = frame[V - 2, V // 2] - viewer, frame[V - 1, V // 2 + 1] - viewer
        for k in (WALL, 2):
            seen = np.concatenate([cells[s][(kinds[0, s] == k).numpy()] for s in range(t + 1)]) - viewer
            if not len(seen):
                continue
            rows, cols = V - 1 - seen @ ahead - V // 2, seen @ right
            assert ends[t, k].tolist() == [rows.min(), rows.max(), cols.min(), cols.max()], (t, k)
    state = empty_extents(1, KINDS, kinds.device)
    for t in range(30):
        step_ends, state = extents_step(state, kinds[:, t], motions[:, t], KINDS, turns)
        assert torch.equal(step_ends[0], ends[t])
    assert view_extents(kinds[0, :1], KINDS).shape == (1, KINDS, 4)


def test_the_turn_kernel_reads_the_view_turned():
    views, actions, _ = _walk(80, 4)
    turns = read_turns([(_kinds(views)[0], actions[0])], 4)
    motions = _true_motions(views, actions, turns)
    conv = MoveConv(ModelConfig(view_size=V, num_channels=KINDS, patch_size=1, turns=turns))
    turning = (motions[0] >= len(SHIFTS)).nonzero()[:, 0]
    turned = conv.turned(views[0, turning], motions[0, turning])
    after = views[0, turning + 1]
    shown = turned.sum(1) > 0  # cells that were in the old view
    assert shown.sum() >= 16 * len(turning)
    assert torch.equal(turned.argmax(1)[shown], after.argmax(1)[shown])
    assert conv.out_channels == len(motion_family(turns)) * KINDS


def test_a_model_with_turns_imagines_step_by_step_as_its_window_predicts():
    long_views, long_actions, _ = _walk(600, 0)
    turns = read_turns([(_kinds(long_views)[0], long_actions[0])], 4)
    views, actions, _ = _walk(20, 5)
    torch.manual_seed(0)
    cfg = ModelConfig(view_size=V, num_channels=KINDS, patch_size=1, width=24, num_heads=2, num_frames=5,
                      reward_values=(0.0,), turns=turns, fixed_cells=(V * V - V // 2 - 1,))
    model = WorldModel(cfg).eval()
    with torch.no_grad():
        model.motion.linear.weight.normal_(0, 0.3)  # some steps turn, some shift, some stay
        model.memory_map.prior.weight.normal_(0, 1.0)
        reference = model(views[:, :20], actions)
        state, steps = None, []
        for i in range(20):
            out, state = model.imagine_step(views[:, i], actions[:, i], state)
            steps.append(out.view)
        chosen = model.motion.shifts(views[:, :20], actions)
    assert (chosen >= len(SHIFTS)).any() and (chosen < len(SHIFTS)).any()
    torch.testing.assert_close(torch.cat(steps, 1), reference.view, atol=1e-5, rtol=1e-5)


def test_a_turn_that_is_not_a_quarter_turn_of_the_view_is_refused():
    with pytest.raises(ConfigError, match="model.turns"):
        ModelConfig(view_size=V, num_channels=KINDS, patch_size=1, turns=((4, 0, 0),)).validate()
    with pytest.raises(ConfigError, match="model.turns"):
        ModelConfig(view_size=V, num_channels=KINDS, patch_size=1, turns=((1, 9, 0),)).validate()


def test_the_replay_benchmark_tells_cells_seen_before_from_cells_never_in_view():
    """`benchmarks/dream_replay.py`'s ``seen_before``: for a walk in a static world, every cell of
    each next frame that an earlier view of the window showed is given as it is, turns or not, and
    no other cell is given, whether or not the model has turns (it reads them off the views)."""
    from benchmark_modules import load_benchmark as benchmark

    views, actions, cells = _walk(200, 6)
    windows, taken = views[0, :200].unfold(0, 16, 16).permute(0, 4, 1, 2, 3), actions[0, :192].view(12, 16)
    cfg = ModelConfig(view_size=V, num_channels=KINDS, patch_size=1, num_actions=4,
                      fixed_cells=(V * V - V // 2 - 1,))  # a model without turns
    seen = benchmark("dream_replay", "dream_replay_for_turns").seen_before(cfg, windows, taken)
    truth = windows.argmax(2)[:, 1:]
    shown = seen != HIDDEN
    shown[..., V - 1, V // 2] = False  # the viewer's own cell, fixed
    assert torch.equal(seen[shown], truth[shown]) and shown.float().mean() > 0.5
    for w in range(12):  # and a cell no earlier view of the window showed is not given
        for t in range(15):
            before = {tuple(c) for s in range(t + 1) for c in cells[16 * w + s].reshape(-1, 2)}
            never = np.array([tuple(c) not in before for c in cells[16 * w + t + 1].reshape(-1, 2)])
            assert not seen[w, t].flatten()[torch.from_numpy(never)].ne(HIDDEN).any()
