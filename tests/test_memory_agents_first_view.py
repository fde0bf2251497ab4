"""`benchmarks/memory_agents.py`'s MiniGrid Memory split: the games an agent wins where its first
view shows the cue, and where it does not. A scripted agent that remembers the cue when it sees it
wins every game of the first kind and about half of the others; one that never looks at the cue
wins about half of each."""

from __future__ import annotations

import numpy as np
import pytest
from benchmark_modules import load_benchmark

from rpg_env.envs.minigrid_views import kind_names
from rpg_env.experts.config import EXPERT_CONFIG_DIR, load_expert_config
from rpg_env.policies.base import BatchPolicy

pytest.importorskip("minigrid")

KINDS = kind_names()
WALL, KEY, BALL = KINDS.index("wall"), KINDS.index("key"), KINDS.index("ball")
LEFT, RIGHT, FORWARD = 0, 1, 2
#: The agent's cell in a 3x3 view is row 2, column 1; ahead of it lie rows 1 and 0 of column 1.
AHEAD, TWO_AHEAD = (1, 1), (0, 1)


class HallwayWalker(BatchPolicy):
    """Walks the hallway to its end, turns up and looks at the object two cells ahead: steps onto
    the cell before it if it is the cue remembered from the first view (``remember``), else turns
    round and steps down. Without a remembered cue it always steps up."""

    def __init__(self, remember: bool) -> None:
        super().__init__()
        self.remember = remember
        self.cue: int | None = None
        self.plan: list[int] = []

    def act(self, obs: np.ndarray, episode_start: np.ndarray | None = None) -> np.ndarray:
        view = obs[0]
        if episode_start is not None and episode_start[0]:
            shown = [kind for kind in (KEY, BALL) if view[kind].any()]
            self.cue = shown[0] if shown and self.remember else None
            self.plan = []
        if not self.plan:
            if not view[WALL][AHEAD]:
                return np.array([FORWARD])
            self.plan = [LEFT, -1]  # turn up, then decide on what the view shows
        step = self.plan.pop(0)
        if step == -1:
            ahead = int(np.argmax(view[:, TWO_AHEAD[0], TWO_AHEAD[1]]))
            step = FORWARD if self.cue in (None, ahead) else RIGHT
            if step == RIGHT:
                self.plan = [RIGHT, FORWARD]
        return np.array([step])


def test_an_agent_that_remembers_the_cue_wins_every_game_whose_first_view_shows_it():
    split = load_benchmark("memory_agents", "benchmark_memory_agents_first_view").wins_by_first_view
    cfg = load_expert_config(None, EXPERT_CONFIG_DIR / "minigrid-memory-onehot-ppo.yaml")
    remembering = split(HallwayWalker(remember=True), cfg, 120, 300_000)
    forgetting = split(HallwayWalker(remember=False), cfg, 120, 300_000)
    for result in (remembering, forgetting):
        assert result["cue_shown"]["games"] + result["cue_hidden"]["games"] == 120
        assert 5 <= result["cue_shown"]["games"] <= 40  # the cue's column is one start column of six
    assert remembering["cue_shown"]["games"] == forgetting["cue_shown"]["games"]  # same seeds, same starts
    assert remembering["cue_shown"]["won"] == 1.0
    assert 0.2 < forgetting["cue_shown"]["won"] < 0.8
    assert 0.3 < remembering["cue_hidden"]["won"] < 0.7
    assert remembering["cue_hidden"]["won"] == forgetting["cue_hidden"]["won"]  # it had nothing to remember


def test_the_memoryless_bound_counts_the_same_starts_as_the_split():
    bench = load_benchmark("memory_agents", "benchmark_memory_agents_first_view_bound")
    cfg = load_expert_config(None, EXPERT_CONFIG_DIR / "minigrid-memory-onehot-ppo.yaml")
    bound = bench.first_view_memory(games=120)
    split = bench.wins_by_first_view(HallwayWalker(remember=True), cfg, 120, 0)
    assert bound["cue_in_first_view"] == split["cue_shown"]["games"] / 120
    shown = bound["cue_in_first_view"]
    assert bound["figure"]["mean"] == pytest.approx(shown + (1 - shown) / 2)
