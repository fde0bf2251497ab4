"""Expert training and inference speed, against SB3's CartPole DQN measured in the same run.

Rows (env steps per second of ``model.learn``, the whole SB3 loop: env, replay buffer,
gradient steps, callbacks off):

- ``treasurehunt dqn``: the default expert config (`configs/dqn.yaml`: 8 DummyVecEnv envs,
  5 stacked frames, the GridCNN) for ``--steps`` steps;
- ``cartpole dqn (reference)``: SB3 ``DQN("MlpPolicy", "CartPole-v1")`` with SB3's defaults
  except ``learning_starts`` (the ANCHORS.md reference: 1,600-1,900 steps/s on this machine kind);

and inference (``act`` on a batch of 64 views, rows per second): the shipped DQN expert via
`SB3Policy` (frame stacking included) and `GreedyPolicy` (the scripted baseline, BFS in NumPy).

Usage::

    python benchmarks/expert_training.py            # ~1-2 minutes
    python benchmarks/expert_training.py --quick    # seconds, a smoke check

Writes ``benchmarks/results/expert_training.json``.
"""

from __future__ import annotations

import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import rpg_env
from rpg_base.cli import ArgumentParser, output_file, positive_int, run_command
from rpg_base.provenance import pinned_torch_threads, provenance
from rpg_base.results import write_results
from rpg_env.experts import pretrained_path
from rpg_env.experts.config import load_expert_config
from rpg_env.experts.train import build_model, make_training_env
from rpg_env.policies.sb3 import SB3Policy
from rpg_env.policies.scripted import GreedyPolicy

RESULTS = Path(__file__).resolve().parent / "results" / "expert_training.json"


def time_learn(model, steps: int) -> float:
    start = time.perf_counter()
    model.learn(total_timesteps=steps, progress_bar=False)
    return steps / (time.perf_counter() - start)


def time_act(policy, obs: np.ndarray, calls: int) -> float:
    start_mask = np.ones(len(obs), dtype=bool)
    policy.act(obs, start_mask)
    start = time.perf_counter()
    for _ in range(calls):
        policy.act(obs, ~start_mask)
    return calls * len(obs) / (time.perf_counter() - start)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python benchmarks/expert_training.py", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=positive_int, default=30_000,
                        help="learner steps timed per algorithm")
    parser.add_argument("--quick", action="store_true", help="3,000 steps, for a smoke check")
    parser.add_argument("--out", type=output_file, default=RESULTS, help="JSON output path")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    steps = 3_000 if args.quick else args.steps
    with pinned_torch_threads(1):  # and the caller's setting back after
        (treasure, cartpole), (expert, greedy) = time_learning(steps), time_acting(30 if args.quick else 300)
    rows = [("learn: treasurehunt dqn (default config)", treasure, treasure / cartpole),
            ("learn: cartpole dqn (reference)", cartpole, 1.0),
            ("act: shipped dqn expert, batch 64", expert, expert / greedy),
            ("act: greedy policy, batch 64 (reference)", greedy, 1.0)]
    print(f"{'measurement':<44} {'per second':>12} {'vs reference':>13}")
    for name, rate, ratio in rows:
        print(f"{name:<44} {rate:>12,.0f} {ratio:>12.2f}x")
    record = provenance(seed=0, steps=steps, results={
        "learn_steps_per_s": {"treasurehunt_dqn": round(treasure, 1), "cartpole_dqn": round(cartpole, 1),
                              "ratio": round(treasure / cartpole, 3)},
        "act_rows_per_s": {"dqn_expert": round(expert, 1), "greedy": round(greedy, 1),
                           "ratio": round(expert / greedy, 3)}})
    write_results(args.out, record, indent=2)


def time_learning(steps: int) -> tuple[float, float]:
    """Learner steps per second: DQN on treasurehunt (default config), and on CartPole (reference)."""
    from stable_baselines3 import DQN

    cfg = load_expert_config("dqn")
    venv = make_training_env(cfg, cfg.n_envs, seed=0)
    treasure = time_learn(build_model(cfg, venv, tensorboard_log=None), steps)
    cartpole = time_learn(DQN("MlpPolicy", "CartPole-v1", learning_starts=1000, seed=0, device="cpu"), steps)
    return treasure, cartpole


def time_acting(calls: int) -> tuple[float, float]:
    """Rows per second acted on 64 views: the shipped DQN expert, and the greedy policy (reference)."""
    views = np.stack([gym.make(rpg_env.ENV_ID).reset(seed=s)[0] for s in range(64)])
    expert = time_act(SB3Policy.load(pretrained_path("dqn")), views, calls)
    return expert, time_act(GreedyPolicy(), views, calls)


if __name__ == "__main__":
    run_command(main)
