"""DreamerV3 (sheeprl 0.8.4) on Treasurehunt-v0, in sheeprl's own virtualenv: the outside anchor of
``benchmarks/sample_efficiency.py``. Never imported by the project; its install stays apart
(ANCHORS.md, "DreamerV3 beside the project").

    PYTHONPATH=. /path/to/sheeprl-venv/bin/python benchmarks/sheeprl_dreamer.py --steps 5000 --seed 0 \\
        --out runs/dreamer_rr1/dreamer-s0 [key=value ...]

It imports ``rpg_env`` (which registers ``Treasurehunt-v0``; it needs only gymnasium and NumPy),
then runs ``sheeprl.cli.run()`` with DreamerV3's XS size on one env and the CPU (``--accelerator
cuda``: its networks on the GPU, the env still on the CPU), at sheeprl's own
training recipe for DreamerV3 (``algo.replay_ratio`` 1: one gradient step per env step;
``algo.learning_starts`` 1,024 random steps first). ``--obs`` picks the input:

- ``onehot`` (the default, the input the loop reads): the one-hot egocentric view, ``(6, 9, 9)``
  MultiBinary, flattened to a 486-long float32 vector (`onehot_env`) under the key ``state``,
  read by sheeprl's MLP encoder and rebuilt by its MLP decoder (``algo.mlp_keys.encoder=[state]``,
  ``algo.cnn_keys.encoder=[]``).
- ``rgb``: the rendered view (``obs_mode="rgb"``) through the CNN encoder and decoder, as the first
  DreamerV3 row was run (that row's launcher also set ``algo.learning_starts=1000`` and it ran with
  ``algo.replay_ratio=0.05``: overrides now).

The replay buffer holds every step of the run (``buffer.size`` = ``--steps``: sheeprl's 1,000,000
is never filled in these budgets, so this changes nothing but the size of a checkpoint) and a
checkpoint is saved every ``--checkpoint-every`` env steps (default 1,000; all kept, each with its
buffer, so a stopped run resumes: ``checkpoint.resume_from=OUT/.../checkpoint/ckpt_N_0.ckpt``, with
the same ``--steps``, since the buffer keeps the size it was made with; a run to go past 5,000 is
started with its final ``--steps``).
``benchmarks/sheeprl_dreamer_eval.py`` plays a checkpoint greedily on the loop's evaluation games;
``OUT/checkpoint_times.json`` holds the CPU and wall seconds spent to each checkpoint. torch runs on
sheeprl's ``num_threads`` (1; ``OMP_NUM_THREADS`` set before torch loads, which sheeprl's cli does
too late), and the env in this process (``env.sync_env=True``), so the CPU time is the run's.
Extra ``key=value`` words are sheeprl's Hydra overrides (e.g. ``algo.replay_ratio=0.1``).

Writes ``OUT/episodes.json``: ``train``, the logged mean return of the training episodes at each
logging step (``metric.log_every`` = one episode's length, so about one episode each) with the wall
seconds since the first of them, and ``test``, the return of sheeprl's test episode after training.
``--episodes-only`` writes it from the logs already in ``OUT`` (a run that was stopped) and trains
nothing.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

#: sheeprl's DreamerV3 at its XS size on one env (in this process, so its CPU time counts in the
#: run's); its training recipe (replay ratio, learning starts, batch, sequence length) is
#: sheeprl's own.
DEFAULTS = ["exp=dreamer_v3", "algo=dreamer_v3_XS", "env=gym", "env.id=Treasurehunt-v0", "env.num_envs=1",
            "env.sync_env=True", "env.capture_video=False", "buffer.memmap=False",
            "metric.log_every=100", "checkpoint.keep_last=null", "algo.run_test=True"]
#: The observation each ``--obs`` gives DreamerV3, as sheeprl overrides.
OBSERVATIONS = {
    "onehot": ["env.wrapper._target_=benchmarks.sheeprl_dreamer.onehot_env", "algo.cnn_keys.encoder=[]",
               "algo.cnn_keys.decoder=[]", "algo.mlp_keys.encoder=[state]", "algo.mlp_keys.decoder=[state]"],
    "rgb": ["+env.wrapper.obs_mode=rgb", "algo.cnn_keys.encoder=[rgb]", "algo.cnn_keys.decoder=[rgb]",
            "algo.mlp_keys.encoder=[]", "algo.mlp_keys.decoder=[]"],
}
#: The env keyword arguments of the loop's games (its agents' ``rpg_expert`` env record).
ENV_KWARGS = {"vision_radius": 4, "co_policy": "random"}


def flat_onehot(views):
    """``(..., C, V, V)`` one-hot views -> ``(..., C*V*V)`` float32: the vector DreamerV3 reads (C order)."""
    import numpy as np

    views = np.asarray(views)
    return views.reshape(*views.shape[:-3], -1).astype(np.float32)


def onehot_env(id: str, render_mode: str | None = None, **kwargs):  # noqa: A002 (sheeprl's key)
    """``gymnasium.make(id)`` with its one-hot view given as a flat float32 vector in [0, 1]
    (`flat_onehot`): sheeprl wraps a 1-D Box as ``{"state": ...}`` for its MLP encoder."""
    import gymnasium as gym
    import numpy as np

    import rpg_env  # noqa: F401  (registers Treasurehunt-v0 in this process too)

    env = gym.make(id, render_mode=render_mode, **{**ENV_KWARGS, **kwargs})
    size = int(np.prod(env.observation_space.shape))
    space = gym.spaces.Box(0.0, 1.0, (size,), np.float32)
    return gym.wrappers.TransformObservation(env, flat_onehot, space)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, help="real env steps (algo.total_steps)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--obs", choices=sorted(OBSERVATIONS), default="onehot",
                        help="onehot: the loop's one-hot view as a flat vector (MLP); rgb: the rendered "
                             "view (CNN)")
    parser.add_argument("--accelerator", choices=("cpu", "cuda"), default="cpu",
                        help="where sheeprl's Fabric trains (fabric.accelerator); the env runs on the CPU")
    parser.add_argument("--checkpoint-every", type=int, default=1000,
                        help="env steps between saved checkpoints (all kept)")
    parser.add_argument("--out", required=True, help="folder for sheeprl's logs and episodes.json")
    parser.add_argument("--episodes-only", action="store_true",
                        help="only write OUT/episodes.json from the logs in OUT (a stopped run)")
    parser.add_argument("overrides", nargs="*", help="more sheeprl (Hydra) overrides")
    args = parser.parse_args()
    out = os.path.abspath(args.out)
    if args.episodes_only:
        write_episodes(out)
        return
    if args.steps is None:
        parser.error("--steps is required to train")
    os.makedirs(out, exist_ok=True)
    # sheeprl's num_threads (1 by default) reaches torch only through OMP_NUM_THREADS, which its cli sets
    # after torch has started its threads: set here, before torch loads, it holds (a run's CPU minutes
    # are otherwise inflated by a second thread that spins beside other work on a shared machine).
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    from sheeprl.cli import run

    import rpg_env  # noqa: F401  (registers Treasurehunt-v0)

    time_checkpoints(out)
    sys.argv = [sys.argv[0], *DEFAULTS, *OBSERVATIONS[args.obs], f"algo.total_steps={args.steps}",
                f"buffer.size={args.steps}", f"checkpoint.every={args.checkpoint_every}",
                f"fabric.accelerator={args.accelerator}", f"seed={args.seed}",
                f"root_dir={out}", "run_name=dreamer", *args.overrides]
    run()
    write_episodes(out)


def time_checkpoints(out: str) -> None:
    """Record, beside every checkpoint sheeprl saves, the CPU seconds (all threads of this process,
    where the env runs too) and wall seconds the run has spent to it: ``OUT/checkpoint_times.json``,
    a list of ``{"checkpoint", "step", "cpu_seconds", "wall_seconds"}``. A run resumed from a
    checkpoint (``checkpoint.resume_from=...ckpt_N_0.ckpt``) adds its own to the times recorded at
    step N, with ``"resumed_from": N``."""
    import resource
    import time

    from sheeprl.utils.callback import CheckpointCallback

    path = os.path.join(out, "checkpoint_times.json")
    started = time.perf_counter()
    times = json.load(open(path)) if os.path.isfile(path) else []
    resumed = [w.split("=", 1)[1] for w in sys.argv if w.startswith("checkpoint.resume_from=")]
    offset = {"cpu_seconds": 0.0, "wall_seconds": 0.0}
    if resumed:
        step = int(os.path.basename(resumed[-1]).split("_")[1])
        at = [t for t in times if t["step"] == step]
        offset = at[-1] if at else {"cpu_seconds": None, "wall_seconds": None}  # unknown: not recorded
    save = CheckpointCallback.on_checkpoint_coupled

    def timed(self, fabric, ckpt_path, state, replay_buffer=None):
        save(self, fabric=fabric, ckpt_path=ckpt_path, state=state, replay_buffer=replay_buffer)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        spent = {"cpu_seconds": usage.ru_utime + usage.ru_stime,
                 "wall_seconds": time.perf_counter() - started}
        entry = {"checkpoint": os.path.relpath(ckpt_path, out),
                 "step": int(os.path.basename(ckpt_path).split("_")[1]),
                 **{k: None if offset[k] is None else round(offset[k] + v, 1) for k, v in spent.items()}}
        if resumed:
            entry["resumed_from"] = int(os.path.basename(resumed[-1]).split("_")[1])
        times.append(entry)
        with open(path, "w") as f:
            json.dump(times, f, indent=1)

    CheckpointCallback.on_checkpoint_coupled = timed


def write_episodes(out: str) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = sorted(glob.glob(os.path.join(out, "**", "events.out.tfevents.*"), recursive=True))
    if not events:
        raise SystemExit(f"sheeprl wrote no TensorBoard events under {out}")
    train, test = [], None
    for path in events:
        acc = EventAccumulator(path, size_guidance={"scalars": 0})
        acc.Reload()
        tags = acc.Tags()["scalars"]
        if "Rewards/rew_avg" in tags:
            train += [{"step": int(e.step), "return": float(e.value), "wall": float(e.wall_time)}
                      for e in acc.Scalars("Rewards/rew_avg")]
        if "Test/cumulative_reward" in tags:
            test = float(acc.Scalars("Test/cumulative_reward")[-1].value)
    train.sort(key=lambda e: e["step"])
    start = min((e["wall"] for e in train), default=0.0)
    for entry in train:
        entry["seconds"] = round(entry.pop("wall") - start, 1)
    with open(os.path.join(out, "episodes.json"), "w") as f:
        json.dump({"train": train, "test": test}, f, indent=1)


if __name__ == "__main__":
    main()
