"""Generated datasets are made once per set of generator knobs and cached on disk, atomically.

Generation writes into a temporary sibling folder and renames it into place, so an interrupted
run never leaves a half-written dataset that a later run would trust, and two processes that
generate the same dataset at once both end up reading one complete copy.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

MARKER = "COMPLETE"


def digest(knobs: Mapping[str, Any]) -> str:
    """A short digest of the knobs that change the generated files."""
    return hashlib.sha256(json.dumps(dict(knobs), sort_keys=True).encode()).hexdigest()[:10]


def ensure_generated(
    cache_dir: Path, name: str, meta: Mapping[str, Any], write: Callable[[Path], None]
) -> Path:
    """Return ``cache_dir/name``, calling ``write(folder)`` to generate it first if missing."""
    root = cache_dir / name
    if (root / MARKER).exists():
        return root
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=cache_dir))
    try:
        write(tmp)
        (tmp / MARKER).write_text(json.dumps(dict(meta), sort_keys=True))
        try:
            os.replace(tmp, root)
        except OSError:
            if (root / MARKER).exists():  # another process finished the same dataset first
                return root
            shutil.rmtree(root)  # a leftover without its marker
            os.replace(tmp, root)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return root
