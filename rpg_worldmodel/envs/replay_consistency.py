"""Does some real game explain a whole dream? Whole-game consistency by replaying the real game.

In a game whose randomness is all drawn at its reset (the layout, the objects, the agent's start;
every move after is determined, as in many gridworlds' tasks), a real game is fixed by its seed. A dream
that starts from a real game's opening is one world for the whole game if some real game, the
opening's own or one of ``seeds`` others, played from its reset with the opening's and the dream's
actions, shows every frame the dream shows, ends where the dream ends, and pays where the dream
pays. A dream that invents a layout no seed draws, forgets a wall it passed, changes an object
nobody touched or ends a game away from its goal breaks at that frame.

The check plays the real game (`RealGame`: the env made again from the checkpoint's files): it
reads what the game shows, holds no rule of any game, and never changes a frame. A real game
scores exactly 1: its own seed explains it (tests/test_imagined_any_game.py). A game with
randomness after its reset (a co-player, a moving obstacle) cannot be explained this way, and its
real games score below 1: `dream_replays` reports the real games' score beside the dream's, so a
check that does not apply says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

from rpg_base.errors import InputError
from rpg_env.policies.base import BatchPolicy
from rpg_worldmodel.envs.fidelity import Share
from rpg_worldmodel.envs.imagination import GivenContext, ImaginedWorlds, Start, play_opening
from rpg_worldmodel.envs.real_game import RealGame


@dataclass(frozen=True, eq=False)
class Replay:
    """One game replayed (`SeedReplays.replay`): ``explained`` ``(T,)`` bool, frame t and every frame
    before it explained by one real game; ``broken_by``, what the real games still explaining the game
    disagreed on at its first unexplained frame: ``view`` (none shows that frame), ``end`` (one shows
    it but ends where the dream goes on, or goes on where it ends), ``pay`` (one shows it and ends
    alike but pays otherwise), or "" (no break); ``wrong``, at a ``view`` break, each cell where the
    frame differs from the first of those real games' (the opening's own, where it was one), as
    ``real kind -> dream kind``."""

    explained: np.ndarray
    broken_by: str
    wrong: tuple[str, ...]


class SeedReplays:
    """The real games of ``game`` that may explain a dream: those of ``seeds``, and a dream's own
    opening's seed (`explained`). Each seed's first view is read once and indexed by its cells, so a
    dream's first frame picks its candidates among many seeds before any is played (`--candidates`
    in the hundreds of thousands stays cheap: one reset a seed)."""

    def __init__(self, game: RealGame, seeds: Sequence[int], progress: bool = False) -> None:
        self.game, self.seeds = game, [int(s) for s in seeds]
        self._given = set(self.seeds)
        self._first: dict[int, bytes] = {}
        self._by_view: dict[bytes, list[int]] = {}
        self._first_views(self.seeds, progress)

    @staticmethod
    def _key(view: np.ndarray) -> bytes:
        """A view's cells as bytes, whatever its dtype: one byte a cell where every value fits one
        (one-hot views; 200,000 FourRooms first views in 118 MB), eight otherwise."""
        view = np.asarray(view)
        small = view.size == 0 or (view.min() >= 0 and view.max() <= 255)
        cells = np.ascontiguousarray(view, dtype=np.uint8 if small else np.int64)
        return repr((view.shape, small)).encode() + cells.tobytes()

    def _first_views(self, seeds: Sequence[int], progress: bool = False) -> None:
        """Read the first view of each of ``seeds`` not read yet, all from one env."""
        missing = [seed for seed in seeds if seed not in self._first]
        if not missing:
            return
        env = self.game.make()
        try:
            for seed in tqdm(missing, desc="first views", unit="seed", disable=not progress):
                key = self._key(env.reset(seed=seed)[0])
                self._first[seed] = key
                self._by_view.setdefault(key, []).append(seed)
        finally:
            env.close()

    def candidates(self, first_view: np.ndarray, own_seed: int | None = None) -> list[int]:
        """The seeds whose reset shows ``first_view``: ``own_seed`` first (read now if it was not),
        then those of ``seeds`` in their order."""
        key = self._key(first_view)
        own = []
        if own_seed is not None:
            self._first_views([int(own_seed)])
            own = [int(own_seed)] if self._first[int(own_seed)] == key else []
        return own + [s for s in self._by_view.get(key, []) if s in self._given and s not in own]

    def explained(self, views: np.ndarray, actions: np.ndarray, ends: np.ndarray, paid: np.ndarray,
                  own_seed: int | None = None) -> np.ndarray:
        """``(T,)`` bool: frame t, and every frame before it, is explained by one real game
        (`replay`'s ``explained``)."""
        return self.replay(views, actions, ends, paid, own_seed).explained

    def replay(self, views: np.ndarray, actions: np.ndarray, ends: np.ndarray, paid: np.ndarray,
               own_seed: int | None = None) -> Replay:
        """The `Replay` of one game: ``views`` ``(T, C, V, V)``, its frames from its reset on (the real
        opening's, then the dream's); ``actions`` ``(T-1,)``, the action taken in each frame but the
        last; ``ends`` and ``paid`` ``(T-1,)`` bool, whether each step ended the game and whether it
        paid a reward."""
        candidates = self.candidates(views[0], own_seed)
        # the most frames one candidate explains, why those that got that far stopped, and the first's frame
        reached, causes, real = 0, {"view"}, None
        env = self.game.make()
        try:
            for seed in candidates:  # one at a time, one env: a common first view may have thousands
                env.reset(seed=seed)
                frames, cause, obs = 1, "", None
                while frames < len(views) and not cause:
                    obs, reward, terminated, _, _ = env.step(int(actions[frames - 1]))
                    cause = "view" if not np.array_equal(obs, views[frames]) else \
                        "end" if bool(terminated) != bool(ends[frames - 1]) else \
                        "pay" if (reward != 0) != bool(paid[frames - 1]) else ""
                    frames += 0 if cause else 1
                if frames > reached:
                    reached, causes, real = frames, {cause}, obs
                elif frames == reached:
                    causes.add(cause)
                if reached == len(views):
                    break
        finally:
            env.close()
        explained = np.arange(len(views)) < reached
        if reached == len(views):
            return Replay(explained, "", ())
        broken_by = next(c for c in ("pay", "end", "view") if c in causes)
        shown = broken_by == "view" and real is not None
        wrong = self._wrong_cells(np.asarray(real), views[reached]) if shown else ()
        return Replay(explained, broken_by, wrong)

    def _wrong_cells(self, real: np.ndarray, dream: np.ndarray) -> tuple[str, ...]:
        """Each cell where ``dream`` differs from ``real`` ``(C, V, V)``, as ``real kind -> dream kind``
        (a cell's kind: its first channel set)."""
        names = self.game.channel_names
        rows, cols = np.nonzero((real != dream).any(axis=0))
        return tuple(f"{names[int(real[:, r, c].argmax())]} -> {names[int(dream[:, r, c].argmax())]}"
                     for r, c in zip(rows, cols, strict=True))


@dataclass(frozen=True)
class Played:
    """Games played on from their openings: per world its frames from the reset ``(T_i, C, V, V)``,
    actions ``(T_i - 1,)``, ends and paid ``(T_i - 1,)`` bool, and the seed of its real opening."""

    views: list[np.ndarray]
    actions: list[np.ndarray]
    ends: list[np.ndarray]
    paid: list[np.ndarray]
    seeds: np.ndarray


def real_openings(game: RealGame, policy: BatchPolicy, num_frames: int, worlds: int,
                  seed: int) -> tuple[Played, Any]:
    """``worlds`` real games, world ``i`` reset with seed ``seed + i``, played by ``policy`` for the
    ``num_frames - 1`` opening turns: the openings (`Played`) and the vector env, still running."""
    env = game.make_vector(worlds)
    played = play_opening(env, policy, num_frames - 1, seed, np.random.default_rng(seed))
    if played["ended"].any():
        raise InputError(f"{int(played['ended'].sum())} of {worlds} real games ended within the "
                         f"{num_frames - 1} opening turns: a model of longer games is judged here")
    none_ended = np.zeros(played["actions"].shape, dtype=bool)
    return Played(list(played["views"]), list(played["actions"]), list(none_ended),
                  list(played["rewards"] != 0), seed + np.arange(worlds)), env


def play_on(step: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
            obs: np.ndarray, policy: BatchPolicy, played: Played, max_steps: int, seed: int) -> Played:
    """Every world of ``played`` played on by ``policy`` (seeded with ``seed``) until its game ends or
    is cut (``step(actions) -> (obs, rewards, terminated, truncated)``, at most ``max_steps`` steps):
    ``played`` with each world's steps appended up to its end."""
    worlds = len(obs)
    policy.seed(np.random.default_rng(seed))
    views = [list(v) for v in played.views]
    acts, ends, paid = [list(a) for a in played.actions], [list(e) for e in played.ends], \
        [list(p) for p in played.paid]
    running = np.ones(worlds, dtype=bool)
    for _ in range(max_steps):
        action = np.asarray(policy.act(obs, np.zeros(worlds, dtype=bool)), dtype=np.int64)
        obs, reward, terminated, truncated = step(action)
        for i in np.flatnonzero(running):
            views[i].append(obs[i].astype(np.uint8))
            acts[i].append(int(action[i]))
            ends[i].append(bool(terminated[i]))
            paid[i].append(bool(reward[i] != 0))
        running &= ~(np.asarray(terminated) | np.asarray(truncated))
        if not running.any():
            break
    return Played([np.stack(v) for v in views], [np.asarray(a, dtype=np.int64) for a in acts],
                  [np.asarray(e, dtype=bool) for e in ends], [np.asarray(p, dtype=bool) for p in paid],
                  played.seeds)


@dataclass(frozen=True, eq=False)
class ReplayVerdict:
    """`SeedReplays` over played games: ``games``, 1 of 1 per world some real game explains in every
    frame; ``frames``, its frames from the first imagined one before the first unexplained one, of
    all its frames from there; ``broken_at`` (N,) int64, the first unexplained frame (-1: none) and
    ``action_before`` (N,) int64, the action that led to it (-1: none); ``broken_by`` (N,) str, what
    broke it there (`Replay`: ``view``, ``end`` or ``pay``; "": none), and ``wrong``, per world the
    cells a view break drew wrong (`Replay.wrong`)."""

    games: Share
    frames: Share
    broken_at: np.ndarray
    action_before: np.ndarray
    broken_by: np.ndarray
    wrong: tuple[tuple[str, ...], ...]


def replay_verdict(replays: SeedReplays, played: Played, first: int) -> ReplayVerdict:
    """`ReplayVerdict` of ``played``, its frames from index ``first`` (the first imagined one) on."""
    games, frames, totals, broken, before, causes, wrong = [], [], [], [], [], [], []
    for i in range(len(played.views)):
        replay = replays.replay(played.views[i], played.actions[i], played.ends[i], played.paid[i],
                                own_seed=int(played.seeds[i]))
        ok = replay.explained
        at = -1 if ok.all() else int(ok.argmin())
        games.append(int(at < 0))
        frames.append(len(ok) - first if at < 0 else max(at - first, 0))
        totals.append(len(ok) - first)
        broken.append(at)
        before.append(int(played.actions[i][at - 1]) if at > 0 else -1)
        causes.append(replay.broken_by)
        wrong.append(replay.wrong)
    n = len(games)
    return ReplayVerdict(Share(np.asarray(games, dtype=np.int64), np.ones(n, dtype=np.int64)),
                         Share(np.asarray(frames, dtype=np.int64), np.asarray(totals, dtype=np.int64)),
                         np.asarray(broken, dtype=np.int64), np.asarray(before, dtype=np.int64),
                         np.asarray(causes, dtype=str), tuple(wrong))


def dream_replays(loaded, game: RealGame, policy: Callable[[], BatchPolicy], *, sample: bool, worlds: int,
                  seed: int, replays: SeedReplays) -> dict[str, ReplayVerdict]:
    """``policy()`` (a fresh policy each time) in the dream of ``loaded`` and in the real game, from the
    same real openings (world ``i``'s seed ``seed + i``), each world to its game's end: the
    `ReplayVerdict` of the dream and of the real games (exactly 1 where the check applies)."""
    num_frames = loaded.config.model.num_frames
    opening, real_env = real_openings(game, policy(), num_frames, worlds, seed)
    max_steps = game.max_turns
    try:
        real = play_on(lambda a: real_env.step(a)[:4], np.stack([v[-1] for v in opening.views]), policy(),
                       opening, max_steps, seed + 1)
    finally:
        real_env.close()
    context = GivenContext()
    context.give(Start(np.stack(opening.views), np.stack(opening.actions),
                       np.full(worlds, num_frames - 1, dtype=np.int64)))
    dream = ImaginedWorlds(loaded, worlds, context, sample=sample)
    dream.reset(np.arange(worlds), np.random.default_rng(seed))

    def step(actions: np.ndarray):
        rewards, truncated = dream.step(actions)
        return dream.observations(), rewards, dream.ended.copy(), truncated

    imagined = play_on(step, dream.observations(), policy(), opening, max_steps, seed + 1)
    return {"dream": replay_verdict(replays, imagined, num_frames),
            "real": replay_verdict(replays, real, num_frames)}


#: Seeds 0..K-1 whose real games the play window's line may explain a dream by, besides its own.
PLAY_CANDIDATES = 100


class ReplayStatus:
    """The play window's line for a game judged by replays: one dream from its real opening (a
    `Start` of one world with its reset seed and rewards) and the steps since, as ``one real game``
    or ``no real game from turn k: its view`` (or ``end``, ``pay``: what broke it, `SeedReplays.replay`);
    judged once a frame, however often the panel asks."""

    def __init__(self, game: RealGame, candidates: int = PLAY_CANDIDATES) -> None:
        self.replays = SeedReplays(game, range(candidates))
        self.views: list[np.ndarray] = []
        self.actions: list[int] = []
        self.ends: list[bool] = []
        self.paid: list[bool] = []
        self.seed: int | None = None
        self._judged: tuple[int, str] = (0, "")

    def begin(self, opening: Start | None) -> None:
        """A new dream from ``opening`` (None, or one without rewards: not judged)."""
        self.views, self.actions, self.ends, self.paid, self._judged = [], [], [], [], (0, "")
        if opening is None or opening.rewards is None:
            return
        self.views = list(np.asarray(opening.views[0]))
        self.actions = [int(a) for a in opening.actions[0]]
        self.ends = [False] * len(self.actions)
        self.paid = [bool(r != 0) for r in opening.rewards[0]]
        self.seed = None if opening.seeds is None else int(opening.seeds[0])

    def add(self, view: np.ndarray, action: int, ended: bool, reward: float) -> None:
        if self.views:
            self.views.append(np.asarray(view))
            self.actions.append(int(action))
            self.ends.append(bool(ended))
            self.paid.append(reward != 0)

    def line(self, last_turn: int) -> str:
        """``one real game``, ``no real game from turn k: its view`` (``last_turn``: the game turn of the last
        frame), or "" for a dream not judged."""
        if not self.views:
            return ""
        if self._judged[0] != len(self.views):
            replay = self.replays.replay(np.stack(self.views), np.array(self.actions), np.array(self.ends),
                                         np.array(self.paid), own_seed=self.seed)
            ok = replay.explained
            broken = last_turn - (len(ok) - 1) + int(ok.argmin())
            line = "one real game" if ok.all() else f"no real game from turn {broken}: its {replay.broken_by}"
            self._judged = (len(self.views), line)
        return self._judged[1]
