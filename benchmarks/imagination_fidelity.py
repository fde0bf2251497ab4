"""Does the dream stay a world for a whole game, under policies unlike the data?

A world model learns the game from an expert's games; a dream is judged by the world it imagines
over a whole game, not by one step. For each world model, sampler and policy, N imagined worlds
(`rpg_worldmodel.envs.imagination.ImaginedWorlds`) and N real games of ``Treasurehunt-v0`` start
from the same real opening (a greedy burn-in of ``num_frames - 1`` turns beside a random
co-player, as the imagined env's own openings are played) and play on to the episode's end
(turn 100). Every frame from the last real one is measured with `rpg_worldmodel.envs.fidelity`,
the same way in both worlds:

- ``frame_validity``: the share of frames the game could show (wall layouts read from the game
  itself, the learner at the centre, at most ``num_agents - 1`` others, known kinds);
- ``geometric_consistency``: the share of frames whose walls fit the position the moves imply,
  bumps included, from the real start (the dream must keep to the real map) and, as
  ``consistency_any_start``, from every start the first frame allows (it must keep to some map);
  ``ideal_dream``: the consistency from the real start of a dream that knows the game exactly but
  not where the opening stands (`rpg_worldmodel.envs.whole_games.consistency_ceiling`), the most a
  model can reach there;
- ``item_persistence``: of items seen and not collected, the share still there when their cell
  comes back into view; ``spawn_rate``: new items per empty cell in view per turn (both follow
  the cells by the frames' own moves, so a dream's items are judged in its own geometry);
- ``walls_kept``: of the frames that show cells seen before, the share whose walls agree with the
  last sighting of those cells, by the frames' own moves (the map a dream keeps, in its geometry);
- ``wall_breaks``: where impossible wall layouts began (the cells a move brought in, or cells
  carried over from the frame before);
- ``whole_games_valid``: the share of whole episodes with no impossible frame;
- whole-game self-consistency (`rpg_worldmodel.envs.consistency`; real games score exactly 1):
  ``room_games``, the share of whole games some start position in the open room explains (every
  frame's walls under the moves, blocked by the border, an agent ahead blocking or not), and
  ``room_frames``, the share of frames before the first break; ``map_games`` and ``map_frames``, the
  same for a map of the dream's own (dead reckoning by the frames: no wall or floor shown before is
  contradicted at the same cell, and the floor never spans more than the map's inside), the measure
  for generated levels;
- inhabitants: ``co_players``, other agents in view per frame, and ``items_turns_LO_HI``, items in view
  per frame of turns 0-10, 10-40, 40-70, 70-100, imagined and real (``inhabitants_vs_real``: their
  ratios, and items kept imagined less real in points);
- ``return``: points per episode after the opening, imagined and real, their gap and the gap as a
  share of the real return;
- ``rollout`` (with ``--rollout-data``, the file the models learned from): open-loop rollouts from
  the openings of its held-out games to the episode's end on the recorded actions, view CE, item
  F1 and return error at every k beside the memory and motion oracles and copy
  (`rpg_worldmodel.evaluation.rollouts`).

Every figure carries a 95% bootstrap interval over worlds. Policies: ``greedy``, ``random``,
``eps-greedy`` (greedy with 30% random actions), ``wall-follower`` (a wall on its right hand: the
walls stay in view), ``dqn`` (the shipped expert whose games the model learned) and ``dream`` (the
agent trained in the shipped model's imagination). Samplers: ``sampled`` (temperature 1; with a cell
refiner one joint draw in ``--rounds`` rounds, no kind below ``--floor`` drawn in a cell,
`rpg_worldmodel.models.refiner`) and ``argmax``. No rule places the agents in a drawn view.

    python benchmarks/imagination_fidelity.py [--checkpoint pretrained OTHER ...]
        [--samplers sampled argmax] [--rounds 1 8 81] [--doubt 0.2] [--floor 0 0.001]
        [--policies greedy random eps-greedy wall-follower dqn dream]
        [--worlds 64] [--seed 0] [--rollout-data runs/pipeline/data/dqn.h5 [--rollout-horizon 95]]

Writes ``benchmarks/results/imagination_fidelity.json`` (``--out``) and ``.png`` (validity by turn), and
prints a line a row and, at the end, a table of the whole-game figures.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from rpg_base.cli import (
    ArgumentParser,
    existing_file,
    float_in,
    non_negative_int,
    output_file,
    positive_int,
    run_command,
)
from rpg_base.errors import InputError
from rpg_base.provenance import pinned_torch_threads, provenance
from rpg_base.results import pyplot, save_figure, write_results
from rpg_worldmodel.checkpoint import choose_checkpoint, load_checkpoint, read_checkpoint_record
from rpg_worldmodel.data.sources import DataSource
from rpg_worldmodel.envs.whole_games import JUDGING_POLICIES, dream_and_real, judging_policy, reference_of
from rpg_worldmodel.evaluation.run import EvalOptions, Evaluation
from rpg_worldmodel.report.text import dream_line, rollout_line, whole_game_table

RESULTS = Path(__file__).resolve().parent / "results"
POLICIES = JUDGING_POLICIES
SAMPLERS = ("sampled", "argmax")


def sampler_names(samplers: list[str], rounds: list[int] | None, floors: list[float] | None = None
                  ) -> list[str]:
    """The samplers to run: ``sampled`` once per ``--rounds`` value (``sampled@R``) and ``--floor``
    value (``sampled floor=F``, ``sampled@R floor=F``), ``argmax``."""
    names = []
    for sampler in samplers:
        if sampler != "sampled":
            names.append(sampler)
            continue
        drawn = [f"sampled@{r}" for r in rounds] if rounds else ["sampled"]
        names += [f"{d} floor={f:g}" for d in drawn for f in floors] if floors else drawn
    return names


def sampler_settings(name: str) -> tuple[int | None, float | None]:
    """The rounds and floor of a sampler's name (`sampler_names`; None: the model's)."""
    drawn, _, floor = name.partition(" floor=")
    rounds = drawn.partition("@")[2]
    return (int(rounds) if rounds else None), (float(floor) if floor else None)


def compare(checkpoint: str, samplers: list[str], policies: list[str], worlds: int,
            seed: int, doubt: float | None = None) -> dict:
    loaded = load_checkpoint(checkpoint)
    ref = reference_of(loaded)
    used = choose_checkpoint(checkpoint).describe(portable=True)
    out = {"checkpoint": checkpoint, "checkpoint_used": used, "rows": {}}
    sampled_once = False
    for sampler in samplers:
        rounds, floor = sampler_settings(sampler)
        if sampler.startswith("sampled"):
            if sampled_once and not loaded.config.model.refiner_layers:
                continue  # a model without a refiner draws every cell on its own: one row says it
            sampled_once = True
        for name in policies:
            row = dream_and_real(loaded, ref, partial(judging_policy, name), sample=sampler != "argmax",
                                 worlds=worlds, seed=seed, sample_rounds=rounds,
                                 sample_doubt=doubt, sample_floor=floor)
            out["rows"][f"{sampler}/{name}"] = row
            print(line(checkpoint, sampler, name, row), flush=True)
    return out


def rollout_horizon(checkpoint: str, data: Path, asked: int | None) -> int:
    """The steps ``checkpoint`` is rolled out on ``data``: ``asked``, or to the episode's last turn (the
    game's ``max_turns`` less the model's real views); a horizon no episode holds is refused here,
    before anything is fitted or played."""
    turns = int((DataSource.open(data).meta.get("env_kwargs") or {}).get("max_turns", 0))
    frames = read_checkpoint_record(checkpoint).config.model.num_frames
    if asked is None and not turns:
        raise InputError(f"{data} does not say how long its games are: give --rollout-horizon")
    if turns and (asked or 0) > turns - frames:
        raise InputError(f"--rollout-horizon {asked} is longer than a game of {turns} turns holds after the "
                         f"model's {frames} real views: at most {turns - frames}")
    return asked or turns - frames


def rollouts(ev: Evaluation, horizon: int) -> dict:
    """Open-loop rollouts of ``ev``'s world model from the openings of the held-out games of its file
    (the one it was trained on: its recorded split says which), every k = 1..``horizon``, beside the
    memory and motion oracles and copy (`rpg_worldmodel.evaluation.rollouts`)."""
    ev.evaluate_file(ev.data[0])
    table = ev.rollout(horizon)
    print(f"{ev.checkpoint}: {rollout_line(table)}", flush=True)
    return table


def line(checkpoint: str, sampler: str, name: str, row: dict) -> str:
    return (f"{checkpoint} [{sampler}] {name:>6}: {dream_line(row)}; "
            f"{row['imagined_steps_per_s']:,.0f} imagined steps/s")


def plot(results: list[dict], path: Path) -> None:
    """Validity by frame: one panel per world model, a colour per policy,
    solid sampled, dashed arg-max."""
    plt = pyplot()

    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4.2), squeeze=False)
    palette = ("tab:blue", "tab:orange", "tab:purple", "tab:brown", "tab:green", "tab:red")
    colours = dict(zip(POLICIES, palette, strict=True))
    for ax, result in zip(axes[0], results, strict=True):
        for key, row in result["rows"].items():
            sampler, name = key.split("/")
            curve = row["validity_by_turn"]
            ax.plot(range(len(curve)), curve, color=colours[name], ls="--" if sampler == "argmax" else "-",
                    lw=1, label=f"{name}, {sampler}")
        ax.set_title(result["checkpoint"], fontsize=9)
        ax.set_xlabel("frames since the imagined episode began")
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("share of imagined frames the game could show")
    fig.suptitle("frame validity over a whole imagined game (real games: 1.0 throughout)")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python benchmarks/imagination_fidelity.py",
                            description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", nargs="+", default=["pretrained"],
                        help="world models to compare (run folders, checkpoint folders or 'pretrained')")
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=SAMPLERS,
                        help="sampled (temperature 1) and/or argmax")
    parser.add_argument("--rounds", type=positive_int, nargs="+", default=None,
                        help="rounds of a joint draw for 'sampled' (one row each; default: the model's "
                             "model.sample_rounds; 81 with --doubt 0: one cell a round)")
    parser.add_argument("--doubt", type=float_in(0.0), default=None,
                        help="doubt one round of a joint draw takes on (default: 0.2, "
                             "rpg_worldmodel.models.refiner.SAMPLE_DOUBT; 0: one cell a round)")
    parser.add_argument("--floor", type=float_in(0.0, 1.0), nargs="+", default=None,
                        help="no kind whose refined probability in a cell is below this is drawn there, "
                             "one 'sampled' row each (default: the model's model.sample_floor; 0: the "
                             "refined distributions as they are)")
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES)
    parser.add_argument("--worlds", type=positive_int, default=64, help="imagined worlds and real games each")
    parser.add_argument("--seed", type=non_negative_int, default=0)
    parser.add_argument("--threads", type=positive_int, default=1,
                        help="torch CPU threads (one is fastest for these small steps)")
    parser.add_argument("--rollout-data", type=existing_file, default=None, metavar="FILE",
                        help="the trajectory file the world models were trained on: adds their open-loop "
                             "rollouts from its held-out games beside the memory and motion oracles "
                             "(python -m rpg_worldmodel.pipeline records it as DIR/data/dqn.h5)")
    parser.add_argument("--rollout-horizon", type=positive_int, default=None,
                        help="steps rolled out with --rollout-data (default: to the episode's last turn, 95 "
                             "in a 100-turn game after 5 real views)")
    parser.add_argument("--out", type=output_file, default=RESULTS / "imagination_fidelity.json")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.rollout_horizon is not None and args.rollout_data is None:
        parser.error("--rollout-horizon is how far the rollouts of --rollout-data go: give that file too")
    for checkpoint in args.checkpoint:  # every world model is found before the first is played
        if checkpoint != "pretrained":
            choose_checkpoint(checkpoint)
    with pinned_torch_threads(args.threads):  # and the caller's setting back after
        # a horizon no game holds, or a file another model learned from, is refused before any play
        models = list(dict.fromkeys(args.checkpoint)) if args.rollout_data else []
        horizons = {ck: rollout_horizon(ck, args.rollout_data, args.rollout_horizon) for ck in models}
        evaluations = {ck: Evaluation(ck, [args.rollout_data], EvalOptions(seed=args.seed)) for ck in models}
        samplers = sampler_names(args.samplers, args.rounds, args.floor)
        results = [compare(ck, samplers, args.policies, args.worlds, args.seed, args.doubt)
                   for ck in args.checkpoint]
        tables = {ck: rollouts(ev, horizons[ck]) for ck, ev in evaluations.items()}
        for result in results:
            if result["checkpoint"] in tables:
                result["rollout"] = tables[result["checkpoint"]]
    record = provenance(seed=args.seed, worlds=args.worlds, policies=args.policies, samplers=args.samplers,
                        rounds=args.rounds, doubt=args.doubt, floor=args.floor,
                        rollout_data=str(args.rollout_data) if args.rollout_data else None,
                        rollout_horizon=horizons or None,
                        threads=args.threads, results=results)
    for result in results:
        print(f"\n{result['checkpoint']}: whole games, imagined (real)")
        print("\n".join(whole_game_table(result["rows"])), flush=True)
    write_results(args.out, record, lambda png: plot(results, png))


if __name__ == "__main__":
    run_command(main)
