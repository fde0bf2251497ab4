"""The theory-of-mind ceiling: how well the next action can be predicted by someone who has the
expert's own network.

The shipped experts act greedily on their last ``k`` views (`rpg_env.policies.sb3.SB3Policy`, frame
stacks zero-padded at an episode's start). Predicting the action at t+1 from what is known at t
lacks exactly one frame: the view at t+1. The *expert-through-oracle* references apply the
expert's network to its real frames up to t and a view at t+1 taken from

- ``expert_true_view``: the recording (by construction the recorded action: a check that frames,
  stacking and network are those the expert played with);
- ``expert_motion_view``: the motion oracle's most likely next view;
- ``expert_model_view``: the world model's most likely next view.

Beside them, the world model's own action head, which never sees the expert's weights, on exactly
the same steps. Counts are per game, so every figure gets the usual bootstrap interval.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rpg_worldmodel.evaluation import metrics as M
from rpg_worldmodel.evaluation.baselines import FittedBaselines
from rpg_worldmodel.evaluation.episodes import EvalSet

VARIANTS = ("expert_true_view", "expert_motion_view", "expert_model_view")


def shipped_expert(policy_ids: list[str]) -> tuple[str, Path] | None:
    """``(name, model.zip)`` of the shipped expert that played every stream of ``policy_ids``
    (``dqn``, ``ppo`` or ``sb3-dqn``...), or None when they are not all one shipped expert."""
    from rpg_env.experts import PRETRAINED, pretrained_path

    names = {pid.removeprefix("sb3-") for pid in policy_ids}
    if len(names) != 1 or (name := names.pop()) not in PRETRAINED:
        return None
    try:
        return name, pretrained_path(name)
    except FileNotFoundError:
        return None


def _one_hot(codes: np.ndarray, num_classes: int) -> np.ndarray:
    """``(N, V, V)`` codes -> ``(N, C, V, V)`` uint8 one-hot."""
    return np.moveaxis(np.eye(num_classes, dtype=np.uint8)[codes], -1, 1)


def theory_of_mind_counts(es: EvalSet, unit_ids: np.ndarray, rows: np.ndarray, steps: np.ndarray,
                          model_codes: np.ndarray, baselines: FittedBaselines, expert_path: str | Path,
                          batch_size: int = 2048) -> dict[str, M.Counts]:
    """Per-game ``action_n`` / ``action_correct`` counts of every `VARIANTS` reference.

    Args:
        es: the scored episodes; ``unit_ids`` their games as `Scores` numbers them.
        rows, steps: ``(N,)`` the scored predictions (episode row, step t: the view at t+1 and
            the action at t+1 are predicted).
        model_codes: ``(N, V, V)`` the world model's most likely view at t+1 of each.
        baselines: gives the motion oracle.
        expert_path: the expert's ``model.zip``.
    """
    from rpg_env.policies.sb3 import SB3Policy

    expert = SB3Policy.load(expert_path)
    store = es.store()
    k, num_classes = expert.frame_stack, len(baselines.channel_names)
    rows, steps = np.asarray(rows, dtype=np.int64), np.asarray(steps, dtype=np.int64)
    acts_next = steps + 1 < store.lengths[rows]  # no action follows a game's last step
    rows, steps, model_codes = rows[acts_next], steps[acts_next], np.asarray(model_codes)[acts_next]
    older = steps[:, None] + np.arange(-(k - 2), 1)  # (N, k-1): frames t-k+2 .. t
    index = store.obs_offset[rows][:, None] + np.maximum(older, 0)
    past = store.obs[index] * (older >= 0)[..., None, None, None].astype(np.uint8)  # zeros before the start
    now = store.obs[store.obs_offset[rows] + steps]
    target = store.actions[store.act_offset[rows] + steps + 1]
    shifted, revealed, _ = baselines.shift(now.argmax(1), store.actions[store.act_offset[rows] + steps])
    motion_codes = baselines.shift_cal.log_probs(shifted, revealed).argmax(1)
    nexts = {"expert_true_view": store.obs[store.obs_offset[rows] + steps + 1],
             "expert_motion_view": _one_hot(motion_codes, num_classes),
             "expert_model_view": _one_hot(np.asarray(model_codes, dtype=np.int64), num_classes)}
    unit_index = np.searchsorted(unit_ids, es.game_ids[rows])
    out = {}
    for name, nxt in nexts.items():
        acted = np.concatenate([
            expert.greedy_on_frames(np.concatenate([past[a:a + batch_size], nxt[a:a + batch_size, None]], 1))
            for a in range(0, len(rows), batch_size)]) if len(rows) else np.zeros(0, np.int64)
        counts = {"action_n": np.ones(len(rows)), "action_correct": (acted == target).astype(np.float64)}
        out[name] = M.sum_by_unit(counts, unit_index, len(unit_ids))
    return out


def theory_of_mind_table(model_counts: M.Counts, references: dict[str, M.Counts], expert: str,
                         num_boot: int, seed: int) -> dict:
    """Action accuracy of the model's head and of each reference, with intervals, and the paired
    differences ``model head - reference``."""
    head = {k: model_counts[k] for k in ("action_n", "action_correct")}

    def accuracy(totals: M.Counts) -> M.Figures:
        return {"action_acc": M.ratio(totals["action_correct"], totals["action_n"])}

    def acc(counts: M.Counts) -> dict:
        return M.bootstrap_figures(counts, accuracy, num_boot, seed)["action_acc"].as_dict()

    def diff(counts: M.Counts) -> dict:
        return M.bootstrap_differences(head, counts, accuracy, num_boot, seed)["action_acc"].as_dict()

    return {"expert": expert,
            "action_acc": {"model_action_head": acc(head), **{n: acc(c) for n, c in references.items()}},
            "model_minus": {n: diff(c) for n, c in references.items()}}
