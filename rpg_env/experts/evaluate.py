"""Evaluate an expert beside the greedy and random baselines on the same fixed seeds.

Episodes run on a vector env of the expert's own env (Treasurehunt-v0's native one, Gymnasium's
sync one for any other id, with the wrappers it was trained in) in batches of at most
`MAX_BATCH` worlds; batch ``i`` is reset with seed ``seed + i`` and every world plays one
episode, so every policy meets the same worlds (in Treasurehunt: the same initial positions and,
as far as its own moves leave cells free, the same spawns) and the same co-player random stream.
The learner's policy is seeded from the same seed. The greedy baseline plays where the env shows
the game's views and takes its moves (`game_description`); random draws from the env's own actions.

The 95% interval is the Student-t interval of the mean return over episodes.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import rpg_env
from rpg_base.errors import InputError
from rpg_env.envs.any_env import make_vector, resolve_env_id
from rpg_env.envs.protocol import EnvDescription, describe
from rpg_env.game.constants import vocabulary
from rpg_env.policies.base import BatchPolicy
from rpg_env.policies.registry import load_expert_policy
from rpg_env.policies.scripted import GreedyPolicy, RandomPolicy
from rpg_env.rollout import Step, rollout

MAX_BATCH = 100
DEFAULT_EPISODES = 100
DEFAULT_SEED = 10_000
BASELINES = ("greedy", "random")


def t_quantile_975(dof: int) -> float:
    """Two-sided 95% Student-t critical value for ``dof`` degrees of freedom.

    Cornish-Fisher expansion of the t quantile around the normal one (Abramowitz & Stegun
    26.7.5); within 0.1% of the exact value for ``dof >= 5`` and exact as ``dof`` grows. Used
    instead of scipy, which the package does not otherwise need.
    """
    if dof < 1:
        raise ValueError("need at least 2 episodes (1 degree of freedom) for an interval")
    exact_small = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764}
    if dof in exact_small:
        return exact_small[dof]
    z, v = 1.959963984540054, float(dof)
    return (z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
            + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4))


def summarize(returns: np.ndarray) -> dict[str, Any]:
    """``{"mean", "ci95": [low, high], "episodes", "positive"}`` for per-episode ``returns``;
    ``positive``: the share of episodes with a positive return (a sparse-reward task's success rate,
    e.g. MiniGrid's goal reached)."""
    returns = np.asarray(returns, dtype=np.float64)
    n = len(returns)
    mean = float(returns.mean())
    half = t_quantile_975(n - 1) * float(returns.std(ddof=1)) / math.sqrt(n)
    return {"mean": round(mean, 4), "ci95": [round(mean - half, 4), round(mean + half, 4)], "episodes": n,
            "positive": round(float((returns > 0).mean()), 4)}


def mean_t_interval(values: Sequence[float | None]) -> dict[str, Any]:
    """Mean of per-seed values (a seed is the unit: one trained agent) with a 95% t-interval (None
    with a single value); None values (an undefined figure) are left out and counted."""
    undefined = sum(v is None for v in values)
    known = [float(v) for v in values if v is not None]
    if not known:
        return {"mean": None, "ci95": None, "n": 0, "undefined": undefined}
    mean = statistics.fmean(known)
    if len(known) < 2:
        return {"mean": mean, "ci95": None, "n": len(known), "undefined": undefined}
    half = t_quantile_975(len(known) - 1) * statistics.stdev(known) / math.sqrt(len(known))
    return {"mean": mean, "ci95": [mean - half, mean + half], "n": len(known), "undefined": undefined}


def _seeded_batches(episodes: int, seed: int) -> list[tuple[int, int]]:
    """``(env seed, worlds)`` of each batch: batch ``i`` holds up to `MAX_BATCH` worlds, seed ``seed + i``."""
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    starts = range(0, episodes, MAX_BATCH)
    return [(seed + i, min(MAX_BATCH, episodes - start)) for i, start in enumerate(starts)]


def _play(policy: BatchPolicy, env_kwargs: dict[str, Any], episodes: int, seed: int, env_id: str,
          on_step: Callable[[Step], None] | None = None, also_seed: Sequence[BatchPolicy] = (),
          wrappers: Sequence[str] = ()) -> tuple[np.ndarray, EnvDescription | None]:
    """Per-episode learner returns of ``policy`` on the fixed evaluation seeds (one rollout per
    batch), and what a project game says of itself (`rpg_env.envs.protocol`; None for other envs)."""
    returns = []
    description = None
    for batch_seed, size in _seeded_batches(episodes, seed):
        env = make_vector(env_id, size, env_kwargs, wrappers)
        try:
            description = game_description(env)
            for other in also_seed:
                other.seed(np.random.default_rng(batch_seed))
            result = rollout(env, policy, seed=batch_seed, policy_rng=np.random.default_rng(batch_seed),
                             on_step=on_step)
        finally:
            env.close()
        returns.append(result.returns)
    return np.concatenate(returns), description


def run_episodes_with(policy: BatchPolicy, env_kwargs: dict[str, Any], episodes: int, seed: int,
                      on_step: Callable[[Step], None], env_id: str = rpg_env.ENV_ID) -> np.ndarray:
    """`run_episodes` with ``on_step`` called after every step (e.g. to ask another policy what it
    would have done in the same states)."""
    return _play(policy, env_kwargs, episodes, seed, env_id, on_step=on_step)[0]


def run_episodes(policy: BatchPolicy, env_kwargs: dict[str, Any], episodes: int,
                 seed: int = DEFAULT_SEED, env_id: str = rpg_env.ENV_ID,
                 wrappers: Sequence[str] = ()) -> np.ndarray:
    """Per-episode learner returns ``(episodes,)`` of ``policy`` on the fixed evaluation seeds, in
    ``env_id`` made with ``env_kwargs`` and ``wrappers``."""
    return _play(policy, env_kwargs, episodes, seed, env_id, wrappers=wrappers)[0]


def trained_env(policy: BatchPolicy) -> tuple[str, dict[str, Any]]:
    """``(env id, keyword arguments)`` of the env an expert was trained in (its ``rpg_expert``
    record; Treasurehunt-v0's defaults for a policy without one)."""
    spec = getattr(policy, "rpg_expert", None) or {}
    return spec.get("env_id", rpg_env.ENV_ID), dict(spec.get("env", {}))


def trained_wrappers(policy: BatchPolicy) -> tuple[str, ...]:
    """The Gymnasium wrappers (entry points) an expert was trained in, from its ``rpg_expert`` record."""
    spec = getattr(policy, "rpg_expert", None) or {}
    return tuple(spec.get("wrappers", ()))


def baselines(env_id: str, env_kwargs: dict[str, Any],
              wrappers: Sequence[str] = ()) -> dict[str, BatchPolicy]:
    """The baselines an expert is compared with in ``env_id``: greedy where the env shows the
    game's views and takes its moves (the project's games, or any env whose protocol names the
    game's channels and actions), and uniform random over the env's own action space."""
    env = make_vector(env_id, 1, env_kwargs, wrappers)
    try:
        if game_description(env) is not None:
            return {"greedy": GreedyPolicy(), "random": RandomPolicy()}
        return {"random": RandomPolicy(action_space=env.single_action_space)}
    finally:
        env.close()


def game_description(env: Any) -> EnvDescription | None:
    """What ``env`` says of itself (`rpg_env.envs.protocol`) if it shows one-hot views of the game's
    cell kinds and takes the game's moves, so that the policies written for the game can act in
    it; None for any other env."""
    try:
        description = describe(env)
    except ValueError:
        return None
    vocab = vocabulary()
    names = (description.channel_names, description.action_names)
    return description if names == (vocab.cell_names, vocab.action_names) else None


def compare(model: str | Path | BatchPolicy, episodes: int = DEFAULT_EPISODES, seed: int = DEFAULT_SEED,
            env_kwargs: dict[str, Any] | None = None, env_id: str | None = None,
            sampled: bool = False) -> dict[str, dict[str, Any]]:
    """``{"model": summary, "greedy": summary, "random": summary}`` on the same seeds (no greedy
    outside the project's games, `baselines`).

    ``env_id`` and ``env_kwargs`` default to the environment the expert was trained in (its
    ``rpg_expert`` record, with its wrappers), so the comparison is on the expert's own env.
    ``sampled``: a model read from a file plays actions drawn from its policy (each batch's draws
    seeded by its env seed) instead of its likeliest ones.
    """
    policy = model if isinstance(model, BatchPolicy) else load_expert_policy(model, deterministic=not sampled)
    trained_id, trained_kwargs = trained_env(policy)
    env_id = env_id or trained_id
    if env_kwargs is None:
        env_kwargs = trained_kwargs
    wrappers = trained_wrappers(policy)
    env_id = resolve_env_id(env_id)  # "rpg_env:Treasurehunt-v0" is still a project game
    results = {"model": summarize(run_episodes(policy, env_kwargs, episodes, seed, env_id, wrappers))}
    if not isinstance(model, BatchPolicy):
        results["model"]["actions"] = "sampled" if sampled else "likeliest"
    for name, baseline in baselines(env_id, env_kwargs, wrappers).items():
        results[name] = summarize(run_episodes(baseline, env_kwargs, episodes, seed, env_id, wrappers))
    return results


def behaviour(policy: BatchPolicy, env_kwargs: dict[str, Any], episodes: int = DEFAULT_EPISODES,
              seed: int = DEFAULT_SEED, env_id: str = rpg_env.ENV_ID) -> dict[str, Any]:
    """How a policy plays, per episode on the fixed seeds: return, pickups, wall bumps, and the
    share of each action. Used to tell experts apart."""
    counts: dict[str, float] = {"bumps": 0.0}
    actions_taken: list[np.ndarray] = []

    def tally(step: Step) -> None:
        actions_taken.append(np.asarray(step.actions)[step.counted])
        for kind, picked in step.infos["pickups"].items():
            if not kind.startswith("_"):
                counts[kind] = counts.get(kind, 0.0) + float(picked[step.counted].sum())
        counts["bumps"] += float(step.infos["bumped"][step.counted].sum())

    returns, description = _play(policy, env_kwargs, episodes, seed, env_id, on_step=tally)
    if description is None:
        raise InputError(f"behaviour counts the project games' pick-ups and bumps; {env_id} has none "
                         "(use compare)")
    names = description.action_names
    taken = np.bincount(np.concatenate(actions_taken), minlength=len(names)).astype(np.float64)
    result: dict[str, Any] = {"return": summarize(returns)}
    result.update({f"{k}_per_episode": round(v / episodes, 3) for k, v in counts.items()})
    share = taken / taken.sum()
    result["action_share"] = {name: round(float(x), 4) for name, x in zip(names, share, strict=True)}
    return result


def action_agreement(first: BatchPolicy, second: BatchPolicy, env_kwargs: dict[str, Any],
                     episodes: int = DEFAULT_EPISODES, seed: int = DEFAULT_SEED,
                     env_id: str = rpg_env.ENV_ID) -> float:
    """Share of states (visited by ``first``) where ``second`` picks the same action."""
    agree, total = 0, 0

    def compare_step(step: Step) -> None:
        nonlocal agree, total
        same = second.act(step.obs, step.episode_start) == step.actions
        agree += int(same[step.counted].sum())
        total += int(step.counted.sum())

    _play(first, env_kwargs, episodes, seed, env_id, on_step=compare_step, also_seed=(second,))
    return agree / total


#: Suffix of a results row played beside a greedy co-player (``model_greedy_co_player``, ...).
GREEDY_CO_PLAYER = "_greedy_co_player"


def beside_suffix(name: str) -> str:
    """The co-player suffix of a results row's name ('' beside the env's own co-player): a row is
    compared with greedy beside the same co-player."""
    return GREEDY_CO_PLAYER if name.endswith(GREEDY_CO_PLAYER) else ""


def print_table(results: dict[str, dict[str, Any]], title: str | None = None) -> None:
    """One rich table: policy, mean return, 95% CI, episodes, ratio to greedy beside the same
    co-player."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in ("policy", "mean return", "95% CI", "episodes", "vs greedy"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for name, row in results.items():
        greedy = results.get("greedy" + beside_suffix(name), {}).get("mean")
        ratio = f"{row['mean'] / greedy:.1%}" if greedy else "-"
        low, high = row["ci95"]
        table.add_row(name, f"{row['mean']:.1f}", f"[{low:.1f}, {high:.1f}]", str(row["episodes"]), ratio)
    Console().print(table)


def evaluate_cli(model: str, episodes: int = DEFAULT_EPISODES, seed: int = DEFAULT_SEED,
                 json_path: str | None = None, sampled: bool = False) -> dict[str, dict[str, Any]]:
    results = compare(model, episodes=episodes, seed=seed, sampled=sampled)
    play = ", actions sampled" if sampled else ""
    print_table(results, title=f"{model}: {episodes} episodes, seeds {seed}..{play}")
    if json_path is not None:
        path = Path(json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=2) + "\n")
    return results


def profile_cli(models: list[str], episodes: int = DEFAULT_EPISODES, seed: int = DEFAULT_SEED,
                json_path: str | None = None) -> dict[str, Any]:
    """Behaviour table of each model plus greedy and random, and each pair's action agreement."""
    from rich.console import Console
    from rich.table import Table

    experts = {f"{Path(m).parent.name}/{Path(m).name}": load_expert_policy(m) for m in models}
    env_id, env_kwargs = trained_env(next(iter(experts.values())))
    policies: dict[str, BatchPolicy] = dict(experts)
    policies.update(greedy=GreedyPolicy(), random=RandomPolicy())
    rows = {name: behaviour(p, env_kwargs, episodes, seed, env_id) for name, p in policies.items()}
    names = list(policies)
    agreement = {f"{a} | {b}": round(action_agreement(policies[a], policies[b], env_kwargs, episodes,
                                                      seed, env_id), 4)
                 for i, a in enumerate(names) for b in names[i + 1:] if b != "random"}
    table = Table(title=f"behaviour over {episodes} episodes, seeds {seed}..")
    for column in ("policy", "return", "gems", "food", "bones", "bumps", "up/down/left/right"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for name, row in rows.items():
        share = "/".join(f"{100 * v:.0f}" for v in row["action_share"].values())
        table.add_row(name, f"{row['return']['mean']:.1f}", f"{row['gem_per_episode']:.1f}",
                      f"{row['food_per_episode']:.1f}", f"{row['bone_per_episode']:.2f}",
                      f"{row['bumps_per_episode']:.2f}", share)
    console = Console()
    console.print(table)
    agree_table = Table(title="action agreement on the first policy's states")
    agree_table.add_column("pair")
    agree_table.add_column("same action", justify="right")
    for pair, value in agreement.items():
        agree_table.add_row(pair, f"{value:.1%}")
    console.print(agree_table)
    result = {"policies": rows, "agreement": agreement, "episodes": episodes, "seed": seed}
    if json_path is not None:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(result, indent=2) + "\n")
    return result
