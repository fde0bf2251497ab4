"""The native vector env: make_vec, autoreset conventions, wrappers, and the same rules."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers.vector import FlattenObservation, RecordEpisodeStatistics

from rpg_env.envs.vector import TreasurehuntVectorEnv
from rpg_env.game.constants import AGENT, BONE, EMPTY, FOOD, GEM, ITEM_CODES, WALL
from rpg_env.policies.base import BatchPolicy

MOVES = np.array([(-1, 0), (1, 0), (0, -1), (0, 1)])
VALUES = {GEM: 10.0, FOOD: 5.0, BONE: -10.0, EMPTY: 0.0}


def make(num_envs=4, **kwargs) -> TreasurehuntVectorEnv:
    kwargs.setdefault("height", 8)
    kwargs.setdefault("width", 8)
    return gym.make_vec("Treasurehunt-v0", num_envs=num_envs, **kwargs)


def test_make_vec_returns_the_native_vector_env():
    envs = make(5, vision_radius=3)
    assert type(envs) is TreasurehuntVectorEnv
    assert envs.num_envs == 5
    assert envs.single_observation_space.shape == (6, 7, 7)
    assert envs.observation_space.shape == (5, 6, 7, 7)
    assert envs.single_action_space == gym.spaces.Discrete(4)
    assert envs.action_space.shape == (5,)
    assert envs.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    obs, infos = envs.reset(seed=0)
    assert envs.observation_space.contains(obs)
    obs, rewards, terminated, truncated, infos = envs.step(envs.action_space.sample())
    assert obs.shape == (5, 6, 7, 7) and rewards.shape == (5,)
    assert terminated.dtype == truncated.dtype == np.bool_ and not terminated.any()


def test_infos_follow_the_vector_convention():
    envs = make(3, num_agents=3)
    _, infos = envs.reset(seed=0)
    assert infos["positions"].shape == (3, 3, 2) and infos["turn"].tolist() == [0, 0, 0]
    assert "co_actions" not in infos and infos["pickups"]["gem"].tolist() == [0, 0, 0]
    assert infos["co_obs"].shape == (3, 2, 6, 9, 9)
    for key in ("turn", "positions", "episode_return", "co_obs", "co_returns"):
        assert infos["_" + key].tolist() == [True] * 3
    _, rewards, _, _, infos = envs.step(np.array([0, 1, 2]))
    assert set(infos["pickups"]) == {"gem", "food", "bone", "_gem", "_food", "_bone"}
    assert infos["bumped"].dtype == np.bool_ and infos["_bumped"].all()
    assert infos["co_actions"].shape == infos["co_rewards"].shape == (3, 2)
    np.testing.assert_allclose(infos["episode_return"], rewards)


# ---------------------------------------------------------------------------- same rules
def check_transition(before: np.ndarray, rc_before: np.ndarray, actions: np.ndarray,
                     after: np.ndarray, rc_after: np.ndarray, rewards: np.ndarray,
                     values: dict[int, float]) -> None:
    """An independent, cell-by-cell reading of the rules, applied to one world's turn."""
    grid = before.copy()
    rc = rc_before.copy()
    height, width = grid.shape
    for k, action in enumerate(actions):
        r, c = rc[k] + MOVES[action]
        code = grid[r, c] if 0 <= r < height and 0 <= c < width else WALL
        if code == WALL:
            assert rewards[k] == values[WALL]
        elif code == AGENT:
            assert rewards[k] == 0.0
        else:
            assert rewards[k] == values[code]
            grid[tuple(rc[k])] = EMPTY
            grid[r, c] = AGENT
            rc[k] = (r, c)
    np.testing.assert_array_equal(rc_after, rc)
    spawned = grid != after
    assert (grid[spawned] == EMPTY).all() and np.isin(after[spawned], ITEM_CODES).all()


@pytest.mark.parametrize("co_policy", ["random", "greedy"])
def test_every_world_follows_the_rules(co_policy):
    values = {**VALUES, WALL: -1.0}
    envs = make(32, num_agents=3, spawn_prob=0.05, max_turns=15, co_policy=co_policy)
    _, infos = envs.reset(seed=3)
    rng = np.random.default_rng(0)
    ended = np.zeros(32, dtype=bool)
    for _ in range(40):
        before, rc_before = envs.world.grid.copy(), envs.world.agent_rc()
        actions = rng.integers(0, 4, size=32)
        _, rewards, _, truncated, infos = envs.step(actions)
        for w in np.flatnonzero(~ended):
            all_actions = np.concatenate([[actions[w]], infos["co_actions"][w]])
            all_rewards = np.concatenate([[rewards[w]], infos["co_rewards"][w]])
            check_transition(before[w], rc_before[w], all_actions, envs.world.grid[w],
                             infos["positions"][w], all_rewards, values)
        for w in np.flatnonzero(ended):  # restarted: a fresh empty world, turn 0
            assert infos["turn"][w] == 0 and not np.isin(envs.world.grid[w], ITEM_CODES).any()
        ended = truncated


def test_one_world_matches_the_single_env():
    """make_vec(num_envs=1) and make() draw the same game from the same seed."""
    kwargs = dict(height=9, width=9, spawn_prob=0.05, max_turns=50)
    env = gym.make("Treasurehunt-v0", **kwargs)
    envs = make(1, **kwargs)
    obs, info = env.reset(seed=9)
    vobs, vinfo = envs.reset(seed=9)
    np.testing.assert_array_equal(vobs[0], obs)
    for a in np.random.default_rng(1).integers(0, 4, size=50):
        obs, reward, _, truncated, info = env.step(int(a))
        vobs, vreward, _, vtruncated, vinfo = envs.step(np.array([a]))
        np.testing.assert_array_equal(vobs[0], obs)
        assert vreward[0] == reward and vtruncated[0] == truncated
        np.testing.assert_array_equal(vinfo["positions"][0], info["positions"])
        np.testing.assert_array_equal(vinfo["co_actions"][0], info["co_actions"])
    assert truncated


# ---------------------------------------------------------------------------- autoreset
def test_next_step_autoreset():
    envs = make(4, max_turns=3)
    envs.reset(seed=0)
    # Desynchronise: worlds 0 and 1 restart after one step.
    envs.step(np.zeros(4, dtype=np.int64))
    _, infos = envs.reset(options={"reset_mask": np.array([True, True, False, False])})
    assert infos["turn"].tolist() == [0, 0, 1, 1]
    _, _, _, truncated, _ = envs.step(np.zeros(4, dtype=np.int64))
    assert truncated.tolist() == [False, False, False, False]
    _, _, _, truncated, infos = envs.step(np.zeros(4, dtype=np.int64))
    assert truncated.tolist() == [False, False, True, True]
    assert infos["turn"].tolist() == [2, 2, 3, 3]
    grids_before = envs.world.grid.copy()
    obs, rewards, terminated, truncated, infos = envs.step(np.full(4, 3))
    # Worlds 2 and 3 reset now: reward 0, not done, turn 0, their action ignored, and they
    # report reset info: no pickups or bump, and no co_actions/co_rewards (masked out).
    assert rewards[2:].tolist() == [0.0, 0.0]
    assert truncated.tolist() == [True, True, False, False] and not terminated.any()
    assert infos["turn"].tolist() == [3, 3, 0, 0]
    assert infos["_co_actions"].tolist() == infos["_co_rewards"].tolist() == [True, True, False, False]
    assert infos["pickups"]["_gem"].all() and infos["_turn"].all() and infos["_bumped"].all()
    assert infos["bumped"][2:].tolist() == [False, False]
    assert [infos["pickups"][k][2:].tolist() for k in ("gem", "food", "bone")] == [[0, 0]] * 3
    assert not np.isin(envs.world.grid[2:], ITEM_CODES).any()
    assert not np.array_equal(envs.world.grid[2:], grids_before[2:])
    assert infos["episode_return"][2:].tolist() == [0.0, 0.0]


def test_same_step_autoreset():
    kwargs = dict(max_turns=4, spawn_prob=0.3)
    envs = make(3, autoreset_mode="same_step", **kwargs)
    twin = make(3, **kwargs)  # NEXT_STEP: identical until it resets a step later
    assert envs.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    envs.reset(seed=1)
    twin.reset(seed=1)
    actions = np.full(3, 1)
    for _ in range(3):
        _, _, _, truncated, infos = envs.step(actions)
        twin.step(actions)
        assert "final_obs" not in infos and not truncated.any()
    obs, rewards, terminated, truncated, infos = envs.step(actions)
    twin_obs, twin_rewards, _, _, twin_infos = twin.step(actions)
    assert truncated.all() and not terminated.any()
    np.testing.assert_array_equal(rewards, twin_rewards)  # rewards of the ending step
    # The ended episodes' last observation and info, as Gymnasium's vector envs give them.
    assert infos["final_obs"].dtype == object and infos["_final_obs"].tolist() == [True] * 3
    np.testing.assert_array_equal(np.stack(infos["final_obs"]), twin_obs)
    final_info = infos["final_info"]
    assert infos["_final_info"].all() and final_info["_turn"].all()
    assert final_info["turn"].tolist() == [4, 4, 4]
    np.testing.assert_array_equal(final_info["positions"], twin_infos["positions"])
    np.testing.assert_array_equal(final_info["co_obs"], twin_infos["co_obs"])
    np.testing.assert_array_equal(final_info["episode_return"], twin_infos["episode_return"])
    # The returned obs and infos already belong to the new episodes.
    assert infos["turn"].tolist() == [0, 0, 0]
    assert infos["episode_return"].tolist() == [0.0, 0.0, 0.0]
    assert not infos["_co_actions"].any() and not infos["bumped"].any()
    assert all(infos["pickups"][k].sum() == 0 for k in ("gem", "food", "bone"))
    assert not np.isin(envs.world.grid, ITEM_CODES).any()
    np.testing.assert_array_equal(obs.argmax(axis=1).reshape(3, -1), envs.world.views()[:, 0])
    obs, rewards, _, truncated, infos = envs.step(actions)
    assert infos["turn"].tolist() == [1, 1, 1] and not truncated.any() and "final_obs" not in infos


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_record_episode_statistics_wrapper(mode):
    num_envs, max_turns = 6, 7
    envs = RecordEpisodeStatistics(make(num_envs, max_turns=max_turns, spawn_prob=0.2,
                                        autoreset_mode=mode))
    envs.reset(seed=2)
    rng = np.random.default_rng(0)
    returns = np.zeros(num_envs)
    done_prev = np.zeros(num_envs, dtype=bool)
    episodes = 0
    for _ in range(3 * max_turns + 2):
        _, rewards, terminated, truncated, infos = envs.step(rng.integers(0, 4, size=num_envs))
        if mode == AutoresetMode.NEXT_STEP:
            returns[done_prev] = 0.0
            returns[~done_prev] += rewards[~done_prev]
        else:
            returns += rewards
        done = terminated | truncated
        if done.any():
            assert infos["_episode"].tolist() == done.tolist()
            np.testing.assert_allclose(infos["episode"]["r"][done], returns[done], rtol=1e-6)
            assert (infos["episode"]["l"][done] == max_turns).all()
            episodes += int(done.sum())
            if mode == AutoresetMode.SAME_STEP:
                returns[done] = 0.0
        done_prev = done
    assert episodes == 3 * num_envs


def test_observation_wrapper():
    # Gymnasium's vector observation wrappers accept NEXT_STEP (and DISABLED) envs only.
    envs = FlattenObservation(make(2, max_turns=2))
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (2, 6 * 9 * 9)
    for _ in range(3):
        obs, _, _, truncated, infos = envs.step(np.zeros(2, dtype=np.int64))
    assert obs.shape == (2, 486) and infos["turn"].tolist() == [0, 0]


def test_autoreset_mode_names_and_errors():
    assert make(1, autoreset_mode="NextStep").autoreset_mode == AutoresetMode.NEXT_STEP
    assert make(1, autoreset_mode="SAME_STEP").autoreset_mode == AutoresetMode.SAME_STEP
    with pytest.raises(ValueError, match="DISABLED is not supported"):
        make(1, autoreset_mode=AutoresetMode.DISABLED)
    with pytest.raises(ValueError, match="autoreset_mode"):
        make(1, autoreset_mode="sometimes")


# ---------------------------------------------------------------------------- errors
def test_step_before_reset():
    with pytest.raises(ResetNeeded):
        make(2).step(np.zeros(2, dtype=np.int64))


@pytest.mark.parametrize("actions, error, fragment", [
    (np.zeros(3, dtype=np.int64), ValueError, "shape"),
    (np.zeros((2, 1), dtype=np.int64), ValueError, "shape"),
    (np.zeros(2, dtype=np.float32), TypeError, "integers"),
    (np.zeros(2, dtype=bool), TypeError, "integers"),
    (np.array(["up", "up"]), TypeError, "integers"),
    (np.array([0, 4]), ValueError, "out of range"),
    (np.array([-1, 0]), ValueError, "out of range"),
    (5, ValueError, "shape"),
])
def test_invalid_actions(actions, error, fragment):
    envs = make(2)
    envs.reset(seed=0)
    with pytest.raises(error, match=fragment):
        envs.step(actions)
    envs.step([0, 1])  # a list of ints is fine


def test_bad_constructor_and_reset_arguments():
    with pytest.raises(ValueError, match="num_envs"):
        TreasurehuntVectorEnv(0)
    with pytest.raises(ValueError, match="render_mode"):
        make(1, render_mode="human")
    with pytest.raises(ValueError, match="spawn_prob"):
        make(1, spawn_prob=2.0)
    envs = make(2)
    with pytest.raises(ValueError, match="one int seed"):
        envs.reset(seed=[1, 2])
    with pytest.raises(ValueError, match="unknown reset option"):
        envs.reset(options={"layout": ["..."]})
    envs.reset(seed=0)
    with pytest.raises(ValueError, match="reset_mask"):
        envs.reset(options={"reset_mask": np.array([1, 0])})


# ---------------------------------------------------------------------------- determinism
@pytest.mark.parametrize("co_policy", ["random", "greedy"])
def test_same_seed_same_batch_trajectories(co_policy):
    def run():
        envs = make(8, spawn_prob=0.1, max_turns=10, co_policy=co_policy)
        obs, _ = envs.reset(seed=5)
        out = [obs.copy()]
        rng = np.random.default_rng(0)
        for _ in range(25):
            obs, rewards, _, _, infos = envs.step(rng.integers(0, 4, size=8))
            out += [obs.copy(), rewards.copy(), infos["co_actions"].copy(), infos["positions"].copy()]
        return out

    for a, b in zip(run(), run(), strict=True):
        np.testing.assert_array_equal(a, b)


class StartRecorder(BatchPolicy):
    policy_id = "start-recorder"

    def __init__(self):
        super().__init__()
        self.starts = []

    def act(self, obs, episode_start=None):
        self.starts.append(np.asarray(episode_start).copy())
        return np.zeros(len(obs), dtype=np.int64)


def test_co_players_see_episode_starts():
    policy = StartRecorder()
    envs = make(2, max_turns=2, co_policy=policy)
    envs.reset(seed=0)
    for _ in range(4):
        envs.step(np.zeros(2, dtype=np.int64))
    starts = [s.tolist() for s in policy.starts]
    # step 1 first of the episode; step 2 not; step 3 resets (action ignored), so the first
    # real step of the new episode (step 4) is still flagged as a start.
    assert starts == [[True, True], [False, False], [True, True], [True, True]]


def test_render_modes():
    envs = make(2, render_mode="ansi")
    envs.reset(seed=0)
    frames = envs.render()
    assert len(frames) == 2 and all(isinstance(f, str) for f in frames)
    envs = make(2, render_mode="rgb_array")
    envs.reset(seed=0)
    frames = envs.render()
    assert len(frames) == 2 and frames[0].dtype == np.uint8 and frames[0].ndim == 3


@pytest.mark.parametrize("obs_mode, shape", [("rgb", (72, 72, 3)), ("full", (7, 8, 8))])
def test_other_observation_modes(obs_mode, shape):
    envs = make(3, obs_mode=obs_mode)
    obs, _ = envs.reset(seed=0)
    assert obs.shape == (3, *shape) and envs.observation_space.contains(obs)
    obs, *_ = envs.step(np.zeros(3, dtype=np.int64))
    assert envs.observation_space.contains(obs)
    if obs_mode == "full":
        rc = envs.world.agent_rc()[:, 0]
        assert obs[np.arange(3), 6, rc[:, 0], rc[:, 1]].tolist() == [1, 1, 1]
        assert (obs[:, 6].sum(axis=(1, 2)) == 1).all()
        np.testing.assert_array_equal(obs[:, :6].argmax(axis=1), envs.world.grid)


def test_keywords_and_defaults_match_the_single_env():
    import inspect

    from rpg_env.envs.treasurehunt import TreasurehuntEnv

    single = inspect.signature(TreasurehuntEnv.__init__).parameters
    vector = inspect.signature(TreasurehuntVectorEnv.__init__).parameters
    for name, param in single.items():
        if name != "self":
            assert vector[name].default == param.default, name
    assert make(1).params == TreasurehuntEnv(height=8, width=8).params


def test_single_agent_worlds():
    envs = make(3, num_agents=1, max_turns=3)
    _, infos = envs.reset(seed=0)
    assert not {"co_obs", "co_returns"} & set(infos) and envs.co_policy is None
    for _ in range(4):
        obs, rewards, _, truncated, infos = envs.step(np.zeros(3, dtype=np.int64))
    assert not {"co_actions", "co_rewards"} & set(infos)
    assert infos["positions"].shape == (3, 1, 2) and infos["turn"].tolist() == [0, 0, 0]


def _mask_structure(infos: dict, n: int) -> dict:
    """{key: mask} over the info tree, an absent key reading as an all-False mask."""
    out = {}
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        mask = np.asarray(infos.get("_" + key, np.zeros(n, dtype=bool)))
        out[key] = mask.tolist()
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in _mask_structure(value, n).items()})
    return out


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_info_masks_match_gymnasiums_own_sync_vector_env(mode):
    """Gymnasium's SyncVectorEnv over single envs is the reference for the info convention."""
    kwargs = dict(height=7, width=7, max_turns=2, spawn_prob=0.1)
    native = make(3, autoreset_mode=mode, **kwargs)
    sync = gym.make_vec("Treasurehunt-v0", num_envs=3, vectorization_mode="sync",
                        vector_kwargs={"autoreset_mode": mode}, **kwargs)
    assert type(sync).__name__ == "SyncVectorEnv"
    native_obs, native_infos = native.reset(seed=0)
    sync_obs, sync_infos = sync.reset(seed=0)
    for _ in range(5):
        ours, theirs = _mask_structure(native_infos, 3), _mask_structure(sync_infos, 3)
        for key in set(ours) | set(theirs):
            if key in ("final_obs", "final_info"):
                continue
            assert ours.get(key, [False] * 3) == theirs.get(key, [False] * 3), key
        if "final_obs" in sync_infos:
            assert native_infos["_final_obs"].tolist() == sync_infos["_final_obs"].tolist()
            assert native_infos["final_obs"].dtype == sync_infos["final_obs"].dtype == object
            final_ours = _mask_structure(native_infos["final_info"], 3)
            final_theirs = _mask_structure(sync_infos["final_info"], 3)
            assert final_ours == final_theirs
        actions = np.array([0, 1, 2])
        native_obs, r1, _, t1, native_infos = native.step(actions)
        sync_obs, r2, _, t2, sync_infos = sync.step(actions)
        assert t1.tolist() == t2.tolist() and native_obs.shape == sync_obs.shape
