"""Shared fixtures: paths to the bundled spaces and scenarios, and an isolated HOME for Ray."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPACES = ROOT / "search_spaces"
SCENARIOS = SPACES / "scenarios"


@pytest.fixture
def write_yaml(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Write a YAML text into tmp_path and return its path."""
    def write(text: str, name: str = "space.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return write
