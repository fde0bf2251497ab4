"""Running the model and the baselines over an EvalSet's windows into per-game counts.

Which predictions are scored: every transition ``t -> t+1`` of an episode exactly once
(`rpg_worldmodel.data.windows.window_plan`: the same windows as training, ``full``, or
non-overlapping ones, ``stride``). The model runs in eval mode under ``torch.inference_mode``
(no gradient, no optimizer: the weights cannot change); baselines see exactly the same
transitions, always unmasked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch

from rpg_base.errors import InputError
from rpg_base.progress import progress_bar
from rpg_worldmodel.config import WorldModelConfig
from rpg_worldmodel.data.masks import RANDOM_CELLS_SHARE, apply_input_mask
from rpg_worldmodel.data.sources import reward_classes
from rpg_worldmodel.data.stores import window_ends
from rpg_worldmodel.data.windows import extents_at, plan_windows
from rpg_worldmodel.evaluation import metrics as M
from rpg_worldmodel.evaluation.baselines import FittedBaselines
from rpg_worldmodel.evaluation.cells import CellAnnotations, annotate_cells
from rpg_worldmodel.evaluation.episodes import EvalSet
from rpg_worldmodel.evaluation.metrics import RETURN_BLOCK
from rpg_worldmodel.evaluation.oracles import copy_view, views_to_codes
from rpg_worldmodel.models.heads import reward_weights
from rpg_worldmodel.models.steps import store_extents
from rpg_worldmodel.models.world_model import WorldModel


@dataclass
class Batch:
    """Windows of ``T + 1`` steps with the positions to score.

    views ``(B, T+1, C, V, V)`` uint8, actions ``(B, T+1)`` int64, rewards ``(B, T+1)`` float32,
    agent_ids ``(B,)``, rows ``(B,)`` index into the EvalSet's episodes, starts ``(B,)`` the
    windows' first steps, score ``(B, T)`` bool positions scored, ends ``(B, T+1)`` bool: the step
    ended its game (`rpg_worldmodel.data.stores.window_ends`).
    """

    views: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    agent_ids: np.ndarray
    rows: np.ndarray
    starts: np.ndarray
    score: np.ndarray
    ends: np.ndarray


def iter_windows(es: EvalSet, num_frames: int, batch_size: int = 256, desc: str | None = None,
                 context: str = "full") -> Iterator[Batch]:
    """Windows of every selected episode in batches of ``batch_size`` (episode order, then start
    order); each transition is scored exactly once (see `rpg_worldmodel.data.windows.window_plan`).
    Episodes shorter than ``T`` steps have no window."""
    store = es.store()
    plan = plan_windows(store.lengths, num_frames, context)
    starts = range(0, len(plan), batch_size)
    for a in progress_bar(starts, desc=desc or f"windows {es.path.name}", unit="batch", leave=False,
                  disable=desc == ""):
        rows, starts = plan.rows[a : a + batch_size], plan.starts[a : a + batch_size]
        views, actions, rewards = store.gather(rows, starts, num_frames + 1)
        score = plan.score[a : a + batch_size]
        yield Batch(views, actions, rewards, es.agent_ids[rows], rows, starts, score,
                    window_ends(store, rows, starts, num_frames + 1))


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
    reward_names: tuple[str, ...] = ()  # the reward classes, when the model predicts rewards
    floor_method: str | None = None  # how the floor was found, when the cells were annotated
    #: With ``keep_model_views``: the scored predictions' episode rows and steps t ``(N,)`` and the
    #: model's most likely view at t+1 ``(N, V, V)`` int8.
    model_views: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def figures_fn(self) -> Callable[[M.Counts], M.Figures]:
        """Counts -> figures with this set's channel names, plus ``total_ce`` (view + action CE)."""
        names, reward_names = self.channel_names, self.reward_names

        def fn(totals: M.Counts) -> M.Figures:
            figs = M.figures_from_counts(totals, names, reward_names)
            if "view_ce" in figs and "action_ce" in figs:
                figs["total_ce"] = figs["view_ce"] + figs["action_ce"]
            return figs

        return fn


@dataclass
class _Masking:
    """How the model's input is hidden (`rpg_worldmodel.data.masks.apply_input_mask`)."""

    kind: str
    prob: float
    generator: torch.Generator | None
    channel_names: list[str]


def _model_log_probs(model: WorldModel, batch: Batch, num_frames: int, mask: _Masking,
                     device: torch.device, extents: list[np.ndarray] | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Model log-probabilities ``(B, T, C, V, V)``, ``(B, T, A)`` and ``(B, T, K)`` (rewards; None
    without a reward head), and the end head's logits ``(B, T)`` (None without one), for a batch;
    ``extents``: each row's extents before each start
    (`rpg_worldmodel.models.steps.store_extents`), as training reads them."""
    views = torch.as_tensor(np.ascontiguousarray(batch.views[:, :num_frames]), device=device).float()
    if mask.kind != "none":
        views = apply_input_mask(views, mask.kind, mask.prob, mask.generator, mask.channel_names)
    actions = torch.as_tensor(batch.actions[:, :num_frames], dtype=torch.long, device=device)
    before = None if extents is None else torch.as_tensor(extents_at(extents, batch.rows, batch.starts),
                                                          device=device)
    out = model(views, actions, before)
    view_lp = torch.log_softmax(out.view.float(), dim=2).cpu().numpy()
    action_lp = torch.log_softmax(out.action.float(), dim=-1).cpu().numpy()
    reward_lp = None if out.reward is None else torch.log_softmax(out.reward.float(), dim=-1).cpu().numpy()
    end_logits = None if out.end is None else out.end.float().cpu().numpy()
    return view_lp, action_lp, reward_lp, end_logits


@dataclass
class _Returns:
    """Per scored step of one batch: episode row, step index, predicted and true points."""

    rows: np.ndarray
    steps: np.ndarray
    predicted: np.ndarray
    true: np.ndarray


def reward_targets(rewards: np.ndarray, reward_values: np.ndarray) -> np.ndarray:
    """Points ``(...)`` -> their weights over the reward classes ``reward_values`` ``(..., K)``: one
    class where a reward is one, else the two around it (`rpg_worldmodel.models.heads.reward_weights`,
    as the model trains on them)."""
    values = torch.as_tensor(np.asarray(reward_values), dtype=torch.float32)
    return reward_weights(values, torch.as_tensor(np.asarray(rewards, dtype=np.float32))).numpy()


def _prediction_counts(
    batch: Batch, view_lp: np.ndarray, action_lp: np.ndarray, reward_lp: np.ndarray | None,
    baselines: FittedBaselines | None, reward_values: np.ndarray, cells: CellAnnotations | None = None,
    end_logits: np.ndarray | None = None,
) -> tuple[dict[str, M.Counts], np.ndarray, np.ndarray, dict[str, _Returns]]:
    """Per-prediction counts of the model and the baselines on a batch's scored positions (by cell
    category and against the floor, given ``cells``), the (last input, true next) codes
    ``(N, V, V)`` of those predictions, and the points each reward predictor gave them (for the
    return error)."""
    w, p = np.nonzero(batch.score)
    codes = views_to_codes(batch.views)  # (B, T+1, V, V)
    prev, target = codes[w, p], codes[w, p + 1]
    act_prev, act_target = batch.actions[w, p], batch.actions[w, p + 1]
    views = {"model": view_lp[w, p]}
    parts = {"model": M.merge_counts(M.view_counts(views["model"], target, prev),
                                     M.action_counts(action_lp[w, p], act_target))}
    returns: dict[str, _Returns] = {}
    if end_logits is not None:
        parts["model"] = M.merge_counts(parts["model"], M.end_counts(end_logits[w, p], batch.ends[w, p]))
    if reward_lp is not None:
        true_points = batch.rewards[w, p].astype(np.float64)
        true_weights = reward_targets(true_points, reward_values)
        parts["model"] = M.merge_counts(parts["model"], M.reward_counts(reward_lp[w, p], true_weights))
        steps = batch.starts[w] + p
        predicted = reward_values[reward_lp[w, p].argmax(1)]
        returns["model"] = _Returns(batch.rows[w], steps, predicted, true_points)
        if baselines is not None and baselines.reward_rule is not None:
            rule_lp = baselines.reward_rule.log_probs(prev, act_prev)
            parts["reward_rule"] = M.reward_counts(rule_lp, true_weights)
            rule_points = reward_values[rule_lp.argmax(1)]
            returns["reward_rule"] = _Returns(batch.rows[w], steps, rule_points, true_points)
    if baselines is not None:
        views["copy"] = baselines.copy_cal.log_probs(*copy_view(prev))
        if baselines.oracles:
            pred, revealed, _ = baselines.shift(prev, act_prev)
            views["motion_oracle"] = baselines.shift_cal.log_probs(pred, revealed)
        if cells is not None:
            here = cells.gather(batch.rows[w], batch.starts[w] + p)
            views["memory_oracle"] = baselines.memory_cal.log_probs(here.memory_pred, here.memory_region)
        for name in ("copy", "motion_oracle", "memory_oracle"):
            if name in views:
                parts[name] = M.view_counts(views[name], target, prev)
        parts["majority_action"] = M.action_counts(baselines.majority.log_probs(act_prev), act_target)
        parts["previous_action"] = M.action_counts(baselines.previous.log_probs(act_prev), act_target)
        if cells is not None:
            for name, lp in views.items():
                parts[name] = M.merge_counts(parts[name], M.category_counts(lp, target, here.category,
                                                                             here.floor))
    return parts, prev, target, returns


def return_errors(returns: list[_Returns], game_of_row: np.ndarray, num_units: int) -> M.Counts:
    """Per-game ``return_abs_err_sum`` (points) and ``return_blocks``: the absolute error of the
    return summed over each full block of `RETURN_BLOCK` scored steps of an episode."""
    rows = np.concatenate([r.rows for r in returns])
    steps = np.concatenate([r.steps for r in returns])
    error = np.concatenate([r.predicted - r.true for r in returns])
    blocks = np.stack([rows, steps // RETURN_BLOCK], 1)
    keys, index, sizes = np.unique(blocks, axis=0, return_inverse=True, return_counts=True)
    per_block = np.zeros(len(keys))
    np.add.at(per_block, index.reshape(-1), error)
    full = sizes == RETURN_BLOCK
    units = game_of_row[keys[full, 0]]
    return M.sum_by_unit({"return_abs_err_sum": np.abs(per_block[full]),
                          "return_blocks": np.ones(int(full.sum()))}, units, num_units)


class _Examples:
    """A few held-out predictions for the report's view strip: one full-context prediction per
    episode, so the strip shows different games."""

    def __init__(self, wanted: int, num_frames: int) -> None:
        self.wanted, self.num_frames = wanted, num_frames
        self.parts: dict[str, list[np.ndarray]] = {"input": [], "predicted": [], "true": []}
        self.rows: set[int] = set()

    def add(self, batch: Batch, view_lp: np.ndarray, prev: np.ndarray, target: np.ndarray) -> None:
        have = sum(len(x) for x in self.parts["input"])
        if not self.wanted or have >= self.wanted:
            return
        w, p = np.nonzero(batch.score)
        last = np.flatnonzero(p == self.num_frames - 1)
        fresh = last[~np.isin(batch.rows[w[last]], list(self.rows))]
        _, first = np.unique(batch.rows[w[fresh]], return_index=True)
        take = fresh[np.sort(first)][: self.wanted - have]
        self.rows.update(batch.rows[w[take]].tolist())
        self.parts["input"].append(prev[take])
        self.parts["predicted"].append(view_lp[w[take], p[take]].argmax(1))
        self.parts["true"].append(target[take])

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: np.concatenate(v) if v else np.zeros((0,), np.int64) for k, v in self.parts.items()}


def score_eval_set(
    model: WorldModel,
    config: WorldModelConfig,
    es: EvalSet,
    baselines: FittedBaselines | None,
    mask_kind: str = "none",
    mask_seed: int = 0,
    mask_prob: float = RANDOM_CELLS_SHARE,
    batch_size: int = 256,
    device: str | torch.device = "cpu",
    num_examples: int = 0,
    desc: str | None = None,
    context: str = "full",
    floor: str | None = None,
    keep_model_views: bool = False,
) -> Scores:
    """Score the model (and, if given, the baselines) on every transition of ``es``.

    With baselines and a ``floor`` mode (`rpg_worldmodel.evaluation.cells.FLOOR_MODES`), every
    view predictor is also scored per cell category and against the floor, and the memory oracle
    joins the baselines. ``keep_model_views`` keeps the model's most likely next views
    (`Scores.model_views`).

    The model is put in eval mode and run under ``torch.inference_mode``. ``mask_kind``
    hides part of the model's *input* (`rpg_worldmodel.data.masks.apply_input_mask`, seeded with
    ``mask_seed``; ``random_cells`` hides each cell with probability ``mask_prob``); targets
    and baselines always see the unmasked views.
    """
    num_frames = int(config.model.num_frames)
    device = torch.device(device)
    model.eval()
    generator = torch.Generator(device=device).manual_seed(int(mask_seed)) if mask_kind != "none" else None
    channel_names = es.store().channel_names
    mask = _Masking(mask_kind, mask_prob, generator, channel_names)
    reward_values = np.asarray(config.model.reward_values, dtype=np.float64)
    annotate = baselines is not None and baselines.oracles and floor is not None  # the floor needs the game
    cells = annotate_cells(es, baselines, floor) if annotate else None
    collected = _Collected(_Examples(num_examples, num_frames), keep_model_views)
    # what each game showed before a window, as training reads it; a masked input reads none (the
    # mask would not hide it)
    extents = store_extents(es.store(), model.cfg) if model.cfg.extent_prior and mask_kind == "none" else None
    with torch.inference_mode():
        for batch in iter_windows(es, num_frames, batch_size, desc=desc, context=context):
            view_lp, action_lp, reward_lp, end_logits = _model_log_probs(model, batch, num_frames, mask,
                                                                         device, extents)
            parts, prev, target, batch_returns = _prediction_counts(
                batch, view_lp, action_lp, reward_lp, baselines, reward_values, cells, end_logits)
            collected.add(batch, view_lp, parts, prev, target, batch_returns)
    if not collected.rows:
        raise InputError(f"no episode of {es.path} has num_frames={num_frames} steps or more, so "
                         "there is nothing to score; record longer episodes")
    names = baselines.channel_names if baselines is not None else channel_names
    scores = _per_game(es, collected.counts, collected.returns, np.concatenate(collected.rows), names,
                       collected.num_windows, collected.examples.arrays())
    if len(reward_values) and config.model.reward_head:
        scores.reward_names = reward_classes(es.store().meta).names_for(reward_values)
    scores.floor_method = cells.floor_method if cells is not None else None
    if keep_model_views:
        scores.model_views = tuple(np.concatenate(part) for part in zip(*collected.kept, strict=True))
    return scores


@dataclass
class _Collected:
    """What scoring gathers batch by batch before it is summed per game: counts and returns per
    predictor, the episode row of every scored position, the model's kept views, the examples."""

    examples: _Examples
    keep_model_views: bool
    counts: dict[str, list[M.Counts]] = field(default_factory=dict)
    returns: dict[str, list[_Returns]] = field(default_factory=dict)
    rows: list[np.ndarray] = field(default_factory=list)
    kept: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)
    num_windows: int = 0

    def add(self, batch: Batch, view_lp: np.ndarray, parts: dict[str, M.Counts], prev: np.ndarray,
            target: np.ndarray, batch_returns: dict[str, _Returns]) -> None:
        self.num_windows += len(batch.views)
        for name, c in parts.items():
            self.counts.setdefault(name, []).append(c)
        for name, r in batch_returns.items():
            self.returns.setdefault(name, []).append(r)
        self.rows.append(batch.rows[np.nonzero(batch.score)[0]])
        if self.keep_model_views:
            w, p = np.nonzero(batch.score)
            self.kept.append((batch.rows[w], batch.starts[w] + p, view_lp[w, p].argmax(1).astype(np.int8)))
        self.examples.add(batch, view_lp, prev, target)


def _per_game(es: EvalSet, rows_counts: dict[str, list[M.Counts]], returns: dict[str, list[_Returns]],
              ep_rows: np.ndarray, channel_names: list[str], num_windows: int,
              examples: dict[str, np.ndarray]) -> Scores:
    """Sum per-prediction counts into per-game counts, overall and per policy id."""
    units, unit_index_of_row = np.unique(es.game_ids, return_inverse=True)
    unit_idx = unit_index_of_row[ep_rows]
    flat = {name: {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
            for name, parts in rows_counts.items()}
    counts = {name: M.sum_by_unit(c, unit_idx, len(units)) for name, c in flat.items()}
    for name, parts in returns.items():
        counts[name] = M.merge_counts(counts[name], return_errors(parts, unit_index_of_row, len(units)))
    by_policy: dict[str, dict[str, M.Counts]] = {}
    policies = np.asarray(es.policy_ids)
    for pid in sorted(set(es.policy_ids)):
        keep = policies[ep_rows] == pid
        by_policy[pid] = {name: M.sum_by_unit({k: v[keep] for k, v in c.items()}, unit_idx[keep], len(units))
                          for name, c in flat.items()}
        for name, parts in returns.items():
            mine = [_Returns(*(x[policies[r.rows] == pid] for x in (r.rows, r.steps, r.predicted, r.true)))
                    for r in parts]
            by_policy[pid][name] = M.merge_counts(by_policy[pid][name],
                                                  return_errors(mine, unit_index_of_row, len(units)))
    return Scores(list(channel_names), units, counts, by_policy, num_windows, len(unit_idx), examples)
