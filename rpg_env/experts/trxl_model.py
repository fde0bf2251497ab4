"""`TrXLPPO`: TrXL-PPO (seed 002) in Stable-Baselines3's shape, for any Gymnasium env::

    from rpg_env.experts.trxl_model import TrXLPPO

    model = TrXLPPO("CartPoleMasked-v1", seed=0, net={"extractor": "mlp"}, hyperparams={"n_steps": 256})
    model.learn(total_timesteps=200_000)
    model.save("trxl.zip")                           # the file the CLI writes as model.zip
    actions, memory = model.predict(obs)              # obs (B, *obs_shape); memory: pass it back next step
    actions, memory = model.predict(next_obs, memory, episode_start=done)
    model = TrXLPPO.load("trxl.zip")                 # nothing unpickled

The settings are an `ExpertConfig` (``algo: trxl-ppo``) built from the keyword arguments, a
dict per section (``env``, ``net``, ``memory``, ``hyperparams``), and checked as the command
line checks them. ``learn`` runs `TrXLTrainer.train_updates`, the CLI's loop, without its run folder (no
evaluations, checkpoints or tensorboard): with the same settings and seed it gives the weights
``python -m rpg_env.experts train`` gives (tested).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rpg_base.provenance import pinned_torch_threads
from rpg_env.experts.config import ExpertConfig, from_dict
from rpg_env.experts.trxl_ppo import TrXLTrainer
from rpg_env.policies.transformer_xl import TRXL_ALGO, EpisodicMemory, TrXLPolicy, load_trxl


class TrXLPPO:
    """TrXL-PPO on ``env_id`` (a registered Gymnasium id, ``package:Id`` for another package's).

    :param env_id: the env; ``env_kwargs`` its keyword arguments, ``wrappers`` Gymnasium wrappers as
        entry points (``"package.module:Class key=value"``), applied in order.
    :param sections: ``seed``, ``n_envs``, ``device``, ``torch_threads`` and the config's sections
        ``net``, ``memory``, ``hyperparams`` as dicts (`ExpertConfig`; unknown keys are refused).
    """

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None, wrappers: tuple[str, ...] = (),
                 **sections: Any) -> None:
        data = {"algo": TRXL_ALGO, "env_id": env_id, "env": dict(env_kwargs or {}),
                "wrappers": list(wrappers), "frame_stack": 1, "progress_bar": False, **sections}
        self.config: ExpertConfig | None = from_dict(data)  # None for a model loaded from a file
        self._trainer: TrXLTrainer | None = None
        self.policy: TrXLPolicy | None = None
        self.num_timesteps = 0

    def learn(self, total_timesteps: int) -> TrXLPPO:
        """Collect and update until ``total_timesteps`` env steps (whole updates); returns ``self``."""
        cfg = self.config
        if cfg is None:
            raise RuntimeError("a loaded model only predicts (its optimizer state is not saved); build a "
                               "TrXLPPO to learn")
        with pinned_torch_threads(cfg.torch_threads):
            if self._trainer is None:
                self._trainer = TrXLTrainer(cfg, Path("."))
            trainer = self._trainer
            for _ in trainer.train_updates(total_timesteps):
                pass
        self.num_timesteps = trainer.steps
        self.policy = TrXLPolicy(trainer.model, trainer.record(), deterministic=True)
        return self

    def predict(self, observation: np.ndarray, state: EpisodicMemory | None = None,
                episode_start: np.ndarray | None = None,
                deterministic: bool = True) -> tuple[np.ndarray, EpisodicMemory]:
        """Actions for a batch ``observation`` (B, *obs_shape) -> ``(actions, state)``: (B,) for a
        Discrete space, (B, K) for a MultiDiscrete one; ``state`` is each row's memory, to pass
        back with the next batch (None: fresh), cleared where ``episode_start`` is true."""
        if self.policy is None:
            raise RuntimeError("the model has not learned or been loaded yet: call learn or TrXLPPO.load")
        policy = self.policy
        policy.deterministic = deterministic
        policy.memory = state  # each row's window is the caller's
        actions = policy.act(np.asarray(observation), episode_start)
        return actions, policy.memory

    def save(self, path: str | Path) -> None:
        """The model as the CLI's ``model.zip`` (`rpg_env.policies.transformer_xl.save_trxl`)."""
        if self._trainer is None:
            raise RuntimeError("nothing to save: the model has not learned (TrXLPPO.load reads a file)")
        self._trainer.save(Path(path))

    @classmethod
    def load(cls, path: str | Path) -> TrXLPPO:
        """A saved model, ready to `predict` (not to learn on: its optimizer state is not saved)."""
        network, record = load_trxl(path)
        model = cls.__new__(cls)
        model.config, model._trainer, model.num_timesteps = None, None, 0
        model.policy = TrXLPolicy(network, record, deterministic=True)
        return model

    def close(self) -> None:
        if self._trainer is not None:
            self._trainer.close()

