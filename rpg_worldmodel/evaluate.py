"""Held-out evaluation of a trained world model, beside baselines, across agents and under masks.

    python -m rpg_worldmodel.evaluate --checkpoint CK --data F [--data G ...] [--out DIR]
        [--masks none random_cells gem bone food wall] [--masked-checkpoint CK2 ...]

The model runs in eval mode under ``torch.inference_mode`` (no gradient, no optimizer: the
weights cannot change). Only held-out episodes are scored: on the checkpoint's own training
file, the test split recorded in the checkpoint; on any other file, all of its episodes (or
its own test split with ``--split test``). Asking for training episodes is refused unless
``--allow-training-episodes`` is given, and then every output is labelled as such.

Which predictions are scored: every transition ``t -> t+1`` of an episode exactly once, with
as much history as the model takes (up to ``num_frames`` steps): all positions of the window
that starts at step 0, and the last position of every later window. Baselines are scored on
exactly the same transitions (see `rpg_worldmodel.baselines`) and fitted on the checkpoint's
training split only. Every figure carries a percentile bootstrap interval over games (the
learner's and co-player's episodes of one game form one cluster); model-minus-baseline
differences use a paired bootstrap.

Outputs (``--out``): ``metrics.json`` (every figure with its interval, plus provenance) and
``examples.npz`` (a few held-out views: last input, predicted, true) for the report.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from rpg_worldmodel import metrics as M
from rpg_worldmodel.baselines import (
    ActionFrequencies,
    CalibratedCells,
    action_deltas,
    copy_view,
    shift_view,
    views_to_codes,
)

VIEW_BASELINES = ("copy", "motion_oracle")
ACTION_BASELINES = ("majority_action", "previous_action")
#: Figures shown in the transfer table; ``total_ce`` is the reference's "state + action loss".
TRANSFER_FIGURES = ("view_ce", "action_ce", "total_ce", "cell_acc", "changed_acc", "f1_items", "action_acc")


class TrainingEpisodesError(ValueError):
    """Raised when an evaluation would score episodes the model was trained on."""


# ---------------------------------------------------------------------------- data access
@dataclass
class EvalSet:
    """Episodes of one trajectory file selected for scoring."""

    path: Path
    episodes: list[int]
    label: str  # "test split of the training file", "all episodes", ...
    held_out: bool = True
    game_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    agent_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    policy_ids: list[str] = field(default_factory=list)


def _open(path: str | Path):
    from rpg_env.trajectories import TrajectoryFile

    return TrajectoryFile(path)


def _episode_table(tf) -> np.ndarray:
    """The file's per-episode table (structured: game_id, agent_id, policy_id, length, ...)."""
    return tf.episodes


_DIGESTS: dict[tuple[str, int, int], str] = {}


def file_digest(path: str | Path) -> str:
    """The trajectory file's content digest (`TrajectoryFile.digest`, as recorded by training);
    cached per (path, size, mtime) so a file is hashed once per process."""
    p = Path(path).resolve()
    stat = p.stat()
    key = (str(p), stat.st_size, stat.st_mtime_ns)
    if key not in _DIGESTS:
        with _open(p) as tf:
            _DIGESTS[key] = tf.digest()
    return _DIGESTS[key]


def _meta_get(meta: dict, *names, default=None):
    for name in names:
        if isinstance(meta, dict) and name in meta:
            return meta[name]
    return default


def checkpoint_split(meta: dict) -> dict[str, list[int]]:
    """The train/val/test episode indices recorded in a checkpoint's metadata (``splits``)."""
    split = _meta_get(meta, "splits", "split")
    if not isinstance(split, dict) or "train" not in split or "test" not in split:
        raise ValueError("the checkpoint records no train/test episode split; it cannot be evaluated "
                         "on held-out episodes of its training file (retrain with the current trainer)")
    return {k: [int(i) for i in v] for k, v in split.items()}


def checkpoint_data(meta: dict) -> tuple[Path | None, str | None]:
    """(training data path, content fingerprint) recorded in a checkpoint's ``data`` record."""
    data = _meta_get(meta, "data", default={})
    if not isinstance(data, dict):
        return None, None
    path = data.get("path")
    return (Path(path) if path else None), data.get("fingerprint")


def is_training_file(meta: dict, path: str | Path) -> bool:
    """Whether ``path`` is the file the checkpoint was trained on, or a copy of it (same content).

    Raises ValueError when ``path`` *is* the training path but its content changed since
    training (re-recorded or appended): the recorded split would then be meaningless.
    """
    train_path, train_fp = checkpoint_data(meta)
    same_path = train_path is not None and Path(path).resolve() == Path(train_path).resolve()
    if train_fp is None:  # an older checkpoint without a fingerprint: trust the path
        return same_path
    same_content = file_digest(path) == train_fp
    if same_path and not same_content:
        raise ValueError(f"{path} changed since the checkpoint was trained on it (content fingerprint "
                         f"differs), so its recorded train/test split no longer applies; evaluate on the "
                         "original file or retrain")
    return same_content


def select_episodes(meta: dict, path: str | Path, split: str = "auto",
                    allow_training_episodes: bool = False, split_seed: int = 0,
                    agent_id: int | None = None) -> EvalSet:
    """Choose the episodes of ``path`` to score for a checkpoint with metadata ``meta``.

    ``split``: ``auto`` (the recorded test split on the training file, all episodes
    elsewhere), ``test``, ``val``, ``all`` or ``train``. On the training file, ``train`` and
    ``all`` include training episodes and raise `TrainingEpisodesError` unless
    ``allow_training_episodes``; then a loud warning is issued and the set is marked.
    ``agent_id`` (e.g. the config's ``data.agent_id``; None or -1: all) keeps only that agent's
    streams of another file, as training did on its own file.
    """
    if split not in ("auto", "test", "val", "all", "train"):
        raise ValueError(f"split must be auto, test, val, all or train, got {split!r}")
    path = Path(path)
    with _open(path) as tf:
        table = _episode_table(tf)
    num = len(table["game_id"])
    if is_training_file(meta, path):
        recorded = checkpoint_split(meta)
        if split in ("auto", "test"):
            episodes, label = recorded["test"], "test split recorded in the checkpoint"
        elif split == "val":
            episodes, label = recorded.get("val", []), "validation split recorded in the checkpoint"
        else:
            chosen = sorted(recorded["train"]) if split == "train" else list(range(num))
            if not allow_training_episodes:
                raise TrainingEpisodesError(
                    f"{path} is the checkpoint's training file and split={split!r} includes "
                    f"{len(set(chosen) & set(recorded['train']))} episodes the model was trained on; "
                    "evaluate on split 'test' (the default) or pass --allow-training-episodes to "
                    "score them anyway (the results are then marked as not held out)")
            warnings.warn(f"EVALUATING ON TRAINING EPISODES of {path}: these figures are NOT "
                          "held-out and overstate the model", stacklevel=2)
            episodes, label = chosen, f"{split} episodes INCLUDING TRAINING EPISODES (not held out)"
            return _finish(EvalSet(path, episodes, label, held_out=False), table)
    else:
        if split in ("auto", "all", "train"):
            episodes, label = list(range(num)), "all episodes (file not used in training)"
        else:
            from rpg_env.trajectories import split_episodes

            parts = split_episodes(table, seed=split_seed)
            episodes, label = list(parts[split]), f"{split} split of a file not used in training"
        if agent_id is not None and agent_id >= 0:
            episodes = [e for e in episodes if int(table["agent_id"][e]) == agent_id]
            label += f", agent {agent_id} streams"
    if not episodes:
        raise ValueError(f"no episodes selected in {path} (split={split!r}); record more episodes")
    return _finish(EvalSet(path, sorted(int(i) for i in episodes), label), table)


def _finish(es: EvalSet, table: np.ndarray) -> EvalSet:
    idx = np.asarray(es.episodes, dtype=np.int64)
    es.game_ids = table["game_id"][idx].astype(np.int64)
    es.agent_ids = table["agent_id"][idx].astype(np.int64)
    es.policy_ids = [str(p) for p in table["policy_id"][idx]]
    return es


@dataclass
class Batch:
    """Windows of ``T + 1`` steps with the positions to score.

    views ``(B, T+1, C, V, V)`` uint8, actions ``(B, T+1)`` int64, agent_ids ``(B,)``,
    rows ``(B,)`` index into the EvalSet's episodes, score ``(B, T)`` bool positions scored.
    """

    views: np.ndarray
    actions: np.ndarray
    agent_ids: np.ndarray
    rows: np.ndarray
    score: np.ndarray


CONTEXTS = ("full", "stride")


def window_plan(length: int, num_frames: int, context: str = "full") -> tuple[np.ndarray, np.ndarray]:
    """Window starts ``(W,)`` and scored positions ``(W, T)`` for an episode of ``length`` steps.

    Position ``p`` of the window starting at ``s`` predicts step ``s + p + 1`` from steps
    ``s .. s + p``; targets run over ``1 .. length - 1``, each exactly once.

    ``full``: one window per start ``0 .. L-T-1``; all positions of the first, the last
    position of the others (every prediction but the first T-1 has T steps of history).
    ``stride``: windows at ``0, T, 2T, ...`` with all positions scored (history 1..T steps,
    as in the training loss; about T times cheaper), plus one last window for the tail.
    """
    t = num_frames
    num = length - t
    if context not in CONTEXTS:
        raise ValueError(f"context must be one of {CONTEXTS}, got {context!r}")
    if num < 1:
        return np.zeros(0, np.int64), np.zeros((0, t), bool)
    if context == "full":
        starts = np.arange(num)
        score = np.zeros((num, t), dtype=bool)
        score[0, :] = True
        score[1:, -1] = True
        return starts, score
    starts = np.arange(0, num, t)
    score = np.ones((len(starts), t), dtype=bool)
    covered = int(starts[-1]) + t  # last target step scored so far
    if covered < length - 1:
        tail = num - 1
        targets = tail + np.arange(t) + 1
        starts = np.append(starts, tail)
        score = np.vstack([score, targets > covered])
    return starts, score


def iter_windows(es: EvalSet, num_frames: int, batch_size: int = 256, desc: str | None = None,
                 context: str = "full") -> Iterator[Batch]:
    """Windows of every selected episode, batched; each transition is scored exactly once.

    Window ``s`` holds observations ``s .. s+T`` and actions ``s .. s+T`` of an episode
    (model input: the first ``T``; targets: the last ``T``); see `window_plan` for which
    windows and positions. Episodes shorter than ``T + 1`` steps have no window.
    """
    with _open(es.path) as tf:
        t = num_frames
        pending: list[Batch] = []
        pending_n = 0
        for row, ep_index in enumerate(tqdm(es.episodes, desc=desc or f"windows {es.path.name}",
                                            unit="episode", leave=False, disable=desc == "")):
            ep = tf.episode(int(ep_index))
            obs, actions = np.asarray(ep["obs"]), np.asarray(ep["actions"]).astype(np.int64)
            starts, score = window_plan(len(actions), t, context)
            num = len(starts)
            if num < 1:
                continue
            windows = np.lib.stride_tricks.sliding_window_view(obs[: len(actions)], t + 1, axis=0)
            win_obs = np.moveaxis(windows, -1, 1)[starts]
            win_act = np.lib.stride_tricks.sliding_window_view(actions, t + 1)[starts]
            pending.append(Batch(win_obs, win_act, np.full(num, es.agent_ids[row]), np.full(num, row), score))
            pending_n += num
            if pending_n >= batch_size:
                merged = _cat_batches(pending)
                pending, pending_n = [], 0
                full = (len(merged.views) // batch_size) * batch_size
                for start in range(0, full, batch_size):
                    yield _slice_batch(merged, start, start + batch_size)
                if full < len(merged.views):
                    rest = len(merged.views)
                    pending, pending_n = [_slice_batch(merged, full, rest)], rest - full
        if pending:
            yield _cat_batches(pending)


def _cat_batches(parts: list[Batch]) -> Batch:
    return Batch(*(np.concatenate([getattr(p, f) for p in parts]) for f in
                   ("views", "actions", "agent_ids", "rows", "score")))


def _slice_batch(b: Batch, start: int, end: int) -> Batch:
    return Batch(np.ascontiguousarray(b.views[start:end]), b.actions[start:end], b.agent_ids[start:end],
                 b.rows[start:end], b.score[start:end])


def _scored(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """(window index, position) of every scored prediction in a batch."""
    return np.nonzero(batch.score)


# ---------------------------------------------------------------------------- baselines
@dataclass
class FittedBaselines:
    """Baselines fitted on the checkpoint's training split (never on evaluated episodes)."""

    channel_names: list[str]
    action_names: list[str]
    copy_cal: CalibratedCells
    shift_cal: CalibratedCells
    majority: ActionFrequencies
    previous: ActionFrequencies
    train_episodes_used: int

    @property
    def codes(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.channel_names)}

    def shift(self, codes: np.ndarray, actions: np.ndarray):
        c = self.codes
        return shift_view(codes, actions, action_deltas(self.action_names), empty=c["empty"],
                          agent=c["agent"], blocking=[c["wall"], c["agent"]])


def fit_baselines(train_path: str | Path, train_episodes: Sequence[int], max_episodes: int = 400,
                  seed: int = 0) -> FittedBaselines:
    """Fit the calibrated view baselines and the action frequencies on training episodes.

    At most ``max_episodes`` training episodes (a seeded random subset) are read; counts of
    a few hundred episodes pin the tables down far below the evaluation's noise.
    """
    with _open(train_path) as tf:
        meta = tf.meta
        channel_names = [str(c) for c in _meta_get(meta, "channel_names")]
        action_names = [str(a) for a in _meta_get(meta, "action_names")]
        missing = {"empty", "wall", "agent"} - set(channel_names)
        if missing:
            raise ValueError(f"{train_path}: channel_names {channel_names} lack {sorted(missing)}; "
                             "the baselines need them")
        chosen = np.asarray(sorted(int(i) for i in train_episodes), dtype=np.int64)
        if len(chosen) > max_episodes:
            chosen = np.sort(np.random.default_rng(seed).choice(chosen, max_episodes, replace=False))
        fb = FittedBaselines(channel_names, action_names, CalibratedCells(len(channel_names)),
                             CalibratedCells(len(channel_names)), ActionFrequencies(len(action_names), 0),
                             ActionFrequencies(len(action_names), 1), len(chosen))
        for i in tqdm(chosen, desc="fit baselines (train split)", unit="episode", leave=False):
            ep = tf.episode(int(i))
            codes = views_to_codes(np.asarray(ep["obs"]))
            actions = np.asarray(ep["actions"]).astype(np.int64)
            length = len(actions)
            if length < 1:
                continue
            now, nxt = codes[:length], codes[1 : length + 1]
            fb.copy_cal.update(*copy_view(now), nxt)
            pred, revealed, _ = fb.shift(now, actions)
            fb.shift_cal.update(pred, revealed, nxt)
            if length > 1:
                fb.majority.update(actions[:-1], actions[1:])
                fb.previous.update(actions[:-1], actions[1:])
        return fb


# ---------------------------------------------------------------------------- scoring
@dataclass
class Scores:
    """Per-unit counts of every predictor on one EvalSet (units: games)."""

    channel_names: list[str]
    unit_ids: np.ndarray  # (U,) game ids
    counts: dict[str, M.Counts]  # predictor -> per-unit counts
    by_policy: dict[str, dict[str, M.Counts]]  # policy id -> predictor -> per-unit counts
    num_windows: int
    num_predictions: int
    examples: dict[str, np.ndarray] = field(default_factory=dict)

    def figures_fn(self):
        names = self.channel_names

        def fn(totals: M.Counts) -> M.Figures:
            figs = M.figures_from_counts(totals, names)
            if "view_ce" in figs and "action_ce" in figs:
                figs["total_ce"] = figs["view_ce"] + figs["action_ce"]
            return figs

        return fn


def _model_step(model, batch: Batch, num_frames: int, mask_kind: str, mask_prob: float,
                generator: torch.Generator | None, use_agent_ids: bool,
                device: torch.device) -> tuple[np.ndarray, np.ndarray]:
    """Model log-probabilities ``(B, T, C, V, V)`` and ``(B, T, A)`` for a batch."""
    views = torch.as_tensor(np.ascontiguousarray(batch.views[:, :num_frames]), device=device).float()
    if mask_kind != "none":
        from rpg_worldmodel.data import apply_input_mask

        views = apply_input_mask(views, mask_kind, mask_prob, generator)
    actions = torch.as_tensor(batch.actions[:, :num_frames], dtype=torch.long, device=device)
    agent_ids = torch.as_tensor(batch.agent_ids, dtype=torch.long, device=device) if use_agent_ids else None
    view_logits, action_logits = model(views, actions, agent_ids)
    view_lp = torch.log_softmax(view_logits.float(), dim=2).cpu().numpy()
    action_lp = torch.log_softmax(action_logits.float(), dim=-1).cpu().numpy()
    return view_lp, action_lp


def score_eval_set(
    model,
    config,
    es: EvalSet,
    baselines: FittedBaselines | None,
    mask_kind: str = "none",
    mask_seed: int = 0,
    mask_prob: float = 0.15,
    batch_size: int = 256,
    device: str | torch.device = "cpu",
    num_examples: int = 0,
    desc: str | None = None,
    context: str = "full",
) -> Scores:
    """Score the model (and, if given, the baselines) on every transition of ``es``.

    The model is put in eval mode and run under ``torch.inference_mode``. ``mask_kind``
    hides part of the model's *input* (`rpg_worldmodel.data.apply_input_mask`, seeded with
    ``mask_seed``; ``random_cells`` hides each cell with probability ``mask_prob``); targets
    and baselines always see the unmasked views.
    """
    num_frames = int(config.model.num_frames)
    use_agent_ids = _uses_agent_ids(config)
    device = torch.device(device)
    model.eval()
    generator = torch.Generator(device=device).manual_seed(int(mask_seed)) if mask_kind != "none" else None
    units, unit_index_of_row = np.unique(es.game_ids, return_inverse=True)
    rows_counts: dict[str, list[M.Counts]] = {}
    row_units: list[np.ndarray] = []
    row_eps: list[np.ndarray] = []
    examples: dict[str, list[np.ndarray]] = {"input": [], "predicted": [], "true": []}
    example_rows: set[int] = set()
    num_windows = 0
    with torch.inference_mode():
        for batch in iter_windows(es, num_frames, batch_size, desc=desc, context=context):
            num_windows += len(batch.views)
            w, p = _scored(batch)
            codes = views_to_codes(batch.views)  # (B, T+1, V, V)
            prev, target = codes[w, p], codes[w, p + 1]
            act_prev, act_target = batch.actions[w, p], batch.actions[w, p + 1]
            view_lp, action_lp = _model_step(model, batch, num_frames, mask_kind, mask_prob, generator,
                                             use_agent_ids, device)
            parts = {"model": M.merge_counts(M.view_counts(view_lp[w, p], target, prev),
                                             M.action_counts(action_lp[w, p], act_target))}
            if baselines is not None:
                pred, revealed = copy_view(prev)
                parts["copy"] = M.view_counts(baselines.copy_cal.log_probs(pred, revealed), target, prev)
                pred, revealed, _ = baselines.shift(prev, act_prev)
                parts["motion_oracle"] = M.view_counts(baselines.shift_cal.log_probs(pred, revealed),
                                                       target, prev)
                parts["majority_action"] = M.action_counts(baselines.majority.log_probs(act_prev), act_target)
                parts["previous_action"] = M.action_counts(baselines.previous.log_probs(act_prev), act_target)
            for name, c in parts.items():
                rows_counts.setdefault(name, []).append(c)
            row_units.append(unit_index_of_row[batch.rows[w]])
            row_eps.append(batch.rows[w])
            have = sum(len(x) for x in examples["input"])
            if num_examples and have < num_examples:
                # One full-context example per episode, so the strip shows different games.
                last = np.flatnonzero(p == num_frames - 1)
                fresh = last[~np.isin(batch.rows[w[last]], list(example_rows))]
                _, first = np.unique(batch.rows[w[fresh]], return_index=True)
                take = fresh[np.sort(first)][: num_examples - have]
                example_rows.update(batch.rows[w[take]].tolist())
                examples["input"].append(prev[take])
                examples["predicted"].append(view_lp[w[take], p[take]].argmax(1))
                examples["true"].append(target[take])
    if not row_units:
        raise ValueError(f"no episode of {es.path} is longer than num_frames={num_frames} steps; "
                         "nothing to score")
    unit_idx = np.concatenate(row_units)
    ep_rows = np.concatenate(row_eps)
    flat = {name: _concat(parts) for name, parts in rows_counts.items()}
    counts = {name: M.sum_by_unit(c, unit_idx, len(units)) for name, c in flat.items()}
    by_policy: dict[str, dict[str, M.Counts]] = {}
    policies = np.asarray(es.policy_ids)
    for pid in sorted(set(es.policy_ids)):
        keep = policies[ep_rows] == pid
        by_policy[pid] = {name: M.sum_by_unit({k: v[keep] for k, v in c.items()}, unit_idx[keep], len(units))
                          for name, c in flat.items()}
    ex = {k: np.concatenate(v) if v else np.zeros((0,), np.int64) for k, v in examples.items()}
    channel_names = baselines.channel_names if baselines is not None else _channel_names(es.path)
    return Scores(channel_names, units, counts, by_policy, num_windows, len(unit_idx), ex)


def _concat(parts: list[M.Counts]) -> M.Counts:
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _channel_names(path: Path) -> list[str]:
    with _open(path) as tf:
        return [str(c) for c in _meta_get(tf.meta, "channel_names")]


def _uses_agent_ids(config) -> bool:
    return bool(getattr(config.model, "agent_embedding", False))


# ---------------------------------------------------------------------------- tables
def figure_table(scores: Scores, counts: dict[str, M.Counts] | None = None, num_boot: int = 1000,
                 seed: int = 0) -> dict:
    """Every predictor's figures with intervals, and model-minus-baseline paired differences."""
    counts = scores.counts if counts is None else counts
    fn = scores.figures_fn()
    out: dict = {"predictors": {}, "model_minus": {}}
    for name, c in counts.items():
        out["predictors"][name] = M.intervals_to_json(M.bootstrap_figures(c, fn, num_boot, seed))
    for name, c in counts.items():
        if name != "model":
            out["model_minus"][name] = M.intervals_to_json(
                M.bootstrap_differences(counts["model"], c, fn, num_boot, seed))
    return out


#: The issue's quality bar: (figure, baseline, direction) -- the model must beat the baseline,
#: i.e. the paired 95% interval of (model - baseline) must lie entirely on the better side.
QUALITY_BAR = (("view_ce", "motion_oracle", "lower"), ("f1_gem", "motion_oracle", "higher"),
               ("f1_bone", "motion_oracle", "higher"), ("f1_food", "motion_oracle", "higher"),
               ("action_acc", "majority_action", "higher"))


def quality_checks(file_result: dict) -> dict:
    """Each `QUALITY_BAR` criterion with its paired difference and whether it is met."""
    out = {}
    for figure, baseline, direction in QUALITY_BAR:
        diff = file_result["model_minus"].get(baseline, {}).get(figure)
        if diff is None or diff["lo"] is None:
            out[f"{figure}_vs_{baseline}"] = {"difference": diff, "met": None, "better": direction}
            continue
        met = diff["hi"] < 0 if direction == "lower" else diff["lo"] > 0
        out[f"{figure}_vs_{baseline}"] = {"difference": diff, "met": bool(met), "better": direction}
    return out


def evaluate_file(model, config, es: EvalSet, baselines: FittedBaselines, num_boot: int = 1000,
                  seed: int = 0, batch_size: int = 256, device: str = "cpu",
                  num_examples: int = 8, context: str = "full") -> tuple[dict, Scores]:
    """The full held-out table of one file: predictors, paired differences, per-policy tables."""
    scores = score_eval_set(model, config, es, baselines, batch_size=batch_size, device=device,
                            num_examples=num_examples, desc=f"evaluate {es.path.name}", context=context)
    result = {
        "file": str(es.path),
        "selection": es.label,
        "held_out": es.held_out,
        "episodes": len(es.episodes),
        "games": int(len(scores.unit_ids)),
        "windows": scores.num_windows,
        "predictions": scores.num_predictions,
        "context": context,
        **figure_table(scores, num_boot=num_boot, seed=seed),
        "by_policy": {pid: figure_table(scores, c, num_boot, seed)["predictors"]
                      for pid, c in scores.by_policy.items()},
    }
    result["quality_checks"] = quality_checks(result)
    return result, scores


def transfer_table(self_scores: Scores, cross_scores: Scores, self_label: str, cross_label: str,
                   num_boot: int = 1000, seed: int = 0) -> dict:
    """Self-vs-cross figures of the model and the relative gap ``(cross - self) / self``."""
    fn = self_scores.figures_fn()
    out = {"self": self_label, "cross": cross_label, "gap_definition": "(cross - self) / self",
           "model": {}, "baselines_cross": {}}
    s = M.bootstrap_figures(self_scores.counts["model"], fn, num_boot, seed)
    c = M.bootstrap_figures(cross_scores.counts["model"], fn, num_boot, seed)
    out["model"]["self"] = {k: s[k].as_dict() for k in TRANSFER_FIGURES if k in s}
    out["model"]["cross"] = {k: c[k].as_dict() for k in TRANSFER_FIGURES if k in c}
    out["relative_gap"] = M.intervals_to_json(M.bootstrap_relative_gap(
        self_scores.counts["model"], cross_scores.counts["model"], fn, TRANSFER_FIGURES, num_boot, seed))
    for name in ("motion_oracle", "majority_action"):
        if name in cross_scores.counts:
            b = M.bootstrap_figures(cross_scores.counts[name], fn, num_boot, seed)
            out["baselines_cross"][name] = {k: b[k].as_dict() for k in TRANSFER_FIGURES if k in b}
    return out


MASK_FIGURES = ("view_ce", "cell_acc", "changed_acc", "f1_gem", "f1_bone", "f1_food", "f1_wall",
                "f1_agent", "action_acc")


def masking_table(models: dict[str, tuple], es: EvalSet, eval_masks: Sequence[str], num_boot: int = 1000,
                  seed: int = 0, batch_size: int = 256, device: str = "cpu", context: str = "full") -> dict:
    """Rows: the mask a model was trained with; columns: the mask applied at evaluation.

    ``models`` maps a train-mask name to ``(model, config)``. Masks are seeded with ``seed``
    (the same cells hidden for every model). ``table`` cells: figures with intervals;
    ``cost`` cells (when ``"none"`` is among the columns): the paired increase of each figure
    over the same model's unmasked input, which compares rows trained for different lengths
    more fairly than the raw figures. ``train_steps``: each row's training length.
    """
    table: dict = {}
    cost: dict = {}
    steps: dict = {}
    for train_mask, (model, config) in models.items():
        table[train_mask], cost[train_mask] = {}, {}
        steps[train_mask] = int(getattr(config.train, "max_steps", 0))
        counts = {}
        for eval_mask in eval_masks:
            scores = score_eval_set(model, config, es, None, mask_kind=eval_mask, mask_seed=seed,
                                    batch_size=batch_size, device=device,
                                    desc=f"mask train={train_mask} eval={eval_mask}", context=context)
            fn = scores.figures_fn()
            counts[eval_mask] = scores.counts["model"]
            figs = M.bootstrap_figures(counts[eval_mask], fn, num_boot, seed)
            table[train_mask][eval_mask] = {k: figs[k].as_dict() for k in MASK_FIGURES if k in figs}
        if "none" in counts:
            for eval_mask in eval_masks:
                diff = M.bootstrap_differences(counts[eval_mask], counts["none"], fn, num_boot, seed)
                cost[train_mask][eval_mask] = {k: diff[k].as_dict() for k in MASK_FIGURES if k in diff}
    return {"rows": "train mask", "columns": "eval mask", "file": str(es.path), "selection": es.label,
            "episodes": len(es.episodes), "context": context, "train_steps": steps, "table": table,
            "cost": cost if any(cost.values()) else {}}


# ---------------------------------------------------------------------------- driver
MOTION_ORACLE_TEXT = (
    "the last view shifted by the taken action (blocked when the target cell at t is a wall or an "
    "agent; the agent stays centred, the cell it left becomes empty); cells scrolled into view and "
    "all cell probabilities calibrated on the training split")


def baselines_summary(fb: FittedBaselines, fitted_on: str | Path) -> dict:
    """JSON description of fitted baselines (what they know, where they were fitted)."""
    return {"fitted_on": str(fitted_on), "train_episodes_used": fb.train_episodes_used,
            "majority_action": fb.action_names[fb.majority.majority],
            "copy": "the last view, with probabilities calibrated on the training split",
            "motion_oracle": MOTION_ORACLE_TEXT,
            "previous_action": "P(a_t+1 | a_t) from the training split"}


def _train_mask(config) -> str:
    return str(getattr(config.train, "train_mask", "none") or "none")


def run_evaluation(
    checkpoint: str | Path,
    data: Sequence[str | Path],
    out: str | Path | None = None,
    masks: Sequence[str] = (),
    masked_checkpoints: Sequence[str | Path] = (),
    split: str = "auto",
    allow_training_episodes: bool = False,
    num_boot: int = 1000,
    seed: int = 0,
    batch_size: int = 256,
    device: str = "cpu",
    baseline_episodes: int = 400,
    context: str = "full",
) -> dict:
    """Evaluate ``checkpoint`` on each file of ``data``; the first file with the checkpoint's
    training data (or else the first file) is "self", the others give transfer tables.

    Returns the metrics dictionary (also written to ``out/metrics.json`` when ``out`` is given).
    """
    from rpg_env.provenance import provenance
    from rpg_worldmodel.checkpoint import load_checkpoint

    if not data:
        raise ValueError("give at least one trajectory file (--data F)")
    ck = load_checkpoint(checkpoint)
    model, config, meta = ck.model, ck.config, ck.meta
    from rpg_worldmodel.data import check_data_matches

    for path in data:  # fail before any work on a file recorded for another view or action set
        with _open(path) as tf:
            check_data_matches(config.model, tf.meta, data_path=path, model_source=f"checkpoint {checkpoint}")
    train_path, _ = checkpoint_data(meta)
    if train_path is None or not Path(train_path).exists():
        candidates = [p for p in data if is_training_file(meta, p)]
        if not candidates:
            raise FileNotFoundError(
                f"the checkpoint's training file {train_path} is not found and none of --data is it; "
                "the baselines are fitted on its training split: pass the training file as --data")
        train_path = Path(candidates[0])
    baselines = fit_baselines(train_path, checkpoint_split(meta)["train"], baseline_episodes, seed)
    results: dict = {
        "checkpoint": str(checkpoint),
        "checkpoint_step": _meta_get(meta, "step"),
        "train_mask": _train_mask(config),
        "baselines": baselines_summary(baselines, train_path),
        "bootstrap": {"resampled_unit": "game", "replicates": num_boot, "level": 0.95, "seed": seed},
        "files": {},
    }
    all_scores: dict[str, tuple[EvalSet, Scores]] = {}
    for path in data:
        es = select_episodes(meta, path, split, allow_training_episodes, split_seed=seed,
                             agent_id=getattr(config.data, "agent_id", None))
        result, scores = evaluate_file(model, config, es, baselines, num_boot, seed, batch_size, device,
                                       context=context)
        results["files"][str(path)] = result
        all_scores[str(path)] = (es, scores)
    self_key = next((k for k in all_scores if is_training_file(meta, k)), str(data[0]))
    results["self"] = self_key
    results["transfer"] = {}
    for key, (_, scores) in all_scores.items():
        if key != self_key:
            results["transfer"][key] = transfer_table(all_scores[self_key][1], scores, self_key, key,
                                                      num_boot, seed)
    if masks:
        models = {_train_mask(config): (model, config)}
        for extra in masked_checkpoints:
            other = load_checkpoint(extra)
            models.setdefault(_train_mask(other.config), (other.model, other.config))
        results["masking"] = masking_table(models, all_scores[self_key][0], masks, num_boot, seed,
                                           batch_size, device, context)
    results["provenance"] = provenance(seed=seed, checkpoint=str(checkpoint))
    if out is not None:
        write_outputs(results, all_scores[self_key][1], out)
    return results


def write_outputs(results: dict, self_scores: Scores, out: str | Path) -> Path:
    """Write ``metrics.json`` and ``examples.npz`` into ``out``; returns the JSON path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "metrics.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=1, default=_json_default))
    tmp.replace(path)
    if self_scores.examples:
        np.savez_compressed(out / "examples.npz", **self_scores.examples,
                            channel_names=np.asarray(self_scores.channel_names))
    return path


def _json_default(obj):
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def format_table(result: dict, figures: Sequence[str] = ("view_ce", "cell_acc", "changed_acc", "f1_gem",
                                                         "f1_bone", "f1_food", "f1_wall", "f1_agent",
                                                         "action_ce", "action_acc")) -> str:
    """A markdown table of one file's predictors (rows) by figures (columns), with intervals."""
    preds = result["predictors"]
    header = "| predictor | " + " | ".join(figures) + " |"
    lines = [header, "|" + " --- |" * (len(figures) + 1)]
    for name, figs in preds.items():
        cells = [fmt_interval(figs.get(f)) for f in figures]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fmt_interval(iv: dict | None) -> str:
    if not iv or iv.get("value") is None:
        return "-"
    lo, hi = iv.get("lo"), iv.get("hi")
    if lo is None or hi is None:
        return f"{iv['value']:.3f}"
    return f"{iv['value']:.3f} [{lo:.3f}, {hi:.3f}]"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rpg_worldmodel.evaluate",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True, help="checkpoint written by rpg_worldmodel.train")
    parser.add_argument("--data", action="append", required=True,
                        help="trajectory file (repeat for transfer: the training file first)")
    parser.add_argument("--out", default=None, help="folder for metrics.json and examples.npz")
    parser.add_argument("--masks", nargs="*", default=[],
                        help="evaluation-time input masks (none random_cells gem bone food wall)")
    parser.add_argument("--masked-checkpoint", action="append", default=[],
                        help="a checkpoint trained with cfg.train.train_mask, for the masking table")
    parser.add_argument("--split", default="auto", choices=["auto", "test", "val", "all", "train"])
    parser.add_argument("--allow-training-episodes", action="store_true",
                        help="score training episodes anyway (results are marked as not held out)")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--context", default="full", choices=CONTEXTS,
                        help="full: every prediction with T steps of history (T times the compute); "
                             "stride: non-overlapping windows, history 1..T as in training")
    args = parser.parse_args(argv)
    if args.masks:
        from rpg_worldmodel.data import MASK_KINDS

        bad = [m for m in args.masks if m not in MASK_KINDS]
        if bad:
            parser.error(f"unknown mask(s) {bad}; choose from {list(MASK_KINDS)}")
    try:
        results = run_evaluation(args.checkpoint, args.data, args.out, args.masks, args.masked_checkpoint,
                                 args.split, args.allow_training_episodes, args.bootstrap, args.seed,
                                 args.batch_size, args.device, context=args.context)
    except (TrainingEpisodesError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for key, result in results["files"].items():
        print(f"\n{key}: {result['selection']} ({result['episodes']} episodes, {result['games']} games, "
              f"{result['predictions']} predictions)")
        print(format_table(result))
    for key, tr in results["transfer"].items():
        gap = tr["relative_gap"].get("total_ce")
        print(f"\ntransfer to {key}: relative gap in total CE {fmt_interval(gap)}")
    if args.out:
        print(Path(args.out) / "metrics.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
