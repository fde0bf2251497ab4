"""How long the imagined future stays true: open-loop rollouts scored against the real future.

From held-out starts (``num_frames`` real views and the actions taken in them), each predictor
rolls forward ``horizon`` steps on the *recorded* actions, feeding back its own predictions, and
is scored at every horizon k = 1..H against the real view and reward of that step:

- ``model``: the world model, its arg-max view fed back (``WorldModel.imagine_step``, cached);
- ``model_sampled``: the same, a sampled view fed back (one sample per start, seeded; drawn as
  the imagined env draws them, `rpg_worldmodel.models.sampling`);
- ``teacher_forced``: the model given the *real* history at every k (today's one-step figure,
  at the same steps): the gap to ``model`` is what feeding back its own predictions costs;
- ``memory_oracle``: the motion rule applied to its own previous prediction, and every cell the
  real opening showed recalled when it scrolls back into view (`RolledMemory`): the reference
  for a dream that keeps its map;
- ``motion_oracle``: the motion rule applied to its own previous prediction;
- ``copy``: the last real view, forever.

Figures per k (game-level bootstrap, as every other figure): ``view_ce``, ``cell_acc``,
``changed_acc`` (cells whose true kind differs from the true view before), ``f1_items``,
``reward_acc`` (the reward the predictor gives the recorded action in its own view: the reward
head for the model, the reward rule for the baselines) and ``return_error`` (points, absolute
error of the return summed over steps 1..k).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from rpg_worldmodel.evaluation import metrics as M
from rpg_worldmodel.evaluation.baselines import FittedBaselines
from rpg_worldmodel.evaluation.episodes import EvalSet
from rpg_worldmodel.evaluation.oracles import copy_view, views_to_codes
from rpg_worldmodel.evaluation.scoring import reward_targets
from rpg_worldmodel.models.sampling import ViewSampler
from rpg_worldmodel.models.world_model import WorldModel

PREDICTORS = ("model", "model_sampled", "teacher_forced", "memory_oracle", "motion_oracle", "copy")
#: What the model's rollout is compared with, paired (`rollout_table`'s ``model_minus``).
REFERENCES = ("memory_oracle", "motion_oracle", "copy")
FIGURES = ("view_ce", "cell_acc", "changed_acc", "f1_items", "reward_acc", "return_error")
DEFAULT_HORIZON = 15


@dataclass
class Starts:
    """Held-out rollout starts: ``views`` (S, T + H, C, V, V) uint8 real views from the start,
    ``actions`` and ``rewards`` (S, T + H - 1) recorded, ``rows`` (S,) episode rows of the set."""

    views: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    rows: np.ndarray


def rollout_starts(es: EvalSet, num_frames: int, horizon: int) -> Starts:
    """Non-overlapping starts in every episode: context steps ``s .. s+T-1``, then H steps whose
    real views and rewards are known, spaced H apart. A window is read as ``T + H`` steps of the
    store (`Store.gather`, whose last action is not used), so it ends inside the episode:
    ``s + T + H <= L``, and H is at most ``L - T``."""
    store = es.store()
    span = num_frames + horizon  # views per start
    rows, starts = [], []
    for row, length in enumerate(store.lengths):
        for s in range(0, int(length) - span + 1, horizon):
            rows.append(row)
            starts.append(s)
    if not rows:
        raise ValueError(f"no episode of {es.path} has the {span} steps a rollout of {horizon} after "
                         f"{num_frames} views reads (at most {int(max(store.lengths)) - num_frames})")
    rows_a, starts_a = np.asarray(rows, dtype=np.int64), np.asarray(starts, dtype=np.int64)
    views, actions, rewards = store.gather(rows_a, starts_a, span)
    return Starts(views, actions[:, :-1], rewards[:, :-1], rows_a)


def _one_hot(codes: torch.Tensor, num_classes: int) -> torch.Tensor:
    return F.one_hot(codes, num_classes).movedim(-1, -3).float()


@torch.no_grad()
def _model_rollouts(model: WorldModel, starts: Starts, num_frames: int, horizon: int, seed: int,
                    device: torch.device, sampler: ViewSampler
                    ) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """Per predictor of the model: view log-probs (S, H, C, V, V) and reward log-probs (S, H, K)."""
    views = torch.as_tensor(starts.views, device=device).float()
    actions = torch.as_tensor(starts.actions, device=device)
    c = views.shape[2]
    context = model.imagine_context(views[:, :num_frames], actions[:, : num_frames - 1])
    generator = torch.Generator(device=device).manual_seed(seed)
    out: dict[str, tuple[list, list]] = {name: ([], []) for name in PREDICTORS[:3]}
    states = dict.fromkeys(out, context)
    inputs = dict.fromkeys(out, views[:, num_frames - 1])
    for k in range(horizon):
        act = actions[:, num_frames - 1 + k]
        for name in out:
            step, states[name] = model.imagine_step(inputs[name], act, states[name])
            log_probs = torch.log_softmax(step.view[:, 0].float(), dim=1)
            out[name][0].append(log_probs.cpu().numpy())
            if step.reward is not None:
                out[name][1].append(torch.log_softmax(step.reward[:, 0].float(), -1).cpu().numpy())
            if name == "teacher_forced":
                inputs[name] = views[:, num_frames + k]
            elif name == "model":
                inputs[name] = _one_hot(log_probs.argmax(1), c)
            else:
                inputs[name] = _one_hot(sampler(log_probs.movedim(1, -1), generator), c)
    return {name: (np.stack(v, 1), np.stack(r, 1) if r else None) for name, (v, r) in out.items()}


def _baseline_rollouts(fb: FittedBaselines, starts: Starts, num_frames: int,
                       horizon: int) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """The memory and motion oracles fed their own hard predictions, and the copied last view, as
    log-probs."""
    opening = views_to_codes(starts.views[:, :num_frames])
    last = codes = opening[:, -1]
    if not fb.oracles:  # another game's file: copy alone
        copied = fb.copy_cal.log_probs(*copy_view(last))
        return {"copy": (np.stack([copied] * horizon, 1), None)}
    memory = fb.roll_memory(opening, starts.actions[:, : num_frames - 1], horizon)
    out: dict[str, tuple[list, list]] = {name: ([], []) for name in REFERENCES}
    for k in range(horizon):
        act = starts.actions[:, num_frames - 1 + k]
        if fb.reward_rule is not None:  # each predictor's reward for the action in its own view
            for name, view in (("memory_oracle", memory.view), ("motion_oracle", codes), ("copy", last)):
                out[name][1].append(fb.reward_rule.log_probs(view, act))
        pred, revealed, _ = fb.shift(codes, act)
        out["memory_oracle"][0].append(fb.memory_cal.log_probs(*memory.step(act)))
        out["motion_oracle"][0].append(fb.shift_cal.log_probs(pred, revealed))
        out["copy"][0].append(fb.copy_cal.log_probs(*copy_view(last)))
        codes = pred
    return {name: (np.stack(v, 1), np.stack(r, 1) if r else None) for name, (v, r) in out.items()}


def _counts(view_lp: np.ndarray, reward_lp: np.ndarray | None, starts: Starts, num_frames: int,
            reward_values: np.ndarray, items: list[int]) -> M.Counts:
    """Per start and horizon: ``(S, H)`` sums and ``(S, H, C)`` class counts (see `FIGURES`)."""
    s, h = view_lp.shape[:2]
    true = views_to_codes(starts.views[:, num_frames:])  # (S, H, V, V)
    before = views_to_codes(starts.views[:, num_frames - 1 : -1])
    flat = M.view_counts(view_lp.reshape(s * h, *view_lp.shape[2:]), true.reshape(s * h, *true.shape[2:]),
                         before.reshape(s * h, *before.shape[2:]))
    counts = {k: v.reshape(s, h, *v.shape[1:]) for k, v in flat.items()}
    for name in ("tp", "fp", "fn"):
        counts[f"item_{name}"] = counts.pop(name)[..., items]
    if reward_lp is not None and len(reward_values):
        true_points = starts.rewards[:, num_frames - 1 : num_frames - 1 + h].astype(np.float64)
        hit = reward_lp.argmax(-1) == reward_targets(true_points, reward_values).argmax(-1)
        counts["reward_correct"], counts["reward_n"] = hit.astype(np.float64), np.ones((s, h))
        error = np.cumsum(reward_values[reward_lp.argmax(-1)] - true_points, axis=1)
        counts["return_error_sum"] = np.abs(error)
    return counts


def horizon_figures(totals: M.Counts) -> M.Figures:
    """`FIGURES` from summed counts (any leading axes)."""
    out = {"view_ce": M.ratio(totals["ce_sum"], totals["cells"]),
           "cell_acc": M.ratio(totals["correct"], totals["cells"]),
           "changed_acc": M.ratio(totals["changed_correct"], totals["changed"])}
    tp, fp, fn = totals["item_tp"], totals["item_fp"], totals["item_fn"]
    out["f1_items"] = M.ratio(2 * tp, 2 * tp + fp + fn).mean(-1)
    if "reward_correct" in totals:
        out["reward_acc"] = M.ratio(totals["reward_correct"], totals["reward_n"])
        out["return_error"] = M.ratio(totals["return_error_sum"], totals["reward_n"])
    return out


def rollout_table(model: WorldModel, config, es: EvalSet, baselines: FittedBaselines,
                  horizon: int = DEFAULT_HORIZON, num_boot: int = 1000, seed: int = 0,
                  device: str | torch.device = "cpu",
                  strip_steps: int = 10) -> tuple[dict, dict[str, np.ndarray]]:
    """Every predictor's `FIGURES` at each horizon 1..H with game-level intervals, and a strip for
    the report (one held-out start: real views and the model's imagined ones, ``strip_steps``).

    JSON: ``{"horizon", "starts", "games", "figures", "predictors": {name: {figure: [H x
    {value, lo, hi}]}}, "model_minus": {baseline: {figure: [H x paired difference]}}}``.
    """
    num_frames = int(config.model.num_frames)
    device = torch.device(device)
    model.eval()
    starts = rollout_starts(es, num_frames, horizon)
    channels = es.store().channel_names
    items = [i for i, name in enumerate(channels) if name in M.item_names(channels)]
    values = config.model.reward_values if config.model.reward_head else ()
    reward_values = np.asarray(values, dtype=np.float64)
    sampler = ViewSampler.of(model)
    predictions = {**_model_rollouts(model, starts, num_frames, horizon, seed, device, sampler),
                   **_baseline_rollouts(baselines, starts, num_frames, horizon)}
    units, unit_of_row = np.unique(es.game_ids, return_inverse=True)
    unit_index = unit_of_row[starts.rows]
    per_game = {name: M.sum_by_unit(_counts(*predictions[name], starts, num_frames, reward_values, items),
                                    unit_index, len(units)) for name in PREDICTORS if name in predictions}
    weights = M.resample_weights(len(units), num_boot, seed)
    table = {name: _per_horizon([M.bootstrap_figures(_at(counts, k), horizon_figures, num_boot, seed,
                                                     weights=weights) for k in range(horizon)])
             for name, counts in per_game.items()}
    # Paired differences at each k (the same resampled games): is the model's future truer?
    minus = {}
    for name in (n for n in REFERENCES if n in predictions):
        minus[name] = _per_horizon([M.bootstrap_differences(_at(per_game["model"], k), _at(per_game[name], k),
                                                            horizon_figures, num_boot, seed)
                                    for k in range(horizon)])
    steps = min(strip_steps, horizon)
    strip = {"real": views_to_codes(starts.views[0, num_frames - 1 : num_frames + steps]),
             "imagined": predictions["model"][0][0, :steps].argmax(1),
             "channel_names": np.asarray(channels)}
    return {"horizon": horizon, "starts": int(len(starts.rows)), "games": int(len(units)),
            "figures": list(FIGURES), "predictors": table, "model_minus": minus}, strip


def _at(counts: M.Counts, k: int) -> M.Counts:
    return {key: value[:, k] for key, value in counts.items()}


def _per_horizon(intervals: list[dict[str, M.Interval]]) -> dict[str, list]:
    """``{figure: [interval dict at k = 1..H]}`` from one ``{figure: Interval}`` per horizon."""
    columns: dict[str, list] = {}
    for at_k in intervals:
        for figure, iv in at_k.items():
            columns.setdefault(figure, []).append(iv.as_dict())
    return columns
