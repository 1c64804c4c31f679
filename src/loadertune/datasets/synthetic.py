"""Generate the default dataset: a folder of JPEG (or PNG) files in ImageFolder layout, once.

The images are smooth colour fields with fine noise, so they compress and decode like photos
rather than like white noise (which is several times larger and slower to decode). With
``size_jitter`` the sides vary per image, as a photo collection's do, so decode cost varies
from sample to sample the way it does in ImageNet.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
from PIL import Image

from loadertune.config import SyntheticImagesConfig
from loadertune.datasets._cache import digest, ensure_generated

_LAYOUT_VERSION = 1
FORMATS = {"jpeg": ".jpg", "png": ".png"}


def cache_key(cfg: SyntheticImagesConfig) -> str:
    """A folder name that changes whenever a knob that changes the files changes."""
    knobs = {k: v for k, v in asdict(cfg).items() if k not in ("name", "crop_size")}
    knobs["layout"] = _LAYOUT_VERSION
    return f"synthetic_images-{cfg.count}x{cfg.image_size}px-q{cfg.quality}-{digest(knobs)}"


def ensure_synthetic_images(cfg: SyntheticImagesConfig, cache_dir: Path) -> Path:
    """Return the dataset's root folder, generating it first if it is not in the cache."""
    return ensure_generated(cache_dir, cache_key(cfg), asdict(cfg), lambda d: _write(cfg, d))


def _write(cfg: SyntheticImagesConfig, out: Path) -> None:
    rng = np.random.default_rng(cfg.seed)
    suffix = FORMATS[cfg.format]
    for c in range(cfg.num_classes):
        (out / f"class_{c:03d}").mkdir()
    for i in range(cfg.count):
        label = i % cfg.num_classes
        w = h = cfg.image_size
        if cfg.size_jitter > 0:
            lo, hi = 1.0 - cfg.size_jitter, 1.0 + cfg.size_jitter
            w, h = (max(8, round(cfg.image_size * s)) for s in rng.uniform(lo, hi, size=2))
        coarse = rng.integers(0, 256, size=(4, 4, 3), dtype=np.uint8)
        field = np.asarray(
            Image.fromarray(coarse).resize((w, h), Image.Resampling.BICUBIC), dtype=np.int16
        )
        noise = rng.integers(-12, 13, size=field.shape, dtype=np.int16)
        pixels = np.clip(field + noise, 0, 255).astype(np.uint8)
        path = out / f"class_{label:03d}" / f"img_{i:06d}{suffix}"
        if cfg.format == "png":
            Image.fromarray(pixels).save(path, format="PNG")
        else:
            Image.fromarray(pixels).save(path, format="JPEG", quality=cfg.quality)
