"""A flat binary file of uint16 token ids served as fixed-length training sequences.

The nanoGPT-style text workload: ``train.bin`` holds a tokenised corpus end to end; item ``i``
is the window of ``seq_len`` tokens at ``i * seq_len`` and, as targets, the same window shifted
by one token. A read copies a few hundred bytes out of a memory map, so loading is cheap per
sample and the model's step dominates. The generated corpus draws ids from a Zipf law, as
token frequencies in text roughly follow; a real ``train.bin`` can be used instead.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from loadertune._lazy import torch
from loadertune.config import TokensConfig
from loadertune.datasets._cache import digest, ensure_generated
from loadertune.storage import Reader

TOKEN_DTYPE = np.uint16
FILE = "tokens.bin"
_CHUNK = 1 << 22


def cache_key(cfg: TokensConfig) -> str:
    """A folder name that changes whenever a generator knob changes."""
    knobs = {k: v for k, v in asdict(cfg).items() if k in ("count", "vocab_size", "seed")}
    return f"tokens-{cfg.count}-v{cfg.vocab_size}-{digest(knobs)}"


def ensure_tokens(cfg: TokensConfig, cache_dir: Path) -> Path:
    """The generated token file, made first if it is not in the cache."""
    folder = ensure_generated(cache_dir, cache_key(cfg), asdict(cfg), lambda d: _write(cfg, d))
    return folder / FILE


def _write(cfg: TokensConfig, out: Path) -> None:
    rng = np.random.default_rng(cfg.seed)
    with open(out / FILE, "wb") as file:
        for start in range(0, cfg.count, _CHUNK):
            n = min(_CHUNK, cfg.count - start)
            ids = (rng.zipf(1.2, size=n) - 1) % cfg.vocab_size
            file.write(ids.astype(TOKEN_DTYPE).tobytes())


class TokenDataset:
    """``(input ids, next-token ids)``, both int64 tensors of ``seq_len``, from a token file."""

    def __init__(
        self, path: str | Path, seq_len: int, vocab_size: int, reader: Reader | None = None
    ) -> None:
        self.path = str(path)
        self.seq_len = seq_len
        self.vocab_size = vocab_size
        self.reader = reader or Reader()
        tokens = os.path.getsize(self.path) // np.dtype(TOKEN_DTYPE).itemsize
        self.length = (tokens - 1) // seq_len
        if self.length < 1:
            raise ValueError(f"{self.path} holds {tokens} tokens, fewer than seq_len + 1")
        self._window_bytes = (seq_len + 1) * np.dtype(TOKEN_DTYPE).itemsize
        self._tokens: Any = None
        self._pid = os.getpid()

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        if not 0 <= index < self.length:
            raise IndexError(index)
        start = index * self.seq_len
        self.reader.charge(self._window_bytes)
        window = torch.from_numpy(
            np.array(self._map()[start : start + self.seq_len + 1], dtype=np.int64)
        )
        return window[:-1], window[1:]

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_tokens"] = None  # reopened by each process, never pickled as an array
        return state

    def _map(self) -> Any:
        if self._tokens is None or self._pid != os.getpid():
            self._tokens = np.memmap(self.path, dtype=TOKEN_DTYPE, mode="r")
            self._pid = os.getpid()
        return self._tokens
