"""A TransformerXL actor-critic over an episodic memory (seed 002), and `TrXLPolicy`, a trained
one as a batched `BatchPolicy`.

The memory is a sliding window of the last ``memory_length`` steps of the episode: at every step
each transformer block's *input* is kept, and the next steps' queries at that block attend to it.
One step of the network::

    obs (B, *obs_shape) --encoder--> h0 (B, D)  (+ an embedding of the previous action, if used)
    for block i:  h_{i+1} = Block_i(query=h_i, keys/values=[memory_i (B, L, D); h_i], age positions)
    h_N --Linear+ReLU--> logits (B, sum of the action dimensions' choices), value (B,)
    (``input_layer``: a Linear+ReLU after the encoder; ``separate_heads``: the value its own Linear+ReLU)
    returns also the new memory entries [h_0 .. h_{N-1}] (B, N, D)

The encoder follows the observation (`encoder_kind`): a one-hot grid ``(C, V, V)`` goes through
`GridCNN` (3x3 convolutions at full resolution), an image through the same CNN when it is small
and through SB3's `NatureCNN` from 36 pixels on (scaled to [0, 1] when its pixels are bytes), a
vector through one linear layer. Actions are one `Discrete` or a flat `MultiDiscrete`: one
categorical per dimension over its slice of the logits (`ActionHeads`), as seed 002 does.

Slots of the window that precede the episode's start (or are older than it) are masked out, so
the first step of an episode sees only itself. Training recomputes every step of a batch from the
windows stored at collection time, as seed 002's reference does (the stored memory is not
recomputed with the newest weights); that makes each sample one independent forward pass.

With ``previous_action`` the network also reads the action it took last (a learned vector per
action, and one for "none" at an episode's first step): the memory then holds where the agent
went, not only what it saw, which views alone cannot tell in an open room (a common input of
memory agents; seed 002's reference does without it).

Positions are ages (0 = this step, 1 = the step before, ...): ``relative`` adds a sinusoidal
encoding of the age, ``learned`` a learned vector per age, ``none`` nothing. ``layer_norm`` is
``pre`` (the identity-map reordering) or ``post``; ``gtrxl`` replaces both residual sums by GRU
gates (Parisotto et al. 2020) whose update bias starts at ``gtrxl_bias``.

Saved files are zips with the same JSON ``data`` record as the SB3 experts' (``rpg_expert``, with
``"algo": "trxl-ppo"``) and the weights as a torch state dict, read with ``weights_only=True``:
nothing is unpickled.
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.nn import functional as F

from rpg_base.errors import InputError
from rpg_env.policies.action_heads import ActionHeads
from rpg_env.policies.base import BatchPolicy
from rpg_env.policies.features import GridCNN, GridMLP
from rpg_env.policies.sb3 import NATURE_CNN_SIDE, is_channels_last, observation_kind

TRXL_ALGO = "trxl-ppo"
POSITIONAL_ENCODINGS = ("relative", "learned", "none")
LAYER_NORMS = ("pre", "post")
#: How the network reads an observation: a one-hot grid, an image, or a vector (`encoder_kind`).
ENCODERS = ("grid", "image", "vector")
WEIGHTS_ENTRY = "policy.pth"


@dataclass(frozen=True)
class TrXLShape:
    """Everything that fixes the network's parameters (saved with the weights)."""

    obs_shape: tuple[int, ...]  # (C, V, V) grid, (H, W, C) or (C, H, W) image, (D,) vector
    action_dims: tuple[int, ...]  # the choices of each action dimension: (A,) for Discrete(A)
    channels: tuple[int, ...] = (32, 16)
    embed_dim: int = 64
    num_blocks: int = 2
    num_heads: int = 4
    memory_length: int = 16
    positional_encoding: str = "relative"
    layer_norm: str = "pre"
    gtrxl: bool = False
    gtrxl_bias: float = 0.0
    hidden_size: int = 128
    previous_action: bool = True
    encoder: str = "grid"
    obs_scale: float = 1.0  # 1/255 for images of bytes
    input_layer: bool = False  # seed 002's embedding: Linear+ReLU between the encoder and the memory
    separate_heads: bool = False  # a hidden layer each for the policy and the value (seed 002's)

    def __post_init__(self) -> None:
        if self.positional_encoding not in POSITIONAL_ENCODINGS:
            raise ValueError(f"positional_encoding must be one of {POSITIONAL_ENCODINGS}, "
                             f"got {self.positional_encoding!r}")
        if self.layer_norm not in LAYER_NORMS:
            raise ValueError(f"layer_norm must be one of {LAYER_NORMS}, got {self.layer_norm!r}")
        if self.embed_dim % self.num_heads:
            raise ValueError(f"embed_dim ({self.embed_dim}) must be a multiple of num_heads "
                             f"({self.num_heads})")
        if self.encoder not in ENCODERS:
            raise ValueError(f"encoder must be one of {ENCODERS}, got {self.encoder!r}")
        for name in ("embed_dim", "num_blocks", "num_heads", "memory_length", "hidden_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.action_dims or min(self.action_dims) < 1:
            raise ValueError(f"action_dims must be one or more choice counts >= 1, got {self.action_dims}")

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> TrXLShape:
        """The shape a saved record describes (records before any-env support name ``view_shape`` and
        ``num_actions``: a grid and one Discrete action)."""
        known = {k: v for k, v in record.items() if k in cls.__dataclass_fields__}
        known["obs_shape"] = tuple(int(s) for s in record.get("obs_shape", record.get("view_shape", ())))
        dims = record.get("action_dims", [record.get("num_actions", 0)])
        known["action_dims"] = tuple(int(n) for n in dims)
        known["channels"] = tuple(int(c) for c in known.get("channels", ()))
        return cls(**known)


def encoder_kind(space: spaces.Space, extractor: str = "auto") -> tuple[str, float]:
    """``(encoder, obs_scale)`` for observations of ``space`` (`rpg_env.policies.sb3.observation_kind`:
    a one-hot grid, an image, or a vector), an image of bytes scaled by 1/255; ``extractor="mlp"``
    reads any of them flat."""
    kind = "vector" if extractor == "mlp" else observation_kind(space)
    byte_pixels = kind == "image" and space.dtype == np.uint8 and float(np.max(space.high)) > 1
    return kind, (1.0 / 255.0 if byte_pixels else 1.0)


class ImageEncoder(nn.Module):
    """``(B, H, W, C)`` or ``(B, C, H, W)`` image (channels: the smallest axis) -> ``(B, D)``."""

    def __init__(self, shape: TrXLShape) -> None:
        super().__init__()
        self.channels_last = is_channels_last(spaces.Box(0, 255, shape.obs_shape, dtype=np.uint8))
        chw = (shape.obs_shape[2], *shape.obs_shape[:2]) if self.channels_last else tuple(shape.obs_shape)
        space = spaces.Box(0.0, 1.0, chw, dtype=np.float32)
        if min(chw[1:]) >= NATURE_CNN_SIDE:
            from stable_baselines3.common.torch_layers import NatureCNN

            self.cnn: nn.Module = NatureCNN(space, features_dim=shape.embed_dim, normalized_image=True)
        else:
            self.cnn = GridCNN(space, channels=shape.channels, features_dim=shape.embed_dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.cnn(images.permute(0, 3, 1, 2) if self.channels_last else images)


def observation_encoder(shape: TrXLShape) -> nn.Module:
    """The encoder of `encoder_kind`'s ``shape.encoder`` (module docstring)."""
    if shape.encoder == "grid":
        return GridCNN(spaces.Box(0, 1, shape.obs_shape, dtype=np.uint8), channels=shape.channels,
                       features_dim=shape.embed_dim)
    if shape.encoder == "image":
        return ImageEncoder(shape)
    space = spaces.Box(-np.inf, np.inf, shape.obs_shape, dtype=np.float32)
    return GridMLP(space, features_dim=shape.embed_dim)


def orthogonal_relu(inputs: int, outputs: int) -> nn.Sequential:
    """Linear+ReLU with orthogonal weights of gain sqrt(2), as seed 002 initialises its layers."""
    layer = nn.Linear(inputs, outputs)
    nn.init.orthogonal_(layer.weight, gain=math.sqrt(2))
    return nn.Sequential(layer, nn.ReLU())


def sinusoidal_positions(length: int, dim: int) -> torch.Tensor:
    """``(length, dim)`` sinusoidal encodings of positions ``0..length-1`` (Vaswani et al.)."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    rate = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10_000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate[: dim // 2])
    return table


class GRUGate(nn.Module):
    """GTrXL's gate ``g(x, y)``: a GRU cell's update of the residual stream ``x`` by ``y``."""

    def __init__(self, dim: int, bias: float) -> None:
        super().__init__()
        self.reset = nn.Linear(2 * dim, dim, bias=False)
        self.update = nn.Linear(2 * dim, dim, bias=False)
        self.candidate_y = nn.Linear(dim, dim, bias=False)
        self.candidate_x = nn.Linear(dim, dim, bias=False)
        self.update_bias = nn.Parameter(torch.full((dim,), float(bias)))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        xy = torch.cat([x, y], dim=-1)
        r = torch.sigmoid(self.reset(xy))
        z = torch.sigmoid(self.update(xy) - self.update_bias)
        h = torch.tanh(self.candidate_y(y) + self.candidate_x(r * x))
        return (1 - z) * x + z * h


class Residual(nn.Module):
    """``x + y``: the plain TrXL residual, with `GRUGate`'s signature."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


class MemoryBlock(nn.Module):
    """One transformer block: the step's query attends to its block's memory window and itself."""

    def __init__(self, shape: TrXLShape) -> None:
        super().__init__()
        dim = shape.embed_dim
        self.pre_norm = shape.layer_norm == "pre"
        self.norm_query = nn.LayerNorm(dim)
        self.norm_memory = nn.LayerNorm(dim) if self.pre_norm else nn.Identity()
        self.norm_ff = nn.LayerNorm(dim)
        self.attention = nn.MultiheadAttention(dim, shape.num_heads, batch_first=True)
        self.feed_forward = nn.Sequential(nn.Linear(dim, 4 * dim), nn.ReLU(), nn.Linear(4 * dim, dim))
        self.gate_attention = GRUGate(dim, shape.gtrxl_bias) if shape.gtrxl else Residual()
        self.gate_ff = GRUGate(dim, shape.gtrxl_bias) if shape.gtrxl else Residual()

    def forward(self, query: torch.Tensor, window: torch.Tensor, itself: torch.Tensor,
                ignore: torch.Tensor) -> torch.Tensor:
        """``query`` (B, D) the step's input, ``window`` (B, L, D) its memory window as
        `window_keys` gives it, ``itself`` (B, D) the step's own key (the input at age 0), ``ignore``
        (B, L) True where a window slot is outside the episode -> (B, D)."""
        if self.pre_norm:
            attended = self.attend(self.norm_query(query), window, self.window_keys(itself), ignore)
            h = self.gate_attention(query, attended)
            return self.gate_ff(h, self.feed_forward(self.norm_ff(h)))
        h = self.norm_query(self.gate_attention(query, self.attend(query, window, itself, ignore)))
        return self.norm_ff(self.gate_ff(h, self.feed_forward(h)))

    def window_keys(self, window: torch.Tensor) -> torch.Tensor:
        """The part of the keys of a window (..., D) (the stored entries plus their ages) that holds
        no weight: normalized without the norm's scale and shift (pre-norm), or as it is (post-norm).
        It can be computed once per rollout and read by every epoch (`TrXLActorCritic.window_keys`)."""
        if self.pre_norm:
            return F.layer_norm(window, window.shape[-1:], eps=self.norm_memory.eps)
        return window

    def attend(self, query: torch.Tensor, window: torch.Tensor, itself: torch.Tensor,
               ignore: torch.Tensor) -> torch.Tensor:
        """``self.attention``'s multi-head attention of one query per row over its window and the
        step itself: ``query`` (B, D), ``window`` (B, L, D) and ``itself`` (B, D) as `window_keys`
        gives them, ``ignore`` (B, L) -> (B, D).

        The sums of `nn.MultiheadAttention` with its weights (saved files stay the same), taken in
        another order: with one query, the query is carried back through the key projection (and
        the memory norm's scale) instead of projecting every slot of the window, and the values are
        mixed before their projection instead of after. That is (L + 1) times fewer products for
        the keys and values; the key bias and the norm's shift add the same score to every slot and
        drop out of the softmax."""
        mha = self.attention
        batch, slots, dim = window.shape
        heads = mha.num_heads
        per_head = dim // heads
        w_q, w_k, w_v = mha.in_proj_weight.split(dim)
        b_q, _, b_v = mha.in_proj_bias.split(dim)
        q = F.linear(query, w_q, b_q).view(batch, heads, per_head) * per_head ** -0.5
        q_keys = torch.einsum("bhd,hdk->bhk", q, w_k.view(heads, per_head, dim))  # (B, H, D)
        if self.pre_norm:
            q_keys = q_keys * self.norm_memory.weight
        window_scores = torch.bmm(window, q_keys.transpose(1, 2))
        window_scores = window_scores.masked_fill(ignore[:, :, None], float("-inf"))
        own_score = (itself[:, None] * q_keys).sum(dim=-1)[:, None]
        scores = torch.cat([window_scores, own_score], dim=1)  # (B, L + 1, H)
        weights = torch.softmax(scores, dim=1)
        mixed = (torch.bmm(weights[:, :slots].transpose(1, 2), window)
                 + weights[:, slots, :, None] * itself[:, None])
        if self.pre_norm:  # the values' inputs were the normalized keys with the norm's scale and shift
            mixed = torch.addcmul(self.norm_memory.bias, mixed, self.norm_memory.weight)
        values = torch.einsum("bhk,hdk->bhd", mixed, w_v.view(heads, per_head, dim))
        values = values + b_v.view(heads, per_head)
        return mha.out_proj(values.reshape(batch, dim))


class TrXLActorCritic(nn.Module):
    """The network of the module docstring: one environment step per call, batched over worlds."""

    def __init__(self, shape: TrXLShape) -> None:
        super().__init__()
        self.shape = shape
        self.encoder = observation_encoder(shape)
        if shape.encoder != "vector":  # the convolutions run faster on channels-last images here
            self.encoder.to(memory_format=torch.channels_last)
        self.actions = ActionHeads(shape.action_dims)
        # Dimension k's choices take rows offset[k] .. offset[k] + n_k; row offset[k] + n_k is "no
        # previous action" (an episode's first step).
        offsets = np.concatenate([[0], np.cumsum([n + 1 for n in shape.action_dims])[:-1]])
        self.register_buffer("action_offsets", torch.as_tensor(offsets, dtype=torch.int64), persistent=False)
        rows = sum(shape.action_dims) + len(shape.action_dims)
        self.action_embedding = nn.Embedding(rows, shape.embed_dim) if shape.previous_action else None
        self.blocks = nn.ModuleList(MemoryBlock(shape) for _ in range(shape.num_blocks))
        ages = shape.memory_length + 1
        if shape.positional_encoding == "learned":
            self.age_embedding = nn.Parameter(torch.randn(ages, shape.embed_dim) * 0.02)
        else:
            table = (sinusoidal_positions(ages, shape.embed_dim) if shape.positional_encoding == "relative"
                     else torch.zeros(ages, shape.embed_dim))
            self.register_buffer("age_embedding", table, persistent=False)
        self.input_layer = orthogonal_relu(shape.embed_dim, shape.embed_dim) if shape.input_layer else None
        self.hidden = nn.Sequential(nn.Linear(shape.embed_dim, shape.hidden_size), nn.ReLU())
        self.value_hidden = (orthogonal_relu(shape.embed_dim, shape.hidden_size) if shape.separate_heads
                             else None)
        self.policy_head = nn.Linear(shape.hidden_size, sum(shape.action_dims))
        self.value_head = nn.Linear(shape.hidden_size, 1)
        if shape.separate_heads:  # seed 002's gains; its biases keep torch's initialisation
            nn.init.orthogonal_(self.hidden[0].weight, gain=math.sqrt(2))
            nn.init.orthogonal_(self.policy_head.weight, gain=0.1)
            nn.init.orthogonal_(self.value_head.weight, gain=1.0)
        else:  # small initial logits: a near-uniform first policy (as SB3 initialises its action net)
            nn.init.orthogonal_(self.policy_head.weight, gain=0.01)
            nn.init.zeros_(self.policy_head.bias)

    def forward(self, obs: torch.Tensor, previous: torch.Tensor, memory: torch.Tensor | None,
                valid: torch.Tensor, keys: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``obs`` (B, *obs_shape) as stored (any dtype), ``previous`` (B, K) int64 the last action
        (dimension k's ``action_dims[k]``: none), ``memory`` (B, N, L, D) (per block, oldest slot
        first, the newest last), ``valid`` (B, L) bool, ``keys``: `window_keys` of ``memory`` if
        already computed (then ``memory`` may be None) -> logits (B, sum(action_dims)), value (B,),
        new memory entries (B, N, D)."""
        x = obs.float() * self.shape.obs_scale if self.shape.obs_scale != 1.0 else obs.float()
        if self.shape.encoder == "grid":
            x = x.contiguous(memory_format=torch.channels_last)
        h = self.encoder(x)
        if self.input_layer is not None:
            h = self.input_layer(h)
        if self.action_embedding is not None:
            if previous.dim() == 1:  # one Discrete action: (B,) reads as (B, 1)
                previous = previous[:, None]
            h = h + self.action_embedding(previous + self.action_offsets).sum(dim=1)
        if keys is None:
            keys = self.window_keys(memory)
        age_zero = self.age_embedding[0]
        entries = []
        for i, block in enumerate(self.blocks):
            entries.append(h)
            h = block(h, keys[:, i], h + age_zero, ~valid)
        hidden = self.hidden(h)
        value_hidden = hidden if self.value_hidden is None else self.value_hidden(h)
        return self.policy_head(hidden), self.value_head(value_hidden)[:, 0], torch.stack(entries, dim=1)

    def window_keys(self, memory: torch.Tensor) -> torch.Tensor:
        """``memory`` (B, N, L, D) with each slot's age added and each block's weight-free part of
        its keys taken (`MemoryBlock.window_keys`) -> (B, N, L, D). With fixed ages (relative or
        none) it holds no weight, so PPO's epochs share it: computed once per rollout, not once per
        epoch. Ages: the window's oldest slot is L steps old, its newest 1 (the step itself is 0)."""
        ages = self.age_embedding[1:].flip(0)  # (L, D), age L first
        return torch.stack([block.window_keys(memory[:, i] + ages) for i, block in enumerate(self.blocks)],
                           dim=1)

    @property
    def fixed_window_keys(self) -> bool:
        """Whether `window_keys` holds no weight (the ages are not learned), so it may be shared."""
        return self.shape.positional_encoding != "learned"


class EpisodicMemory:
    """The sliding windows of ``worlds`` parallel episodes: ``memory`` (W, N, L, D), ``valid``
    (W, L), and each world's last action ``previous`` (W, K) (``action_dims`` at an episode's start)."""

    def __init__(self, worlds: int, shape: TrXLShape, device: torch.device | str = "cpu") -> None:
        self.memory = torch.zeros(worlds, shape.num_blocks, shape.memory_length, shape.embed_dim,
                                  device=device)
        self.valid = torch.zeros(worlds, shape.memory_length, dtype=torch.bool, device=device)
        self.none = torch.as_tensor(shape.action_dims, dtype=torch.int64, device=device)
        self.previous = self.none.repeat(worlds, 1)

    def start(self, rows: np.ndarray | torch.Tensor) -> None:
        """Forget the windows of the worlds marked in ``rows`` (W,) bool: a new episode begins."""
        rows = torch.as_tensor(np.asarray(rows, dtype=bool)).to(self.valid.device)
        self.valid[rows] = False
        self.memory[rows] = 0.0
        self.previous[rows] = self.none

    def push(self, entries: torch.Tensor, actions: torch.Tensor) -> None:
        """Append every world's new entries (W, N, D) and actions (W, K), dropping the oldest slot."""
        self.memory = torch.cat([self.memory[:, :, 1:], entries[:, :, None]], dim=2)
        self.valid = torch.cat([self.valid[:, 1:], torch.ones_like(self.valid[:, :1])], dim=1)
        actions = torch.as_tensor(actions, dtype=torch.int64).to(self.valid.device, copy=True)
        self.previous = actions.reshape(len(self.valid), -1)


# --------------------------------------------------------------------------- files
def save_trxl(path: str | Path, model: TrXLActorCritic, record: dict[str, Any]) -> None:
    """Write ``model`` as a zip: ``data`` (JSON, ``{"rpg_expert": record}``) and its state dict."""
    buffer = io.BytesIO()
    state = model.state_dict()
    for name, tensor in state.items():  # a network trained on a GPU is saved as one on the CPU
        state[name] = tensor.cpu()
    torch.save(state, buffer)
    record = {**record, "net_shape": _json_shape(model.shape)}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("data", json.dumps({"rpg_expert": record}, indent=2))
        archive.writestr(WEIGHTS_ENTRY, buffer.getvalue())


def _json_shape(shape: TrXLShape) -> dict[str, Any]:
    data = asdict(shape)
    for name in ("obs_shape", "action_dims", "channels"):
        data[name] = list(data[name])
    return data


def load_trxl(path: str | Path, record: dict[str, Any] | None = None
              ) -> tuple[TrXLActorCritic, dict[str, Any]]:
    """The network and its ``rpg_expert`` record from a file `save_trxl` wrote (``record``: the
    already-read record, to skip reading it twice)."""
    from rpg_env.policies.sb3 import ExpertLoadError

    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            if record is None:
                record = json.loads(archive.read("data"))["rpg_expert"]
            weights = archive.read(WEIGHTS_ENTRY)
    except (zipfile.BadZipFile, KeyError, json.JSONDecodeError) as err:
        raise ExpertLoadError(f"{path} is not a TrXL-PPO expert ({err}); pass a model.zip written by "
                              f"`python -m rpg_env.experts train --algo trxl-ppo`") from err
    try:
        shape = TrXLShape.from_record(record["net_shape"])
        model = TrXLActorCritic(shape)
        model.load_state_dict(torch.load(io.BytesIO(weights), weights_only=True, map_location="cpu"))
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise ExpertLoadError(f"{path}: its TrXL weights do not match the network its record describes "
                              f"({err}); the file is damaged or from another version") from err
    model.eval()
    return model, record


class TrXLPolicy(BatchPolicy):
    """A trained `TrXLActorCritic` on ``(B, C, V, V)`` views, one memory window per batch row.

    :param model: the network.
    :param record: its ``rpg_expert`` record (algo, env, seed, ...), exposed as ``.rpg_expert``.
    :param deterministic: the likeliest action; otherwise sampled from the generator given to `seed`.
    """

    def __init__(self, model: TrXLActorCritic, record: dict[str, Any] | None = None,
                 deterministic: bool = True, policy_id: str = "trxl-ppo") -> None:
        super().__init__()
        self.model = model.eval()
        self.rpg_expert = dict(record or {})
        self.deterministic = deterministic
        self.policy_id = policy_id
        self.view_shape = tuple(model.shape.obs_shape)
        #: Each batch row's memory window (None: every row starts afresh at the next `act`).
        self.memory: EpisodicMemory | None = None

    @classmethod
    def load(cls, path: str | Path, deterministic: bool = True, record: dict[str, Any] | None = None,
             **kwargs: Any) -> TrXLPolicy:
        """The policy in ``path``; ``record``: its ``rpg_expert`` record if the caller read it already."""
        model, record = load_trxl(path, record)
        path = Path(path)
        name = path.parent.name if path.stem == "model" and path.parent.name else path.stem
        kwargs.setdefault("policy_id", f"trxl-{name}")
        return cls(model, record, deterministic=deterministic, **kwargs)

    def check_view_shape(self, shape: tuple[int, ...]) -> None:
        from rpg_env.policies.sb3 import ExpertLoadError, describe_shape

        if tuple(int(s) for s in shape) != self.view_shape:
            if self.model.shape.encoder != "grid" or len(shape) != 3:
                raise ExpertLoadError(f"expert {self.policy_id!r} was trained on observations of shape "
                                      f"{self.view_shape} but the environment gives {tuple(shape)}; use the "
                                      "environment it was trained in")
            raise ExpertLoadError(f"expert {self.policy_id!r} was trained on views "
                                  f"{describe_shape(self.view_shape)} but the environment gives "
                                  f"{describe_shape(tuple(shape))}; use the environment it was trained in")

    def reset(self) -> None:
        """Forget every row's memory (the next `act` starts all rows afresh)."""
        self.memory = None

    def act(self, obs: np.ndarray, episode_start: np.ndarray | None = None) -> np.ndarray:
        """``obs`` (B, *obs_shape) -> actions (B,) for a Discrete space, (B, K) for a MultiDiscrete one."""
        obs = np.asarray(obs)
        if obs.ndim != 1 + len(self.view_shape):
            raise InputError(f"TrXLPolicy needs a batch (B, *{self.view_shape}), got shape {obs.shape}")
        self.check_view_shape(obs.shape[1:])
        batch = len(obs)
        if self.memory is None or len(self.memory.valid) != batch:
            self.memory = EpisodicMemory(batch, self.model.shape)
        elif episode_start is not None:
            self.memory.start(np.asarray(episode_start, dtype=bool))
        memory = self.memory
        with torch.no_grad():
            logits, _, entries = self.model(torch.as_tensor(obs), memory.previous, memory.memory,
                                            memory.valid)
        heads = self.model.actions
        if self.deterministic:
            actions = heads.greedy(logits).numpy().astype(np.int64)
        else:
            actions = heads.sample_numpy(logits, self.rng)
        memory.push(entries, torch.as_tensor(actions))
        return actions[:, 0] if len(heads.dims) == 1 else actions
