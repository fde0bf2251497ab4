"""The model learns how a step moves its view (`rpg_worldmodel.models.motion`): the shift read off two
consecutive views is the learner's true move in real games, a motion head trained on those labels
predicts the moves that are blocked and those that go through, and the model package holds
nothing of the game by name."""

from __future__ import annotations

import ast
import configparser
import subprocess
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rpg_env.envs.vector import TreasurehuntVectorEnv
from rpg_env.policies.registry import make_policy
from rpg_worldmodel.models.motion import SHIFTS, STAY, UNKNOWN, MotionHead, infer_shifts
from rpg_worldmodel.models.steps import HIDDEN, cell_kinds

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "rpg_worldmodel" / "models"


@cache
def _games(policy: str, seed: int, num_envs: int = 64, turns: int = 100):
    """``turns`` steps of ``num_envs`` real games, the learner playing ``policy``: its views (N, T+1,
    C, V, V) float one-hot, actions (N, T) long and true shifts (N, T) long (its displacement in
    the world, as an index into `SHIFTS`)."""
    env = TreasurehuntVectorEnv(num_envs)
    learner = make_policy(policy)
    learner.seed(np.random.default_rng(seed))
    obs, info = env.reset(seed=seed)
    views, actions, positions = [obs], [], [info["positions"][:, 0]]
    start = np.ones(num_envs, dtype=bool)
    for _ in range(turns):  # the game's max_turns: no world resets within them
        action = learner.act(obs, start)
        start[:] = False
        obs, _, terminated, truncated, info = env.step(action)
        views.append(obs)
        actions.append(action)
        positions.append(info["positions"][:, 0])
    env.close()
    assert not terminated.any() and truncated.all()  # the last step ended every game, none before
    moves = np.diff(np.stack(positions, 1), axis=1)  # (N, T, 2)
    shifts = torch.tensor([[SHIFTS.index(tuple(int(x) for x in m)) for m in row] for row in moves])
    return torch.as_tensor(np.stack(views, 1)).float(), torch.as_tensor(np.stack(actions, 1)), shifts


# ------------------------------------------------------------------ the shift read off the views
@pytest.mark.parametrize("policy", ["random", "greedy"])
def test_the_shift_read_off_two_views_is_the_learners_true_move(policy):
    views, _, true = _games(policy, seed=3)
    read = infer_shifts(cell_kinds(views))
    assert read.shape == true.shape == (64, 100)
    labelled = read != UNKNOWN
    assert labelled.float().mean() >= 0.9  # only a view of bare floor leaves the shift untold
    wrong = (read[labelled] != true[labelled]).float().mean().item()
    assert wrong <= 0.001  # a sparse view with something moving alongside can look like a stay
    if policy == "random":  # the random walker bumps: blocked moves are read as no shift
        assert (read[labelled] == STAY).sum() > 100


def test_a_view_that_looks_alike_under_every_shift_is_left_untold():
    floor = torch.zeros(1, 3, 9, 9, dtype=torch.long)  # bare floor: every shift explains it
    floor[0, 1, 2, 6] = 3  # ... but for one cell, too few to tell the shifts apart
    assert infer_shifts(floor).tolist() == [[UNKNOWN, UNKNOWN]]
    world = torch.randint(1, 5, (20, 20), generator=torch.Generator().manual_seed(0))
    at = [(8, 8), (7, 8), (7, 9), (7, 9)]  # up, right, blocked
    codes = torch.stack([world[r - 4:r + 5, c - 4:c + 5] for r, c in at])[None]
    assert infer_shifts(codes).tolist() == [[SHIFTS.index((-1, 0)), SHIFTS.index((0, 1)), STAY]]
    codes[0, 1:, :3] = HIDDEN  # cells not shown (a masked input) decide nothing
    assert infer_shifts(codes).tolist() == [[SHIFTS.index((-1, 0)), SHIFTS.index((0, 1)), STAY]]


# ------------------------------------------------------------------ the motion head learns the moves
def test_a_motion_head_learns_which_moves_are_blocked_from_the_labels_alone():
    """A few hundred Adam steps on 64 random games' views, actions and read shifts (no table of
    moves): on 64 other games it predicts the moves that go through and those that a wall or an
    agent blocks (the learner stays, though the action moves)."""
    torch.manual_seed(0)
    views, actions, _ = _games("random", seed=11)
    targets = infer_shifts(cell_kinds(views))
    known = targets != UNKNOWN
    head = MotionHead(views.shape[2], views.shape[-1], 4)
    optimizer = torch.optim.Adam(head.parameters(), lr=0.03)
    inputs = views[:, :-1]
    for _ in range(200):
        loss = F.cross_entropy(head(inputs, actions)[known], targets[known])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    test_views, test_actions, true = _games("random", seed=12)
    predicted = head.shifts(test_views[:, :-1], test_actions)
    assert predicted.shape == true.shape
    blocked = true == STAY  # every action of the game moves: a stay is a blocked move
    assert blocked.sum() > 100
    assert (predicted[blocked] == STAY).float().mean() >= 0.9
    assert (predicted[~blocked] == true[~blocked]).float().mean() >= 0.99


# ------------------------------------------------------------------ nothing of the game by name
#: What naming the game looks like: its actions and channels as string literals.
GAME_NAMES = {"up", "down", "left", "right", "wall", "gem", "bone", "food", "agent"}


def _model_sources() -> list[Path]:
    files = sorted(MODELS.rglob("*.py"))
    assert MODELS / "motion.py" in files and MODELS / "world_model.py" in files
    return files


@pytest.mark.parametrize("word", ["rpg_env", "num_agents"])
def test_the_model_package_never_mentions_the_game(word):
    found = [str(f.relative_to(ROOT)) for f in _model_sources() if word in f.read_text()]
    assert found == []


def test_the_model_package_names_no_action_or_channel_of_the_game():
    found = []
    for file in _model_sources():
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and node.value.strip().lower() in GAME_NAMES:
                found.append(f"{file.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert found == []


def test_the_import_contract_keeps_the_game_out_of_the_model():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    contract = config["importlinter:contract:model-knows-no-game"]
    assert contract["type"] == "forbidden"
    assert contract["source_modules"].split() == ["rpg_worldmodel.models"]
    assert contract["forbidden_modules"].split() == ["rpg_env"]
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint), "--contract", "model-knows-no-game", str(ROOT / "setup.cfg")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 kept, 0 broken" in proc.stdout
