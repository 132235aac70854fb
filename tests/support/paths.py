"""Where things are in the repository, for tests in any folder (and the scripts that reuse them)."""

from __future__ import annotations

from pathlib import Path

#: The repository (or the clone) these tests belong to.
REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
EXAMPLES = REPO / "examples"
#: The child programs tests start (tests/programs: a data folder, not a package).
PROGRAMS = REPO / "tests" / "programs"
