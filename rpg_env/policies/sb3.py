"""`SB3Policy`: a trained Stable-Baselines3 expert as a batched `rpg_env.policies.base.BatchPolicy`.

Experts are trained on frame-stacked observations (`VecFrameStack`): the network sees the last k
observations of an episode, older frames zeroed at its start. One observation becomes one frame
of the stack (`network_frame_space`): a one-hot grid ``(C, V, V)`` (the project's views) and an
image are channels first (an image ``(H, W, C)`` is transposed to ``(C, H, W)``) and stack along
their channels, ``(C * k, H, W)`` with the newest frame's channels last; a vector ``(D,)`` stacks
end to end, ``(D * k,)``. `SB3Policy` rebuilds exactly that stack per batch row with SB3's own
`StackedObservations`, so a co-player, a recorder or the evaluator can feed it plain
``(B, *obs_shape)`` observations as the env gives them (``(B, C, V, V)`` views in the project's games).

Loading is safe by construction: `load_expert` reads the zip's JSON record, rebuilds every
pickled entry (spaces, policy class, network kwargs, schedules) from plain JSON fields and
passes them to SB3 as ``custom_objects``, which SB3 then does not unpickle; the weights are
read by SB3 with ``torch.load(weights_only=True)``. Only zips written by
``python -m rpg_env.experts train`` carry the JSON record (``rpg_expert``) this needs. The record
names the env's spaces: the project's games by their ``view_shape`` (one-hot views, the game's
actions), any other env by its ``observation_space`` and ``action_space`` (`rpg_base.spaces` JSON).
"""

from __future__ import annotations

import json
import warnings
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from rpg_base.errors import InputError
from rpg_base.spaces import action_dims, space_from_json, space_to_json
from rpg_env.game.constants import vocabulary
from rpg_env.policies.base import BatchPolicy, sample_actions

#: Version of the ``rpg_expert`` record stored inside every expert zip.
EXPERT_FORMAT = 1
#: Images at least this many pixels on both sides go through SB3's `NatureCNN` under
#: ``net.extractor=cnn`` (its 8x8 stride-4, 4x4 stride-2 and 3x3 kernels need 36); smaller ones, and
#: every one-hot grid, through `rpg_env.policies.features.GridCNN` at full resolution.
NATURE_CNN_SIDE = 36


class ExpertLoadError(InputError):
    """The file is not an expert this package can load, or does not fit the environment."""


def expert_spec(algo: str, frame_stack: int, vision_radius: int | None, net: dict[str, Any],
                env: dict[str, Any], seed: int, env_id: str = "Treasurehunt-v0", *,
                observation_space: spaces.Space | None = None, action_space: spaces.Space | None = None,
                wrappers: Sequence[str] = ()) -> dict[str, Any]:
    """The JSON-only record saved as ``model.rpg_expert`` (enough to rebuild the model safely).
    ``env_id`` is recorded only where it is not Treasurehunt-v0 (older records have none). The
    project's games are described by their ``vision_radius`` (views of the game's vocabulary);
    any other env by its ``observation_space`` and ``action_space`` (one observation, before any
    frame stack) and the ``wrappers`` it was trained in."""
    spec = {"format": EXPERT_FORMAT, "algo": algo, "policy": POLICY_ALIASES.get(algo, "CnnPolicy"),
            "frame_stack": int(frame_stack), "net": dict(net), "env": dict(env), "seed": seed}
    if observation_space is None:
        if vision_radius is None:
            raise ValueError("expert_spec needs the vision_radius of a project game, or the env's spaces")
        side = 2 * vision_radius + 1
        spec.update(view_shape=[vocabulary().num_kinds, side, side], vision_radius=int(vision_radius))
    else:
        if action_space is None:
            raise ValueError("expert_spec needs the action_space beside the observation_space")
        spec.update(observation_space=space_to_json(observation_space),
                    action_space=space_to_json(action_space))
        if wrappers:
            spec["wrappers"] = list(wrappers)
    if env_id != "Treasurehunt-v0":
        spec["env_id"] = env_id
    return spec


# --------------------------------------------------------------------------- observations as frames
def observation_kind(space: spaces.Space) -> str:
    """How an expert reads one observation of ``space``: ``"grid"`` (3-D, one-hot: a MultiBinary or
    integers in 0..1, channels first), ``"image"`` (any other 3-D Box, ``(H, W, C)`` or ``(C, H, W)``)
    or ``"vector"`` (anything flat, ``(D,)``)."""
    shape = tuple(space.shape or ())
    if len(shape) != 3:
        return "vector"
    if isinstance(space, spaces.MultiBinary):
        return "grid"
    return "grid" if space.dtype.kind in "iub" and float(np.max(space.high)) <= 1 else "image"


def is_channels_last(space: spaces.Space) -> bool:
    """Whether ``space`` is an image with its channels last: its smallest axis is not the first (the
    rule SB3 applies, here to one frame, where it holds; on a stack of frames more channels than
    pixels on a side would fool it)."""
    return observation_kind(space) == "image" and int(np.argmin(space.shape)) != 0


def network_frame_space(space: spaces.Space) -> spaces.Box:
    """One observation of ``space`` as the frame the network stacks: a `Box` (a MultiBinary becomes
    ``Box(0, 1, uint8)`` with its values unchanged, as `VecFrameStack` stacks only Boxes), an image
    channels first (``(H, W, C)`` -> ``(C, H, W)``); `ExpertLoadError` for any other space."""
    if isinstance(space, spaces.MultiBinary):
        return spaces.Box(0, 1, space.shape, dtype=np.uint8)
    if not isinstance(space, spaces.Box) or len(space.shape) not in (1, 3):
        raise ExpertLoadError(f"observations {space} are not a vector, a grid (C, V, V) or an image: SB3 "
                              "experts here read those as a Box or MultiBinary")
    if is_channels_last(space):
        return spaces.Box(np.moveaxis(space.low, -1, 0), np.moveaxis(space.high, -1, 0), dtype=space.dtype)
    return space


def network_frames(obs: np.ndarray, space: spaces.Space) -> np.ndarray:
    """A batch ``(B, *space.shape)`` as the frames of `network_frame_space` ``(B, *frame shape)``."""
    return np.ascontiguousarray(np.moveaxis(obs, -1, 1)) if is_channels_last(space) else obs


def stack_order(frame_space: spaces.Box) -> str | None:
    """`VecFrameStack`'s ``channels_order`` for frames of ``frame_space`` (`network_frame_space`):
    ``"first"`` for grids and images (channels first by then), None (SB3's default: the last
    axis) for vectors."""
    return "first" if len(frame_space.shape) == 3 else None


def stacked_space(space: spaces.Space, frame_stack: int) -> spaces.Box:
    """The network's observation space: ``frame_stack`` frames of ``space``'s `network_frame_space`
    stacked as `VecFrameStack` stacks them (``(C * k, H, W)``, or ``(D * k,)``)."""
    from stable_baselines3.common.vec_env.stacked_observations import StackedObservations

    frame = network_frame_space(space)
    return StackedObservations(1, int(frame_stack), frame, stack_order(frame)).stacked_observation_space


def recorded_spaces(spec: dict[str, Any]) -> tuple[spaces.Space, spaces.Space]:
    """``(one observation's space, action space)`` an expert's ``rpg_expert`` record describes: its
    JSON spaces (any env), or for the project's games (records with ``view_shape``) their one-hot
    views and the game's actions."""
    if "observation_space" in spec:
        return space_from_json(spec["observation_space"]), space_from_json(spec["action_space"])
    channels, side, _ = spec["view_shape"]
    return spaces.Box(0, 1, (channels, side, side), dtype=np.uint8), spaces.Discrete(vocabulary().num_actions)


def policy_kwargs_from_net(net: dict[str, Any], memory: dict[str, Any] | None = None,
                           observation_space: spaces.Space | None = None) -> dict[str, Any]:
    """SB3 ``policy_kwargs`` for a ``net`` config section (see `rpg_env.experts.config.NetConfig`);
    with ``memory`` (the config's memory section), RecurrentPPO's LSTM size too.

    ``observation_space`` is the network's input (`stacked_space`); it decides how images are read.
    Byte images (uint8 in 0..255, SB3's `is_image_space`) are scaled to [0, 1] by SB3 itself
    (``normalize_images``) before any extractor sees them, so GridCNN, NatureCNN and GridMLP all read
    [0, 1]; one-hot grids and vectors are read as they are (``normalize_images`` stays False: the
    shipped experts were trained so). ``cnn`` on an image of at least `NATURE_CNN_SIDE` pixels a
    side is SB3's NatureCNN, otherwise GridCNN; ``auto`` is cnn for a 3-D space, mlp for a flat one.
    """
    from stable_baselines3.common.preprocessing import is_image_space

    from rpg_env.policies.features import EXTRACTOR_CLASSES  # imports torch and SB3: only when needed

    shape = tuple(observation_space.shape or ()) if observation_space is not None else ()
    extractor = net.get("extractor", "cnn")
    if extractor == "auto":
        extractor = "mlp" if observation_space is not None and len(shape) != 3 else "cnn"
    if extractor not in EXTRACTOR_CLASSES:
        raise ExpertLoadError(f"unknown features extractor {extractor!r}; known: {sorted(EXTRACTOR_CLASSES)}")
    byte_images = observation_space is not None and is_image_space(observation_space)
    extractor_class = EXTRACTOR_CLASSES[extractor]
    # flatten is SB3's MlpPolicy input: its size is the observation's, it takes no features_dim
    fe_kwargs: dict[str, Any] = {} if extractor == "flatten" else {
        "features_dim": int(net.get("features_dim", 64))}
    wide_image = observation_space is not None and observation_kind(observation_space) == "image" \
        and min(shape[1:]) >= NATURE_CNN_SIDE
    if extractor == "cnn" and wide_image:
        from stable_baselines3.common.torch_layers import NatureCNN

        extractor_class = NatureCNN
        fe_kwargs["normalized_image"] = not byte_images  # other images: skip its uint8 0..255 check
    elif extractor == "cnn":
        fe_kwargs["channels"] = tuple(int(c) for c in net.get("channels", (32, 16)))
    kwargs = {"features_extractor_class": extractor_class, "features_extractor_kwargs": fe_kwargs,
              "net_arch": [int(h) for h in net.get("net_arch", [])], "normalize_images": byte_images}
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
    try:
        custom = _custom_objects(data, spec, cls)
        model = cls.load(path, device=device, custom_objects=custom)
    except ExpertLoadError:
        raise
    except InputError as err:  # a damaged space description in the record
        raise ExpertLoadError(f"{path}: {err}") from err
    except RuntimeError as err:  # weights that do not fit the rebuilt network
        raise ExpertLoadError(f"{path}: weights do not match the network described in its "
                              f"record ({spec['net']}): {err}") from err
    model.rpg_expert = spec
    return model


def _custom_objects(data: dict[str, Any], spec: dict[str, Any], cls: type) -> dict[str, Any]:
    """Every cloudpickled entry of the zip's ``data``, rebuilt from the JSON record ``spec`` (None
    where inference needs nothing), so SB3 unpickles nothing."""
    single, action_space = recorded_spaces(spec)
    obs_space = stacked_space(single, spec["frame_stack"])
    custom: dict[str, Any] = {key: None for key, value in data.items()
                              if isinstance(value, dict) and ":serialized:" in value}
    custom.update(
        policy_class=cls.policy_aliases[spec["policy"]],
        observation_space=obs_space,
        action_space=action_space,
        policy_kwargs=policy_kwargs_from_net(spec["net"], spec.get("memory")
                                             if spec["algo"] == "recurrent-ppo" else None, obs_space),
        lr_schedule=lambda _: 0.0,
    )
    if "learning_rate" in custom:  # a schedule (lin_...) is pickled; inference needs no rate
        custom["learning_rate"] = 0.0
    if spec["algo"] == "dqn":
        custom["buffer_size"] = 1  # inference only: do not allocate the replay buffer
        custom["train_freq"] = 1
    if spec["algo"] in ("ppo", "recurrent-ppo"):
        custom.update(clip_range=0.2, clip_range_vf=None)
    return custom


def describe_shape(shape: tuple[int, ...]) -> str:
    side = shape[-1]
    radius = f"vision_radius {(side - 1) // 2}" if side % 2 == 1 else "no vision radius"
    return f"{tuple(int(s) for s in shape)} ({radius})"


def _observation_layout(model: Any, spec: dict[str, Any], frame_stack: int | None) -> tuple[spaces.Box, int]:
    """``(one observation's space, frames stacked)`` of ``model``: from its record's JSON spaces, or
    (the project's views, or a model without a record) its ``(C * k, V, V)`` input of C-channel views."""
    shape = tuple(model.observation_space.shape)
    if "observation_space" in spec:
        single = space_from_json(spec["observation_space"])
        frames = int(frame_stack or spec["frame_stack"])
        if tuple(stacked_space(single, frames).shape) != shape:
            raise ExpertLoadError(f"{frames} frames of {single} do not make the model's observation shape "
                                  f"{shape}")
        return single, frames
    channels = int(spec["view_shape"][0]) if "view_shape" in spec else vocabulary().num_kinds
    if len(shape) != 3 or shape[0] % channels:
        raise ExpertLoadError(f"model observation shape {shape} is not a stack of ({channels}, V, V) "
                              f"one-hot views")
    frames = int(frame_stack or spec.get("frame_stack") or shape[0] // channels)
    if frames * channels != shape[0]:
        raise ExpertLoadError(f"frame_stack={frames} does not fit the model's observation shape {shape}")
    return spaces.Box(0, 1, (channels, shape[1], shape[2]), dtype=np.uint8), frames


class SB3Policy(BatchPolicy):
    """A trained SB3 model acting on ``(B, *obs_shape)`` observations, frame-stacking per row
    (``(B, C, V, V)`` uint8 views in the project's games).

    :param model: an SB3 DQN/PPO/RecurrentPPO trained on stacked frames (module docstring).
    :param deterministic: greedy actions (argmax Q / mode of the policy); otherwise DQN acts
        epsilon-greedily with ``epsilon`` and PPO samples, both from the generator given to `seed`.
    :param frame_stack: frames the model stacks; read from the model's ``rpg_expert`` record,
        else inferred as ``channels // 6``.
    :param epsilon: exploration rate of a stochastic DQN.

    Actions are ``(B,)`` int64 for a Discrete action space, ``(B, K)`` for a MultiDiscrete one.
    """

    def __init__(self, model: Any, deterministic: bool = True, frame_stack: int | None = None,
                 epsilon: float = 0.05, policy_id: str | None = None) -> None:
        super().__init__()
        self.model = model
        self.deterministic = deterministic
        self.epsilon = float(epsilon)
        spec = getattr(model, "rpg_expert", None) or {}
        #: One observation as the env gives it, e.g. ``(C, V, V)``, ``(H, W, C)`` or ``(D,)``.
        self.single_space, self.frame_stack = _observation_layout(model, spec, frame_stack)
        self.view_shape = tuple(int(s) for s in self.single_space.shape)
        self._frame_space = network_frame_space(self.single_space)
        self._project_views = "observation_space" not in spec  # the project's games (or no record)
        #: The choices of each action dimension; ``num_actions``: a Discrete space's (None otherwise).
        self.action_dims = action_dims(model.action_space)
        multi = isinstance(model.action_space, spaces.MultiDiscrete)
        self.num_actions = None if multi else int(model.action_space.n)
        self._action_shape = (len(self.action_dims),) if multi else ()
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
        """Raise `ExpertLoadError` naming both shapes unless ``shape`` is the shape of one observation
        the model was trained on (the project's views: with their vision radius)."""
        shape = tuple(int(s) for s in shape)
        if shape == self.view_shape:
            return
        if self._project_views:
            raise ExpertLoadError(
                f"expert {self.policy_id!r} was trained on views {describe_shape(self.view_shape)} "
                f"but the environment gives {describe_shape(shape)}; use an environment with "
                f"vision_radius={(self.view_shape[-1] - 1) // 2} or an expert trained for this view")
        env_id = self.rpg_expert.get("env_id", "its env")
        raise ExpertLoadError(f"expert {self.policy_id!r} was trained on observations of shape "
                              f"{self.view_shape} ({env_id}) but the environment gives {shape}; use the "
                              f"environment it was trained in ({env_id}, with its wrappers)")

    def act(self, obs: np.ndarray, episode_start: np.ndarray | None = None) -> np.ndarray:
        """``obs`` ``(B, *obs_shape)`` -> actions ``(B,)`` (Discrete) or ``(B, K)`` (MultiDiscrete)."""
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
            return np.asarray(actions, dtype=np.int64).reshape(batch, *self._action_shape)
        return self._sample(stacked)

    def stack(self, obs: np.ndarray, episode_start: np.ndarray | None = None) -> np.ndarray:
        """Push ``obs`` ``(B, *obs_shape)`` onto the per-row stacks; return the network's input
        ``(B, C * k, H, W)`` (an image channels first) or ``(B, D * k)``, as `VecFrameStack` gives it.

        Rows flagged in ``episode_start`` are cleared first (older frames read as zeros), as
        `VecFrameStack` does after a ``done``; the first call, or a new batch size, starts all rows.
        """
        obs = np.asarray(obs)
        if obs.ndim != 1 + len(self.view_shape):
            raise ValueError(f"SB3Policy needs a batch (B, {', '.join(map(str, self.view_shape))}), got "
                             f"shape {obs.shape}")
        self.check_view_shape(obs.shape[1:])
        frames = network_frames(obs, self.single_space)
        batch = len(obs)
        if self._stack is None or len(self._stack.stacked_obs) != batch:
            from stable_baselines3.common.vec_env.stacked_observations import StackedObservations

            self._stack = StackedObservations(batch, self.frame_stack, self._frame_space,
                                              stack_order(self._frame_space))
            return self._stack.reset(frames).copy()
        starts = np.zeros(batch, bool) if episode_start is None else np.asarray(episode_start, bool)
        if starts.shape != (batch,):
            raise ValueError(f"episode_start must have shape ({batch},), got {starts.shape}")
        with warnings.catch_warnings():
            # SB3 warns that a done row has no terminal_observation: only VecFrameStack's infos need it.
            warnings.filterwarnings("ignore", message="VecFrameStack wrapping a VecEnv without terminal")
            stacked, _ = self._stack.update(frames, starts, [{} for _ in range(batch)])
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
        return self._choose(dist, self.deterministic, np.float64)

    def greedy_on_frames(self, frames: np.ndarray) -> np.ndarray:
        """The greedy action ``(B,)`` (``(B, K)`` for MultiDiscrete) on explicit frame stacks
        ``(B, k, *obs_shape)``, oldest first, frames before an episode's start all zeros: what `act`
        does with its own stacks (same layout), for callers that build stacks themselves, e.g. with a
        predicted newest frame. Stateless: `act`'s stacks are untouched."""
        if self._is_recurrent:
            raise ExpertLoadError(f"expert {self.policy_id!r} is recurrent: its action depends on its whole "
                                  f"episode, not on a stack of frames")
        frames = np.asarray(frames)
        if frames.ndim != 2 + len(self.view_shape) or frames.shape[1] != self.frame_stack:
            raise ValueError(f"frames must be (B, {self.frame_stack}, {', '.join(map(str, self.view_shape))})"
                             f", got {frames.shape}")
        self.check_view_shape(frames.shape[2:])
        batch = len(frames)
        each = network_frames(frames.reshape(-1, *self.view_shape), self.single_space)  # (B * k, *frame)
        # Frames are stacked along their first axis, oldest first, as StackedObservations does.
        stacked = each.reshape(batch, -1, *each.shape[2:]).astype(self._frame_space.dtype)
        actions, _ = self.model.predict(stacked, deterministic=True)
        return np.asarray(actions, dtype=np.int64).reshape(batch, *self._action_shape)

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
            dist = self.model.policy.get_distribution(obs_t)
        return self._choose(dist, False, np.float32)

    def _choose(self, dist: Any, greedy: bool, dtype: type) -> np.ndarray:
        """Actions from an SB3 distribution: the likeliest or drawn with `sample_actions` from this
        policy's generator, one categorical per action dimension in order. ``dtype``: the precision
        of the probabilities drawn from (kept per caller, so seeded draws stay what they were)."""
        parts = dist.distribution if isinstance(dist.distribution, list) else [dist.distribution]
        columns = []
        for part in parts:
            probs = part.probs.cpu().numpy().astype(dtype)
            columns.append(probs.argmax(axis=1).astype(np.int64) if greedy
                           else sample_actions(probs, self.rng))
        return np.stack(columns, axis=1) if self._action_shape else columns[0]
