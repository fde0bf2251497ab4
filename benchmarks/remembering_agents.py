"""Theory of mind of a remembering agent: does the world model predict a memory agent's next action
better with a longer context, where a memoryless agent's gains nothing?

Two experts play the memory variant (``item_visible_turns=2``, the co-player random): the shipped
TrXL-PPO (``pretrained_path("trxl")``, a 16-step memory) and a memoryless PPO on 2 stacked frames
(``--memoryless``, by default the seed-0 PPO of ``benchmarks/memory_agents.py``). Each file
(``--data-memory``, ``--data-memoryless``: recorded with ``python -m rpg_env.record ...
--item-visible-turns 2 --co-policy random --learner-only``) trains the default world model at each
``--frames`` (``batch = 320 // frames`` and ``train_window=0``, so every step scores about 320
predictions, as ``benchmarks/worldmodel_context.py``). Each model is scored on the test games of its
own agent's file (self) and of the other agent's (cross): next-action accuracy with 95% bootstrap
intervals and the transfer gap, by the pipeline's evaluation.

Goal: on the memory expert, 20 frames >= 5 frames + 3 points of action accuracy; on the
memoryless one, no such rise.

    python benchmarks/remembering_agents.py --data-memory trxl.h5 --data-memoryless ppo.h5 [--frames 5 20]
        [--runs runs/remembering_agents]   # a row whose run folder holds a finished run is not retrained

Writes ``benchmarks/results/remembering_agents.json``.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rpg_base.cli import ArgumentParser, output_file, output_folder, positive_int, run_command
from rpg_base.errors import InputError
from rpg_base.results import write_results

RESULTS = Path(__file__).resolve().parent / "results" / "remembering_agents.json"
AGENTS = ("memory", "memoryless")


def train_row(data: Path, frames: int, steps: int, folder: Path) -> tuple[Path, float | None]:
    """The default world model with ``frames`` of context on ``data`` (a finished run in ``folder``
    is reused): its best checkpoint and training seconds (a reused run's, from its summary.json)."""
    from rpg_worldmodel.checkpoint import resolve_checkpoint
    from rpg_worldmodel.config import WorldModelConfig
    from rpg_worldmodel.train import train

    summary = folder / "summary.json"
    if summary.exists():
        return resolve_checkpoint(folder, "best"), json.loads(summary.read_text()).get("wall_s")
    base = WorldModelConfig()
    cfg = replace(base, data=replace(base.data, path=str(data)), out_dir=str(folder),
                  model=replace(base.model, num_frames=frames, train_window=0),
                  train=replace(base.train, batch_size=max(4, 320 // frames), max_steps=steps,
                                eval_every=max(steps // 4, 1), checkpoint_every=max(steps // 4, 1),
                                warmup_steps=min(100, steps // 4), progress=False)).validate()
    started = time.perf_counter()
    result = train(cfg)
    return result.best, time.perf_counter() - started


def score(checkpoint: Path, own: Path, other: Path) -> dict[str, Any]:
    """Action accuracy on the test games of the model's own agent (self) and of the other (cross)."""
    from rpg_worldmodel.evaluation.run import EvalOptions, Evaluation

    ev = Evaluation(checkpoint, [own, other], EvalOptions(split="test", num_boot=1000, theory_of_mind=False))
    started = time.perf_counter()
    ev.evaluate_file(own, num_examples=0)
    ev.evaluate_file(other, num_examples=0)
    table = ev.transfer()[str(other)]
    return {"self": table["model"]["self"], "cross": table["model"]["cross"],
            "relative_gap": table["relative_gap"], "eval_seconds": round(time.perf_counter() - started, 1)}


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python benchmarks/remembering_agents.py",
                            description=__doc__.split("\n")[0])
    parser.add_argument("--data-memory", type=Path, required=True, help="the memory expert's games")
    parser.add_argument("--data-memoryless", type=Path, required=True, help="the memoryless expert's games")
    parser.add_argument("--frames", type=positive_int, nargs="+", default=[5, 20], help="context lengths")
    parser.add_argument("--steps", type=positive_int, default=800, help="training steps of every model")
    parser.add_argument("--runs", type=output_folder, default=Path("runs/remembering_agents"),
                        help="run folders, one per agent and context (finished ones are reused)")
    parser.add_argument("--out", type=output_file, default=RESULTS, help="JSON output path")
    return parser


def main(argv: list[str] | None = None) -> None:
    from rpg_base.provenance import portable_path, provenance

    parser = build_parser()
    args = parser.parse_args(argv)
    parser.refuse_repeats(args, "frames")
    data = {"memory": args.data_memory, "memoryless": args.data_memoryless}
    for agent, path in data.items():
        if not path.is_file():
            raise InputError(f"--data-{agent} {path} is not a file: record the agent's games first "
                             f"(python -m rpg_env.record ... --item-visible-turns 2 --co-policy random)")
    rows = []
    for agent in AGENTS:
        other = data[AGENTS[1 - AGENTS.index(agent)]]
        for frames in args.frames:
            checkpoint, seconds = train_row(data[agent], frames, args.steps, args.runs / f"{agent}_T{frames}")
            row = {"agent": agent, "num_frames": frames, "train_seconds": seconds,
                   **score(checkpoint, data[agent], other)}
            rows.append(row)
            s, c = row["self"]["action_acc"], row["cross"]["action_acc"]
            print(f"{agent:<11} T{frames:<3} self {s['value']:.3f} [{s['lo']:.3f}, {s['hi']:.3f}]  "
                  f"cross {c['value']:.3f} [{c['lo']:.3f}, {c['hi']:.3f}]", flush=True)
    record = provenance(seed=0, data={k: portable_path(v) for k, v in data.items()}, steps=args.steps,
                        rows=rows)
    write_results(args.out, record)


if __name__ == "__main__":
    run_command(main)
