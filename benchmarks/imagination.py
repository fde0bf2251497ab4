"""Imagined agent-steps per second of ``TreasurehuntImagined-v0``, beside the uncached path and the
real game, all measured in this run.

Rows, for N = 1, 64, 256, 1024 worlds stepped together (one ``step`` of the vector env advances
N worlds; random actions):

- ``cached``: ``gym.make_vec("TreasurehuntImagined-v0", num_envs=N)``: one batched forward per
  step that reuses each past step's local work and the global attention's keys and values
  (`WorldModel.imagine_step`), plus sampling the next views and rewards;
- ``uncached``: the same worlds, but each step recomputes the model over every past step its
  prediction depends on (`WorldModel.predict_last`, ``context_steps`` steps), as a world model
  without a cache does; the same sampling;
- ``real``: the native vector env of the real game (``Treasurehunt-v0``), for scale;
- ``by_turn``: the cached path at the largest N over one whole episode, from a reset to its end:
  steps/s over its early turns and over its last 10 (the map holds the whole episode; attention
  reads the last ``num_frames`` steps), their ratio, and steps/s over the whole episode;
  ``--whole-episodes`` measures it at every N (``whole_episodes``, keyed by N);
- ``cached_reference`` (``--reference CHECKPOINT``): the cached path of another trained world model
  (the one shipped before, say), with its whole episode beside this one's at the largest N;
- ``cached_baseline``: the cached path of the default before the episode-long map and the cell
  refiner (checkpoint schema 6: cells drawn on their own, a map of ``num_frames`` steps;
  ``--baseline`` sets its overrides; ``--baseline ""`` leaves the row out), so what those cost
  per step is a ratio within this run, whatever the machine's speed.

The model is ``--checkpoint`` (default: the shipped one, ``pretrained``): how many rounds the
refiner's joint draw takes depends on how sure the model is of each cell (the doubt budget,
`rpg_worldmodel.models.refiner`), so a trained model is measured. The baseline's weights are a
few training steps old (without a refiner, speed does not depend on training). Rounds alternate
between the rows so that load from other processes hits all alike; the median and best round are
reported.

    python benchmarks/imagination.py [--quick] [--device cuda] [--threads 2] [--rounds 1] [--doubt 0.2]
        [--sizes 1 64 256] [--checkpoint pretrained] [--reference RUN] [--whole-episodes]

``--threads``: the imagined env's ``torch_threads`` (its default, 1, measured best on CPU).
``--rounds``, ``--doubt``, ``--floor``: the imagined env's ``sample_rounds``, ``sample_doubt`` and
``sample_floor``, the most rounds of the refiner's joint draw of a view, the doubt each takes on and
the least probability a drawn kind has (default: the model's);
the baseline has no refiner and ignores them.

Writes ``benchmarks/results/imagination.json`` (``imagination_gpu.json`` with ``--device cuda``;
``imagination_rounds1.json`` with ``--rounds 1``).
Goal on a 2-core CPU: >= 5,000 imagined steps/s at N = 256, at turn 100 as at turn 1, and >= 3x the
uncached path.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

import rpg_env
import rpg_worldmodel
from rpg_base.cli import ArgumentParser, device_name, float_in, non_negative_int, positive_int, run_command
from rpg_base.provenance import device_description, provenance
from rpg_base.results import write_results
from rpg_base.typed_config.config import with_overrides
from rpg_env.record import record
from rpg_worldmodel.checkpoint import choose_checkpoint
from rpg_worldmodel.config import WorldModelConfig, load_world_model_config
from rpg_worldmodel.models.refiner import REFINER_WIDTH, SAMPLE_DOUBT
from rpg_worldmodel.run_record import read_record
from rpg_worldmodel.train import train

RESULTS = Path(__file__).resolve().parent / "results"
SIZES = (1, 64, 256, 1024)


PREVIOUS_DEFAULT = "model.refiner_layers=0 model.memory_steps=0 model.train_window=0"


def build_checkpoint(root: Path, device: str, overrides: Sequence[str] = (), name: str = "run") -> Path:
    """A default-configuration world model (with ``overrides``) trained for a few steps on 40 greedy
    games."""
    data = root / "greedy.h5"
    if not data.exists():
        record("greedy", data, 40, seed=0, num_envs=20, mode="w", progress=False)
    base = WorldModelConfig()
    cfg = replace(base, data=replace(base.data, max_val_windows=32),
                  train=replace(base.train, max_steps=3, warmup_steps=1, eval_every=3, checkpoint_every=3,
                                progress=False, device=device))
    cfg = with_overrides(cfg, overrides).validate()
    cfg.data.path, cfg.out_dir = str(data), str(root / name)
    return Path(train(cfg).checkpoint)


class Uncached:
    """Replaces a vector env's cached `imagine_step` by `predict_last` over the kept history."""

    def __init__(self, venv) -> None:
        self.worlds = venv.unwrapped.worlds
        self.model = self.worlds.model
        self.views: list[torch.Tensor] = []
        self.actions: list[torch.Tensor] = []
        self.model.imagine_step = self.step  # instance attribute: this env only

    def step(self, view, action, state=None):
        self.views.append(view)
        self.actions.append(action)
        k = self.model.context_steps
        self.views, self.actions = self.views[-k:], self.actions[-k:]
        out = self.model.predict_last(torch.stack(self.views, 1), torch.stack(self.actions, 1))
        return out, state


def steps_per_second(venv, steps: int, seed: int) -> float:
    """Agent-steps/s (worlds x steps / s) of ``steps`` random-action steps after a reset."""
    rng = np.random.default_rng(seed)
    actions = [rng.integers(0, 4, venv.num_envs) for _ in range(steps + 2)]
    venv.reset(seed=seed)
    for a in actions[:2]:  # warm-up
        venv.step(a)
    start = time.perf_counter()
    for a in actions[2:]:
        venv.step(a)
    return venv.num_envs * steps / (time.perf_counter() - start)


def rates_by_turn(venv, seed: int, turns: int = 10) -> dict[str, float]:
    """Agent-steps/s over ``turns`` imagined steps early in an episode (from its third: the first two
    warm up) and over its last ``turns``, random actions from a reset to the episode's end (an
    imagined episode's steps follow the real opening's ``num_frames - 1`` turns: the last is the
    game's last turn): does turn 100 cost what turn 1 does, with the map holding the whole episode?"""
    rng = np.random.default_rng(seed)
    venv.reset(seed=seed)
    seconds, done = [], False
    while not done:
        action = rng.integers(0, 4, venv.num_envs)
        start = time.perf_counter()
        _, _, terminated, truncated, _ = venv.step(action)
        seconds.append(time.perf_counter() - start)
        done = bool((terminated | truncated).all())
    early, late = sum(seconds[2 : 2 + turns]), sum(seconds[-turns:])
    return {"steps": len(seconds), f"steps_3_{2 + turns}": venv.num_envs * turns / early,
            f"last_{turns}_steps": venv.num_envs * turns / late, "late_over_early": early / late,
            "whole_episode": venv.num_envs * len(seconds) / sum(seconds)}


def measure(checkpoint: Path | str, sizes: tuple[int, ...], steps: int, repeats: int, device: str,
            baseline: Path | None = None, threads: int = 1, rounds: int | None = None,
            doubt: float | None = None, floor: float | None = None, whole_episodes: bool = False,
            reference: str | None = None) -> dict:
    rows: dict[str, dict[int, list[float]]] = {"cached": {}, "uncached": {}, "real": {}}
    by_turn: dict[str, dict[str, float]] = {}
    reference_by_turn: dict[str, float] = {}
    if baseline is not None:
        rows["cached_baseline"] = {}
    if reference is not None:
        rows["cached_reference"] = {}
    for n in sizes:
        make = {"num_envs": n, "checkpoint": checkpoint, "device": device, "torch_threads": threads,
                "sample_rounds": rounds, "sample_doubt": doubt, "sample_floor": floor}
        envs = {"cached": gym.make_vec(rpg_worldmodel.IMAGINED_ENV_ID, **make),
                "uncached": gym.make_vec(rpg_worldmodel.IMAGINED_ENV_ID, **make),
                "real": gym.make_vec(rpg_env.ENV_ID, num_envs=n)}
        Uncached(envs["uncached"])
        if reference is not None:
            envs["cached_reference"] = gym.make_vec(rpg_worldmodel.IMAGINED_ENV_ID,
                                                    **{**make, "checkpoint": reference})
        if baseline is not None:
            envs["cached_baseline"] = gym.make_vec(rpg_worldmodel.IMAGINED_ENV_ID,
                                                   **{**make, "checkpoint": baseline, "sample_rounds": None,
                                                      "sample_doubt": None, "sample_floor": None})
        for r in range(repeats):
            for name, venv in envs.items():
                rows[name].setdefault(n, []).append(steps_per_second(venv, steps, seed=r))
        medians = ", ".join(f"{k} {statistics.median(v[n]):,.0f}" for k, v in rows.items())
        print(f"N={n}: {medians}", flush=True)
        if whole_episodes or n == max(sizes):
            whole = [rates_by_turn(envs["cached"], seed=r) for r in range(repeats)]
            by_turn[str(n)] = {"worlds": n, **{k: statistics.median(w[k] for w in whole) for k in whole[0]}}
            print(f"N={n}, cached, one episode to its end: {by_turn[str(n)]['whole_episode']:,.0f} steps/s; "
                  f"{by_turn[str(n)]['late_over_early']:.2f}x as fast over its last 10 steps as early on",
                  flush=True)
        if reference is not None and n == max(sizes):
            whole = [rates_by_turn(envs["cached_reference"], seed=r) for r in range(repeats)]
            reference_by_turn = {"worlds": n, **{k: statistics.median(w[k] for w in whole) for k in whole[0]}}
        for venv in envs.values():
            venv.close()
    return {**{name: {str(n): {"median": statistics.median(v), "best": max(v), "rounds": v}
                      for n, v in per.items()} for name, per in rows.items()},
            "by_turn": by_turn[str(max(sizes))], **({"whole_episodes": by_turn} if whole_episodes else {}),
            **({"reference_by_turn": reference_by_turn} if reference is not None else {})}


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python benchmarks/imagination.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 1 and 64, few steps: a smoke check")
    parser.add_argument("--sizes", type=positive_int, nargs="+", default=list(SIZES),
                        help="numbers of worlds stepped together (default: 1 64 256 1024; --quick: 1 64)")
    parser.add_argument("--device", type=device_name, default="cpu", help="cpu or cuda")
    parser.add_argument("--threads", type=positive_int, default=1,
                        help="torch CPU threads of the imagined steps")
    parser.add_argument("--steps", type=non_negative_int, default=0,
                        help="timed steps per round (default: by N)")
    parser.add_argument("--repeats", type=positive_int, default=3)
    parser.add_argument("--rounds", type=positive_int, default=None,
                        help="most rounds of the joint draw of a sampled view (default: the model's)")
    parser.add_argument("--doubt", type=float_in(0.0), default=None,
                        help="doubt a round of the joint draw takes on (default: 0.2, the imagined "
                             "env's; 0: one cell a round)")
    parser.add_argument("--floor", type=float_in(0.0, 1.0), default=None,
                        help="no kind below this refined probability is drawn in a cell (default: the "
                             "model's; 0: the refined distributions as they are)")
    parser.add_argument("--checkpoint", default="pretrained",
                        help="the world model measured (a run folder, a checkpoint folder or 'pretrained')")
    parser.add_argument("--whole-episodes", action="store_true",
                        help="time one whole episode at every N, not only at the largest")
    parser.add_argument("--reference", default=None,
                        help="another trained world model measured beside it (the one shipped before)")
    parser.add_argument("--baseline", default=PREVIOUS_DEFAULT,
                        help="overrides of the cached_baseline row's model ('' leaves the row out)")
    return parser


def print_table(results: dict, with_baseline: bool, reference: str | None) -> None:
    """The rows of `measure` at every N, the reference's and the whole episodes, as text."""
    print("\nworlds  cached/s  uncached/s  real/s  cached/uncached" + ("  baseline/s  cached/baseline"
                                                                     if with_baseline else ""))
    for n in results["cached"]:  # "by_turn" and "whole_episodes" hold no rows
        c, u, r = (results[k][n]["median"] for k in ("cached", "uncached", "real"))
        line = f"{n:>6}  {c:>8,.0f}  {u:>10,.0f}  {r:>8,.0f}  {c / u:>6.1f}x"
        if with_baseline:
            b = results["cached_baseline"][n]["median"]
            line += f"  {b:>10,.0f}  {c / b:>14.2f}"
        print(line)
    if reference is not None:
        whole = results["reference_by_turn"]
        print(f"reference ({reference}): "
              + ", ".join(f"N={n} {results['cached_reference'][n]['median']:,.0f}/s"
                          for n in results["cached"])
              + f"; whole episode at N={whole['worlds']}: {whole['whole_episode']:,.0f}/s")
    for n, w in results.get("whole_episodes", {}).items():
        print(f"whole episode of {w['steps']} steps at N={n}: {w['whole_episode']:,.0f} imagined steps/s "
              f"(last 10 steps {w['late_over_early']:.2f}x as fast as steps 3-12)")


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    load_world_model_config(None, args.baseline.split())  # bad overrides fail before any training
    choice = choose_checkpoint(args.checkpoint)  # a missing checkpoint fails before any training too
    reference = choose_checkpoint(args.reference) if args.reference else None
    cfg = read_record(choice.folder / "meta.json").config  # its settings; each env loads the weights
    cells = cfg.model.view_size ** 2
    if args.rounds is not None and args.rounds > cells:
        parser.error(f"--rounds must be in 1..{cells} (one cell a round), got {args.rounds}")
    sizes = SIZES[:2] if args.quick else tuple(dict.fromkeys(args.sizes))  # a size once, in the order given
    steps = args.steps or (5 if args.quick else 30)
    with tempfile.TemporaryDirectory() as tmp:
        baseline = (build_checkpoint(Path(tmp), args.device, args.baseline.split(), "baseline")
                    if args.baseline.strip() else None)
        results = measure(args.checkpoint, sizes, steps, 1 if args.quick else args.repeats, args.device,
                          baseline, args.threads, args.rounds, args.doubt, args.floor, args.whole_episodes,
                          None if reference is None else str(reference.folder))
    at = "256" if "256" in results["cached"] else str(sizes[-1])
    summary = {
        f"cached_steps_per_s_at_{at}": results["cached"][at]["median"],
        f"cached_over_uncached_at_{at}": results["cached"][at]["median"] / results["uncached"][at]["median"],
        "cached_late_over_early": results["by_turn"]["late_over_early"],
        "goal": ">= 5,000 imagined steps/s at N = 256, at turn 100 as at turn 1, and >= 3x the uncached "
                "path (2-core CPU)",
    }
    if "whole_episodes" in results:
        whole = results["whole_episodes"]
        summary["whole_episode_steps_per_s"] = {n: w["whole_episode"] for n, w in whole.items()}
    if args.device.startswith("cuda"):
        summary["goal_gpu"] = ">= 50,000 imagined steps/s at N = 4,096 over whole episodes"
    if reference is not None:
        summary[f"cached_over_reference_at_{at}"] = (results["cached"][at]["median"]
                                                     / results["cached_reference"][at]["median"])
        summary["reference_whole_episode_over_this"] = (results["reference_by_turn"]["whole_episode"]
                                                        / results["by_turn"]["whole_episode"])
        summary["reference"] = reference.describe(portable=True)
    if baseline is not None:
        summary[f"cached_over_baseline_at_{at}"] = (results["cached"][at]["median"]
                                                    / results["cached_baseline"][at]["median"])
        summary["baseline_overrides"] = args.baseline
    hardware = device_description(args.device)
    keys = ("width", "num_layers", "num_heads", "num_frames", "patch_size", "refiner_layers")
    shape = {**{k: getattr(cfg.model, k) for k in keys}, "refiner_width": REFINER_WIDTH,
             "memory_steps": cfg.model.memory_steps}
    record_ = provenance(seed=0, device=args.device, device_name=hardware,
                         torch_threads=args.threads, model=shape,
                         checkpoint=choice.describe(portable=True),
                         sample_rounds=args.rounds or cfg.model.sample_rounds,
                         sample_doubt=SAMPLE_DOUBT if args.doubt is None else args.doubt,
                         sample_floor=cfg.model.sample_floor if args.floor is None else args.floor,
                         steps_per_round=steps, quick=args.quick, rows=results, summary=summary)
    print_table(results, baseline is not None, summary.get("reference"))
    name = "imagination_gpu" if args.device.startswith("cuda") else "imagination"
    out = RESULTS / (name + (f"_rounds{args.rounds}" if args.rounds else "") + ".json")
    if not args.quick:
        write_results(out, record_)


if __name__ == "__main__":
    run_command(main)
