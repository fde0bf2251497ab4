"""The evaluation's results as text: markdown tables, console summaries and the report's sections.

Every figure is shown as ``value [lo, hi]`` (its 95% game-level bootstrap interval).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rpg_worldmodel.data.kinds import item_names, items_first
from rpg_worldmodel.evaluation.metrics import RETURN_BLOCK
from rpg_worldmodel.evaluation.tables import MATCH_TOLERANCE


def recorded_kinds(table: dict) -> tuple[str, ...]:
    """The channel names a table of ``metrics.json`` was scored with (its ``channel_names``); for a
    metrics.json written before they were recorded, the kinds of its per-kind F1 figures."""
    if "channel_names" in table:
        return tuple(table["channel_names"])
    return _f1_kinds(table)


def _f1_kinds(node: object) -> tuple[str, ...]:
    """The kinds with an F1 figure (``f1_X``) in the first dict of figures under ``node``."""
    if not isinstance(node, dict):
        return ()
    kinds = tuple(k[3:] for k in node if k.startswith("f1_") and k != "f1_items")
    for child in node.values():
        kinds = kinds or _f1_kinds(child)
    return kinds


def main_figures(result: dict) -> tuple[str, ...]:
    """The columns of a file's table: the view's figures, the F1 of every kind of its data (items
    first) and the action's figures."""
    kinds = tuple(f"f1_{n}" for n in items_first(recorded_kinds(result)))
    return ("view_ce", "cell_acc", "changed_acc", *kinds, "action_ce", "action_acc")


SCORING_TEXT = {"full": "(every transition once, with up to num_frames steps of history).",
                "stride": "(every transition once; non-overlapping windows: 1..num_frames steps of history)."}


FIGURE_HELP = {
    "view_ce": "next-view cross-entropy, nats per cell (lower is better)",
    "cell_acc": "fraction of next-view cells predicted right",
    "changed_acc": "accuracy on the cells that change between t and t+1",
    "f1_X": "per-entity F1 of the arg-max prediction (every channel of the data but empty)",
    "action_ce": "next-action cross-entropy, nats per step",
    "action_acc": "next-action accuracy",
    "total_ce": "view_ce + action_ce (the reference's 'state + action loss')",
    "reward_ce, reward_acc": "reward-class cross-entropy (nats per step) and accuracy",
    "reward_recall_X": "share of the steps that gave reward class X predicted as X",
    "return_mae": "mean absolute error of the return summed over a block of steps (points)",
}


# ---------------------------------------------------------------------------- text
def fmt_interval(iv: dict | None) -> str:
    """``0.143 [0.140, 0.146]`` (value [95% interval]); ``-`` when undefined."""
    if not iv or iv.get("value") is None:
        return "-"
    lo, hi = iv.get("lo"), iv.get("hi")
    if lo is None or hi is None:
        return f"{iv['value']:.3f}"
    return f"{iv['value']:.3f} [{lo:.3f}, {hi:.3f}]"


def fmt_percent(iv: dict | None) -> str:
    """A relative figure as ``+54.6% [+45.4%, +65.3%]``; ``-`` when undefined."""
    if not iv or iv.get("value") is None:
        return "-"
    if iv.get("lo") is None:
        return f"{100 * iv['value']:+.1f}%"
    return f"{100 * iv['value']:+.1f}% [{100 * iv['lo']:+.1f}%, {100 * iv['hi']:+.1f}%]"


def dream_line(row: dict) -> str:
    """One policy's dream over whole games against the real game (`rpg_worldmodel.envs.whole_games`):
    ``valid frames 0.101 [0.088, 0.115] (whole games valid 0.000; breaks: 52 entered, 24 carried),
    consistent 0.077 [...] (an ideal dream 0.772), to a map of its own 0.102, walls kept 0.983, items
    kept 0.375 (real 0.980), spawn rate 0.0263 (real 0.0102), return gap -13.8 [-28.4, +1.8] (-3.9% of
    real)``; ``-`` when undefined (a row measured before the whole games, the breaks, the ideal
    dream, any-start consistency or walls kept leaves that part out)."""
    im, re = row["imagined"], row["real"]

    def value(iv: dict, spec: str) -> str:
        return "-" if iv.get("value") is None else format(iv["value"], spec)

    gap, share = row["return"]["imagined_minus_real"], row["return"]["gap_share_of_real"]
    spread = "" if gap.get("lo") is None else f" [{gap['lo']:+.1f}, {gap['hi']:+.1f}]"
    of_real = "" if share is None else f" ({share:+.1%} of real)"
    kept, spawned = "item_persistence", "spawn_rate"
    ideal = row.get("ideal_dream", {}).get("geometric_consistency")
    ceiling = "" if ideal is None else f" (an ideal dream {value(ideal, '.3f')})"
    any_start = im.get("consistency_any_start")
    own_map = "" if any_start is None else f", to a map of its own {value(any_start, '.3f')}"
    if im.get("walls_kept") is not None:
        own_map += f", walls kept {value(im['walls_kept'], '.3f')}"
    notes = []
    if im.get("whole_games_valid") is not None:
        notes.append(f"whole games valid {value(im['whole_games_valid'], '.3f')}")
    breaks = im.get("wall_breaks")
    if breaks is not None:
        notes.append(f"breaks: {breaks['entered']} entered, {breaks['carried']} carried")
    where = f" ({'; '.join(notes)})" if notes else ""
    return (f"valid frames {fmt_interval(im['frame_validity'])}{where}, "
            f"consistent {fmt_interval(im['geometric_consistency'])}{ceiling}{own_map}, "
            f"items kept {value(im[kept], '.3f')} (real {value(re[kept], '.3f')}), "
            f"spawn rate {value(im[spawned], '.4f')} (real {value(re[spawned], '.4f')}), "
            f"return gap {value(gap, '+.1f')}{spread}{of_real}{whole_game_part(im, re)}")


def _figure(row: dict, name: str, spec: str) -> str:
    """``row[name]``'s value formatted by ``spec``; ``-`` where it is missing or undefined."""
    iv = row.get(name)
    return "-" if iv is None or iv.get("value") is None else format(iv["value"], spec)


def _item_bins(row: dict) -> list[str]:
    """The ``items_turns_LO_HI`` figures of a measured row, in turn order."""
    return sorted((k for k in row if k.startswith("items_turns_")), key=lambda k: int(k.split("_")[2]))


def whole_game_part(im: dict, re: dict) -> str:
    """The whole-game figures of a `dream_line` (`rpg_worldmodel.envs.consistency`): ``; one room:
    0.016 of games, 0.312 of frames before the first break; own map: 0.203 of games, 0.511 of frames;
    co-players in view 0.071 (real 0.203); items in view by turn bin 1.5/6.4/9.3/11.9 (real
    1.5/6.0/9.0/12.0)``; each part only where measured (empty for a row measured before them)."""
    def value(name: str, spec: str, row: dict = im) -> str:
        return _figure(row, name, spec)

    parts = []
    if "room_games" in im:
        parts.append(f"one room: {value('room_games', '.3f')} of games, {value('room_frames', '.3f')} of "
                     "frames before the first break")
    if "map_games" in im:
        parts.append(f"own map: {value('map_games', '.3f')} of games, {value('map_frames', '.3f')} of frames")
    if "co_players" in im:
        real = value("co_players", ".3f", re)
        parts.append(f"co-players in view {value('co_players', '.3f')} (real {real})")
    if _item_bins(im):
        parts.append("items in view by turn bin " + "/".join(value(k, '.1f') for k in _item_bins(im))
                     + " (real " + "/".join(value(k, '.1f', re) for k in _item_bins(im)) + ")")
    return "".join(f"; {part}" for part in parts)


def whole_game_table(rows: dict[str, dict]) -> list[str]:
    """A markdown table of dreams over whole games (``rows``: a name -> a `dream_and_real` row, e.g.
    ``sampled/greedy``): the shares of games one room and one map of its own explain and of frames
    before their first break, then co-players in view, items in view per turn bin and items kept, each
    ``imagined (real)``. Rows measured before the whole-game figures are left out."""
    rows = {name: row for name, row in rows.items() if "map_games" in row["imagined"]}
    if not rows:
        return []
    bins = _item_bins(next(iter(rows.values()))["imagined"])
    whole = ("room_games", "room_frames", "map_games", "map_frames")
    beside = ("co_players", *bins, "item_persistence")
    header = [*whole, *(name.replace("items_turns_", "items ") for name in beside)]
    lines = ["| dream | " + " | ".join(header) + " |", "|" + " --- |" * (len(header) + 1)]
    for name, row in rows.items():
        im, re = row["imagined"], row["real"]
        cells = [f"{_figure(im, m, '.3f')} ({_figure(re, m, '.3f')})" for m in (*whole, *beside)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _table(rows: dict[str, dict], figures: Sequence[str], first: str = "predictor") -> list[str]:
    """Markdown rows of ``rows`` by ``figures``; a row with none of the figures is left out."""
    lines = [f"| {first} | " + " | ".join(figures) + " |", "|" + " --- |" * (len(figures) + 1)]
    for name, figs in rows.items():
        cells = [fmt_interval(figs.get(f)) for f in figures]
        if any(cell != "-" for cell in cells):
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def format_table(result: dict, figures: Sequence[str] | None = None) -> str:
    """A markdown table of one file's predictors (rows) by figures (columns, default
    `main_figures`), with intervals."""
    return "\n".join(_table(result["predictors"], main_figures(result) if figures is None else figures))


def quality_lines(result: dict) -> list[str]:
    """One line per quality criterion of a file's result: the paired difference and whether it is met."""
    def rule(better: str) -> str:
        return f"within {MATCH_TOLERANCE:g} or better" if better == "match" else f"{better} is better"

    return [f"    {name}: model - baseline {fmt_interval(check['difference'])} "
            f"({rule(check['better'])}): {'met' if check['met'] else 'NOT met'}"
            for name, check in result["quality_checks"].items()]


def transfer_line(transfer: dict) -> str:
    """The headline of a transfer table: the relative gap in total cross-entropy."""
    gap = transfer["relative_gap"].get("total_ce")
    return f"relative gap in total CE (cross - self) / self: {fmt_percent(gap)}"


def evaluation_summary(results: dict) -> str:
    """What ``python -m rpg_worldmodel.evaluate`` prints: which checkpoint, each file's table and
    each transfer gap."""
    lines = [f"checkpoint: {results.get('checkpoint_choice') or results['checkpoint']}"]
    for key, result in results["files"].items():
        lines += [f"\n{key}: {result['selection']} ({result['episodes']} episodes, {result['games']} games, "
                  f"{result['predictions']} predictions)", format_table(result)]
    for key, tr in results["transfer"].items():
        gap = tr["relative_gap"].get("total_ce")
        lines.append(f"\ntransfer to {key}: relative gap in total CE {fmt_interval(gap)}")
    return "\n".join(lines)


def _held_out_section(results: dict) -> list[str]:
    """Header, the self file's table beside the baselines, the paired differences, the quality bar."""
    self_key = results["self"]
    main = results["files"][self_key]
    figures = main_figures(main)
    lines = ["# World model evaluation", ""]
    if not main.get("held_out", True):
        lines += ["**WARNING: these figures include TRAINING episodes; they are not held out.**", ""]
    lines += [
        f"Checkpoint `{results.get('checkpoint_choice') or results['checkpoint']}` (step "
        f"{results.get('checkpoint_step')}, trained with "
        f"input mask `{results.get('train_mask', 'none')}`), evaluated on `{self_key}`: {main['selection']}, "
        f"{main['episodes']} episodes from {main['games']} games, {main['predictions']} predictions "
        + SCORING_TEXT[main.get("context", "full")],
        "",
        "Each cell: value [95% bootstrap interval], resampling games "
        f"({results['bootstrap']['replicates']} replicates). Baselines are fitted on the training split "
        f"only; the majority action is `{results['baselines']['majority_action']}`. Motion oracle: "
        f"{results['baselines']['motion_oracle']}.",
        "",
        "## Held-out table",
        "",
        *_table(main["predictors"], figures),
        "",
        "Model minus baseline (paired bootstrap; negative CE and positive accuracy/F1 favour the model):",
        "",
        *_table(main["model_minus"], figures, "model minus"),
        "",
    ]
    lines += _reward_section(results, main)
    if main.get("quality_checks"):
        lines += ["Quality bar: the paired 95% interval of model minus baseline must lie on the "
                  f"better side ('match': the model trails by at most {MATCH_TOLERANCE:g}).", "",
                  "| criterion | model minus baseline | better | met |",
                  "| --- | --- | --- | --- |"]
        for name, check in main["quality_checks"].items():
            met = {True: "yes", False: "**no**", None: "-"}[check["met"]]
            lines.append(f"| {name} | {fmt_interval(check['difference'])} | {check['better']} | {met} |")
        lines.append("")
    if len(main.get("by_policy", {})) > 1:
        lines += ["### By policy (stream)", ""]
        for pid, preds in main["by_policy"].items():
            lines += [f"`{pid}`:", "", *_table(preds, figures), ""]
    return lines


def _reward_section(results: dict, main: dict) -> list[str]:
    """The reward head beside the rule that reads the reward off the view and the action."""
    predictors = {name: figs for name, figs in main["predictors"].items() if "reward_acc" in figs}
    if "model" not in predictors:
        return ["## Rewards", "", "This checkpoint has no reward head (a checkpoint of schema 1, or "
                "trained with model.reward_head=false): no reward figures.", ""]
    recalls = sorted({k for figs in predictors.values() for k in figs if k.startswith("reward_recall_")})
    figures = ["reward_ce", "reward_acc", "return_mae", *recalls]
    return ["## Rewards", "",
            "The learner's reward of each scored step, as a class; `return_mae`: mean absolute error "
            f"(points) of the return summed over blocks of {RETURN_BLOCK} consecutive steps (arg-max "
            f"predictions). Reward rule: {results['baselines'].get('reward_rule')}.", "",
            *_table(predictors, figures), ""]


def _transfer_section(key: str, tr: dict) -> list[str]:
    """One cross file: the model on self and cross, the baselines on cross, the relative gaps."""
    rows = {"self": tr["model"]["self"], "cross": tr["model"]["cross"],
            **{f"{b} on cross": v for b, v in tr["baselines_cross"].items()}}
    gaps = tr["relative_gap"]
    return ["## Cross-agent transfer", "",
            f"Self `{tr['self']}` vs cross `{key}`; relative gap = {tr['gap_definition']} "
            "(the reference notebook reported +124% on training data, one number, no interval).", "",
            *_table(rows, list(tr["model"]["self"]), "model on"),
            "", "| relative gap | " + " | ".join(gaps) + " |", "|" + " --- |" * (len(gaps) + 1),
            "| (cross - self) / self | " + " | ".join(fmt_percent(v) for v in gaps.values()) + " |", ""]


def _masking_section(mk: dict) -> list[str]:
    """Train mask x eval mask: view CE with mean item F1, then each mask's paired cost."""
    steps, starts = mk.get("train_steps", {}), mk.get("fine_tuned_from", {})
    lines = ["## Masking probes", "",
             f"On {mk.get('episodes', '?')} test episodes ({mk.get('context', 'full')} windows). "
             "Rows: mask used in training (with its training steps); columns: mask applied to the "
             "input at evaluation (targets are never masked). Cells: next-view CE (nats/cell) and "
             "mean item F1 in parentheses.", ""]
    cols = list(next(iter(mk["table"].values())))
    items = item_names(recorded_kinds(mk))
    lines += ["| train \\ eval | " + " | ".join(cols) + " |", "|" + " --- |" * (len(cols) + 1)]
    for row, cells in mk["table"].items():
        rendered = []
        for c in cols:
            f1s = [cells[c].get(f"f1_{e}", {}).get("value") for e in items]
            f1s = [f for f in f1s if f is not None]
            rendered.append(fmt_interval(cells[c].get("view_ce")) + (f" ({np.mean(f1s):.2f})" if f1s else ""))
        how = "fine-tuned " if row in starts else ""
        label = f"{row} ({how}{steps[row]} steps)" if row in steps else row
        lines.append(f"| {label} | " + " | ".join(rendered) + " |")
    lines.append("")
    lines += [f"The `{row}` row's model started from `{start}` (`train.init_from`), so it differs from "
              "that model by its mask and those steps only." for row, start in starts.items()]
    lines += [""] if starts else []
    if mk.get("cost"):
        lines += ["Cost of each mask: increase in view CE over the same model's unmasked input "
                  "(paired bootstrap). Rows trained for different lengths are compared through this "
                  "cost: a model that learned to infer what it cannot see pays less for a mask.", "",
                  "| train \\ eval | " + " | ".join(c for c in cols if c != "none") + " |",
                  "|" + " --- |" * len(cols)]
        for row, cells in mk["cost"].items():
            rendered = [fmt_interval(cells[c].get("view_ce")) for c in cols if c != "none"]
            lines.append(f"| {row} | " + " | ".join(rendered) + " |")
        lines.append("")
    return lines



ROLLOUT_FIGURES = ("view_ce", "cell_acc", "f1_items", "reward_acc", "return_error")


def _beats(diff: dict | None, lower_is_better: bool) -> str | None:
    """"yes" when the paired interval lies on the better side, "point" when only the point estimate
    does, "no" otherwise (None when undefined)."""
    if not diff or diff.get("value") is None:
        return None
    sign = -1 if lower_is_better else 1
    if diff.get("lo") is not None and min(sign * diff["lo"], sign * diff["hi"]) > 0:
        return "yes"
    return "point" if sign * diff["value"] > 0 else "no"


def rollout_goal(rollout: dict, reference: str = "motion_oracle") -> dict[str, dict]:
    """Whether the model's rollout beats ``reference``'s at every horizon, per figure:
    ``{figure: {"every_k": bool, "first_miss": k or None, "per_k": [yes|point|no]}}`` (point
    estimates; "yes" marks a paired interval on the better side)."""
    out = {}
    for figure, lower in (("view_ce", True), ("f1_items", False)):
        diffs = rollout["model_minus"][reference].get(figure, [])
        per_k = [_beats(d, lower) for d in diffs]
        misses = [k + 1 for k, v in enumerate(per_k) if v not in ("yes", "point")]
        out[figure] = {"every_k": not misses, "first_miss": misses[0] if misses else None, "per_k": per_k}
    return out


def rollout_line(rollout: dict) -> str:
    """One console line: view CE of the model and the oracles at a few horizons."""
    h = rollout["horizon"]
    ks = sorted({1, min(5, h), h})
    oracles = [name for name in ("memory_oracle", "motion_oracle") if name in rollout["predictors"]]
    ce = {name: rollout["predictors"][name]["view_ce"] for name in ("model", *oracles)}
    parts = ", ".join(f"k={k}: " + " vs ".join(f"{ce[name][k - 1]['value']:.3f}" for name in ce) for k in ks)
    goal = rollout_goal(rollout)
    verdict = "; ".join(f"{f}: " + ("beats the motion oracle at every k" if g["every_k"]
                                     else f"behind the motion oracle from k={g['first_miss']}")
                        for f, g in goal.items())
    names = " vs ".join(name.replace("_", " ") for name in oracles)
    return f"rollout view CE, model vs {names}, {parts} ({verdict})"


def _rollout_section(rollout: dict) -> list[str]:
    h = rollout["horizon"]
    ks = sorted({1, 2, min(5, h), min(10, h), h})
    lines = ["## Rollouts: how long the imagined future stays true", "",
             f"From {rollout['starts']} held-out starts in {rollout['games']} games, every predictor rolls "
             f"{h} steps forward on the recorded actions, fed its own predictions (`teacher_forced`: the "
             "model given the real history at each step instead). Rows: predictor at horizon k.", ""]
    header = "| predictor | k | " + " | ".join(ROLLOUT_FIGURES) + " |"
    lines += [header, "|" + " --- |" * (len(ROLLOUT_FIGURES) + 2)]
    for name, figures in rollout["predictors"].items():
        for k in ks:
            cells = [fmt_interval(figures[f][k - 1]) if f in figures else "-" for f in ROLLOUT_FIGURES]
            lines.append(f"| {name} | {k} | " + " | ".join(cells) + " |")
    lines.append("")
    for reference in ("memory_oracle", "motion_oracle"):
        if reference not in rollout["model_minus"]:  # written before the memory oracle was rolled out
            continue
        for figure, g in rollout_goal(rollout, reference).items():
            marks = "".join({"yes": "+", "point": "~", "no": "-", None: "?"}[v] for v in g["per_k"])
            state = "better at every k" if g["every_k"] else f"behind from k = {g['first_miss']}"
            lines.append(f"- Model vs {reference.replace('_', ' ')} on `{figure}`: {state} (per k: {marks}; "
                         "+ paired interval better, ~ point estimate better, - worse).")
    return [*lines, ""]


SEED_LINE_FIGURES = ("view_ce", "action_acc", "reward_acc")


def seeds_line(seeds: dict) -> str:
    """One console line: a few headline figures across training seeds (mean [interval])."""
    figures = seeds["self"]
    parts = [f"{name} {fmt_interval(figures[name])} (per seed "
             + ", ".join(f"{v:.3f}" for v in figures[name]["per_seed"]) + ")"
             for name in SEED_LINE_FIGURES if name in figures]
    return f"across seeds {', '.join(map(str, seeds['seeds']))}: " + "; ".join(parts)


def _seeds_section(seeds: dict) -> list[str]:
    names = [f"seed {s}" for s in seeds["seeds"]]
    lines = ["## Across training seeds", "",
             f"One model per training seed ({', '.join(map(str, seeds['seeds']))}), all trained on the same "
             "games and scored on the same held-out games; the tables above are of the first. Mean: the "
             "mean over seeds, with a 95% interval from a bootstrap that resamples seeds and games "
             f"(stratified, {seeds['bootstrap']['replicates']} replicates).", ""]
    parts = [("held-out (self)", seeds["self"], fmt_interval)]
    if "cross" in seeds:
        parts += [("cross expert", seeds["cross"], fmt_interval),
                  ("transfer gap (cross - self) / self", seeds["transfer_gap"], fmt_percent)]
    for title, figures, fmt in parts:
        lines += [f"**{title}**", "", "| figure | " + " | ".join(names) + " | mean [95% interval] |",
                  "|" + " --- |" * (len(names) + 2)]
        for name, row in figures.items():
            per_seed = [fmt({"value": v}) for v in row["per_seed"]]
            lines.append(f"| {name} | " + " | ".join(per_seed) + f" | {fmt(row)} |")
        lines.append("")
    return lines


CELL_PREDICTORS = ("model", "memory_oracle", "motion_oracle", "copy")


def _cells_section(results: dict) -> list[str]:
    """"Where the error lives": the floor, the view CE per cell category of every view predictor,
    and the theory-of-mind ceiling of the next action."""
    from rpg_worldmodel.evaluation.metrics import CELL_CATEGORIES

    main = results["files"][results["self"]]
    preds = main["predictors"]
    lines = ["## Where the error lives", ""]
    if "excess_view_ce" in preds.get("model", {}):
        floor = preds["model"]["floor_view_ce"]["value"]
        shown = [n for n in CELL_PREDICTORS if n in preds]
        lines += [
            f"The floor, the lowest next-view cross-entropy any predictor could reach knowing the whole map "
            f"and both agents' actions (only spawns are random), is {floor:.4f} nats/cell here "
            f"({main.get('floor_method')}). Excess over the floor: "
            + ", ".join(f"{n} {fmt_interval(preds[n].get('excess_view_ce'))}" for n in shown)
            + ".", "",
            "View cross-entropy (nats/cell) per category of cell; the floor's in the last column.", "",
            "| category | share of cells | " + " | ".join(shown) + " | floor | model excess |",
            "|" + " --- |" * (len(shown) + 4)]
        for cat in CELL_CATEGORIES:
            share = preds["model"].get(f"share_{cat}", {}).get("value")
            if not share:
                continue
            ce = preds["model"][f"ce_{cat}"]["value"]
            excess = preds["model"][f"excess_{cat}"]
            cells = [fmt_interval(preds[n].get(f"ce_{cat}")) for n in shown]
            lines.append(f"| {cat} | {100 * share:.1f}% | " + " | ".join(cells)
                         + f" | {ce - excess['value']:.4f} | {fmt_interval(excess)} |")
        lines.append("")
    for key, result in results["files"].items():
        tom = result.get("theory_of_mind")
        if not tom:
            continue
        acc = tom["action_acc"]
        lines += [f"**Theory-of-mind ceiling** on `{Path(key).name}` (expert `{tom['expert']}`): next-action "
                  "accuracy of the expert's own network given its real frames up to t and the view at t+1 "
                  "from the recording, the motion oracle or the model, beside the model's action head.", "",
                  "| predictor | action accuracy | model head minus it |", "| --- | --- | --- |",
                  f"| model action head | {fmt_interval(acc['model_action_head'])} | |"]
        for name, iv in acc.items():
            if name != "model_action_head":
                lines.append(f"| {name} | {fmt_interval(iv)} | {fmt_interval(tom['model_minus'][name])} |")
        lines.append("")
    return lines if len(lines) > 2 else []

