"""Where a dataset's bytes live while a trial reads them.

``local`` reads the files where they are, with the page cache as the OS leaves it. Other
storage kinds (a cold cache, a RAM copy, a throttled device) prepare the dataset's root here
and hand the trial the path to read from, so datasets need not know about them.
"""

from __future__ import annotations

from pathlib import Path

from loadertune.config import StorageConfig


def prepare_storage(storage: StorageConfig, root: Path) -> Path:
    """Make the files under ``root`` readable the way ``storage`` describes; return the root."""
    if storage.name == "local":
        return root
    raise NotImplementedError(f"storage.name={storage.name}")
