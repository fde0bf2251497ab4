"""Progress bars: live on a terminal, plain log lines elsewhere (a log file, a CI job, a pipe)."""

from __future__ import annotations

import io

from rpg_base.progress import PLAIN_INTERVAL_S, PlainLineBar, progress_bar


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_bar_off_a_terminal_writes_few_whole_lines_and_no_carriage_returns():
    log = io.StringIO()
    bar = progress_bar(total=20_000, desc="evaluate", unit="batch", file=log, dynamic_ncols=True)
    assert isinstance(bar, PlainLineBar)
    for _ in range(20_000):
        bar.update(1)
    bar.close()
    text = log.getvalue()
    assert "\r" not in text and text.endswith("\n")
    lines = text.splitlines()
    assert 1 <= len(lines) <= 3, lines  # the opening line and the final count: all within the interval
    assert "20000/20000" in lines[-1] and lines[-1].startswith("evaluate")


def test_an_iterated_bar_off_a_terminal_ends_with_its_final_count_even_with_leave_false():
    log = io.StringIO()
    assert sum(progress_bar(range(5000), desc="windows", file=log, leave=False)) == sum(range(5000))
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and len(lines) <= 3
    assert "5000/5000" in lines[-1]


def test_postfix_updates_wait_for_the_next_line():
    log = io.StringIO()
    bar = progress_bar(total=1000, desc="train", file=log)
    for step in range(1000):
        bar.update(1)
        bar.set_postfix(loss=f"{1 / (step + 1):.3f}")
    bar.close()
    lines = log.getvalue().splitlines()
    assert len(lines) <= 3 and "loss=0.001" in lines[-1]


def test_plain_lines_come_at_most_every_interval():
    bar = progress_bar(total=10, file=io.StringIO(), mininterval=0.5)
    assert bar.mininterval == PLAIN_INTERVAL_S  # a caller's short interval does not flood a log
    bar.close()


def test_a_terminal_gets_the_live_tqdm_bar():
    screen = _Terminal()
    bar = progress_bar(total=3, desc="train", file=screen, mininterval=0)
    for _ in range(3):
        bar.update(1)
    bar.close()
    assert not isinstance(bar, PlainLineBar) and "\r" in screen.getvalue()


def test_a_disabled_bar_writes_nothing():
    log = io.StringIO()
    for _ in progress_bar(range(10), file=log, disable=True):
        pass
    assert log.getvalue() == ""
