"""TrXL-PPO's training speed beside an earlier revision of the same code, measured in the same run.

Both sides train the memory variant (Treasurehunt-v0 with ``item_visible_turns=2``, the shipped
``trxl-ppo.yaml``: 16 worlds x 128 steps per update, 4 epochs of 8 minibatches) from the same seed
on one torch thread, each in its own process: this checkout, and ``--reference`` (a git revision,
checked out into a temporary worktree that is removed at the end). The processes alternate
(this, reference, this, ...) ``--repeats`` times, so a machine that slows down midway slows both.
Each process times ``--updates`` updates after one untimed one: collecting (env steps and the
network acting) and PPO's update, in wall and CPU seconds, and reports env steps per second. The
first update's losses of both sides are printed beside each other: the same seed gives the same
rollout, so they must agree up to float rounding (the rewritten attention sums in another order).

    python benchmarks/trxl_speed.py                          # against 17fbc3f, the code before it
    python benchmarks/trxl_speed.py --reference HEAD~3 --updates 5 --repeats 3

Writes ``benchmarks/results/trxl_speed.json`` (``--out``). Goal: >= 1,500 env steps/s.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "trxl_speed.json"
#: The last revision before the update shared work across epochs and wrote out its attention.
REFERENCE = "17fbc3f"
OVERRIDES = ["env.item_visible_turns=2", "progress_bar=false", "seed=0"]


def measure(updates: int) -> dict[str, Any]:
    """In a child process: time ``updates`` updates of the code importable here (after one untimed)."""
    import torch

    from rpg_env.experts.config import load_expert_config
    from rpg_env.experts.trxl_ppo import TrXLTrainer

    cfg = load_expert_config("trxl-ppo", overrides=OVERRIDES)
    torch.set_num_threads(cfg.torch_threads)
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = TrXLTrainer(cfg, Path(run_dir))
        obs, _ = trainer.envs.reset(seed=cfg.seed)
        trainer.model.train()
        rollout, last_value, obs = trainer.collect(obs)
        first = trainer.update(rollout, last_value, progress=0.0)
        times = {"collect_wall": 0.0, "collect_cpu": 0.0, "update_wall": 0.0, "update_cpu": 0.0}
        for _ in range(updates):
            wall, cpu = time.perf_counter(), time.process_time()
            rollout, last_value, obs = trainer.collect(obs)
            times["collect_wall"] += time.perf_counter() - wall
            times["collect_cpu"] += time.process_time() - cpu
            wall, cpu = time.perf_counter(), time.process_time()
            trainer.update(rollout, last_value, progress=0.5)
            times["update_wall"] += time.perf_counter() - wall
            times["update_cpu"] += time.process_time() - cpu
        trainer.close()
    steps = updates * cfg.n_envs * trainer.hp.n_steps
    return {"steps": steps, **times,
            "steps_per_second": steps / (times["collect_wall"] + times["update_wall"]),
            "steps_per_cpu_second": steps / (times["collect_cpu"] + times["update_cpu"]),
            "first_update": {k: first[k] for k in ("policy_loss", "value_loss", "entropy", "approx_kl")},
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__}


def run_side(source: Path, updates: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(source), "SDL_VIDEODRIVER": "dummy", "SDL_AUDIODRIVER": "dummy"}
    command = [sys.executable, str(Path(__file__).resolve()), "--child", str(updates)]
    done = subprocess.run(command, cwd=source, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the measurement in {source} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    speed = [r["steps_per_second"] for r in runs]

    def per_2048(part: str) -> float:
        return statistics.median(r[part] * 2048 / r["steps"] for r in runs)

    return {"steps_per_second_median": statistics.median(speed), "steps_per_second": speed,
            "steps_per_cpu_second_median": statistics.median(r["steps_per_cpu_second"] for r in runs),
            "update_seconds_per_2048_steps": per_2048("update_wall"),
            "collect_seconds_per_2048_steps": per_2048("collect_wall"),
            "first_update": runs[0]["first_update"]}


def main(argv: list[str] | None = None) -> None:
    from rpg_base.cli import ArgumentParser, output_file, positive_int
    from rpg_base.errors import InputError
    from rpg_base.provenance import provenance
    from rpg_base.results import write_results

    parser = ArgumentParser(prog="python benchmarks/trxl_speed.py", description=__doc__.split("\n")[0])
    parser.add_argument("--reference", default=REFERENCE, help="git revision to compare with")
    parser.add_argument("--updates", type=positive_int, default=5, help="timed updates per process")
    parser.add_argument("--repeats", type=positive_int, default=3, help="processes per side, alternating")
    parser.add_argument("--out", type=output_file, default=RESULTS, help="JSON output path")
    args = parser.parse_args(argv)
    try:
        reference = git("rev-parse", "--short", "--verify", f"{args.reference}^{{commit}}")
    except subprocess.CalledProcessError:
        raise InputError(f"--reference {args.reference!r} is not a commit of this repository") from None
    started = time.perf_counter()
    sides: dict[str, list[dict[str, Any]]] = {"this": [], "reference": []}
    with tempfile.TemporaryDirectory(prefix="trxl_speed_") as tmp:
        worktree = Path(tmp) / "reference"
        git("worktree", "add", "--detach", str(worktree), reference)
        try:
            for repeat in range(args.repeats):
                for side, source in (("this", ROOT), ("reference", worktree)):
                    sides[side].append(run_side(source, args.updates))
                    print(f"{side} #{repeat + 1}: {sides[side][-1]['steps_per_second']:.0f} env steps/s",
                          flush=True)
        finally:
            git("worktree", "remove", "--force", str(worktree))
    summary = {side: summarize(runs) for side, runs in sides.items()}
    ratio = summary["this"]["steps_per_second_median"] / summary["reference"]["steps_per_second_median"]
    print(f"\n{'':<28}{'this checkout':>16}{'reference ' + reference:>22}")
    for key, fmt in (("steps_per_second_median", ".0f"), ("steps_per_cpu_second_median", ".0f"),
                     ("update_seconds_per_2048_steps", ".3f"), ("collect_seconds_per_2048_steps", ".3f")):
        print(f"{key:<28}{format(summary['this'][key], fmt):>16}{format(summary['reference'][key], fmt):>22}")
    for key in ("policy_loss", "value_loss", "entropy", "approx_kl"):
        mine, theirs = summary["this"]["first_update"][key], summary["reference"]["first_update"][key]
        print(f"first update {key:<15}{mine:>16.6g}{theirs:>22.6g}")
    print(f"\nspeed-up: {ratio:.2f}x (goal: >= 1,500 env steps/s)")
    record = provenance(seed=0, reference=reference, updates=args.updates, repeats=args.repeats,
                        config="rpg_env/experts/configs/trxl-ppo.yaml", overrides=OVERRIDES,
                        wall_seconds=round(time.perf_counter() - started, 1), speedup=ratio,
                        goal="TrXL-PPO >= 1,500 env steps/s on the memory variant", summary=summary,
                        runs=sides)
    write_results(args.out, record)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(measure(int(sys.argv[2]))))
    else:
        from rpg_base.cli import run_command

        run_command(main)
