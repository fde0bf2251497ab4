"""The keyboard loop: maps keys to actions and draws the frames the envs render.

It knows nothing about the world. Any env that follows the protocol (`rpg_env.envs.protocol`:
one-hot observations, discrete actions, ``render_mode="rgb_array"``) can be played: the real
game, an imagined one, or a wrapper that hides both. With several envs, Tab switches which one
is shown and receives the keys (as DIAMOND's play loop switches between the game and the
dream), or, with ``side_by_side``, all of them receive every key and are shown next to each
other. The game is turn-based: nothing moves until a move key is pressed.

Holding a key keeps moving (pygame's key repeat), but never more than one turn per loop
iteration and never after the key was let go: pygame makes the repeats on a timer thread, and
while a slow step runs (a world model's first steps) they pile up until the release is read.

Tests drive it headless by posting ``KEYDOWN`` events (``SDL_VIDEODRIVER=dummy``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from rpg_env.envs.protocol import describe

DEFAULT_FPS = 30.0
#: action name -> pygame key names, resolved against the env's ``action_names``: the treasurehunt
#: game's moves, and MiniGrid's turns and object actions (its ``manual_control`` keys where they are
#: free here: Space and Tab belong to the play windows).
ACTION_KEYS = {"up": ("up", "w"), "down": ("down", "s"), "left": ("left", "a"), "right": ("right", "d"),
               "forward": ("up", "w"), "pickup": ("p", "page up"), "drop": ("o", "page down"),
               "toggle": ("t",), "done": ("return",)}


def key_actions(action_names: Sequence[str] = ("up", "down", "left", "right")) -> dict[int, int]:
    """pygame key code -> action index, for the actions `ACTION_KEYS` names (``action_names`` gives the
    order); an action it does not name has no key."""
    import pygame

    keys = {}
    for index, name in enumerate(action_names):
        for key_name in ACTION_KEYS.get(name, ()):
            keys[pygame.key.key_code(key_name)] = index
    return keys


def keys_help(action_names: Sequence[str]) -> str:
    """The key-help line for an env's actions: ``"arrows/WASD move"`` for the four moves, else each
    action with its first key (``"up forward  ·  p pickup"``)."""
    if set(action_names) == {"up", "down", "left", "right"}:
        return "arrows/WASD move"
    return "  ·  ".join(f"{ACTION_KEYS[name][0]} {name}" for name in action_names if name in ACTION_KEYS)


@dataclass
class PlaySummary:
    """What happened in one `play` session, for the env that had the keys at the end (scores in
    points: the learner's episode return)."""

    episode_returns: list[float] = field(default_factory=list)  # finished or restarted episodes
    score: float = 0.0  # return of the episode on screen when the session ended
    turn: int = 0  # its turn
    steps: int = 0  # moves made, all episodes
    restarts: int = 0
    frames: int = 0  # loop iterations (at most fps per second), each handling all pending events
    quit: bool = False  # the player quit (Esc or closing the window), not max_frames
    switches: int = 0  # Tab presses that changed the env on screen
    # Per env (by caption): its finished or restarted episodes' returns, and the return of its
    # episode on screen at the end (side by side, every env's own score).
    returns_by_env: dict[str, list[float]] = field(default_factory=dict)
    score_by_env: dict[str, float] = field(default_factory=dict)

    @property
    def final_score(self) -> float:
        return self.score


@dataclass
class _Screen:
    """One env and its episode as the loop sees it."""

    name: str
    env: gym.Env
    max_turns: int | None
    info: dict = field(default_factory=dict)
    turn: int = 0
    score: float = 0.0
    over: bool = False
    last: list[str] = field(default_factory=list)

    def reset(self, seed: int | None, options: dict | None) -> None:
        _, self.info = self.env.reset(seed=seed, options=options)
        self.turn, self.score, self.over = int(self.info.get("turn", 0)), 0.0, False
        self.score = float(self.info.get("episode_return", 0.0))
        self.last = []

    def step(self, action: int, action_name: str) -> None:
        _, reward, terminated, truncated, self.info = self.env.step(action)
        self.turn = int(self.info.get("turn", self.turn + 1))
        self.score = float(self.info.get("episode_return", self.score + float(reward)))
        self.last = [f"moved {action_name}", describe_step(float(reward), self.info)]
        self.over = bool(terminated or truncated)

    def header(self) -> str:
        total = f"/{self.max_turns}" if self.max_turns else ""
        level = self.info.get("level", -1)
        shown = f"level {level}   " if level >= 0 else ""  # -1: the open room, no level
        return f"{shown}turn {self.turn}{total}   score {self.score:+g}"


def describe_step(reward: float, info: Mapping[str, Any]) -> str:
    """``"last move: +10 (gem)"`` from a step's reward and info (``pickups``, ``bumped``)."""
    picked = [name for name, n in (info.get("pickups") or {}).items() if n]
    if picked:
        return f"last move: {reward:+g} ({picked[0]})"
    if info.get("bumped"):
        return f"last move: {reward:+g} (bumped a wall)"
    return f"last move: {reward:+g}"


def _screens(envs: gym.Env | Sequence[gym.Env] | Mapping[str, gym.Env]) -> list[_Screen]:
    if isinstance(envs, gym.Env):
        envs = {"": envs}
    elif not isinstance(envs, Mapping):
        envs = {f"env {i + 1}": env for i, env in enumerate(envs)}
    if not envs:
        raise ValueError("play needs at least one env")
    screens = []
    for name, env in envs.items():
        mode = getattr(env, "render_mode", None)
        if mode != "rgb_array":
            raise ValueError(f"play draws the frames the env renders: make {name or 'the env'} with "
                             f"render_mode='rgb_array' (it has {mode!r})")
        screens.append(_Screen(name, env, describe(env).max_turns))
    return screens


class _Session:
    """The state of one `play` session: the screens, which one has the keys, the window."""

    def __init__(self, screens: list[_Screen], window, options: dict | None, side_by_side: bool,
                 extra_keys: Mapping[int, Callable[[], str | None]], status, log) -> None:
        import pygame

        self.pg = pygame
        self.screens, self.window, self.options = screens, window, options
        self.side_by_side, self.extra_keys, self.status = side_by_side, dict(extra_keys), status
        self.say = log or (lambda _msg: None)
        self.action_names = describe(screens[0].env).action_names
        self.keys = key_actions(self.action_names)
        self.summary = PlaySummary()
        self.active = 0
        self.notes = ["your move"]
        self.down: set[int] = set()  # keys pressed and not yet released

    @property
    def keyed(self) -> list[_Screen]:
        """The screens a key acts on (and that are shown)."""
        return self.screens if self.side_by_side else [self.screens[self.active]]

    def finish_episode(self, screen: _Screen, reason: str) -> None:
        self.summary.episode_returns.append(screen.score)
        self.summary.returns_by_env.setdefault(screen.name, []).append(screen.score)
        label = f" ({screen.name})" if len(self.screens) > 1 else ""
        self.say(f"episode {len(self.summary.episode_returns)}{label} {reason} after {screen.turn} turns: "
                 f"score {screen.score:+g}")

    def handle_key(self, key: int) -> None:
        pg, keyed = self.pg, self.keyed
        if key == pg.K_r:
            for screen in keyed:
                if not screen.over and screen.turn > 0:
                    self.finish_episode(screen, "restarted")
            for screen in self.screens:
                screen.reset(None, self.options)
            self.summary.restarts += 1
            self.notes = ["new episode: your move"]
        elif key == pg.K_TAB and len(self.screens) > 1 and not self.side_by_side:
            self.active = (self.active + 1) % len(self.screens)
            self.summary.switches += 1
            self.notes = [f"now playing: {self.screens[self.active].name}"]
        elif key in self.extra_keys:
            note = self.extra_keys[key]()
            self.notes = [note] if note else self.notes
        elif key in self.keys and not keyed[0].over:
            action = self.keys[key]
            for screen in keyed:
                if not screen.over:
                    screen.step(action, self.action_names[action])
                    if screen.over:
                        self.finish_episode(screen, "over")
            self.summary.steps += 1
            self.notes = ["episode over:", "R plays again, Esc quits"] if keyed[0].over else []

    def draw(self) -> None:
        shown = self.keyed
        lines = list(shown[0].last)
        if self.status is not None:  # every env shown has its say (side by side: the dream's uncertainty)
            for screen in shown:
                lines += list(self.status(screen.env, screen.info))
        self.window.show([s.env.render() for s in shown], captions=[s.name for s in shown if s.name],
                         header="   |   ".join(s.header() for s in shown), status=lines + self.notes)

    def run(self, max_frames: int | None) -> PlaySummary:
        pg, summary = self.pg, self.summary
        dirty = True  # redraw only when something happened: an idle window costs no CPU
        while not summary.quit:
            for event in self.unrepeated(pg.event.get()):
                # Keys change the game; an exposed window needs repainting; the rest does not.
                dirty = dirty or event.type in (pg.KEYDOWN, pg.VIDEOEXPOSE, pg.WINDOWEXPOSED)
                if event.type == pg.QUIT or (event.type == pg.KEYDOWN and event.key == pg.K_ESCAPE):
                    summary.quit = True
                    break
                if event.type == pg.KEYDOWN:
                    self.handle_key(event.key)
            if dirty:
                self.draw()
                dirty = False
            else:
                self.window.tick()
            summary.frames += 1
            if max_frames is not None and summary.frames >= max_frames:
                break
        summary.score, summary.turn = self.screens[self.active].score, self.screens[self.active].turn
        summary.score_by_env = {screen.name: screen.score for screen in self.screens}
        return summary

    def unrepeated(self, events: list) -> list:
        """``events`` without the key repeats the player did not ask for.

        A ``KEYDOWN`` of a key that is already down is one of pygame's repeats. pygame's timer makes
        them until it reads the release, which it does only when the loop fetches events again: a
        step slower than the repeat delay (300 ms) comes back to a queue of repeats followed by the
        release. Those are dropped; of the repeats of a key still held, one per batch is kept, so
        holding a key moves one turn per iteration, as fast as the steps go and no further.
        """
        pg = self.pg
        released_at = {e.key: i for i, e in enumerate(events) if e.type == pg.KEYUP}
        kept, repeated = [], False
        for i, event in enumerate(events):
            if event.type == pg.KEYDOWN:
                if event.key in self.down:
                    if released_at.get(event.key, -1) > i or repeated:
                        continue
                    repeated = True
                self.down.add(event.key)
            elif event.type == pg.KEYUP:
                self.down.discard(event.key)
            kept.append(event)
        return kept


def play(envs: gym.Env | Sequence[gym.Env] | Mapping[str, gym.Env], *, seed: int | None = None,
         options: dict | None = None, fps: float = DEFAULT_FPS, max_frames: int | None = None,
         window=None, side_by_side: bool = False,
         extra_keys: Mapping[int, Callable[[], str | None]] | None = None,
         status: Callable[[gym.Env, dict], Sequence[str]] | None = None,
         help_text: str | None = None, log: Callable[[str], None] | None = print,
         legend: Sequence[tuple[Any, str]] | None = None) -> PlaySummary:
    """Run the keyboard loop until the player quits (or ``max_frames`` frames).

    Args:
        envs: one env, a list, or ``{caption: env}``; each made with ``render_mode="rgb_array"``.
        seed, options: passed to the first ``reset`` of every env; R restarts all of them with
            the same ``options`` (e.g. a fixed ``layout``) and their continuing random streams.
        fps: at most this many loop iterations per second; each handles every pending event
            and redraws the window if anything happened (the game itself waits for keys).
        max_frames: stop after this many iterations; None plays until the player quits.
        window: a `rpg_env.render.PygameWindow` to draw in (made, and closed, here if None).
        side_by_side: every env receives every key and all are shown; otherwise Tab switches.
        extra_keys: pygame key code -> callback (e.g. a toggle); its return, if any, is shown
            as a status line.
        status: ``(env, info) -> lines`` added to the panel after each step (e.g. uncertainty), for
            every env shown.
        help_text: the key-help line (default: the move, restart, switch and quit keys).
        log: where the episode scores are reported (None: silent).
        legend: ``(icon, label)`` rows of the window it makes, matching the frames the envs draw
            (default: `rpg_env.render.game_legend`, the map's).
    """
    import pygame

    from rpg_env.render import SESSION_KEYS_HELP, PygameWindow

    if max_frames is not None and max_frames < 1:
        raise ValueError(f"max_frames must be >= 1 or None, got {max_frames}")
    screens = _screens(envs)
    if help_text is None:
        actions = describe(screens[0].env).action_names
        help_text = f"{keys_help(actions)}  ·  {SESSION_KEYS_HELP}" + \
            ("  ·  Tab switch" if len(screens) > 1 and not side_by_side else "")
    own_window = window is None
    if own_window:
        window = PygameWindow(fps, help_text=help_text, close_on_quit=False, legend=legend)
    pygame.key.set_repeat(300, 110)  # holding a key keeps moving, one turn per repeat
    for screen in screens:
        screen.reset(seed, options)
    session = _Session(screens, window, options, side_by_side, extra_keys or {}, status, log)
    try:
        return session.run(max_frames)
    finally:
        if own_window:
            window.close()
