"""The one entry point of every command line (``python -m rpg_env.record``, ``rpg_worldmodel.train``...).

Every command fails the same way: bad input (an `rpg_base.errors.InputError`, or a missing,
existing or unreadable path) becomes one line ``error: ...`` on stderr, saying what to change,
and exit status 2; a genuine bug keeps its traceback. Set ``RPG_DEBUG=1`` to see the traceback
of an input error too.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from rpg_base.errors import InputError

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
        raise InputError(f"{message} (see {self.prog} --help)")


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


def run_command(main: Callable[[Sequence[str] | None], Any], argv: Sequence[str] | None = None) -> NoReturn:
    """``sys.exit(command_status(main, argv))``: what each ``__main__`` block calls."""
    sys.exit(command_status(main, argv))
