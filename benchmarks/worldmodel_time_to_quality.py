"""Time to held-out quality: world-model configurations trained on the same games, scored on the
same held-out windows, against training wall-clock and sequences seen.

Data: the pipeline's self file (1,500 games of the shipped DQN expert, learner streams, seed 0),
split by game as training splits it (1,200 / 150 / 150). Every candidate trains on the same train
games with its own config; at regular steps it is scored on the same held-out windows: the test
split, every transition once with full history (as ``rpg_worldmodel.evaluate`` scores it). Figures:
next-view cross-entropy (nats per cell), cell accuracy, next-action accuracy.

Candidates train *interleaved*: ``--chunk`` steps of one, then of the next, round-robin, each
chunk timed alone (evaluation is not timed), so load from other processes hits all alike.
Sorrel's ``ViTOneHot`` trains in its own virtualenv (``--sorrel-python``, see shared/ANCHORS.md)
on the same train games and is scored on the same windows; it runs after ours (not interleaved)
and is reported for the record. ``--sorrel-from RESULT.json`` reuses the Sorrel row of an earlier
result instead of training it again (the JSON says which file it came from); ``--reference-from
RESULT.json`` likewise reuses the reference config's row, and does by default from the committed
results: the reference config (the first version's shape: learned positions, a linear action head,
no reward head, map, table or refiner, and the two-step memory convolution, a setting since removed)
can no longer be trained, so the default is timed to the target CE of its measured row.

    python benchmarks/worldmodel_time_to_quality.py [--candidates default ...]
        [--sorrel-python /work/sorrel-venv/bin/python] [--quick]
    python benchmarks/worldmodel_time_to_quality.py --candidates "w96=model.width=96 model.num_heads=3"
    python benchmarks/worldmodel_time_to_quality.py --device cuda --candidates default \
        --out benchmarks/results/worldmodel_time_to_quality_gpu.json

A candidate is ``default`` or ``name=key=value ...`` overrides of the default config. Writes
``benchmarks/results/worldmodel_time_to_quality.json`` and ``.png``, with
``speedup_vs_reference_config``: the reference's seconds to reach its own final view CE divided
by the default's seconds to reach the same CE (linear interpolation between scoring points), and
``candidates``: the same ratio for every candidate, with its final view CE and action accuracy.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

RESULTS = Path(__file__).resolve().parent / "results"
CONFIGS = Path(__file__).resolve().parents[1] / "rpg_worldmodel" / "configs"
DEFAULT_DATA = Path("runs/benchmarks/dqn_1500.h5")


# ---------------------------------------------------------------------------- held-out windows
@dataclass
class HeldOut:
    """The scored windows: views (W, T+1, C, V, V) uint8, actions (W, T+1), score (W, T) bool."""

    views: np.ndarray
    actions: np.ndarray
    score: np.ndarray


def held_out(data: Path, num_frames: int, max_windows: int = 0) -> HeldOut:
    """The test split's windows (every transition once, full history); ``max_windows`` > 0 keeps
    that many, evenly spaced (a cheaper estimate, for sweeps)."""
    from rpg_worldmodel.config import DataConfig
    from rpg_worldmodel.data.shards import DataFiles, training_splits
    from rpg_worldmodel.data.stores import EpisodeStore
    from rpg_worldmodel.data.windows import plan_windows

    test = training_splits(DataFiles.open(str(data)), DataConfig())["test"]
    store = EpisodeStore.load(data, test)
    plan = plan_windows(store.lengths, num_frames, "full")
    keep = np.arange(len(plan.rows))
    if 0 < max_windows < len(keep):
        keep = np.unique(np.linspace(0, len(keep) - 1, max_windows).astype(int))
    views, actions, _ = store.gather(plan.rows[keep], plan.starts[keep], num_frames + 1)
    return HeldOut(views, actions, plan.score[keep])


def score(predict, windows: HeldOut, batch: int = 512) -> dict[str, float]:
    """``predict(views float (B,T,C,V,V), actions (B,T)) -> (view logits (B,T,C,V,V), action
    logits (B,T,A))`` scored on the windows' scored positions."""
    ce = cells = correct = acts = act_correct = 0.0
    with torch.inference_mode():
        for a in range(0, len(windows.views), batch):
            v = torch.as_tensor(windows.views[a : a + batch]).float()
            act = torch.as_tensor(windows.actions[a : a + batch])
            t = v.shape[1] - 1
            view_logits, action_logits = predict(v[:, :t], act[:, :t])
            w, p = np.nonzero(windows.score[a : a + batch])
            target = v[w, p + 1].argmax(1)
            log_probs = torch.log_softmax(view_logits[w, p].float(), 1)
            ce += float(-log_probs.gather(1, target[:, None]).sum())
            cells += target.numel()
            correct += float((log_probs.argmax(1) == target).sum())
            act_correct += float((action_logits[w, p, :4].argmax(-1) == act[w, p + 1]).sum())
            acts += len(w)
    return {"view_ce": ce / cells, "cell_acc": correct / cells, "action_acc": act_correct / acts}


# ---------------------------------------------------------------------------- our candidates
@dataclass
class Candidate:
    """One configuration in training: the model, optimizer and batch order of `rpg_worldmodel.train`."""

    name: str
    cfg: object
    curve: list[dict] = field(default_factory=list)
    step: int = 0
    seconds: float = 0.0

    def start(self, data: Path, device: str = "cpu") -> None:
        """`rpg_worldmodel.train.setup` on ``data``: seeds, split, model, optimizer, as a run has them,
        on ``device``."""
        from rpg_worldmodel.data.windows import EpochBatchSampler
        from rpg_worldmodel.distributed import Processes
        from rpg_worldmodel.train import setup

        self.cfg.data.path = str(data)
        self.cfg.out_dir = tempfile.mkdtemp(prefix=f"ttq_{self.name}_")  # nothing is written there
        self.cfg.train.device = device
        self.run = setup(self.cfg, Processes.from_env(device))
        self.batches = iter(EpochBatchSampler(len(self.run.train_set), self.cfg.train.batch_size,
                                              self.cfg.train.seed, 0, self.cfg.train.max_steps))
        self.mask_gen = torch.Generator(device=self.run.device)  # as rpg_worldmodel.train makes it
        self.model = self.run.model

    @property
    def done(self) -> bool:
        return self.step >= self.cfg.train.max_steps

    def advance(self, steps: int) -> None:
        """Train ``steps`` steps of `rpg_worldmodel.train.train_step` (timed: batch, loss, backward,
        clip, optimizer step)."""
        from rpg_worldmodel.train import train_step

        self.run.engine.train()
        tick = time.perf_counter()
        for _ in range(min(steps, self.cfg.train.max_steps - self.step)):
            batch = self.run.train_set.get_batch(next(self.batches))
            train_step(self.run, batch, self.step, self.mask_gen)
            self.step += 1
        if self.run.device.type == "cuda":  # the clock stops when the GPU's queued work is done
            torch.cuda.synchronize(self.run.device)
        self.seconds += time.perf_counter() - tick

    def evaluate(self, windows: HeldOut) -> None:
        self.model.eval()
        device = self.run.device

        def predict(views: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, ...]:
            view_logits, action_logits = tuple(self.model(views.to(device), actions.to(device)))[:2]
            return view_logits.cpu(), action_logits.cpu()

        figures = score(predict, windows)
        self.curve.append({"step": self.step, "sequences": self.step * self.cfg.train.batch_size,
                           "train_seconds": round(self.seconds, 3), **figures})
        print(f"  {self.name:>12} step {self.step:>5}  {self.seconds:7.1f} s  "
              f"view CE {figures['view_ce']:.4f}  action acc {figures['action_acc']:.3f}", flush=True)


def make_candidate(spec: str, quick: bool):
    from rpg_base.errors import InputError
    from rpg_worldmodel.config import load_world_model_config

    name, _, overrides = spec.partition("=")
    path = CONFIGS / f"{name}.yaml"
    if not overrides and name == "default":  # the config dataclasses' defaults: no file holds them
        cfg = load_world_model_config(None)
    elif not overrides and path.is_file():
        cfg = load_world_model_config(path)
    elif not overrides:
        # dream_*.yaml there configure the agents trained in imagination, not a world model
        names = sorted(p.stem for p in CONFIGS.glob("*.yaml"))
        shipped = ["default", *(n for n in names if not n.startswith("dream_"))]
        raise InputError(f"--candidates {spec!r}: no config of that name; use one of {shipped} or "
                         "name=key=value ... (overrides of the default)")
    else:
        cfg = load_world_model_config(None, overrides.split())
    if quick:
        cfg.train.max_steps = 40
    return Candidate(name, cfg)


def run_ours(candidates: list[Candidate], data: Path, eval_every: int, chunk: int,
             eval_windows: int = 0, device: str = "cpu") -> None:
    windows: dict[int, HeldOut] = {}
    for c in candidates:
        c.start(data, device)
        windows.setdefault(c.cfg.model.num_frames, held_out(data, c.cfg.model.num_frames, eval_windows))
    while not all(c.done for c in candidates):
        for c in candidates:
            if c.done:
                continue
            before = c.step
            c.advance(min(chunk, eval_every - c.step % eval_every))
            if c.step // eval_every > before // eval_every or c.done:
                c.evaluate(windows[c.cfg.model.num_frames])


# ---------------------------------------------------------------------------- Sorrel (its own venv)
def sorrel_worker(folder: str, steps: int, eval_every: int, threads: int) -> None:
    """Runs in Sorrel's virtualenv: trains ViTOneHot on the train views, scores held-out windows."""
    from sorrel.buffers import TransformerBuffer
    from sorrel.models.pytorch.transformer import ViTOneHot

    torch.set_num_threads(threads)
    train = np.load(Path(folder) / "train.npz")
    test = np.load(Path(folder) / "test.npz")
    windows = HeldOut(test["views"], test["actions"], test["score"])
    buffer = TransformerBuffer(capacity=len(train["views"]), obs_shape=(6, 9, 9), n_frames=5)
    buffer.states[:], buffer.actions[:] = train["views"], train["actions"]
    buffer.idx, buffer.size = 0, len(train["views"])
    np.random.seed(0)  # noqa: NPY002 - Sorrel samples from NumPy's global RNG
    torch.manual_seed(0)
    model = ViTOneHot(state_size=(6, 9, 9), action_space=4, layer_size=192, patch_size=3, num_frames=5,
                      batch_size=64, num_layers=2, num_heads=3, memory=buffer, LR=1e-3, device="cpu", seed=0)
    curve, seconds = [], 0.0

    def predict(v, a):
        # Per cell and channel ViTOneHot gives (off, on) logits; "exactly one channel on" is the
        # softmax over channels of the on-minus-off log-odds.
        states, actions = model(v, a[..., None])  # (B, T, 2, V, V, C)
        return (states[:, :, 1] - states[:, :, 0]).permute(0, 1, 4, 2, 3), actions

    for step in range(1, steps + 1):
        model.train()
        tick = time.perf_counter()
        model.train_model()
        seconds += time.perf_counter() - tick
        if step % eval_every == 0 or step == steps:
            model.eval()
            curve.append({"step": step, "sequences": step * 64, "train_seconds": round(seconds, 3),
                          **score(predict, windows)})
            print(json.dumps(curve[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"curve": curve, "parameters": sum(p.numel() for p in model.parameters())}))


def run_sorrel(python: str, data: Path, steps: int, eval_every: int, threads: int) -> dict:
    """Sorrel's curve: its buffer holds the train games' learner views back to back (its sampler
    draws windows across episode ends too, as in the reference)."""
    from rpg_worldmodel.config import DataConfig
    from rpg_worldmodel.data.shards import DataFiles, training_splits
    from rpg_worldmodel.data.stores import EpisodeStore

    splits = training_splits(DataFiles.open(str(data)), DataConfig())
    store = EpisodeStore.load(data, splits["train"])
    actions = np.concatenate([np.append(store.episode(r)[1], 0) for r in range(len(store))])
    windows = held_out(data, 5)
    with tempfile.TemporaryDirectory() as folder:
        np.savez(Path(folder) / "train.npz", views=store.obs, actions=actions)
        np.savez(Path(folder) / "test.npz", views=windows.views, actions=windows.actions, score=windows.score)
        cmd = [python, str(Path(__file__).resolve()), "--sorrel-worker", folder, "--sorrel-steps", str(steps),
               "--eval-every", str(eval_every), "--threads", str(threads)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=7200)
    if out.returncode:
        raise RuntimeError(f"Sorrel worker failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------- summary
def seconds_to_reach(curve: list[dict], target: float) -> float | None:
    """Training seconds at which the view CE first reaches ``target`` (linear interpolation between
    scoring points; None if it never does)."""
    previous = {"train_seconds": 0.0, "view_ce": float("inf")}
    for point in curve:
        if point["view_ce"] <= target:
            if not np.isfinite(previous["view_ce"]):
                return point["train_seconds"]
            share = (previous["view_ce"] - target) / (previous["view_ce"] - point["view_ce"])
            return previous["train_seconds"] + share * (point["train_seconds"] - previous["train_seconds"])
        previous = point
    return None


def summarise(rows: dict[str, dict]) -> dict:
    out: dict = {}
    ref, new = rows.get("reference"), rows.get("default")
    candidates: dict[str, dict] = {}
    if ref:
        target = ref["curve"][-1]["view_ce"]
        t_ref = seconds_to_reach(ref["curve"], target)
        for name, row in rows.items():
            t = seconds_to_reach(row["curve"], target)
            last = row["curve"][-1]
            candidates[name] = {"seconds_to_reference_ce": t,
                                "speedup_vs_reference_config": None if not t else t_ref / t,
                                "final_view_ce": last["view_ce"], "final_action_acc": last["action_acc"],
                                "final_train_seconds": last["train_seconds"]}
        if new:
            out["reference_final_view_ce"] = target
            out["reference_seconds"] = t_ref
            out["default_seconds_to_reference_ce"] = candidates["default"]["seconds_to_reference_ce"]
            out["speedup_vs_reference_config"] = candidates["default"]["speedup_vs_reference_config"]
    sorrel = rows.get("sorrel")
    if sorrel and new:
        best = min(p["view_ce"] for p in sorrel["curve"])
        t_sorrel = next(p["train_seconds"] for p in sorrel["curve"] if p["view_ce"] == best)
        t_new = seconds_to_reach(new["curve"], best)
        out["sorrel_best_view_ce"] = best
        out["speedup_vs_sorrel"] = None if not t_new else t_sorrel / t_new
    if candidates:
        out["candidates"] = candidates
    return out


def plot(rows: dict[str, dict], path: Path) -> None:
    from rpg_base.results import pyplot, save_figure

    plt = pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, row in rows.items():
        x = [p["train_seconds"] for p in row["curve"]]
        s = [p["sequences"] for p in row["curve"]]
        y = [p["view_ce"] for p in row["curve"]]
        axes[0].plot(x, y, "o-", markersize=3, label=name)
        axes[1].plot(s, y, "o-", markersize=3, label=name)
    for ax, xlabel in zip(axes, ("training seconds (interleaved)", "training sequences"), strict=True):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("held-out next-view CE (nats/cell)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("time to held-out quality (same train games, same test windows)")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def ensure_data(path: Path) -> Path:
    """The pipeline's self file (1,500 DQN games, seed 0), recorded once and reused; an existing
    file is checked first (a folder or a foreign file is refused, before any training)."""
    from rpg_base.errors import InputError
    from rpg_env.experts import pretrained_path
    from rpg_env.record import record
    from rpg_env.trajectories.reader import TrajectoryFile

    if path.is_dir():
        raise InputError(f"--data {path} is a folder: name a trajectory file (recorded there if missing)")
    if path.exists():
        with TrajectoryFile(path):
            return path
    record(str(pretrained_path("dqn")), path, 1500, seed=0, num_envs=64, mode="w", policy_id="dqn",
           record_co_players=False)
    return path


def build_parser() -> argparse.ArgumentParser:
    # rpg_env is imported here, not at the top: the Sorrel worker runs this file in Sorrel's own
    # virtualenv, where only torch, numpy and sorrel are installed.
    from rpg_base.cli import (
        ArgumentParser,
        device_name,
        existing_file,
        non_negative_int,
        output_file,
        positive_int,
    )

    parser = ArgumentParser(prog="python benchmarks/worldmodel_time_to_quality.py",
                            description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", nargs="+", default=["default"],
                        help="default or name=key=value ... overrides of the default")
    parser.add_argument("--data", type=output_file, default=DEFAULT_DATA, help="recorded once if missing")
    parser.add_argument("--sorrel-python", type=existing_file, default=None,
                        help="python of a virtualenv with sorrel==1.6.0")
    parser.add_argument("--sorrel-steps", type=positive_int, default=2000)
    parser.add_argument("--sorrel-from", type=existing_file, default=None,
                        help="reuse the Sorrel row of an earlier result JSON instead of training it")
    parser.add_argument("--reference-from", type=existing_file,
                        default=RESULTS / "worldmodel_time_to_quality.json",
                        help="the reference row of an earlier result JSON (its final view CE is the "
                             "target; default: the committed results, the reference config holding a "
                             "removed setting, model.memory_conv)")
    parser.add_argument("--device", type=device_name, default="cpu",
                        help="cpu (the recorded comparison) or cuda[:N]: where our candidates train")
    parser.add_argument("--eval-every", type=positive_int, default=200, help="steps between scoring points")
    parser.add_argument("--chunk", type=positive_int, default=50, help="steps per interleaved turn")
    parser.add_argument("--threads", type=positive_int, default=2)
    parser.add_argument("--eval-windows", type=non_negative_int, default=0,
                        help="score this many evenly spaced held-out windows (0: all; for cheaper sweeps)")
    parser.add_argument("--quick", action="store_true", help="40 steps each, a smoke check (no JSON written)")
    parser.add_argument("--out", type=output_file, default=RESULTS / "worldmodel_time_to_quality.json")
    return parser


def worker_main(argv: list[str] | None = None) -> None:
    """Sorrel's run, in Sorrel's virtualenv (`run_sorrel` starts it)."""
    parser = argparse.ArgumentParser(description="Sorrel worker of benchmarks/worldmodel_time_to_quality.py")
    parser.add_argument("--sorrel-worker", required=True)
    for name in ("--sorrel-steps", "--eval-every", "--threads"):
        parser.add_argument(name, type=int, required=True)
    args = parser.parse_args(argv)
    sorrel_worker(args.sorrel_worker, args.sorrel_steps, args.eval_every, args.threads)


def earlier_row(path: Path, name: str, flag: str, instead: str) -> dict:
    """Row ``name`` of an earlier result JSON (``flag``), marked as reused."""
    from rpg_base.errors import InputError
    from rpg_base.provenance import portable_path

    try:
        earlier = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"{flag} {path} is not valid JSON ({err})") from None
    rows = earlier.get("rows") if isinstance(earlier, dict) else None
    if not isinstance(rows, dict) or not isinstance(rows.get(name), dict) or not rows[name].get("curve"):
        raise InputError(f"{flag} {path} has no {name} row with a curve; {instead}")
    return {**rows[name], "reused_from": {
        "file": portable_path(path), "created": earlier.get("created"), "data": earlier.get("data"),
        "device": earlier.get("device", "cpu")}}


def main(argv: list[str] | None = None) -> None:
    from rpg_base.errors import InputError
    from rpg_base.provenance import device_description, pinned_torch_threads, portable_path, provenance
    from rpg_base.results import write_results

    args = build_parser().parse_args(argv)
    eval_every = 20 if args.quick else args.eval_every
    candidates = [make_candidate(spec, args.quick) for spec in args.candidates]
    sorrel = (earlier_row(args.sorrel_from, "sorrel", "--sorrel-from", "run with --sorrel-python instead")
              if args.sorrel_from else None)
    reference = (earlier_row(args.reference_from, "reference", "--reference-from",
                             "the reference config can no longer be trained")
                 if args.reference_from else None)
    if reference is not None and any(c.name == "reference" for c in candidates):
        raise InputError("--reference-from reuses the reference row: leave reference out of --candidates")
    data = ensure_data(args.data)
    with pinned_torch_threads(args.threads):  # and the caller's setting back after
        run_ours(candidates, data, eval_every, args.chunk, args.eval_windows, args.device)
    rows = {c.name: {"config": {**c.cfg.to_dict(), "out_dir": portable_path(c.cfg.out_dir)},
                     "parameters": c.model.num_parameters(), "curve": c.curve} for c in candidates}
    if reference is not None:
        rows = {"reference": reference, **rows}
    if sorrel is not None:
        rows["sorrel"] = sorrel
    elif args.sorrel_python:
        steps = 40 if args.quick else args.sorrel_steps
        rows["sorrel"] = run_sorrel(str(args.sorrel_python), data, steps, eval_every, args.threads)
    summary = summarise(rows)
    if reference is not None:  # its seconds were timed where its run was (the row says where)
        summary["reference_reused_from"] = reference["reused_from"]
    print(f"\n{'candidate':>12} {'params':>9} {'steps':>6} {'train s':>8} {'view CE':>8} {'cell acc':>8} "
          f"{'act acc':>7}")
    for name, row in rows.items():
        last = row["curve"][-1]
        print(f"{name:>12} {row['parameters']:>9,} {last['step']:>6} {last['train_seconds']:>8.1f} "
              f"{last['view_ce']:>8.4f} {last['cell_acc']:>8.4f} {last['action_acc']:>7.3f}")
    print(json.dumps(summary, indent=1))
    if not args.quick:
        record_ = provenance(seed=0, data=portable_path(data), threads=args.threads, chunk=args.chunk,
                             device=args.device, device_name=device_description(args.device),
                             eval_every=eval_every, eval_windows=args.eval_windows, rows=rows,
                             summary=summary,
                             held_out="test split (150 games), every transition once, full history")
        write_results(args.out, record_, lambda png: plot(rows, png))


if __name__ == "__main__":
    if "--sorrel-worker" in sys.argv[1:]:
        sys.exit(worker_main())
    from rpg_base.cli import run_command

    run_command(main)
