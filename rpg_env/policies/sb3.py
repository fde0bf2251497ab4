"""`SB3Policy`: a trained Stable-Baselines3 expert as a batched `rpg_env.policies.base.BatchPolicy`.

Experts are trained on frame-stacked views (`VecFrameStack`, channels first): the network
sees ``(C * k, V, V)``, the last C channels being the newest frame and older frames zeroed at
the start of an episode. `SB3Policy` rebuilds exactly that stack per batch row with SB3's own
`StackedObservations`, so a co-player, a recorder or the evaluator can feed it plain
``(B, C, V, V)`` views (C cell kinds).

Loading is safe by construction: `load_expert` reads the zip's JSON record, rebuilds every
pickled entry (spaces, policy class, network kwargs, schedules) from plain JSON fields and
passes them to SB3 as ``custom_objects``, which SB3 then does not unpickle; the weights are
read by SB3 with ``torch.load(weights_only=True)``. Only zips written by
``python -m rpg_env.experts train`` carry the JSON record (``rpg_expert``) this needs.
"""

from __future__ import annotations

import json
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from rpg_base.errors import InputError
from rpg_env.game.constants import vocabulary
from rpg_env.policies.base import BatchPolicy, sample_actions

#: Version of the ``rpg_expert`` record stored inside every expert zip.
EXPERT_FORMAT = 1


class ExpertLoadError(InputError):
    """The file is not an expert this package can load, or does not fit the environment."""


def expert_spec(algo: str, frame_stack: int, vision_radius: int, net: dict[str, Any],
                env: dict[str, Any], seed: int, env_id: str = "Treasurehunt-v0") -> dict[str, Any]:
    """The JSON-only record saved as ``model.rpg_expert`` (enough to rebuild the model safely).
    ``env_id`` is recorded only where it is not Treasurehunt-v0 (older records have none)."""
    side = 2 * vision_radius + 1
    spec = {"format": EXPERT_FORMAT, "algo": algo, "policy": POLICY_ALIASES.get(algo, "CnnPolicy"),
            "frame_stack": int(frame_stack), "view_shape": [vocabulary().num_kinds, side, side],
            "vision_radius": int(vision_radius), "net": dict(net), "env": dict(env), "seed": seed}
    if env_id != "Treasurehunt-v0":
        spec["env_id"] = env_id
    return spec


def policy_kwargs_from_net(net: dict[str, Any], memory: dict[str, Any] | None = None) -> dict[str, Any]:
    """SB3 ``policy_kwargs`` for a ``net`` config section (see `rpg_env.experts.config.NetConfig`);
    with ``memory`` (the config's memory section), RecurrentPPO's LSTM size too."""
    from rpg_env.policies.features import EXTRACTORS  # imports torch and SB3: only when needed

    extractor = net.get("extractor", "cnn")
    if extractor not in EXTRACTORS:
        raise ExpertLoadError(f"unknown features extractor {extractor!r}; known: {sorted(EXTRACTORS)}")
    fe_kwargs: dict[str, Any] = {"features_dim": int(net.get("features_dim", 64))}
    if extractor == "cnn":
        fe_kwargs["channels"] = tuple(int(c) for c in net.get("channels", (32, 16)))
    kwargs = {"features_extractor_class": EXTRACTORS[extractor], "features_extractor_kwargs": fe_kwargs,
              "net_arch": [int(h) for h in net.get("net_arch", [])], "normalize_images": False}
    if memory is not None:
        kwargs["lstm_hidden_size"] = int(memory.get("lstm_hidden_size", 128))
    return kwargs


#: The algorithms whose models `SB3Policy` loads (`load_expert`): Stable-Baselines3's and sb3-contrib's.
SB3_ALGOS = ("dqn", "ppo", "recurrent-ppo")
#: The SB3 policy of each algorithm (a CNN features extractor; recurrent-ppo adds an LSTM).
POLICY_ALIASES = {"dqn": "CnnPolicy", "ppo": "CnnPolicy", "recurrent-ppo": "CnnLstmPolicy"}


def algo_class(algo: str):
    """The Stable-Baselines3 class of ``algo``: DQN, PPO, or sb3-contrib's RecurrentPPO."""
    if algo not in SB3_ALGOS:
        raise ExpertLoadError(f"algo must be one of {SB3_ALGOS}, got {algo!r}")
    if algo == "recurrent-ppo":
        from sb3_contrib import RecurrentPPO

        return RecurrentPPO
    from stable_baselines3 import DQN, PPO  # heavy: imported when a model is built or loaded

    return {"dqn": DQN, "ppo": PPO}[algo]


def _read_record(path: Path) -> dict[str, Any]:
    try:
        with zipfile.ZipFile(path) as archive:
            data = json.loads(archive.read("data"))
    except (zipfile.BadZipFile, KeyError, json.JSONDecodeError) as err:
        raise ExpertLoadError(f"{path} is not a Stable-Baselines3 model zip ({err}); pass a .zip "
                              f"written by `python -m rpg_env.experts train`") from err
    return data


def read_expert_record(path: Path) -> dict[str, Any]:
    """The ``rpg_expert`` record of an expert zip (empty when it has none), without loading it."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"expert model {path} does not exist")
    record = _read_record(Path(path)).get("rpg_expert")
    return record if isinstance(record, dict) else {}


def load_expert(path: str | Path, device: str = "cpu"):
    """Load an expert zip without unpickling anything; returns the SB3 model.

    Raises `ExpertLoadError` for files that are not expert zips (including SB3 zips saved
    elsewhere, which would need unpickling: load those yourself with ``DQN.load`` if you trust
    them and wrap the model in `SB3Policy`).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"expert model {path} does not exist")
    data = _read_record(path)
    spec = data.get("rpg_expert")
    if not isinstance(spec, dict) or "frame_stack" not in spec:
        raise ExpertLoadError(
            f"{path} is an SB3 zip without an 'rpg_expert' record, so it cannot be loaded without "
            f"unpickling; train it with `python -m rpg_env.experts train`, or, if you trust the file, "
            f"load it with stable_baselines3 yourself and pass the model to SB3Policy")
    if spec.get("format") != EXPERT_FORMAT:
        raise ExpertLoadError(f"{path} has expert format {spec.get('format')!r}; this version reads "
                              f"format {EXPERT_FORMAT}")
    cls = algo_class(spec["algo"])
    channels, side, _ = spec["view_shape"]
    obs_space = spaces.Box(0, 1, (channels * spec["frame_stack"], side, side), dtype=np.uint8)
    # Every cloudpickled entry is replaced, so SB3 unpickles nothing.
    custom: dict[str, Any] = {key: None for key, value in data.items()
                              if isinstance(value, dict) and ":serialized:" in value}
    custom.update(
        policy_class=cls.policy_aliases[spec["policy"]],
        observation_space=obs_space,
        action_space=spaces.Discrete(vocabulary().num_actions),
        policy_kwargs=policy_kwargs_from_net(spec["net"], spec.get("memory")
                                             if spec["algo"] == "recurrent-ppo" else None),
        lr_schedule=lambda _: 0.0,
    )
    if spec["algo"] == "dqn":
        custom["buffer_size"] = 1  # inference only: do not allocate the replay buffer
        custom["train_freq"] = 1
    if spec["algo"] in ("ppo", "recurrent-ppo"):
        custom.update(clip_range=0.2, clip_range_vf=None)
    try:
        model = cls.load(path, device=device, custom_objects=custom)
    except RuntimeError as err:  # weights that do not fit the rebuilt network
        raise ExpertLoadError(f"{path}: weights do not match the network described in its "
                              f"record ({spec['net']}): {err}") from err
    model.rpg_expert = spec
    return model


def describe_shape(shape: tuple[int, ...]) -> str:
    side = shape[-1]
    radius = f"vision_radius {(side - 1) // 2}" if side % 2 == 1 else "no vision radius"
    return f"{tuple(int(s) for s in shape)} ({radius})"


class SB3Policy(BatchPolicy):
    """A trained SB3 model acting on ``(B, C, V, V)`` uint8 views, frame-stacking per row.

    :param model: an SB3 DQN/PPO trained on ``(C * k, V, V)`` stacked views.
    :param deterministic: greedy actions (argmax Q / mode of the policy); otherwise DQN acts
        epsilon-greedily with ``epsilon`` and PPO samples, both from the generator given to `seed`.
    :param frame_stack: frames the model stacks; read from the model's ``rpg_expert`` record,
        else inferred as ``channels // 6``.
    :param epsilon: exploration rate of a stochastic DQN.
    """

    def __init__(self, model: Any, deterministic: bool = True, frame_stack: int | None = None,
                 epsilon: float = 0.05, policy_id: str | None = None) -> None:
        super().__init__()
        self.model = model
        self.deterministic = deterministic
        self.epsilon = float(epsilon)
        shape = tuple(model.observation_space.shape)
        spec = getattr(model, "rpg_expert", None) or {}
        channels = int(spec["view_shape"][0]) if "view_shape" in spec else vocabulary().num_kinds
        if len(shape) != 3 or shape[0] % channels:
            raise ExpertLoadError(f"model observation shape {shape} is not a stack of ({channels}, V, V) "
                                  f"one-hot views")
        self.frame_stack = int(frame_stack or spec.get("frame_stack") or shape[0] // channels)
        if self.frame_stack * channels != shape[0]:
            raise ExpertLoadError(f"frame_stack={self.frame_stack} does not fit the model's "
                                  f"observation shape {shape}")
        self.view_shape = (channels, shape[1], shape[2])
        self.num_actions = int(model.action_space.n)
        self.single_space = spaces.Box(0, 1, self.view_shape, dtype=np.uint8)
        algo = type(model).__name__.lower()
        self.policy_id = policy_id or f"sb3-{algo}"
        self._is_dqn = algo == "dqn"
        self._is_recurrent = algo == "recurrentppo"
        self._stack = None
        self._lstm_states: tuple | None = None

    @property
    def rpg_expert(self) -> dict[str, Any]:
        """The model's JSON record (algo, env, seed, ...); empty for a model trained elsewhere."""
        return dict(getattr(self.model, "rpg_expert", None) or {})

    @classmethod
    def load(cls, path: str | Path, deterministic: bool = True, **kwargs: Any) -> SB3Policy:
        """`load_expert` + wrap. The policy id is ``sb3-<stem>``, or ``sb3-<folder>`` for a run
        folder's or a shipped expert's ``model.zip`` (e.g. ``sb3-dqn``), as `rpg_env.record` names it."""
        path = Path(path)
        name = path.parent.name if path.stem == "model" and path.parent.name else path.stem
        kwargs.setdefault("policy_id", f"sb3-{name}")
        return cls(load_expert(path), deterministic=deterministic, **kwargs)

    def check_view_shape(self, shape: tuple[int, ...]) -> None:
        """Raise `ExpertLoadError` naming both shapes unless ``shape`` is the model's view shape."""
        shape = tuple(int(s) for s in shape)
        if shape != self.view_shape:
            raise ExpertLoadError(
                f"expert {self.policy_id!r} was trained on views {describe_shape(self.view_shape)} "
                f"but the environment gives {describe_shape(shape)}; use an environment with "
                f"vision_radius={(self.view_shape[-1] - 1) // 2} or an expert trained for this view")

    def act(self, obs: np.ndarray, episode_start: np.ndarray | None = None) -> np.ndarray:
        fresh = self._stack is None or len(self._stack.stacked_obs) != len(obs)
        stacked = self.stack(obs, episode_start)
        batch = len(obs)
        if self._is_recurrent:
            if fresh:
                starts = np.ones(batch, bool)
            else:
                starts = np.zeros(batch, bool) if episode_start is None else np.asarray(episode_start, bool)
            return self._recurrent_act(stacked, starts)
        if self.deterministic:
            actions, _ = self.model.predict(stacked, deterministic=True)
            return np.asarray(actions, dtype=np.int64).reshape(batch)
        return self._sample(stacked)

    def stack(self, obs: np.ndarray, episode_start: np.ndarray | None = None) -> np.ndarray:
        """Push ``obs`` ``(B, C, V, V)`` onto the per-row stacks; return ``(B, C * k, V, V)``.

        Rows flagged in ``episode_start`` are cleared first (older frames read as zeros), as
        `VecFrameStack` does after a ``done``; the first call, or a new batch size, starts all rows.
        """
        obs = np.asarray(obs)
        if obs.ndim != 4:
            raise ValueError(f"SB3Policy needs a batch (B, C, V, V), got shape {obs.shape}")
        self.check_view_shape(obs.shape[1:])
        batch = len(obs)
        if self._stack is None or len(self._stack.stacked_obs) != batch:
            from stable_baselines3.common.vec_env.stacked_observations import StackedObservations

            self._stack = StackedObservations(batch, self.frame_stack, self.single_space, "first")
            return self._stack.reset(obs).copy()
        starts = np.zeros(batch, bool) if episode_start is None else np.asarray(episode_start, bool)
        if starts.shape != (batch,):
            raise ValueError(f"episode_start must have shape ({batch},), got {starts.shape}")
        with warnings.catch_warnings():
            # SB3 warns that a done row has no terminal_observation: only VecFrameStack's infos need it.
            warnings.filterwarnings("ignore", message="VecFrameStack wrapping a VecEnv without terminal")
            stacked, _ = self._stack.update(obs, starts, [{} for _ in range(batch)])
        return stacked.copy()

    def reset(self) -> None:
        """Forget the frame stacks and LSTM states (the next `act` starts every row afresh)."""
        self._stack = None
        self._lstm_states = None

    def _recurrent_act(self, stacked: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """RecurrentPPO: one LSTM step per row from its kept state (cleared where ``starts``)."""
        import torch

        policy = self.model.policy
        batch = len(stacked)
        with torch.no_grad():
            obs_t, _ = policy.obs_to_tensor(stacked)
            if self._lstm_states is None or self._lstm_states[0].shape[1] != batch:
                shape = (policy.lstm_actor.num_layers, batch, policy.lstm_actor.hidden_size)
                self._lstm_states = (torch.zeros(shape), torch.zeros(shape))
            dist, self._lstm_states = policy.get_distribution(
                obs_t, self._lstm_states, torch.as_tensor(starts, dtype=torch.float32))
            probs = dist.distribution.probs.cpu().numpy().astype(np.float64)
        if self.deterministic:
            return probs.argmax(axis=1).astype(np.int64)
        return sample_actions(probs, self.rng)

    def greedy_on_frames(self, frames: np.ndarray) -> np.ndarray:
        """The greedy action ``(B,)`` on explicit frame stacks ``(B, k, C, V, V)``, oldest first,
        frames before an episode's start all zeros: what `act` does with its own stacks (same
        layout, `StackedObservations` channels-first), for callers that build stacks themselves,
        e.g. with a predicted newest frame. Stateless: `act`'s stacks are untouched."""
        if self._is_recurrent:
            raise ExpertLoadError(f"expert {self.policy_id!r} is recurrent: its action depends on its whole "
                                  f"episode, not on a stack of frames")
        frames = np.asarray(frames)
        if frames.ndim != 5 or frames.shape[1] != self.frame_stack:
            raise ValueError(f"frames must be (B, {self.frame_stack}, C, V, V), got {frames.shape}")
        self.check_view_shape(frames.shape[2:])
        stacked = frames.reshape(len(frames), -1, *frames.shape[3:]).astype(np.uint8)
        actions, _ = self.model.predict(stacked, deterministic=True)
        return np.asarray(actions, dtype=np.int64).reshape(len(frames))

    def _sample(self, stacked: np.ndarray) -> np.ndarray:
        import torch

        batch = len(stacked)
        if self._is_dqn:
            greedy, _ = self.model.predict(stacked, deterministic=True)
            explore = self.rng.random(batch) < self.epsilon
            random = self.rng.integers(0, self.num_actions, size=batch)
            return np.where(explore, random, greedy).astype(np.int64)
        with torch.no_grad():
            obs_t, _ = self.model.policy.obs_to_tensor(stacked)
            probs = self.model.policy.get_distribution(obs_t).distribution.probs.cpu().numpy()
        return sample_actions(probs, self.rng)
