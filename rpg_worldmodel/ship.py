"""Rebuild what ships with the package (`rpg_worldmodel.shipped`): the world model and the dream agent.

    python -m rpg_worldmodel.ship worldmodel [--pipeline OUT]   # from a pipeline run (default: run one)
    python -m rpg_worldmodel.ship dream RUN_DIR                 # a `rpg_worldmodel.dream` run folder
    python -m rpg_worldmodel.ship scratch RUN_DIR               # a `rpg_worldmodel.learn` run folder

The world model is the best checkpoint of a default ``python -m rpg_worldmodel.pipeline`` run (the
shipped DQN expert's games, the default config with its reward head), stored with fp16 weights
(loading stays ``weights_only``; the model computes in fp32), beside ``provenance.json`` (the
command, seed, data fingerprints, code revision), ``checkpoint/baselines.json`` (the evaluation's
baselines fitted on its training split, so it is evaluated beside them without that file) and
``eval.json`` (its held-out figures beside the motion oracle and the reward rule, from the
pipeline's metrics.json). The dream agent is a
dream run's ``model.zip`` with its ``config.yaml``, ``provenance.json``, ``eval.json`` and
``dream.json``. The learned-from-scratch pair is a learn run's last agent (its ``model.zip`` and
records) and last world model (best checkpoint, fp16 weights), beside the run's ``curve.json``,
``curve.png`` and ``config.yaml`` (as ``learn.yaml``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import torch

from rpg_base.cli import ArgumentParser, run_command
from rpg_base.errors import InputError
from rpg_base.provenance import portable_path, provenance
from rpg_worldmodel.checkpoint import META_FILE, MODEL_FILE, Choice, choose_checkpoint
from rpg_worldmodel.evaluation.baselines import BASELINES_FILE, fit_baselines, save_baselines
from rpg_worldmodel.evaluation.episodes import checkpoint_split, training_files
from rpg_worldmodel.evaluation.run import EvalOptions
from rpg_worldmodel.run_record import CheckpointRecord, read_record, write_record
from rpg_worldmodel.shipped import PRETRAINED_DIR, SHIPPED

#: Held-out figures copied into the shipped eval.json (per predictor, with intervals).
EVAL_FIGURES = ("view_ce", "cell_acc", "f1_items", "action_acc", "reward_acc", "return_mae", "excess_view_ce")
MAX_BYTES = 8 * 2**20


def save_half(weights: Path, dest: Path) -> None:
    """``weights`` (a checkpoint's model.pt) saved to ``dest`` in fp16; loading stays weights_only
    and the model computes in fp32."""
    state = torch.load(weights, weights_only=True)
    torch.save({k: v.half() if v.is_floating_point() else v for k, v in state.items()}, dest)


def ship_worldmodel(pipeline_out: Path, dest: Path = PRETRAINED_DIR / SHIPPED["worldmodel"][0]) -> Path:
    """Export the best checkpoint of the pipeline run in ``pipeline_out`` to ``dest``."""
    metrics_path = pipeline_out / "metrics.json"
    if not metrics_path.is_file():
        raise InputError(f"{pipeline_out} holds no pipeline run (no metrics.json); run "
                         "`python -m rpg_worldmodel.pipeline --out DIR` first or drop --pipeline")
    metrics = json.loads(metrics_path.read_text())
    choice = choose_checkpoint(pipeline_out / "run", "best")
    folder = dest / SHIPPED["worldmodel"][1]
    if dest.exists():
        shutil.rmtree(dest)
    folder.mkdir(parents=True)
    save_half(choice.folder / MODEL_FILE, folder / MODEL_FILE)
    record = read_record(choice.folder / META_FILE)
    shipped = _ship_record(record, choice, pipeline_out, folder)
    _ship_baselines(record, folder, Path(metrics["self"]).name)
    main = metrics["files"][metrics["self"]]
    held_out = {name: {fig: figs[fig] for fig in EVAL_FIGURES if fig in figs}
                for name, figs in main["predictors"].items()}
    evaluation = {"selection": main["selection"], "games": main["games"], "predictions": main["predictions"],
                  "floor_method": main.get("floor_method"), "predictors": held_out,
                  "quality_checks": main["quality_checks"], "rollout_view_ce": _rollout_summary(metrics)}
    (dest / "eval.json").write_text(json.dumps(evaluation, indent=1) + "\n")
    pipeline = metrics.get("pipeline", {})
    settings = dict(pipeline.get("settings") or {})
    if settings.get("out"):  # the folder it ran in, as a record keeps it (no machine's folders)
        settings["out"] = portable_path(settings["out"])
    (dest / "provenance.json").write_text(json.dumps(provenance(
        seed=record.seed, checkpoint_step=record.step, data=[f.to_dict() for f in shipped.data.files],
        trained_by=metrics.get("provenance", {}).get("command"), pipeline_settings=settings,
        pipeline_git_revision=metrics.get("provenance", {}).get("git_revision")), indent=1) + "\n")
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    if size > MAX_BYTES:
        raise InputError(f"the shipped world model takes {size / 2**20:.1f} MB, over the "
                         f"{MAX_BYTES // 2**20} MB budget; ship a smaller model")
    return folder


def _ship_record(record: CheckpointRecord, choice: Choice, pipeline_out: Path,
                 folder: Path) -> CheckpointRecord:
    """``record`` as the shipped model carries it (`CheckpointRecord.shipped_as`), written to
    ``folder``: its origin named from the pipeline folder on, as its data files are named only, so
    that no path of the machine that built it ships."""
    where = Path(pipeline_out.resolve().name) / choice.folder.relative_to(pipeline_out)
    shipped = record.shipped_as(dataclasses.replace(choice, folder=where).describe(), "float16")
    write_record(shipped, folder / META_FILE)
    return shipped


def _ship_baselines(record: CheckpointRecord, folder: Path, evaluated: str) -> Path:
    """The baselines fitted as `rpg_worldmodel.evaluation.run.Evaluation` fits them (its default
    options, the train split of the training file the pipeline evaluated, named ``evaluated``, else
    the first), saved in the checkpoint ``folder``, so the shipped model is evaluated beside them
    where its training file is not (known by its fingerprint there, so only the file's name is
    recorded)."""
    options = EvalOptions()
    files = training_files(record)
    trained = next((f for f in files if Path(f.name).name == evaluated), files[0])
    if trained.path is None or not trained.path.is_file():
        raise InputError(f"the run's training file {trained.name} is gone; the shipped model carries the "
                         "baselines fitted on it: ship from a pipeline run whose data is still there")
    model = record.config.model
    train = trained.part(checkpoint_split(record))["train"]
    fb = fit_baselines(trained.path, train, options.baseline_episodes, options.seed,
                       model.reward_values if model.reward_head else ())
    return save_baselines(fb, folder / BASELINES_FILE, {
        "path": trained.path.name, "fingerprint": trained.fingerprint, "seed": options.seed,
        "max_episodes": options.baseline_episodes})


def _rollout_summary(metrics: dict) -> dict | None:
    rollout = metrics.get("rollout")
    if not rollout:
        return None
    return {name: [iv["value"] for iv in figs["view_ce"]] for name, figs in rollout["predictors"].items()}


def ship_dream(run_dir: Path, dest: Path = PRETRAINED_DIR / SHIPPED["dream"][0]) -> Path:
    """Copy a dream run's agent and its records into ``dest``."""
    names = ("model.zip", "config.yaml", "provenance.json", "eval.json", "dream.json")
    missing = [n for n in names if not (run_dir / n).is_file()]
    if missing:
        raise InputError(f"{run_dir} is not a finished dream run (missing {', '.join(missing)})")
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in names:
        shutil.copy2(run_dir / name, dest / name)
    return dest / "model.zip"


def ship_scratch(run_dir: Path, dest: Path = PRETRAINED_DIR / SHIPPED["scratch"][0]) -> Path:
    """Copy a finished learn run's last agent and world model, and its curve, into ``dest``."""
    curve_path = run_dir / "curve.json"
    if not curve_path.is_file():
        raise InputError(f"{run_dir} is not a learn run with a finished iteration (no curve.json)")
    final = json.loads(curve_path.read_text())["final"]
    agent = run_dir / final["agent"]
    names = ("model.zip", "config.yaml", "provenance.json", "eval.json")
    missing = [n for n in names if not (agent.parent / n).is_file()]
    if missing:
        raise InputError(f"{agent.parent} is not a finished agent (missing {', '.join(missing)})")
    choice = choose_checkpoint(run_dir / final["world_model"], "best")
    if dest.exists():
        shutil.rmtree(dest)
    folder = dest / SHIPPED["scratch_worldmodel"][1]
    folder.mkdir(parents=True)
    for name in names:
        shutil.copy2(agent.parent / name, dest / name)
    run_files = (("curve.json", "curve.json"), ("curve.png", "curve.png"), ("config.yaml", "learn.yaml"))
    for name, as_name in run_files:
        shutil.copy2(run_dir / name, dest / as_name)
    save_half(choice.folder / MODEL_FILE, folder / MODEL_FILE)
    where = Path(run_dir.resolve().name) / choice.folder.relative_to(run_dir)
    shipped = read_record(choice.folder / META_FILE).shipped_as(
        dataclasses.replace(choice, folder=where).describe(), "float16")
    base = run_dir.resolve().parent  # where it started from, named from the run folder on
    if shipped.init_from:
        shipped = dataclasses.replace(shipped, init_from=portable_path(shipped.init_from, base))
    if shipped.config.train.init_from:
        shipped.config.train.init_from = portable_path(shipped.config.train.init_from, base)
    write_record(shipped, folder / META_FILE)
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    if size > MAX_BYTES:
        raise InputError(f"the learned-from-scratch pair takes {size / 2**20:.1f} MB, over the "
                         f"{MAX_BYTES // 2**20} MB budget; ship a smaller model")
    return dest / "model.zip"


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m rpg_worldmodel.ship", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    wm = sub.add_parser("worldmodel", help="ship the best checkpoint of a pipeline run")
    wm.add_argument("--pipeline", default=None, help="a finished pipeline run folder (default: run one now)")
    dream = sub.add_parser("dream", help="ship a dream run's agent")
    dream.add_argument("run", help="the run folder of python -m rpg_worldmodel.dream")
    scratch = sub.add_parser("scratch", help="ship a learn run's last agent and world model")
    scratch.add_argument("run", help="the run folder of python -m rpg_worldmodel.learn")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.what == "dream":
        print(ship_dream(Path(args.run)))
        return 0
    if args.what == "scratch":
        print(ship_scratch(Path(args.run)))
        return 0
    out = Path(args.pipeline) if args.pipeline else None
    if out is None:
        from rpg_worldmodel.pipeline import PipelineSettings, run_pipeline

        out = run_pipeline(PipelineSettings()).parent
    print(ship_worldmodel(out))
    return 0


if __name__ == "__main__":
    run_command(main)
