"""Play a DreamerV3 checkpoint of ``benchmarks/sheeprl_dreamer.py`` (``--obs onehot``) greedily on the
loop's evaluation games, in sheeprl's own virtualenv. Never imported by the project (ANCHORS.md,
"DreamerV3 beside the project").

    PYTHONPATH=. /path/to/sheeprl-venv/bin/python benchmarks/sheeprl_dreamer_eval.py \\
        runs/dreamer_rr1/dreamer-s0/dreamer/version_0/checkpoint/ckpt_5000_0.ckpt [...] --out eval.json

Each checkpoint is loaded as sheeprl's own evaluation loads it (``sheeprl.utils.fs.load_checkpoint``
with the run's ``config.yaml``, the agent from ``build_agent``); its player then acts with
``greedy=True`` (the mode of the policy, as ``sheeprl.algos.dreamer_v3.utils.test`` can) on the
games of `rpg_env.experts.evaluate.run_episodes`: ``--episodes`` worlds (32) of one native vector
env reset with seed ``--seed`` (900,000) and the env keyword arguments of the loop's agents
(``vision_radius=4``, ``co_policy="random"``), the games ``rpg_worldmodel.learn`` evaluates its
agents on (its ``eval_seed`` and ``eval_episodes``). The player's latent states are drawn with
torch seeded from ``--seed``.

sheeprl's own loader reads its checkpoints with ``torch.load(weights_only=False)``: a checkpoint
saved with its replay buffer (sheeprl's default for DreamerV3, ``buffer.checkpoint=True``, which a
resume needs) holds, beside tensors and numbers, a ``BufferFiles`` (a list subclass naming the
buffer's files) that ``weights_only=True`` refuses even when allowed. This tries
``weights_only=True`` first and falls back to sheeprl's way, recording which one loaded
(``weights_only`` in the JSON); the files are read only here, in sheeprl's virtualenv, never in
the project's install.

Writes one JSON (``--out``): per checkpoint its env step, per-game returns, the mean with its 95%
t-interval, and the training's CPU and wall minutes up to it (``checkpoint_times.json`` that
``sheeprl_dreamer.py`` writes beside its run; None where it is missing), with the seeds, the
settings of the run and sheeprl's version.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.sheeprl_dreamer import ENV_KWARGS, flat_onehot  # noqa: E402
from rpg_env.experts.evaluate import run_episodes, summarize  # noqa: E402
from rpg_env.policies.base import BatchPolicy  # noqa: E402

EVAL_SEED = 900_000  # rpg_worldmodel.learn's eval_seed, benchmarks/sample_efficiency.py's EVAL_SEED
EVAL_EPISODES = 32  # rpg_worldmodel.learn's eval_episodes


class DreamerPolicy(BatchPolicy):
    """sheeprl's DreamerV3 player over batches of one-hot views: flat float vectors under ``state``,
    its recurrent state reset at the first step of an episode, the mode of its policy (``greedy``)."""

    policy_id = "dreamer_v3"

    def __init__(self, player, fabric, key: str, greedy: bool = True) -> None:
        super().__init__()
        self.player, self.fabric, self.key, self.greedy = player, fabric, key, greedy

    def act(self, obs: np.ndarray, episode_start: np.ndarray | None = None) -> np.ndarray:
        import torch
        from sheeprl.algos.dreamer_v3.utils import prepare_obs

        n = len(obs)
        if self.player.num_envs != n:
            self.player.num_envs = n
            self.player.init_states()
        elif episode_start is not None and episode_start.any():
            started = np.flatnonzero(episode_start)
            self.player.init_states(None if len(started) == n else started.tolist())
        with torch.no_grad():
            torch_obs = prepare_obs(self.fabric, {self.key: flat_onehot(obs)}, num_envs=n)
            actions = self.player.get_actions(torch_obs, self.greedy)
        chosen = torch.stack([a.argmax(dim=-1) for a in actions], dim=-1).reshape(n)
        return chosen.cpu().numpy().astype(np.int64)


def load_player(checkpoint: Path):
    """sheeprl's player of ``checkpoint``, built as ``sheeprl.algos.dreamer_v3.evaluate`` builds it;
    with the run's config and which ``torch.load`` mode read the file."""
    import gymnasium as gym
    from lightning import Fabric
    from omegaconf import OmegaConf
    from sheeprl.algos.dreamer_v3.agent import build_agent
    from sheeprl.utils import fs
    from sheeprl.utils.utils import dotdict

    cfg = dotdict(OmegaConf.to_container(fs.load_yaml(fs.run_config(str(checkpoint))), resolve=True))
    if cfg.algo.cnn_keys.encoder or len(cfg.algo.mlp_keys.encoder) != 1:
        raise SystemExit(f"{checkpoint}: only the one-hot vector runs (sheeprl_dreamer.py --obs onehot) are "
                         f"played here (encoder keys: cnn {cfg.algo.cnn_keys.encoder}, mlp "
                         f"{cfg.algo.mlp_keys.encoder})")
    precision = cfg.fabric.get("precision", "32-true")
    fabric = Fabric(accelerator="cpu", devices=1, num_nodes=1, precision=precision)
    try:  # a checkpoint saved without its replay buffer (buffer.checkpoint=False) holds tensors and numbers
        state, weights_only = fs.load_checkpoint(fabric, str(checkpoint), weights_only=True), True
    except Exception:  # sheeprl's own pickles (its loader's weights_only=False), in its own venv only
        state, weights_only = fs.load_checkpoint(fabric, str(checkpoint), weights_only=False), False
    key = cfg.algo.mlp_keys.encoder[0]
    import rpg_env  # noqa: F401  (registers Treasurehunt-v0)

    probe = gym.make(cfg.env.id, **ENV_KWARGS)
    size = int(np.prod(probe.observation_space.shape))
    probe.close()
    obs_space = gym.spaces.Dict({key: gym.spaces.Box(0.0, 1.0, (size,), np.float32)})
    actions_dim = (gym.make(cfg.env.id).action_space.n,)
    _, _, _, _, player = build_agent(fabric, actions_dim, False, cfg, obs_space, state["world_model"],
                                     state["actor"])
    return player, fabric, cfg, key, weights_only


def checkpoint_step(checkpoint: Path) -> int:
    return int(checkpoint.name.split("_")[1])


def training_times(checkpoint: Path) -> dict | None:
    """``checkpoint_times.json``'s entry of ``checkpoint`` (sheeprl_dreamer.py writes it in its OUT,
    four folders above the checkpoint), or None."""
    out = checkpoint.resolve().parents[3]
    path = out / "checkpoint_times.json"
    if not path.is_file():
        return None
    name = checkpoint.resolve().relative_to(out).as_posix()
    at = [entry for entry in json.loads(path.read_text()) if entry["checkpoint"] == name]
    return at[-1] if at and at[-1]["cpu_seconds"] is not None else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoints", nargs="+", type=Path)
    parser.add_argument("--episodes", type=int, default=EVAL_EPISODES)
    parser.add_argument("--seed", type=int, default=EVAL_SEED)
    parser.add_argument("--sampled", action="store_true",
                        help="sample actions instead of the mode (not greedy)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import sheeprl
    import torch

    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    points, settings = [], None
    for checkpoint in sorted(args.checkpoints, key=checkpoint_step):
        player, fabric, cfg, key, weights_only = load_player(checkpoint)
        torch.manual_seed(args.seed)
        started = time.process_time()
        returns = run_episodes(DreamerPolicy(player, fabric, key, greedy=not args.sampled), ENV_KWARGS,
                               args.episodes, seed=args.seed, env_id=cfg.env.id)
        times = training_times(checkpoint)
        out = checkpoint.resolve().parents[3]  # the --out of sheeprl_dreamer.py
        points.append({"run": out.name, "checkpoint": checkpoint.resolve().relative_to(out).as_posix(),
                       "step": checkpoint_step(checkpoint),
                       "returns": [float(r) for r in returns], **summarize(returns),
                       "train_cpu_minutes": None if times is None else times["cpu_seconds"] / 60,
                       "train_wall_minutes": None if times is None else times["wall_seconds"] / 60,
                       "eval_cpu_seconds": round(time.process_time() - started, 1),
                       "weights_only": weights_only})
        settings = {"seed": cfg.seed, "algo": "dreamer_v3_XS", "replay_ratio": cfg.algo.replay_ratio,
                    "learning_starts": cfg.algo.learning_starts, "batch_size": cfg.algo.per_rank_batch_size,
                    "sequence_length": cfg.algo.per_rank_sequence_length, "num_envs": cfg.env.num_envs,
                    "mlp_keys": cfg.algo.mlp_keys.encoder, "cnn_keys": cfg.algo.cnn_keys.encoder,
                    "dense_units": cfg.algo.dense_units,
                    "recurrent_state_size": cfg.algo.world_model.recurrent_model.recurrent_state_size,
                    "accelerator": cfg.fabric.accelerator}
        print(f"step {points[-1]['step']}: {points[-1]['mean']:.1f} {points[-1]['ci95']} "
              f"(train CPU min {points[-1]['train_cpu_minutes']})", flush=True)
    record = {"method": f"DreamerV3 XS (sheeprl), replay ratio {settings['replay_ratio']}, one-hot vector, "
                        f"{'sampled' if args.sampled else 'greedy'} on the evaluation games",
              "actions": "sampled" if args.sampled else "greedy (mode)", "episodes": args.episodes,
              "eval_seed": args.seed, "env_seeds": [args.seed + i for i in range(-(-args.episodes // 100))],
              "env_kwargs": ENV_KWARGS,
              "games": "rpg_env.experts.evaluate.run_episodes: vector envs of up to 100 worlds, batch i "
                       "reset with eval_seed + i",
              "sheeprl": sheeprl.__version__, "torch": torch.__version__, "run": settings, "points": points}
    if settings["accelerator"] == "cuda" and torch.cuda.is_available():  # trained and played on this card
        record["device_name"] = torch.cuda.get_device_name(0)
    if not all(p["weights_only"] for p in points):
        record["loading"] = ("sheeprl's own format, read as sheeprl's loader reads it: "
                             "torch.load(weights_only=False) (its checkpoints hold a BufferFiles, a list "
                             "subclass naming the replay buffer's files, that weights_only=True refuses), "
                             "only in sheeprl's virtualenv")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
