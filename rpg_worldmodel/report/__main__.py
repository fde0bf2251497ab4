"""``python -m rpg_worldmodel.report --metrics OUT/metrics.json [--run RUN_DIR]``: plots and report.md."""

from __future__ import annotations

from collections.abc import Sequence

from rpg_base.cli import ArgumentParser, run_command
from rpg_worldmodel.report.document import write_report


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m rpg_worldmodel.report",
                            description="Plots and report.md from an evaluation's metrics.json.")
    parser.add_argument("--metrics", required=True, help="metrics.json written by rpg_worldmodel.evaluate")
    parser.add_argument("--run", default=None,
                        help="training run folder (for the learning curves in its metrics.csv)")
    args = parser.parse_args(argv)
    print(write_report(args.metrics, args.run))
    return 0


if __name__ == "__main__":
    run_command(main)
