"""Where the tests find the repository: its root, the committed studies and the tests' own
data, whatever folder of tests/ a test module sits in."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
