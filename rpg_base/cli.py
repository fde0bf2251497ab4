"""The one entry point of every command line (``python -m rpg_env.record``, ``rpg_worldmodel.train``...).

Every command fails the same way: bad input (an `rpg_base.errors.InputError`, or a missing,
existing or unreadable path) becomes one line ``error: ...`` on stderr, saying what to change,
and exit status 2; a genuine bug keeps its traceback. Set ``RPG_DEBUG=1`` to see the traceback
of an input error too.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from rpg_base.errors import InputError
from rpg_base.typed_config.values import ConfigError

#: What a user's input can cause: the project's own errors and the file-system errors of the
#: paths they gave. Everything else is a bug.
INPUT_ERRORS: tuple[type[BaseException], ...] = (
    InputError, FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError,
)
EXIT_INPUT_ERROR = 2


class ArgumentParser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` whose usage errors are `InputError`s, so a bad option fails like
    every other bad input: one ``error:`` line (with a pointer to ``--help``) and exit status 2."""

    def error(self, message: str):
        # "argument --fps: must be > 0, got 0" reads as "--fps must be > 0, got 0"
        message = re.sub(r"^argument (\S+): must ", r"\1 must ", message)
        raise InputError(f"{message} (see {self.prog} --help)")

    def refuse_repeats(self, args: argparse.Namespace, *names: str) -> None:
        """A usage error where a list option (``--seeds 0 0``) names a value twice: a repeated seed
        or method would be run twice and counted twice in every mean."""
        for name in names:
            values = getattr(args, name)
            if len(set(values)) < len(values):
                self.error(f"--{name} repeats a value ({' '.join(map(str, values))}); give each once")


# --------------------------------------------------------------------------- argument types
# Each command declares its bounds once, in `add_argument(type=...)`; argparse turns the
# `ArgumentTypeError` into "argument --x: ..." and `ArgumentParser.error` into one `error:` line,
# before any file is opened or written.
def int_in(low: int | None = None, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in ``[low, high]`` (either end may be open)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if (low is not None and value < low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{_bounds(low, high)}, got {value}")
        return value

    parse.__name__ = "integer"  # argparse names the type in "invalid <name> value" messages
    return parse


def float_in(low: float | None = None, high: float | None = None, *,
             low_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite float in ``[low, high]``, or ``(low, high]`` with ``low_open``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        too_low = low is not None and (value <= low if low_open else value < low)
        if not math.isfinite(value) or too_low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{_bounds(low, high, low_open)}, got {text}")
        return value

    parse.__name__ = "number"
    return parse


def _bounds(low, high, low_open: bool = False) -> str:
    if high is None:
        return f"must be {'>' if low_open else '>='} {low:g}"
    if low is None:
        return f"must be <= {high:g}"
    return f"must be in {'(' if low_open else '['}{low:g}, {high:g}]"


#: A count that must be at least one (episodes, games, steps, batch sizes).
positive_int = int_in(1)
#: A count that may be zero (seeds, thread counts where 0 means the library's default).
non_negative_int = int_in(0)
#: A rate or duration that must be above zero (frames per second, temperatures).
positive_float = float_in(0.0, low_open=True)


def check_device(text: str, *, what: str = "device", here: bool = True) -> str:
    """``text`` if it names ``auto`` or a device torch can use on this machine (``cpu``, ``cuda``,
    ``cuda:N`` below the GPU count, ``mps`` where present); else an `InputError` naming ``what``.
    Parsed by torch's own parser, so a typo fails up front and not deep in a model. With
    ``here=False`` only the name is checked (a saved config may name a GPU this machine lacks)."""
    if text == "auto":
        return text
    import torch  # only the commands that take a device pay for importing torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise InputError(f"{what}={text!r} is not a torch device: use auto, cpu, cuda, cuda:N or mps"
                         ) from None
    if device.type not in ("cpu", "cuda", "mps"):
        raise InputError(f"{what}={text!r}: use auto, cpu, cuda, cuda:N or mps")
    if not here:
        return text
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise InputError(f"{what}={text!r}: this machine has no CUDA GPU; use cpu or auto")
        if device.index is not None and device.index >= count:
            raise InputError(f"{what}={text!r}: this machine has {count} CUDA GPU(s), "
                             f"cuda:0..cuda:{count - 1}")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise InputError(f"{what}={text!r}: MPS is not available here; use cpu or auto")
    return text


def device_name(text: str) -> str:
    """An argparse type: `check_device` of ``text``."""
    try:
        return check_device(text, what="device")
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("device=")) from None


def output_file(text: str) -> Path:
    """An argparse type: a path a command may write a file to: not a folder, and not under a file."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder: name a file (in it or elsewhere)")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise argparse.ArgumentTypeError(f"{parent} is a file, so {text} cannot be written")
    return path


def output_folder(text: str) -> Path:
    """An argparse type: a path a command may create a folder at: not an existing file, and not
    under a file (which would fail only at the first write, as a raw "Not a directory")."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file: name a folder")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise argparse.ArgumentTypeError(f"{parent} is a file, so no folder can be made at {text}: "
                                             "name a folder elsewhere")
    return path


def folder_contents(folder: Path, own: Sequence[str]) -> tuple[list[Path], str]:
    """What a command may reuse in an output ``folder``: the entries matching its ``own`` output
    patterns, and a short list of the names of everything else (``""`` when nothing else is there:
    a folder holding someone's files is refused, never written into or cleared)."""
    if not folder.is_dir():
        return [], ""
    ours = [p for pattern in own for p in folder.glob(pattern)]
    others = sorted(p.name for p in folder.iterdir() if p not in ours)
    return ours, ", ".join(others[:5]) + (", ..." if len(others) > 5 else "")


def output_folder_contents(folder: Path, own: Sequence[str], writer: str, option: str = "--out",
                           error: type[Exception] | None = None) -> list[Path]:
    """What an earlier run of ``writer`` left in output ``folder`` (`folder_contents`); refused with
    ``error`` (`InputError` by default) naming ``option`` when ``folder`` is a file, or holds files
    ``writer`` does not write."""
    error = error or InputError
    if folder.exists() and not folder.is_dir():
        raise error(f"{option} {folder} is a file: name a new or empty folder")
    ours, others = folder_contents(folder, own)
    if others:
        raise error(f"{option} {folder} holds files {writer} does not write ({others}); choose a new or "
                    "empty folder")
    return ours


def existing_file(text: str) -> Path:
    """An argparse type: a file that exists (not a folder)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder: name a file")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text} does not exist")
    return path


def one_line(err: BaseException) -> str:
    """The error's message on one line (multi-line messages are joined with '; ')."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return "; ".join(lines) or type(err).__name__


def command_status(main: Callable[[Sequence[str] | None], Any], argv: Sequence[str] | None = None) -> int:
    """Run ``main(argv)``; return its status (0 unless it returns an int), or 2 after printing one
    ``error:`` line for bad input. Bugs propagate."""
    try:
        result = main(argv)
    except INPUT_ERRORS as err:
        if os.environ.get("RPG_DEBUG"):
            raise
        print(f"error: {one_line(err)}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


# --------------------------------------------------------------------------- a long command's lifetime
#: Seconds between two looks at whether the caller of a long command still lives.
CALLER_POLL_SECONDS = 0.5


def end_with_caller() -> None:
    """Tie this process (a long command: a benchmark that trains for an hour) to its caller.

    SIGTERM (a ``kill``, ``timeout``, a harness's time limit) ends it as Ctrl-C would: its child
    processes are sent SIGTERM, then `SystemExit` (status 143) unwinds the main thread, so
    ``finally`` blocks and context managers run (temporary folders removed, env workers closed, a
    ``subprocess.run`` child killed). And when the caller dies (killed by its own time limit, without
    passing the signal on), a watcher thread sees this process handed to another parent and sends it
    that SIGTERM: the command does not train on for nobody. The watcher polls rather than use Linux's
    ``PR_SET_PDEATHSIG``, which fires when the caller's *thread* that started this process ends, not
    the caller. A command started to outlive its caller (under ``nohup``, which ignores SIGHUP, or
    ``setsid``, which makes it a session leader) is not watched: leaving it running was asked for.
    Call it from the main thread in the script's ``__main__`` block, before `run_command` (``main``
    itself stays free of process-wide settings, for tests that call it).
    """
    caller = os.getppid()
    signal.signal(signal.SIGTERM, _terminated)
    detached = signal.getsignal(signal.SIGHUP) == signal.SIG_IGN or os.getsid(0) == os.getpid()
    if not detached:
        threading.Thread(target=_watch_caller, args=(caller,), name="watch-caller", daemon=True).start()


def _watch_caller(caller: int) -> None:
    while os.getppid() == caller:
        time.sleep(CALLER_POLL_SECONDS)
    os.kill(os.getpid(), signal.SIGTERM)


def child_pids() -> list[int]:
    """The ids of this process's live child processes (from Linux's ``/proc``; none elsewhere)."""
    pids: list[int] = []
    for task in Path("/proc/self/task").glob("*"):
        with contextlib.suppress(OSError):
            pids += [int(pid) for pid in (task / "children").read_text().split()]
    return pids


def _terminated(signum: int, frame: Any) -> NoReturn:
    # Ignore further SIGTERMs (the watcher's, a caller's second) so they do not cut the unwinding
    # short; a caller that cannot wait still has SIGKILL.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for pid in child_pids():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    with contextlib.suppress(OSError):  # a caller gone with the pipe it read
        print("terminated", file=sys.stderr)
    raise SystemExit(128 + signum)


def run_command(main: Callable[[Sequence[str] | None], Any], argv: Sequence[str] | None = None) -> NoReturn:
    """``sys.exit(command_status(main, argv))``: what each ``__main__`` block calls."""
    sys.exit(command_status(main, argv))


def yaml_mapping(value: str | dict[str, Any], what: str) -> dict[str, Any]:
    """``value`` (a mapping, or its YAML text given to option ``what``) as a dict; `ConfigError` saying
    what to give otherwise."""
    import yaml

    if isinstance(value, dict):
        return dict(value)
    try:
        parsed = yaml.safe_load(value) if value.strip() else {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{what} is not YAML ({str(err).splitlines()[0]}); give a mapping such as "
                          "'{agent_view_size: 3}'") from None
    if not isinstance(parsed, dict):
        raise ConfigError(f"{what} must be a YAML mapping such as '{{agent_view_size: 3}}', got {value!r}")
    return parsed
