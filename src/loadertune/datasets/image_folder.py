"""A map-style dataset over an ImageFolder layout, decoded with Pillow and numpy.

Paths and labels are held in numpy arrays rather than Python lists: every DataLoader worker
touches the dataset, and reference-counted Python objects get copied into each worker on read
(pytorch issue 13246), while numpy buffers stay shared. Files are read whole through the
storage's reader (a throttled device charges each one), then decoded from memory.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from loadertune._lazy import torch
from loadertune.storage import Reader

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(3, 1, 1)
_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(3, 1, 1)


class ImageFolderDataset:
    """``root/<class>/<image>`` files; each item is (float32 CHW tensor, class index).

    Each read decodes the file, takes a random ``crop_size`` square crop (resizing first when
    the image is smaller), flips it half the time, and normalises it: the usual training
    augmentation, so the CPU cost per sample is like a real image pipeline's.
    """

    def __init__(
        self, root: str | Path, crop_size: int = 224, reader: Reader | None = None
    ) -> None:
        root = Path(root)
        classes = sorted(p.name for p in root.iterdir() if p.is_dir())
        paths: list[str] = []
        labels: list[int] = []
        for index, name in enumerate(classes):
            for file in sorted((root / name).iterdir()):
                if file.suffix.lower() in IMAGE_EXTENSIONS:
                    paths.append(str(file))
                    labels.append(index)
        if not paths:
            raise FileNotFoundError(
                f"no {'/'.join(IMAGE_EXTENSIONS)} files under {root}/<class>/: "
                "expected ImageFolder layout"
            )
        self.root = root
        self.classes = classes
        self.num_classes = len(classes)
        self.crop_size = crop_size
        self.reader = reader or Reader()
        self._paths = np.array(paths, dtype=np.bytes_)
        self._labels = np.array(labels, dtype=np.int64)

    def __len__(self) -> int:
        return len(self._paths)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        path = self._paths[index].decode()
        with Image.open(io.BytesIO(self.reader.read_file(path))) as file:
            rgb = _resize_to_cover(file.convert("RGB"), self.crop_size)
            pixels = np.asarray(rgb, dtype=np.uint8)
        rng = np.random.default_rng()
        h, w = pixels.shape[:2]
        top = int(rng.integers(0, h - self.crop_size + 1))
        left = int(rng.integers(0, w - self.crop_size + 1))
        crop = pixels[top : top + self.crop_size, left : left + self.crop_size]
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        chw = crop.transpose(2, 0, 1).astype(np.float32) / 255.0
        chw = (chw - _MEAN) / _STD
        return torch.from_numpy(np.ascontiguousarray(chw)), int(self._labels[index])


def _resize_to_cover(img: Any, size: int) -> Any:
    """Scale up so both sides are at least ``size`` (no-op for large enough images)."""
    w, h = img.size
    if min(w, h) >= size:
        return img
    scale = size / min(w, h)
    return img.resize(
        (max(size, round(w * scale)), max(size, round(h * scale))), Image.Resampling.BILINEAR
    )
