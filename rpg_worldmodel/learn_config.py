"""The learn loop's settings (`LearnConfig`): one typed config of every setting of a run of
`rpg_worldmodel.learn`, and the configs it builds from them for each stage (the world model's, the
agent's). A run's ``config.yaml`` records them; `run_config` reads a recorded one back, settings it
predates as it ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import rpg_env
from rpg_base.cli import check_device
from rpg_base.errors import InputError
from rpg_base.typed_config import config as tc
from rpg_base.typed_config.config import dict_section, setting
from rpg_base.typed_config.values import ConfigError, Removed

CONFIG_FILE = "config.yaml"


@dataclass
class LearnConfig:
    """Every setting of a learn run (``key=value`` overrides; ``config.yaml`` records them)."""

    REMOVED_SETTINGS: ClassVar[dict[str, Removed]] = {
        name: Removed(False, "the switch that turned the world model's movement table and reward prior off; "
                             "the model has neither now and learns both (schema 12)")
        for name in ("move_rules", "rules")}

    seed: int = setting(0, "seed of everything: collection waves, world model, agent")
    env_id: str = setting("Treasurehunt-v0", "the real game: Treasurehunt-v0, or any env id rpg_env.record "
                                             "records (as one-hot views: rpg_env.envs.any_env.recorded_env)")
    env: dict[str, Any] = dict_section("keyword argument of the env", lambda cfg: _env_defaults(cfg.env_id),
                                       label=lambda cfg: f"{cfg.env_id} arguments")
    real_steps: int = setting(10_000, "budget of real learner steps (the learner's env steps in the real "
                                      "game, summed over games)")
    collect_steps: int = setting(2_000, "real learner steps collected per iteration: whole games, until "
                                        "at least this many (the last iteration: what is left of real_steps)")
    collect_envs: int = setting(10, "real games played together while collecting")
    world_model_steps: int = setting(400, "world-model optimisation steps of the first iteration")
    world_model_steps_later: int = setting(200, "world-model optimisation steps of each later iteration "
                                                "(from the last iteration's weights)")
    world_model: list[str] = setting([], "world-model config overrides (key=value, rpg_worldmodel.train's "
                                         "keys)")
    agent_steps: int = setting(120_000, "imagined steps the agent trains in each iteration")
    imagined_worlds: int = setting(64, "imagined worlds the agent steps together (PPO's n_envs): one batched "
                                       "forward pass of the world model steps them all")
    rollout_steps: int = setting(32, "imagined steps of each world between PPO updates (n_steps): "
                                     "imagined_worlds x rollout_steps steps an update")
    horizon: int = setting(0, "most imagined turns of an episode the agent trains in, from its real start "
                              "(IRIS: 20); 0: to the game's last turn")
    agent: list[str] = setting([], "agent config overrides (key=value, rpg_env.experts train's keys, "
                                   "on configs/dream_ppo.yaml)")
    eval_episodes: int = setting(32, "real games of each evaluation (the agent, greedy and random on the "
                                     "same seeds)")
    eval_seed: int = setting(900_000, "first seed of the evaluation games (collection seeds are hashed "
                                      "and never fall on them)")
    torch_threads: int = setting(2, "torch's CPU threads in every stage (part of what makes a run "
                                    "reproducible)")
    sample_floor: float = setting(0.001, "the joint draw's floor in every world model's dreams "
                                         "(model.sample_floor; 0: none, as runs before it drew)")
    imagination_threads: int = setting(1, "torch's CPU threads of each imagined step the agent trains on: "
                                          "2 is faster on idle cores, 1 holds its speed beside other "
                                          "load (docs/learn.md)")
    device: str = setting("auto", "where the world model trains and the imagined worlds step: auto (a GPU "
                                  "when there is one), cpu, cuda or cuda:N; the agent's own network "
                                  "stays on the CPU")

    def validate(self) -> LearnConfig:
        for name in ("real_steps", "collect_steps", "collect_envs", "world_model_steps",
                     "world_model_steps_later", "agent_steps", "imagined_worlds", "rollout_steps",
                     "torch_threads", "imagination_threads"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.horizon < 0:
            raise ConfigError(f"horizon must be >= 0 (0: to the game's last turn), got {self.horizon}")
        if self.eval_episodes < 2:
            raise ConfigError(f"eval_episodes must be >= 2 (for the 95% interval), got {self.eval_episodes}")
        check_device(self.device, what="device", here=False)
        _env_defaults(self.env_id)  # an unknown id is named before the stages' configs are built
        for key, overrides in (("world_model", self.world_model), ("agent", self.agent)):
            bad = [o for o in overrides if "=" not in o]
            if bad:
                raise ConfigError(f"{key} takes key=value overrides, got {bad}")
        world_model = self.world_model_config(0, [], Path("."))  # a bad override fails before any work
        self.agent_config(0)
        self._first_games_fill_split(world_model.data.split_fractions)
        return self

    def _first_games_fill_split(self, fractions: Sequence[float]) -> None:
        """Refuse a budget whose first iteration has too few games for the world model's train and
        validation splits: the run would fail only after collecting them. Games that all last the
        whole episode are the fewest an iteration can collect."""
        from rpg_env.trajectories.splits import fewest_games

        turns, need = self.game_turns(), fewest_games(fractions)
        if (games := games_for(self.planned_steps(turns)[0], turns)) < need:
            low = [n for n in ("real_steps", "collect_steps") if getattr(self, n) < need * turns]
            raise ConfigError(f"real_steps={self.real_steps} and collect_steps={self.collect_steps} give the "
                              f"first iteration {games} game(s) of at most {turns} steps; the world model's "
                              f"split (data.split_fractions {list(fractions)}) needs {need} to fill its "
                              f"train and validation games: set {' and '.join(low)} to at least "
                              f"{need * turns}")

    # -------------------------------------------------------------------- the real game
    @property
    def treasurehunt(self) -> bool:
        """Whether the loop learns the treasurehunt game (its co-player, greedy and dream config)."""
        return self.env_id.rpartition(":")[2] == rpg_env.ENV_ID

    def real_env(self) -> tuple[str, dict[str, Any]]:
        """The env id and keyword arguments the learner plays and is recorded in: what `rpg_env.record`
        records for ``env_id`` (`rpg_env.envs.any_env.recorded_env`: a task of another package as
        its one-hot twin)."""
        from rpg_env.envs.any_env import recorded_env

        return recorded_env(self.env_id, dict(self.env))

    def game_turns(self) -> int:
        """The real game's episode length in turns (the env protocol's ``max_turns``)."""
        from rpg_env.envs.any_env import make_wrapped_env
        from rpg_env.envs.protocol import describe

        env_id, kwargs = self.real_env()
        try:
            with make_wrapped_env(env_id, kwargs) as env:
                turns = describe(env).max_turns
        except InputError as err:
            raise ConfigError(f"env_id={self.env_id}: {err}") from None
        if turns is None:
            raise ConfigError(f"env_id={self.env_id} declares no episode length (max_turns or a time "
                              "limit): the loop counts its budget in whole games")
        return turns

    # -------------------------------------------------------------------- what each stage runs
    def planned_steps(self, max_turns: int) -> list[int]:
        """The real steps each iteration collects toward where every game lasts ``max_turns`` (the
        treasurehunt game's always do): ``collect_steps`` while the budget lasts, then what is left of
        it. Games that end early make each iteration's count at least its target, and the loop
        continues (`rpg_worldmodel.learn`) until ``real_steps`` are spent."""
        targets, spent = [], 0
        while spent < self.real_steps:
            targets.append(min(self.collect_steps, self.real_steps - spent))
            spent += games_for(targets[-1], max_turns) * max_turns
        return targets

    def world_model_config(self, k: int, files: list[Path], out: Path, start: Path | None = None):
        """Iteration ``k``'s world-model config: ``files`` so far, into ``out``, from ``start``. The
        loop's settings go in as typed fields, then the ``world_model`` overrides; validated once."""
        from rpg_worldmodel.config import WorldModelConfig

        steps = self.world_model_steps if k == 0 else self.world_model_steps_later
        base = WorldModelConfig()
        cfg = replace(base, data=replace(base.data, agent_id=0),
                      model=replace(base.model, sample_floor=self.sample_floor),
                      train=replace(base.train, seed=self.seed, max_steps=steps,
                                    warmup_steps=max(1, min(100, steps // 4)), eval_every=steps,
                                    checkpoint_every=steps, num_threads=self.torch_threads,
                                    device=self.device, refiner_stage=0.0))
        cfg = tc.with_overrides(cfg, self.world_model)
        return replace(cfg, data=replace(cfg.data, path=[str(f) for f in files] or "unset"), out_dir=str(out),
                       train=replace(cfg.train, init_from=str(start) if start is not None else "")).validate()

    def agent_config(self, k: int):
        """Iteration ``k``'s agent config: the dream PPO config, ``agent_steps`` long (the loop's
        settings as typed fields, then the ``agent`` overrides; validated once). Its env is the one
        the agent is judged in, named as `rpg_worldmodel.dream` names it (`expert_env`: a one-hot
        twin's task under the one-hot wrapper), so the task's own arguments (``env.max_steps=...``)
        reach it."""
        from rpg_env.envs.any_env import expert_env
        from rpg_env.experts.config import ExpertConfig
        from rpg_worldmodel.dream import dream_config_path

        path = dream_config_path("ppo")
        data = {**tc.read_yaml(path), "algo": "ppo"}
        if self.treasurehunt:
            data["env"] = {**data.get("env", {}), **self.env}
        else:  # the dream config's env section is the treasurehunt game's; a twin is named as its task
            data["env_id"], data["env"], data["wrappers"] = expert_env(*self.real_env())
        base = tc.build(ExpertConfig, data, str(path))
        cfg = replace(base, seed=self.seed * 1000 + k, total_timesteps=self.agent_steps,
                      n_envs=self.imagined_worlds,
                      hyperparams={**base.hyperparams, "n_steps": self.rollout_steps},
                      eval=replace(base.eval, freq=self.agent_steps, final_episodes=self.eval_episodes,
                                   seed=self.eval_seed),
                      checkpoint_freq=self.agent_steps, torch_threads=self.torch_threads)
        return tc.with_overrides(cfg, self.agent).validate()


def games_for(steps: int, max_turns: int) -> int:
    """Whole games of ``max_turns`` that hold at least ``steps`` steps (at least one)."""
    return max(1, -(-steps // max_turns))


def _env_defaults(env_id: str) -> dict[str, Any]:
    """The keyword arguments ``env_id`` takes (its package imported first, where the id names it)."""
    from rpg_env.envs.any_env import registered_id
    from rpg_env.experts.config import env_defaults

    return env_defaults(registered_id(env_id))


#: Settings added after runs were made, with the value that a run made before them used: a
#: resumed run whose config.yaml lacks one keeps running as it began.
ADDED_SETTINGS = {"imagined_worlds": 16, "rollout_steps": 128, "sample_floor": 0.0, "env_id": rpg_env.ENV_ID,
                  "env": {}}


def load_learn_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> LearnConfig:
    return tc.load(LearnConfig, path, overrides)  # validated


def run_config(recorded: dict[str, Any], source: str | None = None) -> LearnConfig:
    """A run's recorded config (``config.yaml``, ``curve.json``'s), settings it predates as it ran
    (and keys since renamed, under their names now); validated."""
    return tc.resolve(LearnConfig, {**ADDED_SETTINGS, **recorded}, (), source)


def load_run_config(out: Path) -> LearnConfig:
    """The config of the run in ``out``: `run_config` of its ``config.yaml``."""
    return run_config(tc.read_yaml(out / CONFIG_FILE), str(out / CONFIG_FILE))
