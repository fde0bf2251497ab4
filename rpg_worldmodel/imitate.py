"""The world model's action head as a player: its real-game return and its agreement with the
expert it learned from.

    python -m rpg_worldmodel.imitate [--checkpoint pretrained] [--sample] [--episodes 100] [--json FILE]

Returns are measured with the experts' evaluator (`rpg_env.experts.evaluate`: fixed seeds, the
same worlds for every policy, 95% Student-t intervals) for the head (`WorldModelPolicy`), greedy,
random and the expert whose games trained the model (found by the training data's policy id
among the shipped experts). Agreement is measured on states the expert itself visits in fresh
real games (never seen in training): the head, fed the expert's own history, names the action
the expert is about to take. JSON: the keys of ``python -m rpg_env.experts evaluate --json``
(``model``, ``greedy``, ``random``) plus ``expert`` (its return, name and ``action_agreement``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rpg_base.cli import ArgumentParser, int_in, non_negative_int, output_file, run_command
from rpg_base.errors import InputError
from rpg_worldmodel.shipped import PRETRAINED_NAME


def imitated_expert(loaded) -> str:
    """The shipped expert whose games the checkpoint was trained on (by the data's policy id)."""
    from rpg_env.experts import PRETRAINED

    ids = {p.removeprefix("sb3-") for f in loaded.record.data.files for p in f.policy_ids}
    found = sorted(ids & set(PRETRAINED))
    if len(found) != 1:
        raise InputError(f"cannot tell which shipped expert {loaded.path} imitates (policy ids "
                         f"{sorted(ids)}); its training data must come from one of {list(PRETRAINED)}")
    return found[0]


def agreement(policy, expert, env_kwargs: dict[str, Any], episodes: int, seed: int) -> float:
    """Share of the expert's steps in fresh real games whose action the head names, the head being
    fed the expert's own history (the expert's seeds as the evaluator's)."""
    from rpg_env.experts.evaluate import run_episodes_with
    from rpg_env.rollout import Step

    agree = total = 0

    def on_step(step: Step) -> None:
        nonlocal agree, total
        named = policy.act(step.obs, step.episode_start)
        policy.replace_last_actions(step.actions)
        agree += int((named == step.actions)[step.counted].sum())
        total += int(step.counted.sum())

    run_episodes_with(expert, env_kwargs, episodes, seed, on_step)
    return agree / max(total, 1)


def imitate(checkpoint: str = PRETRAINED_NAME, sample: bool = False, episodes: int = 100,
            seed: int = 10_000) -> dict[str, dict[str, Any]]:
    """The figures of the module docstring, as a dict (the JSON written by ``--json``)."""
    from rpg_env.experts import pretrained_path
    from rpg_env.experts.evaluate import compare, run_episodes, summarize
    from rpg_env.policies.sb3 import SB3Policy
    from rpg_worldmodel.checkpoint import load_checkpoint
    from rpg_worldmodel.policy import WorldModelPolicy

    if episodes < 2:
        raise InputError(f"--episodes must be >= 2 (for the 95% interval), got {episodes}")
    loaded = load_checkpoint(checkpoint)
    env_kwargs = {**loaded.record.data.env_kwargs, "co_policy": "random"}
    policy = WorldModelPolicy(loaded, sample=sample)
    results = compare(policy, episodes=episodes, seed=seed, env_kwargs=env_kwargs)
    name = imitated_expert(loaded)
    expert = SB3Policy.load(pretrained_path(name))
    results["expert"] = {**summarize(run_episodes(expert, env_kwargs, episodes, seed)), "policy": name,
                         "action_agreement": round(agreement(WorldModelPolicy(loaded, sample=sample), expert,
                                                             env_kwargs, episodes, seed), 4),
                         "checkpoint": loaded.choice}
    return results


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m rpg_worldmodel.imitate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default=PRETRAINED_NAME,
                        help="a world-model run folder or checkpoint, or 'pretrained' (the shipped one)")
    parser.add_argument("--sample", action="store_true", help="sample the head's actions (default: arg-max)")
    parser.add_argument("--episodes", type=int_in(2), default=100,
                        help="games per policy (>= 2, for the 95%% interval)")
    parser.add_argument("--seed", type=non_negative_int, default=10_000, help="first evaluation seed")
    parser.add_argument("--json", type=output_file, default=None, help="also write the figures as JSON here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from rpg_env.experts.evaluate import print_table

    args = build_parser().parse_args(argv)
    results = imitate(args.checkpoint, args.sample, args.episodes, args.seed)
    expert = results["expert"]
    print_table(results,
                title=f"world-model head vs greedy, random and the {expert['policy']} expert it imitates "
                      f"({args.episodes} episodes, seeds from {args.seed})")
    print(f"agreement with the {expert['policy']} expert on its own states: {expert['action_agreement']:.1%}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    run_command(main)
