"""``report.md`` and its plots, from an evaluation's ``metrics.json``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rpg_base.errors import InputError
from rpg_worldmodel.report.plots import (
    plot_cells,
    plot_entity_f1,
    plot_learning_curves,
    plot_masking,
    plot_rollout,
    plot_rollout_strip,
    plot_seeds,
    plot_transfer,
    plot_view_strip,
)
from rpg_worldmodel.report.text import (
    FIGURE_HELP,
    _cells_section,
    _held_out_section,
    _masking_section,
    _rollout_section,
    _seeds_section,
    _transfer_section,
    dream_line,
    whole_game_table,
)


def _plots(results: dict, out: Path, run_dir: str | Path | None) -> list[tuple[str, Path | None]]:
    """Every plot of the report, as (title, file) in the order shown."""
    plots: list[tuple[str, Path | None]] = []
    if run_dir is not None and (Path(run_dir) / "metrics.csv").exists():
        plots.append(("Learning curves", plot_learning_curves(Path(run_dir) / "metrics.csv",
                                                              out / "learning_curves.png")))
    plots.append(("Per-entity F1", plot_entity_f1(results["files"][results["self"]], out / "entity_f1.png")))
    cells = plot_cells(results["files"][results["self"]], out / "cells.png")
    if cells is not None:
        plots.append(("Where the error lives", cells))
    if (out / "examples.npz").exists():
        plots.append(("Held-out views", plot_view_strip(out / "examples.npz", out / "view_strip.png")))
    for key, tr in results.get("transfer", {}).items():
        png = plot_transfer(tr, out / f"transfer_{Path(key).stem}.png")
        plots.append((f"Transfer to {Path(key).name}", png))
    if "masking" in results:
        plots.append(("Masking probes (view CE)", plot_masking(results["masking"], out / "masking.png")))
    if "rollout" in results:
        plots.append(("Error against horizon", plot_rollout(results["rollout"], out / "rollout.png")))
        if (out / "rollout_strip.npz").exists():
            strip = plot_rollout_strip(out / "rollout_strip.npz", out / "rollout_strip.png")
            plots.append(("Imagined vs real", strip))
    if "seeds" in results:
        plots.append(("Across training seeds", plot_seeds(results["seeds"], out / "seeds.png")))
    return plots


def read_metrics(path: str | Path) -> dict:
    """An evaluation's ``metrics.json``, or `InputError` saying why it cannot be reported."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"metrics file {path} does not exist; write one with "
                                f"`python -m rpg_worldmodel.evaluate ... --out DIR`")
    try:
        results = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise InputError(f"{path} is not valid JSON ({err}); it was cut short or edited by hand, "
                         f"re-run the evaluation") from None
    keys = results if isinstance(results, dict) else {}
    missing = [key for key in ("self", "files", "bootstrap") if key not in keys]
    if missing:
        raise InputError(f"{path} is not a metrics.json written by rpg_worldmodel.evaluate (no {missing}); "
                         f"pass the metrics.json of an evaluation or pipeline run")
    return results


def write_report(metrics_path: str | Path, run_dir: str | Path | None = None,
                 extra_sections: Sequence[str] = ()) -> Path:
    """Make every plot and ``report.md`` beside ``metrics_path``; returns the report's path."""
    metrics_path = Path(metrics_path)
    out = metrics_path.parent
    results = read_metrics(metrics_path)
    lines = _held_out_section(results)
    lines += _cells_section(results)
    for key, tr in results.get("transfer", {}).items():
        lines += _transfer_section(key, tr)
    if "masking" in results:
        lines += _masking_section(results["masking"])
    if "rollout" in results:
        lines += _rollout_section(results["rollout"])
    if "seeds" in results:
        lines += _seeds_section(results["seeds"])
    lines += ["## Plots", ""]
    for title, path in _plots(results, out, run_dir):
        if path is not None:
            lines += [f"### {title}", "", f"![{title}]({Path(path).name})", ""]
    lines += list(extra_sections)
    lines += ["## Figures", "", *[f"- `{k}`: {v}" for k, v in FIGURE_HELP.items()], "",
              "Every figure above is in `metrics.json` beside this report, with its interval.", ""]
    report = out / "report.md"
    report.write_text("\n".join(lines))
    return report


def pipeline_section(p: dict) -> list[str]:
    """The report's "How this was made" section from the pipeline's part of metrics.json."""
    rec = p["recorded"]
    lines = ["## How this was made", "",
             "`python -m rpg_worldmodel.pipeline` with settings:", "", "```json",
             json.dumps(p["settings"], indent=1), "```", "",
             f"- self expert: {rec['self']['policy_id']}, {rec['self']['games']} games "
             f"(mean return {rec['self']['mean_return']:.2f}); cross expert: {rec['cross']['policy_id']}, "
             f"{rec['cross']['games']} games (mean return {rec['cross']['mean_return']:.2f})"
             + (f"; trained beside {rec['explore']['games']} games of random play"
                if "explore" in rec else ""),
             f"- training run: `{p['run_dir']}`; probe model (that model fine-tuned with a mask): "
             f"`{p['masked_checkpoint']}`",
             "- stage timings (s): " + ", ".join(f"{k} {v}" for k, v in p["timings_s"].items()), ""]
    dream = p.get("dream_fidelity")
    if dream:
        lines += ["## The dream over whole games", "",
                  f"{dream['worlds']} imagined worlds beside as many real games, from the same real opening "
                  f"to the episode's end ({dream['sampler']}; `rpg_worldmodel.envs.whole_games`; 95% "
                  "intervals over worlds):", ""]
        lines += [f"- {name}: {dream_line(row)}" for name, row in dream["policies"].items()] + [""]
        if dream.get("argmax"):  # written before the arg-max rows were added
            lines += ["At arg-max (each cell's likeliest kind):", ""]
            lines += [f"- {name}: {dream_line(row)}" for name, row in dream["argmax"].items()] + [""]
        table = whole_game_table({f"{key}/{name}": row for key in ("policies", "argmax")
                                  for name, row in dream.get(key, {}).items()})
        if table:  # one room (open room) or one map of its own (levels) from turn to turn; 1 for real games
            lines += ["Whole games, imagined (real); `policies` sampled at temperature 1:", "", *table, ""]
    return lines
