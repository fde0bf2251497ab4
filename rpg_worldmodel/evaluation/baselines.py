"""Baselines scored on the same windows as the model: copy, the motion and memory oracles, the
majority and previous action, the reward rule.

`fit_baselines` fits them on the checkpoint's training split only (never on evaluated episodes).
The view baselines make a hard prediction of the next view (`rpg_worldmodel.evaluation.oracles`:
what each knows); `CalibratedCells` turns it into calibrated probabilities (fitted on the
*training* split only) so its cross-entropy is finite and fair: rows scrolled into view that
the motion oracle cannot know get ``P(class | class of their inward neighbour)`` (a wall beyond
a wall is likely). For the co-player (agent 1, which moves after the learner) the blocking rule
is an approximation: the learner may leave or enter its target cell first.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rpg_base.errors import InputError
from rpg_base.progress import progress_bar
from rpg_worldmodel.data.sources import kind_values, plays_the_game
from rpg_worldmodel.data.stores import EpisodeStore
from rpg_worldmodel.evaluation.oracles import (
    NUM_REGIONS,
    RolledMemory,
    action_deltas,
    copy_view,
    memory_predictions,
    shift_view,
    views_to_codes,
)

__all__ = ["BASELINES_FILE", "ActionFrequencies", "CalibratedCells", "FittedBaselines", "RewardRule",
           "baselines_summary", "fit_baselines", "load_baselines", "save_baselines"]


class CalibratedCells:
    """Calibrated cell probabilities for a hard view predictor, fitted on training windows:
    ``P(true class | region, predicted class)`` with add-``alpha`` (Dirichlet) smoothing, so every
    probability is positive and the cross-entropy finite.

    Regions split the cells by what the predictor knows of them: for copy and the motion oracle,
    known (0) and revealed (1; ``pred`` holds the inward neighbour's class there, as `shift_view`
    leaves it, so the table reads ``P(true | class of the neighbour)``); for the memory oracle its
    `rpg_worldmodel.evaluation.oracles.NUM_REGIONS` regions.
    """

    def __init__(self, num_classes: int, alpha: float = 0.5, num_regions: int = 2) -> None:
        if alpha <= 0:
            raise ValueError(f"alpha must be > 0 so every probability is positive, got {alpha}")
        self.num_classes = num_classes
        self.alpha = alpha
        self.counts = np.zeros((num_regions, num_classes, num_classes), dtype=np.float64)

    def update(self, pred: np.ndarray, region: np.ndarray, target: np.ndarray) -> None:
        """Add training windows: ``pred``, ``region`` (bool revealed or int region), ``target``,
        all ``(N, V, V)``."""
        region = np.asarray(region, dtype=np.int64).reshape(-1)
        np.add.at(self.counts, (region, np.asarray(pred).reshape(-1), np.asarray(target).reshape(-1)), 1.0)

    @property
    def table(self) -> np.ndarray:
        """``(R, C, C)`` row-normalized probabilities ``[region, conditioning class, true class]``."""
        smoothed = self.counts + self.alpha
        return smoothed / smoothed.sum(-1, keepdims=True)

    def log_probs(self, pred: np.ndarray, region: np.ndarray) -> np.ndarray:
        """``(N, C, V, V)`` float32 log-probabilities of every cell's class."""
        log_table = np.log(self.table).astype(np.float32)
        out = log_table[np.asarray(region, dtype=np.int64), np.asarray(pred, dtype=np.int64)]
        return np.moveaxis(out, -1, 1)


class ActionFrequencies:
    """Majority-action baseline (``order=0``) or previous-action baseline (``order=1``).

    ``order=0``: ``P(a_{t+1})`` from the training split; its arg-max is the majority action.
    ``order=1``: ``P(a_{t+1} | a_t)`` (a first-order Markov chain over the agent's own actions).
    Both with add-``alpha`` smoothing.
    """

    def __init__(self, num_actions: int, order: int = 0, alpha: float = 0.5) -> None:
        if order not in (0, 1):
            raise ValueError(f"order must be 0 (majority) or 1 (previous action), got {order}")
        self.num_actions, self.order, self.alpha = num_actions, order, alpha
        self.counts = np.zeros((num_actions if order else 1, num_actions), dtype=np.float64)

    def update(self, previous: np.ndarray, target: np.ndarray) -> None:
        """Add training pairs (action at t, action at t+1), both ``(N,)``."""
        rows = np.asarray(previous, dtype=np.int64) if self.order else np.zeros(len(target), np.int64)
        np.add.at(self.counts, (rows, np.asarray(target, dtype=np.int64)), 1.0)

    def log_probs(self, previous: np.ndarray) -> np.ndarray:
        """``(N, A)`` float32 log-probabilities of the next action."""
        smoothed = self.counts + self.alpha
        log_table = np.log(smoothed / smoothed.sum(-1, keepdims=True)).astype(np.float32)
        rows = np.asarray(previous, dtype=np.int64) if self.order else np.zeros(len(previous), np.int64)
        return log_table[rows]

    @property
    def majority(self) -> int:
        return int(self.counts.sum(0).argmax())


# ---------------------------------------------------------------------------- fitted on training data
MOTION_ORACLE_TEXT = (
    "the last view shifted by the taken action (blocked when the target cell at t is a wall or an "
    "agent; the agent stays centred, the cell it left becomes empty); cells scrolled into view and "
    "all cell probabilities calibrated on the training split")
MEMORY_ORACLE_TEXT = (
    "the motion oracle plus every cell seen earlier in the episode (placed in world coordinates from "
    "the agent's moves): a cell scrolling back into view is predicted as last seen; probabilities "
    "calibrated on the training split per region (in view, never seen, seen 1-5 / 6-20 / 21+ steps ago)")
REWARD_RULE_TEXT = (
    "the points of the kind in the cell the action enters at t (empty or an agent: 0; a wall: its "
    "penalty); P(true class | rule class) calibrated on the training split")


class RewardRule:
    """The reward read off the view at t and the action: the points of the kind in the cell the
    move enters (`rpg_worldmodel.data.sources.kind_values`: 0 for an empty cell or an agent, the penalty
    for a wall), as a class among ``values``. ``P(true class | rule class)`` is counted on the
    training split (add-``alpha`` smoothing), so its cross-entropy is finite and calibrated.

    For the learner, which moves first, the rule is the game's exact rule: spawns come after the
    moves, and the co-player has not moved yet. A co-player's stream breaks it when the learner
    entered or left the co-player's target cell first.
    """

    def __init__(self, meta: dict, values: Sequence[float], alpha: float = 0.5) -> None:
        # What the rule reads of the file's metadata, kept so the fitted rule can be saved.
        self.game = {key: meta.get(key) for key in ("channel_names", "action_names", "env_kwargs")}
        self.value_by_code = kind_values(meta)
        self.deltas = action_deltas([str(a) for a in meta["action_names"]])
        self.values = np.asarray(values, dtype=np.float64)
        self.alpha = alpha
        self.counts = np.zeros((len(self.values), len(self.values)), dtype=np.float64)

    def classes(self, rewards: np.ndarray) -> np.ndarray:
        """Points -> class index among ``values`` (InputError naming an unknown reward)."""
        rewards = np.asarray(rewards, dtype=np.float64)
        match = np.isclose(rewards[..., None], self.values, rtol=0.0, atol=1e-4)
        if not match.any(-1).all():
            raise InputError(f"reward {rewards[~match.any(-1)].flat[0]:g} is not among the reward classes "
                             f"{self.values.tolist()}; the file comes from a game with other values")
        return match.argmax(-1)

    def predict(self, codes: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """``(N, V, V)`` codes at t and ``(N,)`` actions -> ``(N,)`` the rule's reward class."""
        r = codes.shape[-1] // 2
        d = self.deltas[np.asarray(actions, dtype=np.int64)]
        target = codes[np.arange(len(codes)), r + d[:, 0], r + d[:, 1]]
        return self.classes(self.value_by_code[target])

    def update(self, codes: np.ndarray, actions: np.ndarray, rewards: np.ndarray) -> None:
        np.add.at(self.counts, (self.predict(codes, actions), self.classes(rewards)), 1.0)

    def log_probs(self, codes: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """``(N, K)`` float32 log-probabilities of the reward classes."""
        smoothed = self.counts + self.alpha
        table = np.log(smoothed / smoothed.sum(-1, keepdims=True)).astype(np.float32)
        return table[self.predict(codes, actions)]


@dataclass
class FittedBaselines:
    """Baselines fitted on the checkpoint's training split (never on evaluated episodes)."""

    channel_names: list[str]
    action_names: list[str]
    copy_cal: CalibratedCells
    shift_cal: CalibratedCells | None  # the motion oracle: files of the game only (`plays_the_game`)
    memory_cal: CalibratedCells | None  # the memory oracle: files of the game only
    majority: ActionFrequencies
    previous: ActionFrequencies
    train_episodes_used: int
    reward_rule: RewardRule | None = None  # with a model that predicts rewards
    fitted_on: dict | None = None  # loaded from a file: where and how they were fitted (`save_baselines`)

    @property
    def oracles(self) -> bool:
        """Whether the motion and memory oracles are here: they know the game's moves and what
        blocks them, so a file of another game has copy and the action frequencies only."""
        return self.shift_cal is not None

    @property
    def codes(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.channel_names)}

    def shift(self, codes: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`shift_view` with the file's vocabulary: walls and agents block a move."""
        c = self.codes
        return shift_view(codes, actions, action_deltas(self.action_names), empty=c["empty"],
                          agent=c["agent"], blocking=[c["wall"], c["agent"]])

    def remember(self, codes: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`memory_predictions` of one episode (``codes`` ``(L + 1, V, V)``, ``actions`` ``(L,)``)
        with the file's vocabulary: ``(pred, region)``, both ``(L, V, V)``."""
        c = self.codes
        return memory_predictions(codes, actions, action_deltas(self.action_names), empty=c["empty"],
                                  agent=c["agent"], blocking=[c["wall"], c["agent"]])

    def roll_memory(self, opening: np.ndarray, opening_actions: np.ndarray, horizon: int) -> RolledMemory:
        """The memory oracle rolled out from the real ``opening`` (S, T, V, V) codes and the
        ``opening_actions`` (S, T - 1) between them (`RolledMemory`), with the file's vocabulary."""
        c = self.codes
        return RolledMemory(opening, opening_actions, horizon, action_deltas(self.action_names),
                            empty=c["empty"], agent=c["agent"], blocking=[c["wall"], c["agent"]])


def fit_baselines(train_path: str | Path, train_episodes: Sequence[int], max_episodes: int = 400,
                  seed: int = 0, reward_values: Sequence[float] = ()) -> FittedBaselines:
    """Fit the calibrated view baselines, the action frequencies and (given the model's
    ``reward_values``) the reward rule on training episodes.

    At most ``max_episodes`` training episodes (a seeded random subset) are read; counts of
    a few hundred episodes pin the tables down far below the evaluation's noise.
    """
    chosen = np.asarray(sorted(int(i) for i in train_episodes), dtype=np.int64)
    if len(chosen) > max_episodes:
        chosen = np.sort(np.random.default_rng(seed).choice(chosen, max_episodes, replace=False))
    store = EpisodeStore.load(train_path, chosen)
    channel_names = store.channel_names
    action_names = [str(a) for a in store.meta["action_names"]]
    game, c = plays_the_game(store.meta), len(channel_names)
    missing = {"empty", "wall", "agent"} - set(channel_names)
    if game and missing:
        raise InputError(f"{train_path}: channel_names {channel_names} lack {sorted(missing)}; "
                         "the oracles need them")
    fb = FittedBaselines(channel_names, action_names, CalibratedCells(c),
                         CalibratedCells(c) if game else None,
                         CalibratedCells(c, num_regions=NUM_REGIONS) if game else None,
                         ActionFrequencies(len(action_names), 0),
                         ActionFrequencies(len(action_names), 1), len(chosen),
                         RewardRule(store.meta, reward_values) if game and len(reward_values) else None)
    for row in progress_bar(range(len(store)), desc="fit baselines (train split)", unit="episode",
                            leave=False):
        obs, actions = store.episode(row)
        length = len(actions)
        if length < 1:
            continue
        codes = views_to_codes(obs)
        now, nxt = codes[:length], codes[1 : length + 1]
        fb.copy_cal.update(*copy_view(now), nxt)
        if fb.oracles:
            pred, revealed, _ = fb.shift(now, actions)
            fb.shift_cal.update(pred, revealed, nxt)
            fb.memory_cal.update(*fb.remember(codes, actions), nxt)
        if length > 1:
            fb.majority.update(actions[:-1], actions[1:])
            fb.previous.update(actions[:-1], actions[1:])
        if fb.reward_rule is not None:
            fb.reward_rule.update(now, actions, store.episode_rewards(row))
    return fb


# ---------------------------------------------------------------------------- carried by a checkpoint
#: A checkpoint folder may carry its fitted baselines (the shipped world model does), so it can be
#: evaluated where its training files are not: counts and names only, in JSON (nothing executable).
BASELINES_FILE = "baselines.json"
BASELINES_FORMAT, BASELINES_VERSION = "rpg_worldmodel.baselines", 1


def save_baselines(fb: FittedBaselines, path: str | Path, fitted_on: dict) -> Path:
    """Write ``fb`` as JSON to ``path``; ``fitted_on`` records where (``path``, ``fingerprint``:
    the training file's content fingerprint, which `load_baselines` checks)."""
    def table(t: CalibratedCells | ActionFrequencies | None) -> dict | None:
        return None if t is None else {"alpha": t.alpha, "counts": t.counts.tolist()}

    rule = fb.reward_rule
    doc = {"format": BASELINES_FORMAT, "version": BASELINES_VERSION, "fitted_on": fitted_on,
           "train_episodes_used": fb.train_episodes_used,
           "channel_names": fb.channel_names, "action_names": fb.action_names,
           "copy": table(fb.copy_cal), "motion_oracle": table(fb.shift_cal),
           "memory_oracle": table(fb.memory_cal),
           "majority_action": table(fb.majority), "previous_action": table(fb.previous),
           "reward_rule": None if rule is None else {**table(rule), "game": rule.game,
                                                     "values": rule.values.tolist()}}
    path = Path(path)
    path.write_text(json.dumps(doc) + "\n")
    return path


def load_baselines(path: str | Path, fingerprints: Sequence[str | None]) -> FittedBaselines:
    """Baselines saved by `save_baselines`, refused (InputError saying why) unless they are of this
    format and were fitted on one of ``fingerprints`` (the checkpoint's training files)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
        if doc.get("format") != BASELINES_FORMAT:
            raise ValueError(f"format {doc.get('format')!r}, not {BASELINES_FORMAT!r}")
        if doc.get("version") != BASELINES_VERSION:
            raise ValueError(f"version {doc.get('version')} (this package reads {BASELINES_VERSION})")
        fitted_on = doc["fitted_on"]
        if fitted_on.get("fingerprint") not in [f for f in fingerprints if f]:
            raise ValueError(f"they were fitted on {fitted_on.get('path')} (fingerprint "
                             f"{fitted_on.get('fingerprint')}), not on the checkpoint's training files")
        channels, actions = list(doc["channel_names"]), list(doc["action_names"])

        def table(t: CalibratedCells | ActionFrequencies, saved: dict | None):
            if saved is None:  # an oracle of the game, absent for another game's files
                return None
            counts = np.asarray(saved["counts"], dtype=np.float64)
            if counts.shape != t.counts.shape or (counts < 0).any():
                raise ValueError(f"a table of shape {counts.shape}, expected {t.counts.shape}")
            t.counts, t.alpha = counts, float(saved["alpha"])
            return t

        c, a = len(channels), len(actions)
        rule = None
        if doc["reward_rule"] is not None:
            saved = doc["reward_rule"]
            rule = table(RewardRule(saved["game"], saved["values"]), saved)
        return FittedBaselines(channels, actions, table(CalibratedCells(c), doc["copy"]),
                               table(CalibratedCells(c), doc["motion_oracle"]),
                               table(CalibratedCells(c, num_regions=NUM_REGIONS), doc["memory_oracle"]),
                               table(ActionFrequencies(a, 0), doc["majority_action"]),
                               table(ActionFrequencies(a, 1), doc["previous_action"]),
                               int(doc["train_episodes_used"]), rule, dict(fitted_on))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path}: not usable baselines of this checkpoint: {exc}; delete the file and pass "
                         "the checkpoint's training file as --data to fit them again") from None


def baselines_summary(fb: FittedBaselines, fitted_on: str | Path) -> dict:
    """JSON description of fitted baselines: what each knows and where it was fitted."""
    return {"fitted_on": str(fitted_on), "train_episodes_used": fb.train_episodes_used,
            "majority_action": fb.action_names[fb.majority.majority],
            "copy": "the last view, with probabilities calibrated on the training split",
            "motion_oracle": MOTION_ORACLE_TEXT if fb.oracles else None,
            "memory_oracle": MEMORY_ORACLE_TEXT if fb.oracles else None,
            "previous_action": "P(a_t+1 | a_t) from the training split",
            "reward_rule": REWARD_RULE_TEXT if fb.reward_rule is not None else None}
