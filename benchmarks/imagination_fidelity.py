"""Does the dream stay a game under policies unlike the data, and can a policy exploit it?

A world model learns the game from an expert's games; an agent trained inside it goes wherever
the model is wrong and profits. This benchmark steps N imagined worlds of
``TreasurehuntImagined-v0`` (sampled, as `rpg_worldmodel.dream` trains in them) and N real games
of ``Treasurehunt-v0`` with the same policies for the same number of turns and compares:

- **reward per step**, imagined and real, and their difference with a 95% bootstrap interval over
  worlds: a positive gap under a fixed policy is what an agent trained in the dream can exploit;
- **invalid frames**: the share of imagined views that no game state gives (the centre is not the
  agent, or more agents than the game has); real views are always valid, and so are views drawn
  with ``--views game`` (the default sampler) by construction: ``--views cells`` samples every cell
  on its own and measures how often the model itself puts its mass on impossible views;
- **item and wall shares** of the views over the last third of the turns, imagined and real.

Policies: ``dqn`` (the shipped expert whose games the model learned), ``greedy``, ``random``, and
``left``: always the same action, which presses into the border wall for most of the episode
(the expert almost never bumps a wall: 0.09% of its steps). Imagined worlds start from a real
greedy burn-in of ``num_frames - 1`` turns, as the dream's do, and so do the real games (the
burn-in is not counted); both with a random co-player.

    python benchmarks/imagination_fidelity.py [--checkpoint pretrained OTHER ...] [--views game cells]
        [--worlds 64] [--steps 60]

Writes ``benchmarks/results/imagination_fidelity.json`` and ``.png``.
"""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

import rpg_env
import rpg_worldmodel
from rpg_env.cli import ArgumentParser, int_in, non_negative_int, output_file, positive_int, run_command
from rpg_env.experts import pretrained_path
from rpg_env.game.constants import ACTION_NAMES
from rpg_env.policies import BatchPolicy, make_policy
from rpg_env.provenance import portable_path, provenance
from rpg_worldmodel.checkpoint import choose_checkpoint, load_checkpoint
from rpg_worldmodel.envs.imagination import VIEWS
from rpg_worldmodel.evaluation.metrics import bootstrap_interval, resample_weights

RESULTS = Path(__file__).resolve().parent / "results"
POLICIES = ("dqn", "greedy", "random", "left")
MAX_STEPS = 99  # turns played stay inside one episode of the shipped game's 100
AGENT, WALL, ITEMS = "agent", "wall", ("gem", "bone", "food")


class Constant(BatchPolicy):
    """Always the same action."""

    def __init__(self, action: int) -> None:
        super().__init__()
        self.action = action

    def act(self, obs: np.ndarray, episode_start: np.ndarray | None = None) -> np.ndarray:
        return np.full(len(obs), self.action, dtype=np.int64)


def policy(name: str) -> BatchPolicy:
    if name == "left":
        return Constant(ACTION_NAMES.index("left"))
    return make_policy(str(pretrained_path(name)) if name == "dqn" else name)


def play(venv, name: str, steps: int, seed: int, burn_in: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``steps`` turns of policy ``name`` from a seeded reset after ``burn_in`` turns of greedy
    (not counted): rewards (steps, N) and cell codes (steps, N, V, V)."""
    pol = policy(name)
    pol.seed(np.random.default_rng(seed))
    obs, _ = venv.reset(seed=seed)
    greedy = make_policy("greedy")
    greedy.seed(np.random.default_rng(seed + 1))  # it breaks ties at random: unseeded, real rows drift
    for _ in range(burn_in):
        obs, *_ = venv.step(greedy.act(obs))
    start = np.ones(venv.num_envs, dtype=bool)
    rewards, codes = [], []
    for _ in range(steps):
        obs, reward, _, truncated, _ = venv.step(pol.act(obs, start))
        start = np.asarray(truncated, dtype=bool)
        rewards.append(np.asarray(reward, dtype=np.float64))
        codes.append(np.asarray(obs).argmax(1))
    return np.stack(rewards), np.stack(codes)


def interval(per_world: np.ndarray, seed: int, reps: int = 2000) -> dict:
    """Mean over worlds with a 95% percentile bootstrap interval (the evaluation's bootstrap)."""
    means = resample_weights(len(per_world), reps, seed) @ per_world / len(per_world)
    return bootstrap_interval(per_world.mean(), means).as_dict()


def compare(checkpoint: str, views: str, worlds: int, steps: int, seed: int) -> dict:
    """Every policy in the imagined game of ``checkpoint`` (views drawn by ``views``) and in the
    real game."""
    loaded = load_checkpoint(checkpoint)
    names = list(loaded.meta["data"]["channel_names"])
    agent, wall = names.index(AGENT), names.index(WALL)
    items = [names.index(k) for k in ITEMS]
    num_agents = int(loaded.meta["data"]["env_kwargs"].get("num_agents", 2))
    imagined = gym.make_vec(rpg_worldmodel.IMAGINED_ENV_ID, num_envs=worlds, checkpoint=checkpoint,
                            sample=True, views=views)
    real = gym.make_vec(rpg_env.ENV_ID, num_envs=worlds, **loaded.meta["data"]["env_kwargs"])  # its game
    tail = slice(2 * steps // 3, steps)
    used = choose_checkpoint(checkpoint).describe(portable=True)  # the record names no machine folder
    out = {"checkpoint": portable_path(checkpoint), "checkpoint_used": used, "views": views, "policies": {}}
    burn_in = loaded.config.model.num_frames - 1  # real games get the imagined worlds' greedy burn-in
    for name in POLICIES:
        (r_im, c_im), (r_re, c_re) = play(imagined, name, steps, seed), play(real, name, steps, seed, burn_in)
        v = c_im.shape[-1] // 2
        invalid = (c_im[..., v, v] != agent) | ((c_im == agent).sum((-1, -2)) > num_agents)
        row = {
            "imagined_reward_per_step": interval(r_im.mean(0), seed),
            "real_reward_per_step": interval(r_re.mean(0), seed),
            "imagined_minus_real": interval(r_im.mean(0) - r_re.mean(0), seed),
            "invalid_frames": interval(invalid.mean(0).astype(np.float64), seed),
            "item_share": {"imagined": float(np.isin(c_im[tail], items).mean()),
                           "real": float(np.isin(c_re[tail], items).mean())},
            "wall_share": {"imagined": float((c_im[tail] == wall).mean()),
                           "real": float((c_re[tail] == wall).mean())},
        }
        out["policies"][name] = row
        gap = row["imagined_minus_real"]
        im, rl = row["imagined_reward_per_step"], row["real_reward_per_step"]
        print(f"{checkpoint} [{views}]  {name:>6}: reward/step imagined {im['value']:+.3f} "
              f"real {rl['value']:+.3f} "
              f"gap {gap['value']:+.3f} [{gap['lo']:+.3f}, {gap['hi']:+.3f}]  "
              f"invalid {row['invalid_frames']['value']:.3f}", flush=True)
    imagined.close()
    real.close()
    return out


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    x = np.arange(len(POLICIES))
    width = 0.8 / len(rows)
    for i, row in enumerate(rows):
        label = Path(row["checkpoint"]).name if row["checkpoint"] != "pretrained" else "pretrained"
        label += f" ({row['views']})"
        for ax, key in ((axes[0], "imagined_minus_real"), (axes[1], "invalid_frames")):
            figs = [row["policies"][p][key] for p in POLICIES]
            values = np.array([f["value"] for f in figs])
            err = np.array([[f["value"] - f["lo"], f["hi"] - f["value"]] for f in figs]).T
            ax.bar(x + i * width, values, width, yerr=err, capsize=2, label=label)
    axes[0].axhline(0, color="black", lw=0.8)
    axes[0].set_ylabel("reward per step, imagined minus real")
    axes[1].set_ylabel("share of imagined frames no game gives")
    for ax in axes:
        ax.set_xticks(x + 0.4 - width / 2)
        ax.set_xticklabels(POLICIES)
        ax.legend(fontsize=7)
    fig.suptitle("imagination fidelity under policies unlike the data (95% intervals over worlds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python benchmarks/imagination_fidelity.py",
                            description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", nargs="+", default=["pretrained"],
                        help="world models to compare (run folders, checkpoint folders or 'pretrained')")
    parser.add_argument("--views", nargs="+", default=["game"], choices=VIEWS,
                        help="samplers: 'game' (as the dream trains) and/or 'cells' (each cell on its own)")
    parser.add_argument("--worlds", type=positive_int, default=64)
    parser.add_argument("--steps", type=int_in(1, MAX_STEPS), default=60,
                        help=f"turns played, 1..{MAX_STEPS} (< the episode's 100)")
    parser.add_argument("--seed", type=non_negative_int, default=0)
    parser.add_argument("--threads", type=positive_int, default=2)
    parser.add_argument("--out", type=output_file, default=RESULTS / "imagination_fidelity.json")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    for checkpoint in args.checkpoint:  # every world model is found before the first is played
        if checkpoint != "pretrained":
            choose_checkpoint(checkpoint)
    torch.set_num_threads(args.threads)
    rows = [compare(ck, views, args.worlds, args.steps, args.seed)
            for ck in args.checkpoint for views in args.views]
    record = provenance(seed=args.seed, worlds=args.worlds, steps=args.steps, policies=list(POLICIES),
                        rows=rows)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    plot(rows, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    run_command(main)
