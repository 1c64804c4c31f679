"""A decoder-only transformer language model (GPT-style), in plain PyTorch.

Token and learned position embeddings, ``layers`` pre-norm blocks of causal self-attention
(PyTorch's fused ``scaled_dot_product_attention``) and an MLP, a final norm and a language-model
head tied to the token embedding, trained on next-token cross-entropy. The shape (and
the initialisation) of the nanoGPT models, so the step costs what a small GPT's does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where each position sees only earlier ones."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, d))  # type: ignore[no-any-return]


class Block(nn.Module):
    """Pre-norm transformer block: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, d_model: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, mlp_ratio * d_model),
            nn.GELU(),
            nn.Linear(mlp_ratio * d_model, d_model),
        )

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))  # type: ignore[no-any-return]


class TokenTransformer(nn.Module):
    """Logits over ``vocab_size`` for every position of a (batch, seq_len) tensor of ids."""

    def __init__(
        self, vocab_size: int, seq_len: int, layers: int, d_model: int, heads: int, mlp_ratio: int
    ) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads, mlp_ratio) for _ in range(layers))
        self.ln = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.tok.weight  # weight tying, as GPT-2 does
        self.apply(_init)

    def forward(self, ids: Tensor) -> Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tok(ids) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))  # type: ignore[no-any-return]


def _init(module: nn.Module) -> None:
    # GPT-2's N(0, 0.02). PyTorch's default N(0, 1) embedding makes the first logits so peaked
    # that the softmax gradient is full of subnormal floats, which slow a CPU matmul ~100x.
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def next_token_loss(logits: Tensor, ids: Tensor, targets: Tensor | None) -> Tensor:
    """Cross-entropy on the next token: ``targets`` if given, else ``ids`` shifted by one."""
    if targets is None or targets.shape != ids.shape:
        logits, targets = logits[:, :-1], ids[:, 1:]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long())
