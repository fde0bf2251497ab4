"""The one progress bar of every command: a live tqdm bar on a terminal, plain log lines elsewhere.

A tqdm bar redraws itself with carriage returns many times a second. On a terminal that is a
bar; in a log file (``python -m rpg_worldmodel.pipeline > pipeline.log``, a CI job, a notebook
cell's captured stderr) it is one line holding thousands of updates. `progress_bar` gives the
live bar only when its stream is a terminal; otherwise a bar that prints one complete,
newline-terminated line at most every `PLAIN_INTERVAL_S` seconds, and one when it closes.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from tqdm import tqdm

#: Seconds between two plain lines of one bar when the output is not a terminal.
PLAIN_INTERVAL_S = 10.0


class PlainLineBar(tqdm):
    """A tqdm bar that writes whole lines (no ``\\r``), at most every ``mininterval`` seconds."""

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        if msg == "":  # tqdm clearing a finished leave=False bar: nothing to erase in a log
            return True
        self.fp.write((self.__str__() if msg is None else msg) + "\n")
        self.fp.flush()
        return True

    def set_postfix(self, ordered_dict=None, refresh: bool = True, **kwargs) -> None:
        super().set_postfix(ordered_dict, refresh=False, **kwargs)  # shown with the next timed line

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        super().set_description(desc, refresh=False)

    def close(self) -> None:
        if self.disable:
            return
        if getattr(self, "last_print_n", self.n) != self.n:
            self.display()  # the final count, even when the last update came within the interval
        self.disable = True
        self._decr_instances(self)


def progress_bar(iterable: Iterable[Any] | None = None, **kwargs: Any) -> tqdm:
    """``tqdm(iterable, **kwargs)`` on a terminal; a `PlainLineBar` (one line every
    `PLAIN_INTERVAL_S` seconds at most, ``dynamic_ncols`` dropped) when ``file`` (default
    stderr) is not one. ``disable=True`` works as in tqdm."""
    stream = kwargs.get("file") or sys.stderr
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        return tqdm(iterable, **kwargs)
    kwargs.pop("dynamic_ncols", None)
    kwargs["mininterval"] = max(float(kwargs.get("mininterval", 0.1)), PLAIN_INTERVAL_S)
    kwargs.setdefault("maxinterval", kwargs["mininterval"])
    return PlainLineBar(iterable, **kwargs)
