"""How a world model moves the co-player: its next-view distribution around a co-player in view,
beside where the real game puts it, and whether a dreamed co-player stays in view.

For each ``--checkpoint``, on the same real games (``--games`` games of ``--turns`` turns, the learner
and the co-player both random, seeds from ``--seed``):

- ``offsets``: teacher forced (the model reads the real views and actions), the mean probability the
  view head gives an agent at each offset (-2..2, -2..2) from a co-player standing alone in view at
  least two cells from its edge, beside the share of those steps the real next view has it there.
  The viewer's move and the co-player's own together put it up to two cells away: straight two
  cells when they move opposite ways;
- ``expected_next``: teacher forced, the agents the view head expects in the next view (the sum of
  its agent probabilities, the viewer's own cell left out) given one co-player in view, beside the
  agents one joint draw of that next view holds (the refiner's, as the imagined env draws: its
  rounds, doubt, floor and limits) and the real count: the head's shortfall and the draw's apart;
- ``dream``: the imagined env (temperature 1, the same random actions, ``--worlds`` worlds from real
  openings): the share of steps with a co-player in view whose next view has none, and co-players in
  view per frame, beside the real game's under the same policy.

    python benchmarks/co_player_motion.py [--checkpoint pretrained OTHER ...] [--games 128]
        [--turns 60] [--worlds 128] [--out benchmarks/results/co_player_motion.json]
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

import rpg_env
import rpg_worldmodel
from rpg_base.cli import ArgumentParser, positive_int, run_command
from rpg_base.provenance import provenance
from rpg_base.results import write_results
from rpg_env.game.constants import AGENT
from rpg_worldmodel.checkpoint import choose_checkpoint, load_checkpoint
from rpg_worldmodel.models.sampling import ViewSampler

RESULTS = Path(__file__).resolve().parent / "results"
REACH = 2  # offsets shown each way


def _others(views: np.ndarray) -> np.ndarray:
    """Agent cells of ``views`` (N, C, V, V) but the viewer's own (N, V, V) bool."""
    agents = views[:, AGENT] > 0
    centre = views.shape[-1] // 2
    agents[:, centre, centre] = False
    return agents


def _alone_away_from_edge(others: np.ndarray) -> list[tuple[int, int, int]]:
    """(world, row, col) of each view whose only co-player stands at least REACH cells inside."""
    found = []
    v = others.shape[-1]
    for i in np.flatnonzero(others.sum((1, 2)) == 1):
        (r, c), = np.argwhere(others[i])
        if REACH <= r < v - REACH and REACH <= c < v - REACH:
            found.append((int(i), int(r), int(c)))
    return found


@torch.no_grad()
def teacher_forced(model, games: int, turns: int, seed: int) -> dict:
    """The view head's agent probabilities around a co-player on real random-play games."""
    env = gym.make_vec(rpg_env.ENV_ID, num_envs=games)
    obs, _ = env.reset(seed=seed)
    rng, state = np.random.default_rng(seed), None
    side = 2 * REACH + 1
    predicted, real = np.zeros((side, side)), np.zeros((side, side))
    expected, drawn, counted, cases = [], [], [], 0
    draw = ViewSampler.of(model)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(turns):
        actions = rng.integers(0, 4, games)
        out, state = model.imagine_step(torch.as_tensor(obs).float(), torch.as_tensor(actions), state)
        logits = out.view[:, 0].float()
        probs = torch.softmax(logits, 1)[:, AGENT].numpy()
        centre = probs.shape[-1] // 2
        probs[:, centre, centre] = 0.0
        kinds = draw(logits.permute(0, 2, 3, 1), generator).numpy()
        kinds[:, centre, centre] = -1
        now = _others(obs)
        obs, *_ = env.step(actions)
        after = _others(obs)
        one = now.sum((1, 2)) == 1
        expected += probs[one].sum((1, 2)).tolist()
        drawn += (kinds[one] == AGENT).sum((1, 2)).tolist()
        counted += after[one].sum((1, 2)).tolist()
        for i, r, c in _alone_away_from_edge(now):
            window = np.s_[r - REACH:r + REACH + 1, c - REACH:c + REACH + 1]
            predicted += probs[i][window]
            real += after[i][window]
            cases += 1
    env.close()
    predicted, real = predicted / max(cases, 1), real / max(cases, 1)
    far = [(0, REACH), (side - 1, REACH), (REACH, 0), (REACH, side - 1)]
    return {"cases": cases, "offsets_model": predicted.tolist(), "offsets_real": real.tolist(),
            "far_straight_model": float(sum(predicted[f] for f in far)),
            "far_straight_real": float(sum(real[f] for f in far)),
            "expected_next_given_one": float(np.mean(expected)),
            "drawn_next_given_one": float(np.mean(drawn)),
            "real_next_given_one": float(np.mean(counted))}


def _stays(env: gym.vector.VectorEnv, worlds: int, turns: int, seed: int) -> dict:
    """Co-players per frame, and the share of steps with one in view whose next view has none."""
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    per_frame, gone = [], []
    for _ in range(turns):
        before = _others(obs).sum((1, 2))
        obs, *_ = env.step(rng.integers(0, 4, worlds))
        after = _others(obs).sum((1, 2))
        per_frame.append(after.mean())
        gone += (after[before > 0] == 0).tolist()
    env.close()
    return {"co_players_per_frame": float(np.mean(per_frame)), "gone_given_one": float(np.mean(gone)),
            "cases": len(gone)}


def dreamed(checkpoint: str, worlds: int, turns: int, seed: int) -> dict:
    """`_stays` in the imagined env at temperature 1, random actions."""
    imagined = gym.make_vec(rpg_worldmodel.IMAGINED_ENV_ID, num_envs=worlds, checkpoint=checkpoint,
                            torch_threads=1)
    return _stays(imagined, worlds, turns, seed)


def print_row(name: str, row: dict) -> None:
    """One checkpoint's figures beside the real game's, and both offset tables."""
    forced, imagined, real = row["teacher_forced"], row["dream"]["imagined"], row["dream"]["real"]
    print(f"{name}\n  two cells straight (4 cells): model {forced['far_straight_model']:.3f}, real "
          f"{forced['far_straight_real']:.3f} ({forced['cases']} steps)")
    print(f"  agents in the next view given one: the view head expects "
          f"{forced['expected_next_given_one']:.3f}, its joint draw holds "
          f"{forced['drawn_next_given_one']:.3f}, real {forced['real_next_given_one']:.3f}")
    print(f"  dream: gone next step given one {imagined['gone_given_one']:.3f} "
          f"(real {real['gone_given_one']:.3f}); co-players per frame "
          f"{imagined['co_players_per_frame']:.3f} (real {real['co_players_per_frame']:.3f})")
    for label in ("offsets_model", "offsets_real"):
        table = ("    " + " ".join(f"{x:.3f}" for x in cells) for cells in forced[label])
        print(f"  {label}:\n" + "\n".join(table))


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", nargs="+", default=["pretrained"], help="world models to measure")
    parser.add_argument("--games", type=positive_int, default=128, help="real games, teacher forced")
    parser.add_argument("--turns", type=positive_int, default=60, help="turns of each game and dream")
    parser.add_argument("--worlds", type=positive_int, default=128, help="imagined worlds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS / "co_player_motion.json"))
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    torch.set_num_threads(1)
    rows = {}
    # the same real games beside every checkpoint's dream: played once
    real = _stays(gym.make_vec(rpg_env.ENV_ID, num_envs=args.worlds), args.worlds, args.turns, args.seed)
    for path in args.checkpoint:
        name = choose_checkpoint(path).describe(portable=True)
        model = load_checkpoint(path).model
        rows[name] = {"teacher_forced": teacher_forced(model, args.games, args.turns, args.seed),
                      "dream": {"imagined": dreamed(path, args.worlds, args.turns, args.seed), "real": real}}
        print_row(name, rows[name])
    write_results(args.out, provenance(seed=args.seed, games=args.games, turns=args.turns, worlds=args.worlds,
                                       policy="random learner, random co-player", rows=rows))


if __name__ == "__main__":
    run_command(main)
