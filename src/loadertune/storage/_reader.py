"""How datasets read their bytes, so that a storage can stand between them and the files.

Datasets call :meth:`Reader.read_file` for whole files (an image) and :meth:`Reader.charge`
before touching a memory-mapped range (a row of a shard, a window of tokens). The plain reader
does nothing extra; the throttled one books each read on the shared simulated device and
returns only when the device would have delivered it. Readers are small and picklable: they
travel into every DataLoader worker, whatever the start method.
"""

from __future__ import annotations

import os

from loadertune.storage._device import SharedDevice, wait_until


class Reader:
    """Reads files as they are: local disk, page cache or tmpfs, whatever holds them."""

    def read_file(self, path: str) -> bytes:
        """The whole file's bytes."""
        with open(path, "rb") as file:
            return file.read()

    def charge(self, nbytes: int) -> None:
        """Account for ``nbytes`` about to be read from a memory map (nothing to do here)."""


class ThrottledReader(Reader):
    """Every read waits for the simulated device shared by all processes."""

    def __init__(self, device: SharedDevice) -> None:
        self.device = device

    def read_file(self, path: str) -> bytes:
        """Book the read on the device, read the file meanwhile, return when the device would."""
        with open(path, "rb") as file:
            done = self.device.read(os.fstat(file.fileno()).st_size)
            data = file.read()
        wait_until(done)
        return data

    def charge(self, nbytes: int) -> None:
        """Wait until the device would have delivered ``nbytes``."""
        wait_until(self.device.read(nbytes))
