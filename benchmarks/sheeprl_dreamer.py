"""DreamerV3 (sheeprl 0.8.4) on Treasurehunt-v0, in sheeprl's own virtualenv: the outside anchor of
``benchmarks/sample_efficiency.py``. Never imported by the project; its install stays apart
(ANCHORS.md, "DreamerV3 beside the project").

    PYTHONPATH=. /path/to/sheeprl-venv/bin/python benchmarks/sheeprl_dreamer.py --steps 10000 --seed 0 \\
        --out runs/dreamer [key=value ...]

It imports ``rpg_env`` (which registers ``Treasurehunt-v0``; it needs only gymnasium and NumPy),
then runs ``sheeprl.cli.run()`` with DreamerV3's XS size on the RGB observation (``obs_mode="rgb"``:
sheeprl's encoders take images or vectors, not the one-hot MultiBinary), on one env and the CPU.
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

DEFAULTS = ["exp=dreamer_v3", "algo=dreamer_v3_XS", "env=gym", "env.id=Treasurehunt-v0",
            "+env.wrapper.obs_mode=rgb", "env.num_envs=1", "env.capture_video=False",
            "fabric.accelerator=cpu",
            "algo.cnn_keys.encoder=[rgb]", "algo.cnn_keys.decoder=[rgb]", "algo.mlp_keys.encoder=[]",
            "algo.mlp_keys.decoder=[]", "buffer.memmap=False", "algo.learning_starts=1000",
            "algo.replay_ratio=0.25", "metric.log_every=100", "checkpoint.every=100000000",
            "checkpoint.save_last=False", "algo.run_test=True"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, help="real env steps (algo.total_steps)")
    parser.add_argument("--seed", type=int, default=0)
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

    from sheeprl.cli import run

    import rpg_env  # noqa: F401  (registers Treasurehunt-v0)

    sys.argv = [sys.argv[0], *DEFAULTS, f"algo.total_steps={args.steps}", f"seed={args.seed}",
                f"root_dir={out}", "run_name=dreamer", *args.overrides]
    run()
    write_episodes(out)


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
