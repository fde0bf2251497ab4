"""Learn the game from nothing: the IRIS loop of collecting, fitting the world model and dreaming.

    python -m rpg_worldmodel.learn [--steps 10000] [--seed S] [--env-id ID] [--out DIR] [key=value ...]
    python -m rpg_worldmodel.learn --resume DIR [--steps N]

It starts with no expert, no recorded file and no pretrained weights, and only orchestrates what
exists. The real game is the treasurehunt game by default; ``--env-id ID`` learns any game
`rpg_env.record` records (its one-hot views, `rpg_env.envs.any_env.recorded_env`) the same way
(docs/other-gridworlds.md). Iteration k:

1. collect   whole games of the current policy (random at first, then the last agent sampling its
             actions) until they hold ``collect_steps`` real learner steps, through the HDF5
             recorder; only the learner's own stream is kept (the co-player's views and actions are
             privileged).
2. world     the world model (`rpg_worldmodel.train`) on every file collected so far, from the
             last iteration's weights (``train.init_from``): games held out stay held out.
3. agent     PPO (`rpg_worldmodel.dream`'s config) trained only in imagination for ``agent_steps``,
             in ``imagined_worlds`` worlds stepped together and started from the learner's own
             games, from the last iteration's agent.
4. evaluate  the agent in the real game on fixed seeds no collection uses, beside random (and greedy,
             in a game that has it): one point of the curve (real return against real steps used).

It stops when ``real_steps`` are spent (the last iteration collects what is left, whole games).
The world models are told nothing of the game but the file's spaces and reward classes: which
action moves where, what blocks a move and what a step pays, they learn (docs/worldmodel.md).

Run folder: ``config.yaml``, ``provenance.json``, ``iter_000/`` ... (``games.h5``, ``world_model/``,
``agent/``, ``iteration.json``), ``curve.json`` (every point, and ``final``: the last agent's
``model.zip`` and world model), ``curve.png``, ``tb/``. The agent is an expert like any other
(``rpg_env.experts watch``), the world model a checkpoint like any other (``rpg_worldmodel.play``).

Resume: each stage is a pure function of the folder's earlier stages and the seed, marked done only
by its last file (``collect.json``, the world model's ``summary.json``, the agent's ``eval.json``,
``iteration.json``; one cut short counts as missing). ``--resume`` runs an unfinished stage again,
so a run killed anywhere and resumed ends as an uninterrupted one. ``--resume DIR --steps N``
extends a run to a larger budget: no stage depends on it, so the run then holds what a run of N
from the start holds (not where its last iteration collected only a remainder: refused).
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rpg_base.cli import ArgumentParser, output_folder, positive_int, run_command
from rpg_base.errors import InputError
from rpg_base.provenance import pinned_torch_threads, portable_command, portable_path, provenance, write_whole
from rpg_base.results import pyplot, save_figure
from rpg_base.typed_config import config as tc
from rpg_worldmodel.learn_config import CONFIG_FILE, LearnConfig, games_for, load_run_config

DEFAULT_OUT_ROOT = "runs/learn"
CURVE_FILE = "curve.json"
#: What a learn run writes into its folder; a new run refuses a folder holding anything else.
LEARN_OUTPUTS = (CONFIG_FILE, "provenance.json", "iter_*", CURVE_FILE, "curve.png", "tb", ".*.tmp")
#: Seed offset of each further collection wave of an iteration: past every first wave's seed
#: (``seed * 1000 + k``), so no two waves of a run share one.
WAVE_SEED_STRIDE = 10_000_019


# ------------------------------------------------------------------------------------- stages
@dataclass
class Iteration:
    """Where iteration ``k`` of the run in ``root`` keeps its stages."""

    root: Path
    k: int

    @property
    def folder(self) -> Path:
        return self.root / f"iter_{self.k:03d}"

    @property
    def games(self) -> Path:
        return self.folder / "games.h5"

    @property
    def world_model(self) -> Path:
        return self.folder / "world_model"

    @property
    def agent(self) -> Path:
        return self.folder / "agent"

    @property
    def record(self) -> Path:
        return self.folder / "iteration.json"

    def point(self) -> dict[str, Any] | None:
        """The curve point of a finished iteration (None: not finished)."""
        return _finished(self.record)


def _finished(done: Path) -> dict[str, Any] | None:
    """The JSON a stage writes last, or None when the stage did not finish: the file is missing, or
    cut short by a kill while it was written."""
    try:
        return json.loads(done.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _write_json(path: Path, record: dict[str, Any]) -> None:
    """Write ``record`` whole or not at all (`write_whole`)."""
    write_whole(path, json.dumps(record, indent=2) + "\n")


def _fresh(*paths: Path) -> None:
    """Remove what an unfinished stage left (a killed run's partial file or folder)."""
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def stage_collect(cfg: LearnConfig, it: Iteration, policy: Any, steps: int, max_turns: int) -> dict[str, Any]:
    """Record whole games of the learner with ``policy`` into ``it.games`` until they hold at least
    ``steps`` steps; its summary (``collect.json``). Waves of games (`wave_games`): the first as many
    as ``steps`` needs where every game lasts ``max_turns`` (the treasurehunt game's always do: one
    wave), each next one at most ``collect_envs`` games, as many as the rest needs at the mean length
    so far (games that end early, a goal reached). Every game a wave plays is recorded and counted."""
    from rpg_env.record import record

    done = it.folder / "collect.json"
    finished = _finished(done)
    if finished is not None:
        return finished
    _fresh(it.games)
    it.folder.mkdir(parents=True, exist_ok=True)
    env_id, env_kwargs = cfg.real_env()
    got, seconds = 0, 0.0
    waves: list[tuple[float, int]] = []  # (mean return, games) of each wave
    for wave in itertools.count():
        played = sum(n for _, n in waves)
        games, envs = wave_games(steps - got, max_turns if not waves else max(1, round(got / played)),
                                 cfg.collect_envs, first=not waves)
        summary = record(policy, it.games, games, seed=cfg.seed * 1000 + it.k + wave * WAVE_SEED_STRIDE,
                         num_envs=envs, mode="a", policy_id=f"learner-{it.k}", env_id=env_id,
                         env_kwargs=env_kwargs, record_co_players=False, progress=False,
                         torch_threads=cfg.torch_threads)
        got, seconds = got + summary["agent_steps"], seconds + summary["seconds"]
        waves.append((summary["mean_return"], summary["games"]))
        if got >= steps:
            break
    means, counts = zip(*waves, strict=True)
    mean_return = means[0] if len(waves) == 1 else float(np.average(means, weights=counts))
    summary = {"games": sum(counts), "agent_steps": got, "seconds": seconds, "waves": len(waves),
               "mean_return": mean_return, "target_steps": steps}
    _write_json(done, summary)
    return summary


def wave_games(steps: int, length: int, envs: int, first: bool) -> tuple[int, int]:
    """``(games, worlds)`` of a collection wave toward ``steps`` more steps, games lasting ``length``
    steps: every world plays whole games until the wave's last ends, so the games are a multiple of
    the worlds and each one played is recorded (`rpg_env.record` plays a world's games to the end).
    The first wave plays what full-length games need; a later one at most ``envs`` games, since a
    mean length read off a few games may be far too short (one lucky wave of quick wins)."""
    games = games_for(steps, length)
    if not first:
        games = min(games, envs)
    worlds = min(envs, games)
    return -(-games // worlds) * worlds, worlds


def stage_world_model(cfg: LearnConfig, it: Iteration, files: list[Path], start: Path | None) -> Path:
    """Train iteration ``it``'s world model on ``files`` from ``start`` (a run folder: its best
    checkpoint); its run folder."""
    from rpg_worldmodel.train import train

    if _finished(it.world_model / "summary.json") is None:
        _fresh(it.world_model)
        wm = cfg.world_model_config(it.k, files, it.world_model, start)
        wm.train.progress = False
        train(wm)
    return it.world_model


def stage_agent(cfg: LearnConfig, it: Iteration, world_model: Path, previous: Path | None) -> dict[str, Any]:
    """PPO trained in the dream of ``world_model`` from ``previous``'s weights, started from this
    iteration's games; evaluated in the real game. Its ``eval.json``."""
    from rpg_env.experts.evaluate import compare
    from rpg_env.experts.train import train
    from rpg_worldmodel import ANY_IMAGINED_ENV_ID, IMAGINED_ENV_ID
    from rpg_worldmodel.distributed import resolve_device
    from rpg_worldmodel.dream import World, imagined_envs

    done = it.agent / "eval.json"
    if _finished(done) is None:
        _fresh(it.agent)
        agent_cfg = cfg.agent_config(it.k)
        agent_cfg.progress_bar = False
        imagined = IMAGINED_ENV_ID if cfg.treasurehunt else ANY_IMAGINED_ENV_ID
        world = World(str(world_model), reset_from=str(it.games), reset_split="all",
                      horizon=cfg.horizon or None, torch_threads=cfg.imagination_threads,
                      device=str(resolve_device(cfg.device)), env_id=imagined)

        def real_game(model_zip: Path) -> dict[str, dict[str, Any]]:
            return compare(model_zip, episodes=agent_cfg.eval.final_episodes, seed=agent_cfg.eval.seed)

        train(agent_cfg, it.agent, make_env=imagined_envs(world), final_eval=real_game,
              extra_provenance={"trained_in": imagined,
                                "world_model": portable_path(world_model, it.root),
                                "imagination_threads": cfg.imagination_threads,
                                "contexts": portable_path(it.games, it.root),
                                "started_from": portable_path(previous, it.root) if previous else None},
              init_params=previous)
    return json.loads(done.read_text())


# ------------------------------------------------------------------------------------- the loop
@dataclass
class Curve:
    """Real return against real learner steps, one point per iteration (``curve.json``)."""

    points: list[dict[str, Any]] = field(default_factory=list)

    def add(self, point: dict[str, Any]) -> None:
        self.points.append(point)

    def to_dict(self, cfg: LearnConfig) -> dict[str, Any]:
        return {"config": tc.to_dict(cfg), "points": self.points,
                "final": self.points[-1] if self.points else None}


def _iteration_point(it: Iteration, steps: int, collected: dict[str, Any], results: dict[str, Any],
                     seconds: dict[str, float]) -> dict[str, Any]:
    """``greedy`` and ``vs_greedy`` are None in a game without a greedy baseline; ``success`` is the
    share of evaluation games with a positive return (a goal reached, in a game that pays only there)."""
    agent, random_ = results["model"], results["random"]
    greedy = results.get("greedy", {}).get("mean")
    return {"iteration": it.k, "real_steps": steps, "agent": f"{it.folder.name}/agent/model.zip",
            "world_model": f"{it.folder.name}/world_model",
            "return": agent["mean"], "ci95": agent["ci95"], "success": agent.get("positive"),
            "greedy": greedy, "random": random_["mean"],
            "vs_greedy": round(agent["mean"] / greedy, 4) if greedy else None,
            "collected_return": collected["mean_return"], "collect_target": collected.get("target_steps"),
            "seconds": seconds}


def learn(cfg: LearnConfig, out: Path, command: str | None = None, resume: bool = False) -> Path:
    """Run (or ``resume``) the loop into ``out``; returns ``out``."""
    from rpg_base.progress import progress_bar

    out = Path(out)
    if not resume:
        _prepare(out)
        tc.write_yaml(cfg, out / CONFIG_FILE)
        record = provenance(seed=cfg.seed, kind="learn", config=tc.to_dict(cfg))
        if command is not None:
            record["command"] = command
        _write_json(out / "provenance.json", record)
    curve, max_turns = Curve(), cfg.game_turns()
    bar = progress_bar(total=cfg.real_steps, desc="learn", unit="real step")
    try:
        with pinned_torch_threads(cfg.torch_threads):
            for k in itertools.count():
                spent = curve.points[-1]["real_steps"] if curve.points else 0
                if spent >= cfg.real_steps:
                    break
                it = Iteration(out, k)
                point = it.point()
                new = point is None
                if new:
                    target = min(cfg.collect_steps, cfg.real_steps - spent)
                    point = run_iteration(cfg, it, curve, target, max_turns)
                    _write_json(it.record, point)
                curve.add(point)
                bar.update(min(point["real_steps"], cfg.real_steps) - bar.n)
                bar.set_postfix(ret=f"{point['return']:.3g}", **({"greedy": f"{point['greedy']:.0f}"}
                                                                 if point["greedy"] is not None else {}))
                _write_curve(out, cfg, curve, new)
    finally:
        bar.close()
    return out


def run_iteration(cfg: LearnConfig, it: Iteration, curve: Curve, steps: int,
                  max_turns: int) -> dict[str, Any]:
    """Collect whole games to ``steps`` real steps, fit the world model, train the agent, evaluate:
    iteration ``it``'s curve point. ``curve`` holds the earlier iterations' points (their files,
    weights and real steps)."""
    from rpg_env.policies.sb3 import SB3Policy

    earlier = [Iteration(it.root, k) for k in range(it.k)]
    agent = earlier[-1].agent / "model.zip" if earlier else None
    policy = "random" if agent is None else SB3Policy.load(agent, deterministic=False)
    timings: dict[str, float] = {}
    tick, cpu = time.perf_counter(), time.process_time()
    collected = stage_collect(cfg, it, policy, steps, max_turns)
    steps = (curve.points[-1]["real_steps"] if curve.points else 0) + collected["agent_steps"]
    timings["collect"], tick = time.perf_counter() - tick, time.perf_counter()
    world_model = stage_world_model(cfg, it, [e.games for e in earlier] + [it.games],
                                    earlier[-1].world_model if earlier else None)
    timings["world_model"], tick = time.perf_counter() - tick, time.perf_counter()
    results = stage_agent(cfg, it, world_model, agent)
    timings["agent"] = time.perf_counter() - tick
    timings["cpu"] = time.process_time() - cpu  # every thread of this process
    return _iteration_point(it, steps, collected, results, {name: round(s, 1) for name, s in timings.items()})


def extend_budget(out: Path, cfg: LearnConfig, steps: int, command: str) -> LearnConfig:
    """The run in ``out`` with its budget raised to ``steps``: noted in ``provenance.json`` (with the
    code that runs the new iterations), then written to ``config.yaml``. Refused where the result
    would differ from a run of ``steps`` from the start."""
    if steps < cfg.real_steps:
        raise InputError(f"--steps {steps} is below the run's budget of {cfg.real_steps}: a run can be "
                         "extended, not cut (its curve.json holds every point it reached)")
    finished = [p for p in (Iteration(out, k).point() for k in range(len(list(out.glob("iter_*")))))
                if p is not None]
    if cfg.planned_steps(cfg.game_turns())[-1] < cfg.collect_steps or \
            any(p.get("collect_target", cfg.collect_steps) < cfg.collect_steps for p in finished):
        raise InputError(f"the run's last iteration collected only what was left of its budget of "
                         f"{cfg.real_steps}, so extending it would not equal a run of {steps} from the "
                         f"start; start a new run with --steps {steps}")
    record = json.loads((out / "provenance.json").read_text())
    extensions = record.setdefault("extended", [])
    if not extensions or extensions[-1]["real_steps"] != steps:  # a killed extension is noted once
        note = provenance(seed=cfg.seed)
        extensions.append({"real_steps": steps, "from_real_steps": cfg.real_steps, "command": command,
                           **{key: note[key] for key in ("created", "git_revision", "versions")}})
        _write_json(out / "provenance.json", record)
    cfg.real_steps = steps
    write_whole(out / CONFIG_FILE, tc.to_yaml(cfg))
    return cfg.validate()


def _prepare(out: Path) -> None:
    from rpg_base.cli import output_folder_contents

    if output_folder_contents(out, LEARN_OUTPUTS, "a learn run"):
        raise FileExistsError(f"{out} already holds a learn run; continue it with --resume {out} or choose "
                              "another --out (nothing was overwritten)")
    out.mkdir(parents=True, exist_ok=True)


def _write_curve(out: Path, cfg: LearnConfig, curve: Curve, new: bool) -> None:
    """``curve.json`` and ``curve.png``, rewritten after every iteration, and the tensorboard
    scalars of a ``new`` point (a resumed run's earlier points are logged already)."""
    from torch.utils.tensorboard import SummaryWriter

    _write_json(out / CURVE_FILE, curve.to_dict(cfg))
    plot_curve(curve.points, out / "curve.png", title=f"learn from scratch, seed {cfg.seed}, "
                                                      f"{cfg.real_steps:,} real steps")
    if not new:
        return
    point = curve.points[-1]
    with SummaryWriter(str(out / "tb")) as tb:
        step = point["real_steps"]
        tb.add_scalar("real/return", point["return"], step)
        for key in ("greedy", "vs_greedy", "success"):
            if point.get(key) is not None:
                tb.add_scalar(f"real/{key}", point[key], step)


def plot_curve(points: list[dict[str, Any]], path: Path, title: str) -> None:
    """Real return (95% interval) against real steps, greedy (where the game has it) and random as
    lines."""
    plt = pyplot()
    steps = np.array([p["real_steps"] for p in points])
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(steps, [p["return"] for p in points], "o-", label="learner (real game)")
    ax.fill_between(steps, [p["ci95"][0] for p in points], [p["ci95"][1] for p in points], alpha=0.2)
    if all(p["greedy"] is not None for p in points):
        ax.plot(steps, [p["greedy"] for p in points], "--", color="gray", label="greedy")
    ax.plot(steps, [p["random"] for p in points], ":", color="gray", label="random")
    ax.set_xlabel("real learner steps")
    ax.set_ylabel("return per episode")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


# ------------------------------------------------------------------------------------- command
def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m rpg_worldmodel.learn", description=__doc__.split("\n\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog="config keys:\n\n" + tc.format_keys(LearnConfig))
    parser.add_argument("--steps", type=positive_int, default=None,
                        help="real learner steps (config real_steps)")
    parser.add_argument("--seed", type=int, default=None, help="seed (config seed)")
    parser.add_argument("--env-id", default=None, help="the real game (config env_id; its keyword arguments: "
                                                       "env.KEY=VALUE)")
    # switches of the movement table and reward prior the world models no longer have
    parser.add_argument("--no-move-rules", "--no-rules", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--config", default=None, help="YAML file of LearnConfig keys")
    parser.add_argument("--out", type=output_folder, default=None,
                        help="run folder (default: runs/learn/<time>-s<seed>)")
    parser.add_argument("--resume", type=Path, default=None, metavar="DIR",
                        help="finish the run in DIR (its config.yaml; no other argument but --steps, which "
                             "extends it to a larger budget)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    words = list(argv) if argv is not None else sys.argv[1:]
    command = "python -m rpg_worldmodel.learn " + portable_command(words)
    if args.no_move_rules:
        print("note: --no-move-rules has no effect: the world models have no movement table or reward "
              "prior to turn off; they learn both", file=sys.stderr)
    if args.resume is not None:
        given = [name for name in ("seed", "env_id", "config", "out") if getattr(args, name) is not None]
        if given or args.overrides:
            parser.error("--resume takes no other argument but --steps: the run keeps its config.yaml")
        if missing := [n for n in (CONFIG_FILE, "provenance.json") if not (args.resume / n).is_file()]:
            raise InputError(f"--resume {args.resume}: no learn run there ({' and '.join(missing)} missing); "
                             "start one with --out DIR")  # both are written before any stage runs
        cfg = load_run_config(args.resume)
        if args.steps is not None and args.steps != cfg.real_steps:
            cfg = extend_budget(args.resume, cfg, args.steps, command)
        print(f"run folder: {learn(cfg, args.resume, resume=True)}")
        return 0
    flags = {"real_steps": args.steps, "seed": args.seed, "env_id": args.env_id}
    cfg = tc.load(LearnConfig, args.config, args.overrides, {k: v for k, v in flags.items() if v is not None})
    out = args.out or Path(DEFAULT_OUT_ROOT) / f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-s{cfg.seed}"
    print(f"run folder: {learn(cfg, out, command)}")
    return 0


if __name__ == "__main__":
    run_command(main)
