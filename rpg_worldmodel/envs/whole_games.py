"""A dream and the real game, played side by side from the same opening to the episode's end.

N imagined worlds (`ImaginedWorlds`) and N real games start from one real opening (a seeded greedy
burn-in of ``num_frames - 1`` turns beside a random co-player, as the imagined env's own openings
are played, handed to the dream through a `GivenContext`), and one policy plays both on to the
last turn. Every frame from the last real one is measured with `rpg_worldmodel.envs.fidelity`, the
same way in both worlds, and so are the whole games (`rpg_worldmodel.envs.consistency`: one room or
one map of the map's size from the first frame to the last; co-players and items in view) and the
return after the opening. `benchmarks/imagination_fidelity.py`
runs it over policies and samplers; the pipeline runs it on the model it trained.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rpg_env.envs.vector import TreasurehuntVectorEnv
from rpg_env.policies.base import BatchPolicy
from rpg_env.policies.registry import make_policy
from rpg_worldmodel.checkpoint import LoadedCheckpoint
from rpg_worldmodel.envs.consistency import INHABITANT_MEASURES, whole_game_shares
from rpg_worldmodel.envs.fidelity import (
    FidelityReference,
    Share,
    agent_ahead,
    check_episodes,
    fidelity,
    follow_moves,
    frame_validity,
    geometric_consistency,
    wall_breaks,
)
from rpg_worldmodel.envs.imagination import GivenContext, ImaginedWorlds, Start
from rpg_worldmodel.evaluation.metrics import bootstrap_interval, resample_weights

#: What is measured of every frame, in both worlds (``consistency_any_start``: from every start the
#: first frame allows, so the dream must keep to *some* map rather than the real one).
MEASURES = ("frame_validity", "geometric_consistency", "consistency_any_start", "item_persistence",
            "spawn_rate", "walls_kept")
REPLICATES = 2000
#: Steps every world by its action: ``step(actions) -> (observations, rewards, done)``.
StepWorlds = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]


def real_opening(rules: dict[str, Any], num_frames: int, worlds: int, seed: int
                 ) -> tuple[Start, TreasurehuntVectorEnv, np.ndarray, np.ndarray]:
    """A real greedy burn-in of ``num_frames - 1`` turns: the `Start` a dream continues from, the
    real games (still running), their last views (N, C, V, V) and the learner's positions (N, 2)."""
    env = TreasurehuntVectorEnv(worlds, **rules, co_policy="random")
    obs, info = env.reset(seed=seed)
    greedy = make_policy("greedy")
    greedy.seed(np.random.default_rng(seed + 1))
    views, actions = [obs], []
    for _ in range(num_frames - 1):
        action = greedy.act(obs)
        obs, _, _, _, info = env.step(action)
        views.append(obs)
        actions.append(action)
    turns = np.full(worlds, num_frames - 1, dtype=np.int64)
    start = Start(np.stack(views, 1).astype(np.uint8), np.stack(actions, 1).astype(np.int64), turns)
    return start, env, obs, info["positions"][:, 0]


def play_out(step: StepWorlds, obs: np.ndarray, policy: BatchPolicy, seed: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Play ``policy`` to the episode's end through ``step(actions) -> (obs, rewards, done)``: cell
    codes (N, T, V, V) from the given view on, actions (N, T - 1), returns (N,) in points."""
    policy.seed(np.random.default_rng(seed + 2))
    start = np.ones(len(obs), dtype=bool)
    codes, actions, returns = [obs.argmax(1)], [], np.zeros(len(obs))
    while True:
        action = policy.act(obs, start)
        obs, rewards, done = step(action)
        start[:] = False
        codes.append(obs.argmax(1))
        actions.append(action)
        returns += rewards
        if done.all():
            return np.stack(codes, 1), np.stack(actions, 1), returns


def _real_step(env: TreasurehuntVectorEnv) -> StepWorlds:
    def step(action):
        obs, reward, _, truncated, _ = env.step(action)
        return obs, np.asarray(reward, dtype=np.float64), np.asarray(truncated, dtype=bool)
    return step


def _imagined_step(worlds: ImaginedWorlds) -> StepWorlds:
    def step(action):
        rewards, truncated = worlds.step(action)
        return worlds.observations(), rewards.astype(np.float64), truncated | worlds.ended
    return step


def share_interval(share: Share, seed: int) -> dict[str, float]:
    """A pooled share (hits / total over worlds) with a 95% percentile bootstrap interval over worlds
    (the evaluation's bootstrap: `resample_weights`, `bootstrap_interval`)."""
    weights = resample_weights(len(share.hits), REPLICATES, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        draws = (weights @ share.hits) / (weights @ share.total)
    return {**bootstrap_interval(share.value, draws).as_dict(),
            "hits": int(share.hits.sum()), "total": int(share.total.sum())}


def mean_bootstrap_interval(per_world: np.ndarray, seed: int) -> dict[str, float]:
    """The mean over worlds with a 95% percentile bootstrap interval (the evaluation's bootstrap)."""
    means = resample_weights(len(per_world), REPLICATES, seed) @ per_world / len(per_world)
    return bootstrap_interval(per_world.mean(), means).as_dict()


def measured(codes: np.ndarray, actions: np.ndarray, ref: FidelityReference, start_cells: np.ndarray,
             seed: int, first_turn: int = 0) -> dict[str, Any]:
    """`MEASURES` of a batch of episodes with intervals, the share of whole episodes whose every frame
    is valid (``whole_games_valid``: a dream that stayed a world the whole game), the whole-game
    measures (`rpg_worldmodel.envs.consistency.whole_game_shares`: ``room_games``, ``room_frames``,
    ``map_games``, ``map_frames``, ``co_players`` and ``items_turns_LO_HI``; view 0 is turn
    ``first_turn``), the frames failing each validity check, and where impossible wall layouts began
    (`wall_breaks`)."""
    shares = fidelity(codes, actions, ref, start=start_cells)
    games = whole_game_shares(codes, actions, ref, first_turn)
    shares["consistency_any_start"] = geometric_consistency(codes, actions, ref).share
    valid = shares["frame_validity"]
    every_frame = (valid.hits == valid.total) & (valid.total > 0)
    whole = Share(every_frame.astype(np.int64), np.ones_like(valid.total))
    return {**{m: share_interval(shares[m], seed) for m in MEASURES},
            "whole_games_valid": share_interval(whole, seed),
            **{m: share_interval(share, seed) for m, share in games.items()},
            "failed": {k: int(v) for k, v in shares["failed"].items()},
            "wall_breaks": wall_breaks(codes, actions, ref)}


#: The policies a dream is judged under (`judging_policy`): four scripts unlike the data (greedy,
#: random, greedy with 30% random actions, a wall-follower that keeps the walls in view), the expert
#: whose games the shipped model learned, and the agent trained in the shipped model's dream.
JUDGING_POLICIES = ("greedy", "random", "eps-greedy", "wall-follower", "dqn", "dream")


def judging_source(name: str) -> str:
    """What `make_policy` takes for a policy of `JUDGING_POLICIES` (or any registry name): ``dqn`` is
    the shipped DQN expert's file, ``dream`` the shipped dream agent's; FileNotFoundError when a
    shipped file is missing, before anything is loaded."""
    from rpg_env.experts import pretrained_path as expert_path
    from rpg_worldmodel.shipped import pretrained_path as shipped_path

    if name == "dqn":
        return str(expert_path("dqn"))
    if name == "dream":
        return str(shipped_path("dream"))
    return name


def judging_policy(name: str) -> BatchPolicy:
    """A fresh policy of `JUDGING_POLICIES` (see `judging_source`)."""
    return make_policy(judging_source(name))


def dream_and_real(loaded: LoadedCheckpoint, ref: FidelityReference, policy: Callable[[], BatchPolicy],
                   *, sample: bool, worlds: int, seed: int,
                   sample_rounds: int | None = None, sample_doubt: float | None = None,
                   sample_floor: float | None = None) -> dict[str, Any]:
    """One policy (``policy()`` makes a fresh one per world) in the dream of ``loaded`` and in the
    real game, from the same opening: the measures of both, the consistency from the real start an
    ideal dream reaches in these games (`consistency_ceiling`: what the opening leaves unknown),
    the return per episode of both and their gap (points and share of the real return), the
    inhabitants imagined over real (`inhabitants_vs_real`), the dream's validity by frame, and its
    imagined steps per second. ``sample_rounds``,
    ``sample_doubt``, ``sample_floor``: most rounds of a joint draw, the doubt each takes on and the
    least probability a drawn kind has (None: the model's)."""
    rules, num_frames = dict(loaded.record.data.env_kwargs), loaded.config.model.num_frames
    start, real, obs, first = real_opening(rules, num_frames, worlds, seed)
    context = GivenContext()
    context.give(start)
    dream = ImaginedWorlds(loaded, worlds, context, sample=sample, sample_rounds=sample_rounds,
                           sample_doubt=sample_doubt, sample_floor=sample_floor)
    dream.reset(np.arange(worlds), np.random.default_rng(seed))
    began = time.perf_counter()
    im_codes, im_actions, im_return = play_out(_imagined_step(dream), dream.observations(), policy(), seed)
    seconds = time.perf_counter() - began
    re_codes, re_actions, re_return = play_out(_real_step(real), obs, policy(), seed)
    real.close()
    gap = im_return - re_return
    share = float(gap.mean() / abs(re_return.mean())) if re_return.mean() else None
    ideal = consistency_ceiling(start.views.argmax(2), start.actions, re_codes, re_actions, ref, first,
                                np.random.default_rng(seed + 3))
    first_turn = int(start.turns[0])
    imagined = measured(im_codes, im_actions, ref, first, seed, first_turn)
    real_measures = measured(re_codes, re_actions, ref, first, seed, first_turn)
    return {
        "imagined": imagined,
        "real": real_measures,
        "inhabitants_vs_real": inhabitants_vs_real(imagined, real_measures),
        "ideal_dream": {"geometric_consistency": share_interval(ideal, seed)},
        "return": {"imagined": mean_bootstrap_interval(im_return, seed),
                   "real": mean_bootstrap_interval(re_return, seed),
                   "imagined_minus_real": mean_bootstrap_interval(gap, seed),
                   "gap_share_of_real": share},
        "validity_by_turn": frame_validity(im_codes, ref).valid.mean(0).round(4).tolist(),
        # the likeliest view is decided in the rounds a draw takes too (`ViewSampler.likeliest`)
        "sample_rounds": dream.sample_rounds,
        "sample_doubt": dream.sample_doubt,
        "sample_floor": dream.sample_floor,
        "imagined_steps_per_s": round(im_actions.size / seconds, 1),  # the policy's time included
    }


def inhabitants_vs_real(imagined: dict[str, Any], real: dict[str, Any]) -> dict[str, float | None]:
    """`INHABITANT_MEASURES` of a dream over the real game's (``measured`` rows of both): each as
    imagined / real (None where the real one is 0 or undefined), and ``item_persistence_points``,
    the items kept imagined less real in points (hundredths)."""
    def value(row: dict, name: str) -> float | None:
        return (row.get(name) or {}).get("value")

    out: dict[str, float | None] = {}
    for name in INHABITANT_MEASURES:
        im, re = value(imagined, name), value(real, name)
        out[name] = None if im is None or not re else round(im / re, 4)
    im, re = value(imagined, "item_persistence"), value(real, "item_persistence")
    out["item_persistence_points"] = None if im is None or re is None else round(100 * (im - re), 2)
    return out


def consistency_ceiling(opening: np.ndarray, opening_actions: np.ndarray, views: np.ndarray,
                        actions: np.ndarray, ref: FidelityReference, start: np.ndarray,
                        rng: np.random.Generator) -> Share:
    """The consistency from the real start that an ideal dream of real games reaches.

    An ideal dream knows the game's rules and map exactly and keeps to its map, but it knows of
    where it is only what its opening showed: it places the map at a position drawn uniformly
    among those the ``opening`` (N, K, V, V) views and their ``opening_actions`` (N, K - 1) allow,
    and sees the walls there as the real game's moves ``actions`` take it (its frames are the wall
    masks along that walk). Scored by `geometric_consistency` from the real ``start`` beside the
    real ``views`` (N, T, V, V; view 0 the opening's last), it is consistent wherever the map it
    chose shows the real map's walls. No world model, which cannot know more, can be expected to
    score higher from the real start; from any start this dream scores 1.
    """
    opening, opening_actions = check_episodes(opening, opening_actions, ref)
    views, actions = check_episodes(views, actions, ref)
    anywhere = np.tile(ref.standable.reshape(1, -1), (len(views), 1))
    _, _, possible = follow_moves(opening, opening_actions, ref, anywhere)
    blocked = agent_ahead(views, actions, ref)
    cells = np.empty(views.shape[:2], dtype=np.int64)
    for i in range(len(views)):
        cell = rng.choice(np.flatnonzero(possible[i])) if possible[i].any() else ref.mask_ids.argmax()
        for t in range(views.shape[1]):
            if t and not blocked[i, t - 1]:
                cell = ref.moves[actions[i, t - 1], cell]
            cells[i, t] = cell
    ideal = ref.bare_frames(cells).astype(views.dtype)
    return geometric_consistency(ideal, actions, ref, start).share


def reference_of(loaded: LoadedCheckpoint) -> FidelityReference:
    """The fidelity reference of the game a checkpoint was trained on."""
    data = loaded.record.data
    return FidelityReference.for_game(dict(data.env_kwargs), channel_names=data.channel_names)
