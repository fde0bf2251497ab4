"""The whole experiment on built-in defaults, in one command (the README's main job).

    python -m rpg_worldmodel.pipeline [--out DIR] [--seed S | --seeds S1 S2 ...] [--quick]

Stages (each a function, so tests and notebooks can run them one by one):

1. experts   the shipped SB3 experts (`rpg_env.experts.pretrained_path`): ``dqn`` is the
             agent we model ("self"), ``ppo`` the other agent ("cross"); scripted policies
             stand in (with a warning) where a shipped expert is missing.
2. record    each expert's games to an HDF5 trajectory file (`rpg_env.record.record`).
3. train     the world model on the self file with the default config
             (`rpg_worldmodel.train`), and that model fine-tuned with an input mask for the probes.
4. evaluate  held-out test split of the self file, beside the baselines (`rpg_worldmodel.evaluate`).
5. transfer  the same model on the cross expert's games: self-vs-cross table and relative gap.
6. probes    masking table: the model and its mask-fine-tuned probe x masks at evaluation.
7. rollouts  the model rolled open-loop 15 steps from held-out starts, scored at every step.
8. dream     its dream beside the real game over whole episodes, from the same real opening, under
             greedy and random play, the shipped DQN expert and the shipped dream agent, at
             temperature 1 and at arg-max: frames the game could show, walls that fit the moves,
             items kept, spawn rate, return gap (`rpg_worldmodel.envs.whole_games`).
9. seeds     with ``--seeds A B C``: one more model per further training seed (``run_seed_B``...),
             each scored on the same held-out and cross games; every headline figure per seed,
             its mean and a seeds-and-games bootstrap interval (`rpg_worldmodel.evaluation.seeds`).
10. report   plots and ``report.md`` (`rpg_worldmodel.report`); ``metrics.json`` beside it.

The last line printed is the path of the report. Everything is seeded by ``--seed`` (with
``--seeds``, the data and the detailed tables by the first seed). The tables, probes and rollouts
are of the first seed's model; the seeds stage adds the spread over training seeds.
``--quick`` shrinks every stage (tiny data, tiny model, a few steps) for smoke tests.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path

from rpg_base.cli import (
    ArgumentParser,
    non_negative_int,
    output_folder,
    output_folder_contents,
    positive_int,
    run_command,
)
from rpg_base.errors import InputError
from rpg_base.provenance import git_revision, pinned_torch_threads
from rpg_worldmodel.config import WorldModelConfig

PIPELINE_OUT_ROOT = "runs/pipeline"
EXPLORE_FILE = "explore.h5"  # the games of random play, in the run's data/ folder
EXPLORE_POLICY = "random"  # their policy id
#: Imagined worlds (and as many real games) of the dream stage.
DREAM_WORLDS = 32
#: What a pipeline run writes into its folder (all of it is replaced by --overwrite, nothing else).
PIPELINE_OUTPUTS = ("data", "run", "run_mask_*", "run_seed_*", "metrics.json", "examples.npz", "report.md",
                    "rollout_strip.npz", "*.png")


def default_out() -> str:
    """A fresh run folder: ``runs/pipeline/YYYYmmdd-HHMMSS`` (UTC), so reruns never collide."""
    return f"{PIPELINE_OUT_ROOT}/{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"


def prepare_out(out: Path, overwrite: bool) -> None:
    """Create ``out``; refuse one that already holds a pipeline run unless ``overwrite``, which
    removes only what an earlier run wrote there (`PIPELINE_OUTPUTS`)."""
    import shutil

    # e.g. a training run's folder is refused: --overwrite must never delete what the pipeline did not write
    previous = output_folder_contents(out, PIPELINE_OUTPUTS, "the pipeline")
    if previous and not overwrite:
        names = ", ".join(sorted(p.name for p in previous))
        raise FileExistsError(f"{out} already holds a pipeline run ({names}); choose another --out or "
                              "pass --overwrite to replace it")
    for p in previous:
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()
    out.mkdir(parents=True, exist_ok=True)


@dataclass
class PipelineSettings:
    """Sizes of every stage. The defaults fit ~10 minutes on a 2-core CPU (see docs/worldmodel.md)."""

    out: str = ""  # "" -> default_out()
    seed: int = 0
    extra_seeds: tuple[int, ...] = ()  # further training seeds (one more model each) for the seeds stage
    self_expert: str = "dqn"  # shipped expert name, "greedy"/"random", or a path to an SB3 .zip
    cross_expert: str = "ppo"
    self_games: int = 1500  # games for the self file (split by game); recording is cheap, more data
    # curbs the action head's over-fitting (measured: 600 games over-fit after ~1000 steps)
    cross_games: int = 80  # games of the cross expert (all scored: the model never saw them)
    # Games of random play trained on beside the self expert's: the expert almost never bumps into a
    # wall, so its games alone do not show the model what blocks a move (docs/worldmodel.md); the
    # action head does not learn their actions (`training_config`)
    explore_games: int = 300
    num_envs: int = 64
    record_co_players: bool = False  # model one agent's own stream, as the reference did
    train_overrides: list[str] = field(default_factory=list)  # key=value for the main run
    mask_train: str = "random_cells"  # train mask of the probe model ("" to skip that run)
    # The probe model is the main model fine-tuned with that mask for this fraction of its steps
    # (60): the table's rows then share their start and differ only by the mask.
    mask_train_steps_fraction: float = 0.05
    eval_masks: tuple[str, ...] = ()  # masking table's columns; () -> every mask of the self file's channels
    mask_eval_episodes: int = 40  # test episodes scored per cell of the masking table
    context: str = "full"  # main and transfer tables: every prediction with num_frames of history
    mask_context: str = "stride"  # masking table: non-overlapping windows (num_frames times cheaper)
    rollout_horizon: int = 15  # open-loop rollout steps scored from held-out starts (0: skip)
    bootstrap: int = 1000
    batch_size: int = 256
    # torch's CPU threads for every stage: the thread count changes the order of floating-point
    # reductions, so leaving it to the machine (or to whatever the caller last set) would make
    # the figures differ between two machines, or between a command and an in-process call.
    torch_threads: int = 2
    quick: bool = False

    @classmethod
    def quick_settings(cls, out: str = "", seed: int = 0) -> PipelineSettings:
        """A tiny end-to-end run (seconds): scripted policies, a tiny model, a few steps."""
        return cls(out=out, seed=seed, self_expert="greedy", cross_expert="random", self_games=24,
                   cross_games=6, explore_games=6, num_envs=8,
                   train_overrides=["model.width=24", "model.num_heads=2", "model.num_layers=1",
                                    "model.num_frames=3", "train.max_steps=6", "train.warmup_steps=2",
                                    "train.batch_size=16", "train.eval_every=3", "train.log_every=2",
                                    "train.checkpoint_every=3", "data.max_val_windows=64"],
                   eval_masks=("none", "random_cells", "gem"), mask_eval_episodes=4, rollout_horizon=5,
                   bootstrap=200, torch_threads=1, quick=True)


class Stage:
    """Prints ``[i/n] name ...`` and ``done in Xs`` around a stage (progress bars run inside)."""

    def __init__(self, index: int, total: int, name: str, timings: dict[str, float]):
        self.index, self.total, self.name, self.timings = index, total, name, timings

    def __enter__(self) -> Stage:
        self.start = time.perf_counter()
        print(f"[{self.index}/{self.total}] {self.name} ...", flush=True)
        return self

    def __exit__(self, exc_type, *_) -> None:
        seconds = time.perf_counter() - self.start
        self.timings[self.name] = round(seconds, 2)
        status = "failed" if exc_type else "done"
        print(f"[{self.index}/{self.total}] {self.name} {status} in {seconds:.1f}s", flush=True)


# ---------------------------------------------------------------------------- stages
def resolve_expert(name: str) -> tuple[str, str]:
    """``(policy spec for rpg_env.record, label)`` of an expert name, path or scripted policy.

    A shipped name (``dqn``, ``ppo``) that is missing falls back to a scripted policy with a
    warning (``greedy`` for dqn, ``random`` for ppo), so the pipeline still runs end to end.
    """
    if name in ("greedy", "random") or name.endswith(".zip"):
        if name.endswith(".zip") and not Path(name).is_file():
            raise FileNotFoundError(f"expert file {name} does not exist")
        if name.endswith(".zip"):
            from rpg_env.policies.sb3 import load_expert

            load_expert(name)  # a file that is not an expert zip fails here, before anything is written
        return name, Path(name).stem if name.endswith(".zip") else name
    from rpg_env.experts import PRETRAINED, pretrained_path

    if name not in PRETRAINED:
        raise InputError(f"unknown expert {name!r}: use one of {list(PRETRAINED)}, greedy, random or a .zip")
    try:
        return str(pretrained_path(name)), name
    except FileNotFoundError as exc:
        fallback = "greedy" if name == "dqn" else "random"
        print(f"WARNING: {exc}; using the scripted {fallback!r} policy instead", flush=True)
        return fallback, fallback


def resolve_experts(s: PipelineSettings) -> tuple[tuple[str, str], tuple[str, str]]:
    """``(policy, label)`` of the self and the cross expert (`resolve_expert`); the same expert
    twice is labelled ``NAME`` and ``NAME-cross``."""
    (self_policy, self_label), (cross_policy, cross_label) = (resolve_expert(s.self_expert),
                                                              resolve_expert(s.cross_expert))
    if self_label == cross_label:
        cross_label = f"{cross_label}-cross"
    return (self_policy, self_label), (cross_policy, cross_label)


def stage_record(policy: str, label: str, out: Path, games: int, seed: int, num_envs: int,
                 record_co_players: bool, quick: bool = False) -> dict:
    """Record ``games`` games of ``policy`` into ``out`` (replacing it); returns the summary."""
    from rpg_env.record import record

    summary = record(policy, out, games, seed=seed, num_envs=num_envs, mode="w", policy_id=label,
                     record_co_players=record_co_players, progress=not quick)
    summary["path"] = str(out)
    return summary


def training_config(overrides: Sequence[str], seed: int, quick: bool = False,
                    explore_policy: str | None = None) -> WorldModelConfig:
    """The default config (the dataclasses of `rpg_worldmodel.config`) plus ``overrides``, read once.

    The pipeline chooses the data file and the run folders itself, so overriding ``data.path``
    or ``out_dir`` is refused rather than ignored. ``explore_policy``: the policy id of the games
    of random play, when they are recorded; unless an override gives ``data.unmodelled_policies``
    (``[]``: learn every action), the action head does not learn their actions: learning them
    pulled its predictions of the expert towards random play (accuracy 0.864-0.865 against
    0.882-0.884 in paired runs; docs/worldmodel.md).
    """
    from rpg_base.typed_config.config import parse_override, with_overrides

    default = WorldModelConfig()
    cfg = with_overrides(replace(default, train=replace(default.train, seed=seed)), overrides).validate()
    settings = (("data.path (the recorded self file)", cfg.data.path, default.data.path),
                ("out_dir (OUT/run)", cfg.out_dir, default.out_dir))
    ignored = [what for what, value, default_value in settings if value != default_value]
    if ignored:
        raise InputError(f"the pipeline sets {' and '.join(ignored)} itself; drop that override "
                         "(--out DIR chooses the pipeline's folder)")
    if quick:
        cfg.train.progress = False
    told = {parse_override(o)[0] for o in overrides}
    if explore_policy is not None and "data.unmodelled_policies" not in told:
        cfg.data.unmodelled_policies = (explore_policy,)
    return cfg


#: Peak learning rate of the probe's fine-tuning, as a fraction of the main run's. Measured on the
#: default run (2026-11-25, 60 steps): 1e-3 and 5e-3 give the same random-cell cost (0.037-0.038
#: against 0.043 unmasked-trained), but 5e-3 first knocks the model off its optimum (val loss 0.309
#: against 0.295).
PROBE_LR_RATIO = 0.2


def masked_config(cfg: WorldModelConfig, mask: str, fraction: float, start: Path) -> WorldModelConfig:
    """``cfg`` fine-tuning checkpoint ``start`` with input mask ``mask`` for ``fraction`` of its
    steps (``train.init_from``), at `PROBE_LR_RATIO` of its learning rate."""
    import copy

    short = copy.deepcopy(cfg)
    steps = max(2, int(cfg.train.max_steps * fraction))
    short.train.max_steps = steps
    short.train.warmup_steps = min(cfg.train.warmup_steps, max(1, steps // 6))
    short.train.lr = cfg.train.lr * PROBE_LR_RATIO
    short.train.eval_every = max(1, min(cfg.train.eval_every, steps))
    short.train.checkpoint_every = max(1, min(cfg.train.checkpoint_every, steps))
    short.train.train_mask = mask
    short.train.refiner_stage = 0.0  # the probe reads views, never draws them
    short.train.init_from = str(start)
    return short.validate()


def stage_train(data: list[Path], run_dir: Path, cfg: WorldModelConfig) -> tuple[Path, Path]:
    """Train ``cfg`` on the files ``data`` into ``run_dir``; returns ``(best checkpoint, run folder)``.

    Same as ``python -m rpg_worldmodel.train --data DATA [--data MORE] --out RUN_DIR [overrides]``.
    """
    import copy

    from rpg_worldmodel.checkpoint import choose_checkpoint
    from rpg_worldmodel.train import train

    cfg = copy.deepcopy(cfg)
    cfg.data.path = str(data[0]) if len(data) == 1 else [str(p) for p in data]
    cfg.out_dir = str(run_dir)
    result = train(cfg.validate())
    print(f"    {run_dir.name}: step {result.step}, val loss {result.val.get('loss', float('nan')):.4f}, "
          f"{result.train_samples_per_s:.0f} samples/s, {result.wall_s:.0f}s", flush=True)
    print(f"    using {choose_checkpoint(result.run_dir, 'best').describe()}", flush=True)
    return Path(result.best), Path(result.run_dir)


def run_pipeline(settings: PipelineSettings, overwrite: bool = False) -> Path:
    """Run every stage on ``settings.torch_threads`` torch threads (the caller's setting is restored
    after); returns the path of ``report.md``."""
    with pinned_torch_threads(settings.torch_threads):
        return _run_stages(settings, overwrite)


def _run_stages(settings: PipelineSettings, overwrite: bool) -> Path:
    from rpg_worldmodel.data.masks import mask_choices
    from rpg_worldmodel.data.sources import DataSource
    from rpg_worldmodel.report.document import pipeline_section, write_report

    s = settings
    out = Path(s.out or default_out())
    # refused before anything is written: unknown experts, files that are not experts, bad overrides
    experts = resolve_experts(s)
    explore = EXPLORE_POLICY if s.explore_games and experts[0][1] != EXPLORE_POLICY else None
    cfg = training_config(s.train_overrides, s.seed, s.quick, explore)
    prepare_out(out, overwrite)
    timings: dict[str, float] = {}
    total, start = 10 if s.extra_seeds else 9, time.perf_counter()
    revision = git_revision()  # the code that runs (the provenance's is read as the report is written)
    with Stage(1, total, "experts", timings):
        (self_policy, self_label), (cross_policy, cross_label) = experts
        print(f"    self: {self_label} ({self_policy}); cross: {cross_label} ({cross_policy})")
    with Stage(2, total, "record", timings):
        training, cross_file, recorded = stage_record_both(s, experts, out / "data")
    self_file = training[0]
    with Stage(3, total, "train", timings):
        checkpoint, run_dir, masked = stage_train_both(s, cfg, training, out)
    masks = s.eval_masks or mask_choices(DataSource.open(self_file).channel_names)
    ev = stage_evaluate(s, checkpoint, masked, (self_file, cross_file), masks, (total, timings))
    with Stage(8, total, "dream (whole games beside the real game)", timings):
        dream = stage_dream(checkpoint, s)
    seeds = None
    if s.extra_seeds:
        with Stage(9, total, f"seeds ({', '.join(map(str, (s.seed, *s.extra_seeds)))})", timings):
            seeds = stage_seeds(ev, cfg, training, cross_file, out, s)
    section = {"settings": {**asdict(s), "eval_masks": masks}, "recorded": recorded, "run_dir": str(run_dir),
               "masked_checkpoint": str(masked) if masked else None, "timings_s": timings,
               "dream_fidelity": dream, "git_revision": revision}
    extra = {"pipeline": section, **({"seeds": seeds} if seeds else {})}
    with Stage(total, total, "report", timings):
        timings["total_before_report"] = round(time.perf_counter() - start, 2)
        metrics_path = ev.write(out, extra)
        report = write_report(metrics_path, run_dir, extra_sections=pipeline_section(section))
    timings["total"] = round(time.perf_counter() - start, 2)
    ev.write(out, extra)
    return report


def stage_record_both(s: PipelineSettings, experts: tuple[tuple[str, str], tuple[str, str]],
                      folder: Path) -> tuple[list[Path], Path, dict]:
    """Each expert's games into ``folder/<label>.h5`` and the games of random play into
    ``folder/explore.h5`` (``s.explore_games``): ``(training files, the self file first; cross file;
    summaries)``."""
    (self_policy, self_label), (cross_policy, cross_label) = experts
    self_file, cross_file = folder / f"{self_label}.h5", folder / f"{cross_label}.h5"
    recorded = {
        "self": stage_record(self_policy, self_label, self_file, s.self_games, s.seed, s.num_envs,
                             s.record_co_players, s.quick),
        "cross": stage_record(cross_policy, cross_label, cross_file, s.cross_games, s.seed + 1,
                              s.num_envs, s.record_co_players, s.quick),
    }
    training = [self_file]
    if s.explore_games:
        training.append(folder / EXPLORE_FILE)
        recorded["explore"] = stage_record("random", EXPLORE_POLICY, training[-1], s.explore_games,
                                           s.seed + 2, s.num_envs, s.record_co_players, s.quick)
    for key, summary in recorded.items():
        print(f"    {key}: {summary['games']} games, {summary['agent_steps']} steps, mean return "
              f"{summary['mean_return']:.2f}, {summary['seconds']:.1f}s -> {summary['path']}")
    return training, cross_file, recorded


def stage_train_both(s: PipelineSettings, cfg: WorldModelConfig, training: list[Path],
                     out: Path) -> tuple[Path, Path, Path | None]:
    """The main model, then (unless ``s.mask_train`` is empty or none) its mask-fine-tuned probe:
    ``(main best checkpoint, main run folder, probe best checkpoint or None)``."""
    checkpoint, run_dir = stage_train(training, out / "run", cfg)
    masked = None
    if s.mask_train and s.mask_train != "none":
        masked, _ = stage_train(training, out / f"run_mask_{s.mask_train}",
                                masked_config(cfg, s.mask_train, s.mask_train_steps_fraction, checkpoint))
    return checkpoint, run_dir, masked


def stage_evaluate(s: PipelineSettings, checkpoint: Path, masked: Path | None, files: tuple[Path, Path],
                   masks: Sequence[str], progress: tuple[int, dict[str, float]]):
    """Stages 4 to 7 on ``files`` (self, cross): held-out table, transfer, masking probes with
    ``masks``, rollouts; returns the `Evaluation` (``progress``: the stage count and timings)."""
    from rpg_worldmodel.evaluation.run import EvalOptions, Evaluation
    from rpg_worldmodel.report.text import format_table, quality_lines, rollout_line, transfer_line

    (self_file, cross_file), (total, timings) = files, progress
    options = EvalOptions(num_boot=s.bootstrap, seed=s.seed, batch_size=s.batch_size, context=s.context,
                          mask_context=s.mask_context, mask_episodes=s.mask_eval_episodes)
    with Stage(4, total, "evaluate (held-out test split)", timings):
        ev = Evaluation(checkpoint, [self_file, cross_file], options)
        self_result = ev.evaluate_file(self_file)
        print(format_table(self_result), *quality_lines(self_result), sep="\n")
    with Stage(5, total, "transfer (cross expert)", timings):
        ev.evaluate_file(cross_file, num_examples=0)
        print("    " + transfer_line(ev.transfer()[str(cross_file)]))
    with Stage(6, total, "masking probes", timings):
        ev.masking(masks, [masked] if masked is not None else [])
    with Stage(7, total, f"rollouts ({s.rollout_horizon} steps, open loop)", timings):
        if s.rollout_horizon:
            print("    " + rollout_line(ev.rollout(s.rollout_horizon)))
    return ev


def stage_seeds(first, cfg: WorldModelConfig, training: list[Path], cross_file: Path, out: Path,
                s: PipelineSettings) -> dict:
    """One more model per seed of ``s.extra_seeds``, trained on ``training`` (the self file first) and
    scored like the first (``first``, an `Evaluation` whose files are scored); the headline figures
    across all seeds."""
    import copy

    from rpg_worldmodel.evaluation.run import Evaluation
    from rpg_worldmodel.evaluation.seeds import across_seeds
    from rpg_worldmodel.report.text import seeds_line

    self_file = training[0]
    own, cross = [first.scores[str(self_file)][1]], [first.scores[str(cross_file)][1]]
    runs = [str(out / "run")]
    for seed in s.extra_seeds:
        seeded = copy.deepcopy(cfg)
        seeded.train.seed = seed
        checkpoint, run_dir = stage_train(training, out / f"run_seed_{seed}", seeded)
        ev = Evaluation(checkpoint, [self_file, cross_file], first.options, baselines=first.baselines)
        own.append(ev.scores_of(self_file))
        cross.append(ev.scores_of(cross_file))
        runs.append(str(run_dir))
    result = across_seeds((s.seed, *s.extra_seeds), runs, own, cross, s.bootstrap, s.seed)
    print("    " + seeds_line(result), flush=True)
    return result


def stage_dream(checkpoint: Path, s: PipelineSettings) -> dict:
    """The trained model's dream beside the real game over whole episodes
    (`rpg_worldmodel.envs.whole_games`), under the scripts (greedy, random, greedy with 30% random
    actions, a wall-follower), the shipped DQN expert and the shipped dream agent (`JUDGING_POLICIES`),
    sampled at temperature 1 (``policies``) and at arg-max (``argmax``): what the one-step figures
    cannot see (frames the game could not show, no one room for the whole game, co-players and items
    lost)."""
    from rpg_worldmodel.checkpoint import load_checkpoint
    from rpg_worldmodel.envs.whole_games import (
        JUDGING_POLICIES,
        dream_and_real,
        judging_policy,
        judging_source,
        reference_of,
    )
    from rpg_worldmodel.report.text import dream_line

    loaded = load_checkpoint(checkpoint)
    ref, worlds = reference_of(loaded), 8 if s.quick else DREAM_WORLDS
    out: dict = {"worlds": worlds, "sampler": "temperature 1", "skipped": {}}
    names = []
    for name in JUDGING_POLICIES:  # a shipped agent removed from the install costs its rows, not the run
        try:
            judging_source(name)
            names.append(name)
        except FileNotFoundError as exc:
            out["skipped"][name] = str(exc)
            print(f"    {name}: skipped ({exc})", flush=True)
    for key, sample in (("policies", True), ("argmax", False)):
        out[key] = {}
        for name in names:
            row = dream_and_real(loaded, ref, partial(judging_policy, name), sample=sample,
                                 worlds=worlds, seed=s.seed)
            print(f"    {name}{'' if sample else ', arg-max'}: " + dream_line(row), flush=True)
            row.pop("imagined_steps_per_s")  # a timing: the stage's time is in timings_s
            out[key][name] = row
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m rpg_worldmodel.pipeline",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=output_folder, default=None,
                        help="folder for data, runs, metrics.json, report.md "
                        f"(default: a new {PIPELINE_OUT_ROOT}/YYYYmmdd-HHMMSS)")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier pipeline run in --out")
    parser.add_argument("--seed", type=non_negative_int, default=0)
    parser.add_argument("--seeds", type=non_negative_int, nargs="+", default=None, metavar="S",
                        help="train and evaluate one model per seed (data recorded once, with the first) "
                             "and report every headline figure across them")
    parser.add_argument("--quick", action="store_true", help="tiny smoke run (seconds)")
    parser.add_argument("--self-expert", default=None, help="dqn (default), ppo, greedy, random or a .zip")
    parser.add_argument("--cross-expert", default=None, help="ppo (default), dqn, greedy, random or a .zip")
    parser.add_argument("--self-games", type=positive_int, default=None)
    parser.add_argument("--cross-games", type=positive_int, default=None)
    parser.add_argument("--threads", type=positive_int, default=None,
                        help="torch CPU threads of every stage (default 2; --quick: 1); part of what makes "
                             "the figures reproducible, recorded in metrics.json")
    parser.add_argument("--no-mask-train", action="store_true",
                        help="skip training the masked probe model (the masking table then has one row)")
    parser.add_argument("overrides", nargs="*", help="training config overrides, key=value")
    args = parser.parse_args(argv)
    if args.seeds is not None and len(set(args.seeds)) != len(args.seeds):
        raise InputError(f"--seeds must be distinct, got {args.seeds}")
    seed = args.seeds[0] if args.seeds else args.seed
    out = str(args.out or "")
    s = PipelineSettings.quick_settings(out, seed) if args.quick else PipelineSettings(out=out, seed=seed)
    s.extra_seeds = tuple(args.seeds[1:]) if args.seeds else ()
    for name in ("self_expert", "cross_expert", "self_games", "cross_games"):
        if getattr(args, name) is not None:
            setattr(s, name, getattr(args, name))
    if args.threads is not None:
        s.torch_threads = args.threads
    if args.no_mask_train:
        s.mask_train = ""
    s.train_overrides = [*s.train_overrides, *args.overrides]
    print(run_pipeline(s, overwrite=args.overwrite))
    return 0


if __name__ == "__main__":
    run_command(main)
