"""The project's one error type for bad input.

`InputError` is raised wherever something a user supplies cannot be used: a file that is
missing, empty, foreign or truncated; a malformed config; a checkpoint of another shape; an
option a command would ignore. Its message says what to change. Every command line turns it
(and the file-system errors of the paths it was given) into one line on stderr and exit
status 2 (`rpg_base.cli.run_command`); anything else is a bug and keeps its traceback.

Game-free: importable from `rpg_worldmodel` without the environment.
"""

from __future__ import annotations


class InputError(ValueError):
    """Something the user supplied cannot be used; the message says what to change.

    A `ValueError`, so code written against the earlier, narrower error classes (all of
    which now derive from this one) keeps working.
    """
