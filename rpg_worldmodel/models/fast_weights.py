"""A self-referential weight matrix (SRWM, seed 003: Irie et al. 2022), the world model's
``model.layer="srwm"`` in place of the global attention across steps.

One matrix per head, ``W`` (R, dh) with ``R = 3 dh + 4`` rows, maps a token ``x`` (dh) to its
output ``y``, a query ``q``, a key ``k`` and four learning rates ``b``, and then rewrites itself
with them (the delta rule, keys and queries through a softmax ``phi``):

    y, q, k, b = W x                    # all read with W_{t-1}
    v, v_old   = W phi(q), W phi(k)     # what W would say at the query, and says at the key now
    W         += sigmoid(b) * (v - v_old) outer phi(k)

``sigmoid(b)`` has one rate per group of rows (those making y, q, k and b), so the matrix learns
how fast to change each part of itself. The slow weights are the starting matrix ``W_0``, learned
by gradient descent; the fast weights are what the sequence writes on top of them. The state
carried from one token to the next is ``W`` itself: (N, H, R, dh) whatever the length of the
past, so a step of imagination costs the same at turn 100 as at turn 1.

Two forms compute the same numbers (tested):

* `srwm_sequential`, the equations above token by token, rewriting ``W`` each time: the form
  imagination steps with (two tokens a step);
* `srwm_chunked`, the training form: ``W`` is written out once per chunk of tokens. Inside a
  chunk every token's product with the chunk's starting matrix is one batched matmul, and what
  the chunk's earlier tokens wrote is added as a sum of rank-one terms (``u_j phi(k_j)^T x``).
  Autograd then keeps one matrix per chunk instead of one per token. The matrix writes its own
  keys, so no form can skip the token loop (seed 003 runs it in a CUDA kernel); this one keeps
  the loop's work to vectors.
"""

from __future__ import annotations

import math

import torch
from torch import nn

#: Learning rates per head: one for each group of rows (the y, q, k and b rows).
NUM_RATES = 4


def _rows(head_dim: int) -> int:
    """Rows of a head's matrix: y, q and k (``head_dim`` each) and the four rates."""
    return 3 * head_dim + NUM_RATES


def row_groups(head_dim: int, device: torch.device | None = None) -> torch.Tensor:
    """(R,) long: the rate (0..3) each row of a head's matrix takes."""
    sizes = torch.tensor((head_dim, head_dim, head_dim, NUM_RATES), device=device)
    return torch.arange(NUM_RATES, device=device).repeat_interleave(sizes)


def _read(a: torch.Tensor, groups: torch.Tensor
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A matrix's answer ``a`` (..., R) split into y, phi(q), phi(k) (..., dh) and the rates of
    its row groups (``groups``, `row_groups`) expanded to every row (..., R)."""
    head_dim = (a.shape[-1] - NUM_RATES) // 3
    y, q, k, b = a.split((head_dim, head_dim, head_dim, NUM_RATES), -1)
    return y, q.softmax(-1), k.softmax(-1), torch.sigmoid(b)[..., groups]


def srwm_sequential(x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The SRWM over a sequence, token by token.

    ``x`` (N, H, L, dh) float; ``weights`` (N, H, R, dh) each head's matrix before the first
    token. Returns the outputs ``y`` (N, H, L, dh) and the matrices after the last token.
    """
    groups = row_groups(x.shape[-1], x.device)
    outputs = []
    for t in range(x.shape[2]):
        a = (weights @ x[:, :, t, :, None])[..., 0]                     # (N, H, R)
        y, q, k, rates = _read(a, groups)
        v, v_old = (weights @ torch.stack([q, k], -1)).unbind(-1)       # (N, H, R) each
        weights = weights + (rates * (v - v_old))[..., None] * k[..., None, :]
        outputs.append(y)
    return torch.stack(outputs, 2), weights


def srwm_chunked(x: torch.Tensor, weights: torch.Tensor, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`srwm_sequential`'s numbers with the matrix written out once per ``chunk`` tokens.

    Within a chunk started at matrix ``W_c``, the matrix before token i is ``W_c + sum_{j<i}
    u_j phi(k_j)^T`` (``u_j``: what token j wrote, its rates times ``v - v_old``), so its product
    with any vector z is ``W_c z + U^T (K z)`` over the chunk's earlier tokens.
    """
    groups = row_groups(x.shape[-1], x.device)
    outputs = []
    for start in range(0, x.shape[2], chunk):
        xs = x[:, :, start:start + chunk]                               # (N, H, C, dh)
        from_start = xs @ weights.transpose(-1, -2)                     # (N, H, C, R): W_c x_i
        written: list[torch.Tensor] = []                                # u_j (N, H, R)
        keys: list[torch.Tensor] = []                                   # phi(k_j) (N, H, dh)
        for i in range(xs.shape[2]):
            a = from_start[:, :, i]
            if written:
                u, kk = torch.stack(written, 2), torch.stack(keys, 2)   # (N, H, i, R), (N, H, i, dh)
                a = a + ((kk @ xs[:, :, i, :, None]) * u).sum(2)
            y, q, k, rates = _read(a, groups)
            probes = torch.stack([q, k], -1)                            # (N, H, dh, 2)
            answers = weights @ probes                                  # (N, H, R, 2)
            if written:
                answers = answers + u.transpose(-1, -2) @ (kk @ probes)
            v, v_old = answers.unbind(-1)
            written.append(rates * (v - v_old))
            keys.append(k)
            outputs.append(y)
        weights = weights + torch.stack(written, 2).transpose(-1, -2) @ torch.stack(keys, 2)
    return torch.stack(outputs, 2), weights


class SelfReferentialWeights(nn.Module):
    """The SRWM as a sequence layer: (N, L, D) -> (N, L, D) and the matrices after the last token.

    ``num_heads`` heads of ``D / num_heads`` channels each; the slow weights ``initial`` (H, R, dh)
    start every sequence, an output projection mixes the heads. ``state`` (N, H, R, dh): the
    matrices a previous call left (None: start from ``initial``). The recurrence runs in float32
    (or wider; under autocast too: bf16 rewrites of a matrix drift over a long dream).
    """

    def __init__(self, width: int, num_heads: int, chunk: int = 16):
        super().__init__()
        self.num_heads, self.head_dim, self.chunk = num_heads, width // num_heads, chunk
        self.initial = nn.Parameter(torch.randn(num_heads, _rows(self.head_dim), self.head_dim)
                                    / math.sqrt(self.head_dim))
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor, state: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        n, length, width = x.shape
        dtype = torch.promote_types(x.dtype, torch.float32)  # bf16 and fp16 run as float32
        heads = x.to(dtype).view(n, length, self.num_heads, self.head_dim).transpose(1, 2)
        weights = (self.initial.expand(n, -1, -1, -1) if state is None else state).to(dtype)
        with torch.autocast(x.device.type, enabled=False):
            # One step of imagination holds two tokens: the plain equations are the cheaper there.
            if length <= 2:
                y, weights = srwm_sequential(heads, weights)
            else:
                y, weights = srwm_chunked(heads, weights, self.chunk)
        y = y.transpose(1, 2).reshape(n, length, width).to(x.dtype)
        return self.proj(y), weights


class FastWeightBlock(nn.Module):
    """Pre-norm block of the SRWM and a 4x GELU MLP, both residual: the global block of
    ``model.layer="srwm"`` (the attention `Block`'s interface: ``past`` is the state it left)."""

    def __init__(self, width: int, num_heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.srwm = SelfReferentialWeights(width, num_heads)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor, past: tuple[torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor]]:
        """``x`` (N, L, D) in order (causal by construction) -> (N, L, D) and ``(weights,)``, the
        matrices (N, H, R, dh) after its last token, which a later call continues from."""
        out, weights = self.srwm(self.norm1(x), None if past is None else past[0])
        x = x + out
        return x + self.mlp(self.norm2(x)), (weights,)



def step_layers(blocks: nn.ModuleList, local: torch.Tensor, global_: torch.Tensor,
                past: tuple[tuple[torch.Tensor], ...]) -> tuple[torch.Tensor, torch.Tensor, tuple]:
    """The world model's layers (`StarBlock`) over one step (T = 1), each SRWM going on from its
    matrices in ``past`` (empty: from its slow weights); the tokens and every layer's new matrices."""
    carried = []
    for layer, block in enumerate(blocks):
        local, global_, weights = block(local, global_, None, past=past[layer] if past else None)
        carried.append(weights)
    return local, global_, tuple(carried)


class RecurrentOrder:
    """How steps know their order under the SRWM: by its recurrence, with no position tables
    (``rope`` gives none). Imagination carries the matrices (``caches_past``) and a prediction
    depends on the whole history (``context_steps``: longer than any game)."""

    caches_past = True
    context_steps = 10**9

    def rope(self, positions: torch.Tensor) -> None:
        return None

    def window_attention(self, num_steps: int, device: torch.device) -> dict:
        """Nothing: the SRWM reads its sequence in order, from its slow weights."""
        return {}
