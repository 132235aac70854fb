"""The shared notes server, with two habits of real servers, set by the environment.

``HIGHLANDER_TEST_SERVE_AFTER``: seconds it sleeps between its claim and
``highlander.mcp.run`` (a server that restores a large state first).
``HIGHLANDER_TEST_CHDIR``: a directory it changes to before anything else (a server
that works in its project).  ``HIGHLANDER_*`` variables are outside the configuration
fingerprint, so two copies of this program share whatever they say."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
if os.environ.get("HIGHLANDER_TEST_CHDIR"):
    os.chdir(os.environ["HIGHLANDER_TEST_CHDIR"])

from mcp_server import restore, save
from shared_notes import server

import highlander.mcp
from highlander import Highlander

hl = Highlander.ensure_singleton(app="notes", on_save=save)
restore(hl.handoff)
time.sleep(float(os.environ.get("HIGHLANDER_TEST_SERVE_AFTER", "0")))
highlander.mcp.run(server, hl)
