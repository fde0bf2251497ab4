"""PPO with GAE over a TransformerXL episodic memory (seed 002), in one readable loop.

``python -m rpg_env.experts train --algo trxl-ppo`` ends here (through `rpg_env.experts.train`,
which writes the run folder's config, provenance and eval.json as for every expert). Each update:

1. collect ``n_steps`` steps in each of ``n_envs`` worlds (a Gymnasium vector env that resets a
   finished world within the step), keeping for every step the view, the memory window the
   network read, the action, its log-probability, the value and the reward; a truncated episode's
   reward gets ``gamma * V(final view)`` so a time limit is not mistaken for the game's end;
2. GAE(``gamma``, ``gae_lambda``) advantages and returns;
3. ``n_epochs`` passes of PPO's clipped objective over ``n_minibatches`` shuffled minibatches, each
   sample one forward pass from its stored window (the memory is not recomputed, as in seed
   002's reference). What of a window's keys holds no weight (the entries with their ages added,
   normalized before the norm's own scale and shift) is computed once per rollout and shared by
   all epochs (`TrXLActorCritic.window_keys`); with learned ages it is recomputed every time.

The learning rate, the entropy bonus and the clip range decay polynomially from their initial to
their ``_final`` values over ``total_timesteps`` (``schedule_power`` 1: linearly; equal values:
constant), as seed 002's schedules do. Everything random is drawn from generators seeded by
``seed``: the same config on the same torch thread count gives the same weights.

Run-folder extras written here: ``checkpoints/trxl-ppo_<steps>_steps.zip``, ``best/model.zip`` and
``best/evaluations.npz`` (periodic greedy evaluations, as SB3's EvalCallback writes them) and
``tb/trxl-ppo_1/`` (tensorboard: rollout/ep_rew_mean, train/* losses, time/fps).
"""

from __future__ import annotations

import copy
import dataclasses
import sys
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from torch import nn

from rpg_base.spaces import action_dims
from rpg_env.envs.any_env import PROJECT_GAMES, make_vector
from rpg_env.experts.config import ExpertConfig, TrXLHyperparams
from rpg_env.policies.transformer_xl import (
    TRXL_ALGO,
    EpisodicMemory,
    TrXLActorCritic,
    TrXLPolicy,
    TrXLShape,
    encoder_kind,
    save_trxl,
)


def network_shape(cfg: ExpertConfig, envs: VectorEnv) -> TrXLShape:
    """The network's shape from the config's ``net`` and ``memory`` sections and the env's spaces."""
    mem = cfg.memory
    encoder, scale = encoder_kind(envs.single_observation_space, cfg.net.extractor)
    return TrXLShape(
        obs_shape=tuple(int(s) for s in envs.single_observation_space.shape),
        action_dims=action_dims(envs.single_action_space), encoder=encoder, obs_scale=scale,
        channels=tuple(cfg.net.channels),
        embed_dim=cfg.net.features_dim, num_blocks=mem.num_blocks, num_heads=mem.num_heads,
        memory_length=mem.memory_length, positional_encoding=mem.positional_encoding,
        layer_norm=mem.layer_norm, gtrxl=mem.gtrxl, gtrxl_bias=mem.gtrxl_bias, hidden_size=mem.hidden_size,
        previous_action=mem.previous_action, input_layer=mem.input_layer, separate_heads=mem.separate_heads)


def make_vector_env(cfg: ExpertConfig, num_envs: int) -> VectorEnv:
    """``num_envs`` worlds of ``cfg.env_id`` (with ``cfg.wrappers``) that reset a finished world
    within the step (its last observation in ``info["final_obs"]``): Treasurehunt's native vector
    env, Gymnasium's sync one otherwise."""
    return make_vector(cfg.env_id, num_envs, cfg.env, cfg.wrappers, autoreset_mode=AutoresetMode.SAME_STEP)


def ppo_value_loss(value: torch.Tensor, old_value: torch.Tensor, returns: torch.Tensor,
                   clip: float | None = None) -> torch.Tensor:
    """Mean squared error of ``value`` against ``returns`` (all (B,)); with ``clip``, the larger of
    that and the error of ``value`` moved at most ``clip`` from ``old_value``, the collection's (PPO2's
    clipped value loss: an update cannot move the value far on the strength of it)."""
    error = (returns - value).pow(2)
    if clip is None:
        return error.mean()
    clipped = old_value + (value - old_value).clamp(-clip, clip)
    return torch.max(error, (returns - clipped).pow(2)).mean()


def decayed(initial: float, final: float, power: float, progress: float) -> float:
    """Polynomial decay from ``initial`` (progress 0) to ``final`` (progress 1)."""
    return final + (initial - final) * (1.0 - min(max(progress, 0.0), 1.0)) ** power


@dataclass
class RolloutBuffer:
    """One update's worth of steps, ``(T, W, ...)``: what the loss needs, as collected."""

    obs: torch.Tensor      # (T, W, *obs_shape) as the env gives them (uint8 views, float vectors, ...)
    memory: torch.Tensor   # (T, W, N, L, D) the windows read
    valid: torch.Tensor    # (T, W, L) bool
    previous: torch.Tensor  # (T, W, K) int64 the action before (action_dims: none)
    actions: torch.Tensor  # (T, W, K) int64
    log_probs: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    dones: torch.Tensor    # (T, W) the step ended its episode

    @classmethod
    def empty(cls, steps: int, worlds: int, shape: TrXLShape, obs_dtype: torch.dtype,
              device: torch.device) -> RolloutBuffer:
        def zeros(*size: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.zeros(steps, worlds, *size, dtype=dtype, device=device)

        dims = len(shape.action_dims)
        return cls(zeros(*shape.obs_shape, dtype=obs_dtype),
                   zeros(shape.num_blocks, shape.memory_length, shape.embed_dim),
                   zeros(shape.memory_length, dtype=torch.bool), zeros(dims, dtype=torch.int64),
                   zeros(dims, dtype=torch.int64),
                   zeros(), zeros(), zeros(), zeros(dtype=torch.bool))


def advantages(rollout: RolloutBuffer, last_value: torch.Tensor, gamma: float, lam: float) -> torch.Tensor:
    """GAE advantages ``(T, W)``; the step after an episode's end does not bootstrap into it."""
    steps = len(rollout.rewards)
    result = torch.zeros_like(rollout.rewards)
    running = torch.zeros_like(last_value)
    for t in reversed(range(steps)):
        next_value = last_value if t == steps - 1 else rollout.values[t + 1]
        alive = (~rollout.dones[t]).float()
        delta = rollout.rewards[t] + gamma * next_value * alive - rollout.values[t]
        running = delta + gamma * lam * alive * running
        result[t] = running
    return result


class TrXLTrainer:
    """Owns the envs, the network, its optimizer and the episodic memory of a training run."""

    def __init__(self, cfg: ExpertConfig, run_dir: Path) -> None:
        self.cfg = cfg
        self.hp = TrXLHyperparams(**cfg.hyperparams)
        self.run_dir = run_dir
        self.device = torch.device(cfg.device)
        torch.manual_seed(cfg.seed)  # the weights start alike on every device
        self.generator = torch.Generator(device=self.device).manual_seed(cfg.seed)
        self.envs = make_vector_env(cfg, cfg.n_envs)
        self.shape = network_shape(cfg, self.envs)
        # Observations are kept as the env gives them (a one-hot view as bytes); the network casts.
        self.obs_dtype = torch.from_numpy(np.zeros(0, dtype=self.envs.single_observation_space.dtype)).dtype
        self.model = TrXLActorCritic(self.shape).to(self.device)
        # One fused kernel for all parameters: the per-parameter loop cost more than the sums.
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=self.hp.learning_rate, fused=True)
        self.memory = EpisodicMemory(cfg.n_envs, self.shape, self.device)
        self.steps = 0
        self.obs: np.ndarray | None = None  # the worlds' observations where the last update stopped
        self.recent_returns: deque[float] = deque(maxlen=100)
        self.recent_success: deque[float] = deque(maxlen=100)
        self._episode_returns = np.zeros(cfg.n_envs)

    # ------------------------------------------------------------------ training
    @property
    def steps_per_update(self) -> int:
        return self.cfg.n_envs * self.hp.n_steps

    def updates_for(self, total_timesteps: int) -> int:
        """Whole updates that cover ``total_timesteps`` env steps (at least one)."""
        return max(-(-int(total_timesteps) // self.steps_per_update), 1)

    def train_updates(self, total_timesteps: int) -> Iterator[tuple[int, int, dict[str, float]]]:
        """Collect and update for ``total_timesteps`` env steps (whole updates), going on from where
        the last call stopped (the first resets the worlds with the config's seed: world i gets
        seed + i (sync), or one stream (native)); yields ``(update, updates, its statistics)``
        after each update, the schedules' progress being ``update / updates``."""
        if self.obs is None:
            self.obs, _ = self.envs.reset(seed=self.cfg.seed)
        updates = self.updates_for(total_timesteps)
        self.model.train()
        for update in range(updates):
            rollout, last_value, self.obs = self.collect(self.obs)
            yield update, updates, self.update(rollout, last_value, progress=update / updates)

    # ------------------------------------------------------------------ collecting
    def collect(self, obs: np.ndarray) -> tuple[RolloutBuffer, torch.Tensor, np.ndarray]:
        """``n_steps`` steps in every world from observations ``obs``; returns the rollout, the value
        of the observations after it (W,), and those observations."""
        hp, memory, heads = self.hp, self.memory, self.model.actions
        rollout = RolloutBuffer.empty(hp.n_steps, self.cfg.n_envs, self.shape, self.obs_dtype, self.device)
        for t in range(hp.n_steps):
            now = self._as_tensor(obs)
            rollout.obs[t], rollout.memory[t], rollout.valid[t] = now, memory.memory, memory.valid
            rollout.previous[t] = memory.previous
            with torch.no_grad():
                logits, value, entries = self.model(now, memory.previous, memory.memory, memory.valid)
                action = heads.sample(logits, self.generator)
                rollout.log_probs[t] = heads.log_prob(logits, action)
            rollout.actions[t], rollout.values[t] = action, value
            memory.push(entries, action)
            env_action = action.cpu().numpy()
            obs, reward, terminated, truncated, info = self.envs.step(
                env_action[:, 0] if len(heads.dims) == 1 else env_action)
            game_reward = np.asarray(reward, dtype=np.float32)
            reward = torch.as_tensor(game_reward).to(self.device)
            truncated_only = np.asarray(truncated) & ~np.asarray(terminated)
            if self.hp.bootstrap_truncation and truncated_only.any():  # from the final view's value
                reward = reward + self.hp.gamma * self._final_values(info, truncated_only)
            done = np.asarray(terminated) | np.asarray(truncated)
            rollout.rewards[t], rollout.dones[t] = reward, torch.as_tensor(done).to(self.device)
            self._count_episodes(game_reward, done, info)
            memory.start(done)
            self.steps += self.cfg.n_envs
        with torch.no_grad():
            _, last_value, _ = self.model(self._as_tensor(obs), memory.previous, memory.memory, memory.valid)
        return rollout, last_value, obs

    def _as_tensor(self, obs: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.asarray(obs)).to(self.device, self.obs_dtype)

    def _final_values(self, info: dict, rows: np.ndarray) -> torch.Tensor:
        """V(final view) of the worlds in ``rows`` with their memory as it stands (W,), 0 elsewhere."""
        index = np.flatnonzero(rows)
        final = np.stack([np.asarray(info["final_obs"][i]) for i in index])
        with torch.no_grad():
            _, value, _ = self.model(self._as_tensor(final), self.memory.previous[index],
                                     self.memory.memory[index], self.memory.valid[index])
        out = torch.zeros(self.cfg.n_envs, device=self.device)
        out[index] = value
        return out

    def _count_episodes(self, rewards: np.ndarray, done: np.ndarray, info: dict) -> None:
        self._episode_returns += rewards
        for i in np.flatnonzero(done):
            self.recent_returns.append(float(self._episode_returns[i]))
            final_info = info.get("final_info", {})
            if "success" in final_info:
                self.recent_success.append(float(final_info["success"][i]))
            self._episode_returns[i] = 0.0

    # ------------------------------------------------------------------ learning
    def update(self, rollout: RolloutBuffer, last_value: torch.Tensor, progress: float) -> dict[str, float]:
        """PPO's epochs over ``rollout``; returns the update's mean losses and statistics."""
        hp = self.hp
        lr = decayed(hp.learning_rate, hp.learning_rate_final, hp.schedule_power, progress)
        ent_coef = decayed(hp.ent_coef, hp.ent_coef_final, hp.schedule_power, progress)
        clip = decayed(hp.clip_range, hp.clip_range_final, hp.schedule_power, progress)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        adv = advantages(rollout, last_value, hp.gamma, hp.gae_lambda)
        returns = (adv + rollout.values).flatten()
        adv = adv.flatten()
        flat = {name: getattr(rollout, name).flatten(0, 1) for name in
                ("obs", "previous", "memory", "valid", "actions", "log_probs", "values")}
        heads = self.model.actions
        if self.model.fixed_window_keys:  # weight-free: every epoch reads the same keys of the windows
            with torch.no_grad():
                flat["keys"] = self.model.window_keys(flat["memory"])
        samples = len(adv)
        minibatch = max(samples // hp.n_minibatches, 1)
        stats: dict[str, list[float]] = {k: [] for k in ("policy_loss", "value_loss", "entropy",
                                                         "approx_kl", "clip_fraction")}
        for _ in range(hp.n_epochs):
            order = torch.randperm(samples, generator=self.generator, device=self.device)
            for start in range(0, samples, minibatch):
                idx = order[start:start + minibatch]
                keys = flat["keys"][idx] if "keys" in flat else None
                memory = flat["memory"][idx] if keys is None else None
                logits, value, _ = self.model(flat["obs"][idx], flat["previous"][idx], memory,
                                              flat["valid"][idx], keys=keys)
                new_log_prob = heads.log_prob(logits, flat["actions"][idx])
                ratio = torch.exp(new_log_prob - flat["log_probs"][idx])
                mb_adv = adv[idx]
                if hp.normalize_advantage and len(idx) > 1:
                    mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                clipped = torch.clamp(ratio, 1 - clip, 1 + clip) * mb_adv
                policy_loss = -torch.min(ratio * mb_adv, clipped).mean()
                value_loss = ppo_value_loss(value, flat["values"][idx], returns[idx],
                                            clip if hp.clip_value else None)
                entropy = heads.entropy(logits).mean()
                loss = policy_loss + hp.vf_coef * value_loss - ent_coef * entropy
                self.optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(self.model.parameters(), hp.max_grad_norm)
                self.optimizer.step()
                with torch.no_grad():
                    log_ratio = new_log_prob - flat["log_probs"][idx]
                    stats["approx_kl"].append(float(((ratio - 1) - log_ratio).mean()))
                    stats["clip_fraction"].append(float(((ratio - 1).abs() > clip).float().mean()))
                stats["policy_loss"].append(policy_loss.item())
                stats["value_loss"].append(value_loss.item())
                stats["entropy"].append(entropy.item())
        result = {k: float(np.mean(v)) for k, v in stats.items()}
        result.update(learning_rate=lr, ent_coef=ent_coef, clip_range=clip)
        return result

    def record(self) -> dict:
        """The ``rpg_expert`` record saved with the weights (`TrXLPolicy` and `compare` read it)."""
        from rpg_env.policies.sb3 import expert_spec

        cfg, envs = self.cfg, self.envs
        if cfg.env_id in PROJECT_GAMES:
            side = self.shape.obs_shape[-1]
            spec = expert_spec(TRXL_ALGO, 1, (side - 1) // 2, vars(cfg.net), cfg.env, cfg.seed,
                               env_id=cfg.env_id)
        else:
            spec = expert_spec(TRXL_ALGO, 1, None, vars(cfg.net), cfg.env, cfg.seed, env_id=cfg.env_id,
                               observation_space=envs.single_observation_space,
                               action_space=envs.single_action_space, wrappers=cfg.wrappers)
        spec["policy"] = "TrXLActorCritic"
        spec["memory"] = dataclasses.asdict(self.cfg.memory)
        return spec

    def save(self, path: Path) -> None:
        save_trxl(path, self.model, self.record())

    def close(self) -> None:
        self.envs.close()


def greedy_return(trainer: TrXLTrainer, episodes: int, seed: int) -> np.ndarray:
    """Per-episode returns of the current network, acting greedily, on fixed seeds."""
    from rpg_env.experts.evaluate import run_episodes

    model = trainer.model  # the greedy player steps one game at a time: on the CPU, as a saved expert
    if trainer.device.type != "cpu":
        model = copy.deepcopy(model).cpu()
    policy = TrXLPolicy(model, trainer.record(), deterministic=True)
    try:
        return run_episodes(policy, dict(trainer.cfg.env), episodes, seed, trainer.cfg.env_id,
                            trainer.cfg.wrappers)
    finally:
        trainer.model.train()


def train_trxl(cfg: ExpertConfig, run_dir: Path, eval_seed: int) -> tuple[float, int]:
    """Train per ``cfg`` into ``run_dir`` (``model.zip`` and the extras of the module docstring);
    returns (training seconds, learner env steps)."""
    from torch.utils.tensorboard import SummaryWriter

    from rpg_base.progress import progress_bar

    trainer = TrXLTrainer(cfg, run_dir)
    writer = SummaryWriter(str(run_dir / "tb" / f"{TRXL_ALGO}_1"))
    per_update = trainer.steps_per_update
    bar = progress_bar(total=trainer.updates_for(cfg.total_timesteps) * per_update, unit="step",
                       desc="train TrXL-PPO", disable=not cfg.progress_bar, file=sys.stderr)
    evaluations: list[tuple[int, np.ndarray]] = []
    best = -np.inf
    next_eval, next_checkpoint = cfg.eval.freq, cfg.checkpoint_freq
    started = time.perf_counter()
    try:
        for update, updates, stats in trainer.train_updates(cfg.total_timesteps):
            bar.update(per_update)
            elapsed = time.perf_counter() - started
            for key, value in stats.items():
                writer.add_scalar(f"train/{key}", value, trainer.steps)
            writer.add_scalar("time/fps", trainer.steps / max(elapsed, 1e-9), trainer.steps)
            if trainer.recent_returns:
                mean_return = float(np.mean(trainer.recent_returns))
                writer.add_scalar("rollout/ep_rew_mean", mean_return, trainer.steps)
                bar.set_postfix(ep_rew=f"{mean_return:.2f}")
            if trainer.recent_success:
                success = float(np.mean(trainer.recent_success))
                writer.add_scalar("rollout/success_rate", success, trainer.steps)
            if trainer.steps >= next_checkpoint:
                trainer.save(run_dir / "checkpoints" / f"{TRXL_ALGO}_{trainer.steps}_steps.zip")
                next_checkpoint += cfg.checkpoint_freq
            if trainer.steps >= next_eval or update == updates - 1:
                returns = greedy_return(trainer, cfg.eval.episodes, eval_seed)
                evaluations.append((trainer.steps, returns))
                writer.add_scalar("eval/mean_reward", float(returns.mean()), trainer.steps)
                if returns.mean() > best:
                    best = float(returns.mean())
                    trainer.save(run_dir / "best" / "model.zip")
                next_eval += cfg.eval.freq
        train_seconds = time.perf_counter() - started
        trainer.save(run_dir / "model.zip")
    finally:
        bar.close()
        writer.close()
        trainer.close()
    np.savez(run_dir / "best" / "evaluations.npz", timesteps=np.array([s for s, _ in evaluations]),
             results=np.stack([r for _, r in evaluations]))
    return train_seconds, trainer.steps
