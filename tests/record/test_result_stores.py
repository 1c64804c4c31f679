"""Result files written whole or not at all, and a full disk told from a full /dev/shm."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest


def test_result_files_are_written_whole_or_not_at_all(tmp_path: Path) -> None:
    from loadertune.record._result_stores import write_text_atomically

    path = tmp_path / "best_loader.yaml"
    write_text_atomically(path, "old: 1\n")

    original = os.replace

    def full_disk(*args: Any) -> None:
        raise OSError(28, "No space left on device")

    os.replace = full_disk  # type: ignore[assignment]
    try:
        with pytest.raises(OSError, match="No space"):
            write_text_atomically(path, "new: 2\n")
    finally:
        os.replace = original
    assert path.read_text() == "old: 1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["best_loader.yaml"]


@pytest.mark.parametrize(
    ("text", "full"),
    [
        ("OSError: [Errno 28] No space left on device: '/out/multirun/1/.hydra'", True),
        ("sqlite3.OperationalError: database or disk is full", True),
        (
            "RuntimeError: unable to write to file </torch_1_2>: No space left on device (shm)",
            False,
        ),
        ("ERROR: Unexpected bus error encountered in worker: insufficient shared memory", False),
        ("ValueError: corrupt record 3", False),
    ],
)
def test_a_full_disk_is_told_from_a_full_dev_shm(text: str, full: bool) -> None:
    from loadertune.record._result_stores import says_disk_full

    assert says_disk_full(text) is full


def test_a_full_disk_is_found_down_the_chain_of_causes() -> None:
    """Optuna's storage error says only that a commit failed; SQLite's, two causes down, says
    the disk is full."""
    import sqlite3

    import optuna
    import sqlalchemy

    from loadertune.record import is_disk_full

    def raised() -> BaseException:
        try:
            try:
                try:
                    raise sqlite3.OperationalError("database or disk is full")
                except sqlite3.Error as e:
                    raise sqlalchemy.exc.OperationalError("COMMIT", {}, e) from e
            except sqlalchemy.exc.SQLAlchemyError as e:
                raise optuna.exceptions.StorageInternalError("An exception is raised") from e
        except optuna.exceptions.StorageInternalError as e:
            return e
        raise AssertionError("unreachable")

    assert is_disk_full(raised())
    assert not is_disk_full(optuna.exceptions.StorageInternalError("An exception is raised"))


def test_a_disk_with_room_does_not_make_an_error_a_full_disk(tmp_path: Path) -> None:
    from loadertune.record import is_disk_full

    assert not is_disk_full(OSError(5, "disk I/O error"), tmp_path)
    assert is_disk_full(OSError(28, "No space left on device"), tmp_path)
