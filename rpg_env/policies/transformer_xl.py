"""A TransformerXL actor-critic over an episodic memory (seed 002), and `TrXLPolicy`, a trained
one as a batched `BatchPolicy`.

The memory is a sliding window of the last ``memory_length`` steps of the episode: at every step
each transformer block's *input* is kept, and the next steps' queries at that block attend to it.
One step of the network::

    view (B, C, V, V) --GridCNN--> h0 (B, D)  (+ an embedding of the previous action, if used)
    for block i:  h_{i+1} = Block_i(query=h_i, keys/values=[memory_i (B, L, D); h_i], age positions)
    h_N --Linear+ReLU--> logits (B, A), value (B,)
    returns also the new memory entries [h_0 .. h_{N-1}] (B, N, D)

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

from rpg_base.errors import InputError
from rpg_env.policies.base import BatchPolicy, sample_actions
from rpg_env.policies.features import GridCNN

TRXL_ALGO = "trxl-ppo"
POSITIONAL_ENCODINGS = ("relative", "learned", "none")
LAYER_NORMS = ("pre", "post")
WEIGHTS_ENTRY = "policy.pth"


@dataclass(frozen=True)
class TrXLShape:
    """Everything that fixes the network's parameters (saved with the weights)."""

    view_shape: tuple[int, int, int]  # (C, V, V)
    num_actions: int
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

    def __post_init__(self) -> None:
        if self.positional_encoding not in POSITIONAL_ENCODINGS:
            raise ValueError(f"positional_encoding must be one of {POSITIONAL_ENCODINGS}, "
                             f"got {self.positional_encoding!r}")
        if self.layer_norm not in LAYER_NORMS:
            raise ValueError(f"layer_norm must be one of {LAYER_NORMS}, got {self.layer_norm!r}")
        if self.embed_dim % self.num_heads:
            raise ValueError(f"embed_dim ({self.embed_dim}) must be a multiple of num_heads "
                             f"({self.num_heads})")
        for name in ("embed_dim", "num_blocks", "num_heads", "memory_length", "hidden_size", "num_actions"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> TrXLShape:
        known = {k: v for k, v in record.items() if k in cls.__dataclass_fields__}
        known["view_shape"] = tuple(int(s) for s in known["view_shape"])
        known["channels"] = tuple(int(c) for c in known.get("channels", ()))
        return cls(**known)


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

    def forward(self, query: torch.Tensor, keys: torch.Tensor, ignore: torch.Tensor) -> torch.Tensor:
        """``query`` (B, D), ``keys`` (B, L + 1, D) (the window, then the step), ``ignore``
        (B, L + 1) True where a slot is outside the episode -> (B, D)."""
        if self.pre_norm:
            normed = self.norm_memory(keys)  # one tensor as keys and values: one packed projection
            attended, _ = self.attention(self.norm_query(query)[:, None], normed, normed,
                                         key_padding_mask=ignore, need_weights=False)
            h = self.gate_attention(query, attended[:, 0])
            return self.gate_ff(h, self.feed_forward(self.norm_ff(h)))
        attended, _ = self.attention(query[:, None], keys, keys, key_padding_mask=ignore, need_weights=False)
        h = self.norm_query(self.gate_attention(query, attended[:, 0]))
        return self.norm_ff(self.gate_ff(h, self.feed_forward(h)))


class TrXLActorCritic(nn.Module):
    """The network of the module docstring: one environment step per call, batched over worlds."""

    def __init__(self, shape: TrXLShape) -> None:
        super().__init__()
        self.shape = shape
        space = spaces.Box(0, 1, shape.view_shape, dtype=np.uint8)
        self.encoder = GridCNN(space, channels=shape.channels, features_dim=shape.embed_dim)
        # Index num_actions: no previous action (an episode's first step).
        self.action_embedding = (nn.Embedding(shape.num_actions + 1, shape.embed_dim)
                                 if shape.previous_action else None)
        self.blocks = nn.ModuleList(MemoryBlock(shape) for _ in range(shape.num_blocks))
        ages = shape.memory_length + 1
        if shape.positional_encoding == "learned":
            self.age_embedding = nn.Parameter(torch.randn(ages, shape.embed_dim) * 0.02)
        else:
            table = (sinusoidal_positions(ages, shape.embed_dim) if shape.positional_encoding == "relative"
                     else torch.zeros(ages, shape.embed_dim))
            self.register_buffer("age_embedding", table, persistent=False)
        self.hidden = nn.Sequential(nn.Linear(shape.embed_dim, shape.hidden_size), nn.ReLU())
        self.policy_head = nn.Linear(shape.hidden_size, shape.num_actions)
        self.value_head = nn.Linear(shape.hidden_size, 1)
        # Small initial logits: a near-uniform first policy (as SB3 initialises its action net).
        nn.init.orthogonal_(self.policy_head.weight, gain=0.01)
        nn.init.zeros_(self.policy_head.bias)

    def forward(self, views: torch.Tensor, previous: torch.Tensor, memory: torch.Tensor,
                valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``views`` (B, C, V, V) float, ``previous`` (B,) int64 the last action (``num_actions``:
        none), ``memory`` (B, N, L, D) (per block, oldest slot first, the newest last), ``valid``
        (B, L) bool -> logits (B, A), value (B,), new memory entries (B, N, D)."""
        h = self.encoder(views)
        if self.action_embedding is not None:
            h = h + self.action_embedding(previous)
        # Ages: the window's oldest slot is L steps old, its newest 1; the step itself is 0.
        ages = self.age_embedding.flip(0)  # (L + 1, D), age L first
        ignore = torch.cat([~valid, torch.zeros_like(valid[:, :1])], dim=1)
        entries = []
        for i, block in enumerate(self.blocks):
            entries.append(h)
            keys = torch.cat([memory[:, i], h[:, None]], dim=1) + ages
            h = block(h, keys, ignore)
        hidden = self.hidden(h)
        return self.policy_head(hidden), self.value_head(hidden)[:, 0], torch.stack(entries, dim=1)


class EpisodicMemory:
    """The sliding windows of ``worlds`` parallel episodes: ``memory`` (W, N, L, D), ``valid``
    (W, L), and each world's last action ``previous`` (W,) (``num_actions`` at an episode's start)."""

    def __init__(self, worlds: int, shape: TrXLShape, device: torch.device | str = "cpu") -> None:
        self.memory = torch.zeros(worlds, shape.num_blocks, shape.memory_length, shape.embed_dim,
                                  device=device)
        self.valid = torch.zeros(worlds, shape.memory_length, dtype=torch.bool, device=device)
        self.none = shape.num_actions
        self.previous = torch.full((worlds,), self.none, dtype=torch.int64, device=device)

    def start(self, rows: np.ndarray | torch.Tensor) -> None:
        """Forget the windows of the worlds marked in ``rows`` (W,) bool: a new episode begins."""
        rows = torch.as_tensor(np.asarray(rows, dtype=bool)).to(self.valid.device)
        self.valid[rows] = False
        self.memory[rows] = 0.0
        self.previous[rows] = self.none

    def push(self, entries: torch.Tensor, actions: torch.Tensor) -> None:
        """Append every world's new entries (W, N, D) and actions (W,), dropping the oldest slot."""
        self.memory = torch.cat([self.memory[:, :, 1:], entries[:, :, None]], dim=2)
        self.valid = torch.cat([self.valid[:, 1:], torch.ones_like(self.valid[:, :1])], dim=1)
        self.previous = torch.as_tensor(actions, dtype=torch.int64).to(self.valid.device, copy=True)


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
    data["view_shape"] = list(shape.view_shape)
    data["channels"] = list(shape.channels)
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
        self.view_shape = tuple(model.shape.view_shape)
        self._memory: EpisodicMemory | None = None

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
            raise ExpertLoadError(f"expert {self.policy_id!r} was trained on views "
                                  f"{describe_shape(self.view_shape)} but the environment gives "
                                  f"{describe_shape(tuple(shape))}; use the environment it was trained in")

    def reset(self) -> None:
        """Forget every row's memory (the next `act` starts all rows afresh)."""
        self._memory = None

    def act(self, obs: np.ndarray, episode_start: np.ndarray | None = None) -> np.ndarray:
        obs = np.asarray(obs)
        if obs.ndim != 4:
            raise InputError(f"TrXLPolicy needs a batch (B, C, V, V), got shape {obs.shape}")
        self.check_view_shape(obs.shape[1:])
        batch = len(obs)
        if self._memory is None or len(self._memory.valid) != batch:
            self._memory = EpisodicMemory(batch, self.model.shape)
        elif episode_start is not None:
            self._memory.start(np.asarray(episode_start, dtype=bool))
        memory = self._memory
        with torch.no_grad():
            logits, _, entries = self.model(torch.as_tensor(obs, dtype=torch.float32), memory.previous,
                                            memory.memory, memory.valid)
        if self.deterministic:
            actions = logits.argmax(dim=1).numpy().astype(np.int64)
        else:
            actions = sample_actions(torch.softmax(logits, dim=1).numpy().astype(np.float64), self.rng)
        memory.push(entries, torch.as_tensor(actions))
        return actions
