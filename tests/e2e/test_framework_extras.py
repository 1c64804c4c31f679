"""The ``frameworks`` extra installs beside the project's torch and keeps it: every package it
pins, and everything those require (their unconditional requirements, as installed here),
accepts the torch installed, so pip has no reason to replace it. Read from the installed
packages' metadata: no network."""

from __future__ import annotations

import importlib.metadata as metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version


def _extra(name: str) -> list[Requirement]:
    """The extra's requirements as the installed loadertune declares them (what pip reads)."""
    declared = [Requirement(r) for r in metadata.requires("loadertune") or []]
    marked = [
        r for r in declared if "extra" in str(r.marker) and r.marker.evaluate({"extra": name})
    ]
    assert marked, f"loadertune declares no extra {name!r}"
    return [Requirement(f"{r.name}{r.specifier}") for r in marked]


def _torch_requirements(root: Requirement) -> dict[str, str]:
    """Each package reached from ``root`` that requires torch, and its specifier."""
    found: dict[str, str] = {}
    todo, seen = [root], set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        for text in metadata.requires(req.name) or []:
            dep = Requirement(text)
            if dep.marker is not None and not dep.marker.evaluate({"extra": ""}):
                continue  # an extra of theirs, or another platform's
            if canonicalize_name(dep.name) == "torch":
                found[req.name] = str(dep.specifier)
            else:
                todo.append(dep)
    return found


def test_the_frameworks_extra_keeps_the_installed_torch() -> None:
    torch_version = Version(metadata.version("torch")).public  # 2.13.0, without +cpu
    frameworks = _extra("frameworks")
    assert {canonicalize_name(r.name) for r in frameworks} >= {"lightning", "accelerate",
                                                               "transformers"}  # fmt: skip
    for req in frameworks:
        assert metadata.version(req.name) in req.specifier, f"{req} is not what is installed"
        for who, spec in _torch_requirements(req).items():
            assert Version(torch_version) in Requirement(f"torch{spec}").specifier, (
                f"{who} requires torch{spec}: installing {req} would replace torch {torch_version}"
            )


def test_the_dev_extra_pins_the_frameworks_as_the_frameworks_extra_does() -> None:
    dev = {canonicalize_name(r.name): str(r.specifier) for r in _extra("dev")}
    for req in _extra("frameworks"):
        assert dev.get(canonicalize_name(req.name)) == str(req.specifier), req.name
