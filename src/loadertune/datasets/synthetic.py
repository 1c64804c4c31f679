"""Generate the default dataset: a folder of JPEG files in ImageFolder layout, made once.

The images are smooth colour fields with fine noise, so they compress and decode like photos
rather than like white noise (which is several times larger and slower to decode).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

from loadertune.config import SyntheticImagesConfig

_LAYOUT_VERSION = 1


def cache_key(cfg: SyntheticImagesConfig) -> str:
    """A folder name that changes whenever a knob that changes the files changes."""
    knobs = {k: v for k, v in asdict(cfg).items() if k not in ("name", "crop_size")}
    knobs["layout"] = _LAYOUT_VERSION
    digest = hashlib.sha256(json.dumps(knobs, sort_keys=True).encode()).hexdigest()[:10]
    return f"synthetic_images-{cfg.count}x{cfg.image_size}px-q{cfg.quality}-{digest}"


def ensure_synthetic_images(cfg: SyntheticImagesConfig, cache_dir: Path) -> Path:
    """Return the dataset's root folder, generating it first if it is not in the cache.

    Generation writes into a temporary sibling folder and renames it into place, so an
    interrupted run never leaves a half-written dataset that a later run would trust.
    """
    root = cache_dir / cache_key(cfg)
    if (root / "COMPLETE").exists():
        return root
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=cache_dir))
    try:
        _write_images(cfg, tmp)
        (tmp / "COMPLETE").write_text(json.dumps(asdict(cfg), sort_keys=True))
        if root.exists():
            shutil.rmtree(root)
        os.replace(tmp, root)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return root


def _write_images(cfg: SyntheticImagesConfig, out: Path) -> None:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(cfg.seed)
    size = cfg.image_size
    for c in range(cfg.num_classes):
        (out / f"class_{c:03d}").mkdir()
    for i in range(cfg.count):
        label = i % cfg.num_classes
        coarse = rng.integers(0, 256, size=(4, 4, 3), dtype=np.uint8)
        field = np.asarray(
            Image.fromarray(coarse).resize((size, size), Image.Resampling.BICUBIC), dtype=np.int16
        )
        noise = rng.integers(-12, 13, size=field.shape, dtype=np.int16)
        pixels = np.clip(field + noise, 0, 255).astype(np.uint8)
        path = out / f"class_{label:03d}" / f"img_{i:06d}.jpg"
        Image.fromarray(pixels).save(path, format="JPEG", quality=cfg.quality)
