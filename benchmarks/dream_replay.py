"""Is a whole dream one real game? The replay check of any game whose worlds are set at reset.

For each world model, policy and sampler, N real games are opened (world ``i`` reset with seed
``--seed + i``, ``num_frames - 1`` turns played by the policy) and played on to their end twice:
in the real game and in the model's dream (`rpg_worldmodel.envs.imagination.ImaginedWorlds` from
the same openings). Each whole game is then replayed in the real env
(`rpg_worldmodel.envs.replay_consistency`): is there a real game, the opening's own or one of the
``--candidates`` seeds 0..K-1, that played with the same actions shows every frame, ends where it
ends and pays where it pays?

- ``games``: the share of whole games some real game explains in every frame;
- ``frames``: the share of imagined frames before the first unexplained one;
- ``broken_after``: how many first breaks came right after each action;
- ``broken_by``: how many first breaks were a frame no real game shows (``view``), an end the real
  game does not make or a game going on where it ends (``end``), or a step paid otherwise (``pay``);
- ``wrong_cells``: at those first view breaks, the cells the dream drew otherwise than the real game
  (the opening's own where it still explained the game), counted as ``real kind -> dream kind``;
- with ``--data FILE`` (the file the model learned from): ``one_step``, on its held-out games, the
  share of next frames whose arg-max has a wrong cell, by the action taken (teacher-forced: every
  view before it real), which says whether a break is already there one step ahead; and the share
  whose wrong cells the window's earlier views all showed as they are (``wrong_seen``: a memory
  failure, not a cell never seen).

Real games score exactly 1 (their own seed explains them); a real score below 1 says the game has
randomness after its reset and the check does not apply to it. Every share carries a 95% bootstrap
interval over worlds. Policies: ``random`` (from the env's actions) or an SB3 ``.zip``; samplers:
``sampled`` (temperature 1) and ``argmax``.

    python benchmarks/dream_replay.py --checkpoint runs/wm_doorkey [--policies random runs/ppo/model.zip]
        [--samplers sampled argmax] [--worlds 32] [--candidates 1000] [--seed 1000000] [--data FILE]

Writes ``benchmarks/results/dream_replay.json`` (``--out``) and prints a table.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from gymnasium import spaces

from rpg_base.cli import (
    ArgumentParser,
    existing_file,
    non_negative_int,
    output_file,
    positive_int,
    run_command,
)
from rpg_base.provenance import pinned_torch_threads, provenance
from rpg_base.results import write_results
from rpg_env.policies.registry import make_policy
from rpg_worldmodel.checkpoint import choose_checkpoint, load_checkpoint
from rpg_worldmodel.data.windows import TrajectoryWindows
from rpg_worldmodel.envs.real_game import RealGame
from rpg_worldmodel.envs.replay_consistency import ReplayVerdict, SeedReplays, dream_replays
from rpg_worldmodel.envs.whole_games import share_interval
from rpg_worldmodel.models.extents import told_motions
from rpg_worldmodel.models.motion import read_turns
from rpg_worldmodel.models.steps import HIDDEN, cell_kinds, fixed_mask, memory_canvas

RESULTS = Path(__file__).resolve().parent / "results"
SAMPLERS = ("sampled", "argmax")


def verdict_json(verdict: ReplayVerdict, action_names: tuple[str, ...], seed: int) -> dict:
    broken = Counter(action_names[a] for a in verdict.action_before if a >= 0)
    starts = verdict.broken_at[verdict.broken_at >= 0]
    return {"games": share_interval(verdict.games, seed), "frames": share_interval(verdict.frames, seed),
            "broken_after": dict(broken.most_common()),
            "broken_by": dict(Counter(str(c) for c in verdict.broken_by if c).most_common()),
            "wrong_cells": dict(Counter(cell for cells in verdict.wrong for cell in cells).most_common()),
            "median_break_frame": float(sorted(starts)[len(starts) // 2]) if len(starts) else None}


def one_step_wrong_frames(loaded, data: Path, windows: int = 400) -> dict[str, dict]:
    """Per action, the share of held-out next frames (the test split of ``data``, ``windows`` training
    windows spread over it) whose arg-max prediction has at least one wrong cell (``wrong``), and the
    share whose wrong cells the window's own earlier views all showed as they are (``wrong_seen``:
    placed by the motions the views tell, each action's usual one where they tell none), which a
    model that remembers what it saw could have drawn right; the rest were never in view."""
    model = loaded.model.eval()
    test = np.asarray(loaded.record.splits["test"])
    store = TrajectoryWindows(data, test, num_frames=loaded.config.model.window)
    batch = store.get_batch(np.linspace(0, len(store) - 1, min(windows, len(store))).astype(np.int64))
    views, actions = batch["views"].float(), batch["actions"]
    with torch.no_grad():
        predicted = torch.cat([model(views[s:s + 50], actions[s:s + 50].clamp_min(0)).view.argmax(2)[:, :-1]
                               for s in range(0, len(views), 50)])
    truth = views.argmax(2)[:, 1:]
    wrong_cells = predicted != truth
    seen = seen_before(loaded.config.model, views, actions)  # (B, T-1, V, V) the map's kind, as it is
    wrong, taken = wrong_cells.flatten(2).any(-1), actions[:, :-1]
    wrong_seen = wrong & (wrong_cells <= (seen == truth)).flatten(2).all(-1)
    names = loaded.record.data.action_names
    return {names[a]: {"frames": int((taken == a).sum()), "wrong": float(wrong[taken == a].float().mean()),
                       "wrong_seen": float(wrong_seen[taken == a].float().mean())}
            for a in range(len(names)) if (taken == a).any()}


def seen_before(cfg, views: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """For each step t < T-1 of windows ``views`` (B, T, C, V, V): each cell of view t+1's frame as
    views 0..t last showed it (`memory_canvas` over the motions the views tell, turns included
    whether or not the model has them; ``HIDDEN``: not shown), (B, T-1, V, V)."""
    kinds = cell_kinds(views, fixed_mask(cfg))
    masked = kinds.masked_fill(kinds == cfg.num_channels, HIDDEN)
    taken = actions[:, :-1].clamp_min(0)
    turns = read_turns(zip(masked, taken, strict=True), cfg.num_actions)
    motions = torch.stack(told_motions(list(zip(masked, taken, strict=True)), cfg.num_actions, turns))
    kind, _ = memory_canvas(masked[:, :-1], motions, views.shape[1], views.shape[1] - 1, turns)
    return kind


def measure(checkpoint: str, policies: list[str], samplers: list[str], worlds: int, candidates: int,
            seed: int, data: Path | None = None) -> dict:
    loaded = load_checkpoint(checkpoint)
    game = RealGame.of(loaded.record.data)
    replays = SeedReplays(game, range(candidates), progress=True)
    actions = spaces.Discrete(len(game.action_names))
    rows = []
    for policy in policies:
        for sampler in samplers:
            began = time.perf_counter()
            out = dream_replays(loaded, game, lambda p=policy: make_policy(p, actions),
                                sample=sampler == "sampled", worlds=worlds, seed=seed, replays=replays)
            row = {"policy": Path(policy).name if policy.endswith(".zip") else policy, "sampler": sampler,
                   **{world: verdict_json(v, game.action_names, seed) for world, v in out.items()},
                   "seconds": round(time.perf_counter() - began, 1)}
            rows.append(row)
            print(line(row), flush=True)
    choice = dataclasses.replace(choose_checkpoint(checkpoint), step=loaded.record.step)
    one_step = None if data is None else one_step_wrong_frames(loaded, data)
    if one_step:
        print("one step ahead, held-out frames with a wrong cell: "
              + ", ".join(f"after {k} {v['wrong']:.3f} ({v['wrong_seen']:.3f} seen before)"
                          for k, v in one_step.items()), flush=True)
    return {"checkpoint": choice.describe(portable=True), "game": game.env_id,
            "env_kwargs": game.env_kwargs, "rows": rows, "one_step": one_step}


def line(row: dict) -> str:
    d, r = row["dream"], row["real"]
    return (f"{row['policy']:>12} {row['sampler']:>8}: whole games {d['games']['value']:.3f} "
            f"[{d['games']['lo']:.3f}, {d['games']['hi']:.3f}] (real {r['games']['value']:.3f}), "
            f"frames before the first break {d['frames']['value']:.3f} (real {r['frames']['value']:.3f}); "
            f"breaks after {d['broken_after']}, by {d['broken_by']}; cells drawn wrong there "
            f"(real -> dream) {d['wrong_cells']}")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", nargs="+", required=True,
                        help="world-model run folders or checkpoints")
    parser.add_argument("--policies", nargs="+", default=["random"], help="random, or SB3 .zip files")
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=SAMPLERS)
    parser.add_argument("--worlds", type=positive_int, default=32,
                        help="games of each row, real and imagined")
    parser.add_argument("--candidates", type=non_negative_int, default=1000,
                        help="seeds 0..K-1 whose real games may explain a dream, besides its own opening's")
    parser.add_argument("--seed", type=non_negative_int, default=1_000_000,
                        help="world i's real game is reset with seed + i")
    parser.add_argument("--data", type=existing_file, nargs="+", default=None,
                        help="each checkpoint's training file (in --checkpoint's order): one-step "
                             "figures by action")
    parser.add_argument("--threads", type=positive_int, default=1)
    parser.add_argument("--out", type=output_file, default=RESULTS / "dream_replay.json")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.data is not None and len(args.data) != len(args.checkpoint):
        parser.error(f"--data gives each checkpoint's training file: {len(args.checkpoint)} checkpoints, "
                     f"{len(args.data)} files")
    data = args.data or [None] * len(args.checkpoint)
    with pinned_torch_threads(args.threads):
        results = [measure(ck, args.policies, args.samplers, args.worlds, args.candidates, args.seed, path)
                   for ck, path in zip(args.checkpoint, data, strict=True)]
    record = provenance(seed=args.seed, worlds=args.worlds, candidates=args.candidates,
                        policies=[Path(p).name for p in args.policies], samplers=args.samplers,
                        data=[Path(p).name for p in args.data] if args.data else None,
                        threads=args.threads, results=results)
    write_results(args.out, record)


if __name__ == "__main__":
    run_command(main)
