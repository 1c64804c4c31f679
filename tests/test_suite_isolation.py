"""The suite keeps to itself: its own host timing lock, for every fixture scope."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from loadertune.checks import _host_lock as host_lock


@pytest.fixture(scope="module")
def lock_seen_by_a_module_fixture() -> Path:
    """Where a module-scoped fixture (as the shared review sweep is) would take the lock."""
    return host_lock.lock_dir()


def test_module_fixtures_take_the_suites_private_lock(lock_seen_by_a_module_fixture: Path) -> None:
    machine_wide = Path(tempfile.gettempdir()) / f"loadertune-{os.getuid()}"
    assert lock_seen_by_a_module_fixture != machine_wide
    assert lock_seen_by_a_module_fixture.name.startswith("loadertune-test-lock-")
    assert lock_seen_by_a_module_fixture.is_dir()
    assert host_lock.lock_dir() == lock_seen_by_a_module_fixture  # tests and fixtures share it
