"""The shared notes server, but slow to start serving: it sleeps between its claim and
``highlander.mcp.run`` for ``HIGHLANDER_TEST_SERVE_AFTER`` seconds (a server that restores
a large state first).  ``HIGHLANDER_*`` variables are outside the configuration
fingerprint, so two copies of this program share whatever that variable says."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

from mcp_server import restore, save
from shared_notes import server

import highlander.mcp
from highlander import Highlander

hl = Highlander.ensure_singleton(app="notes", on_save=save)
restore(hl.handoff)
time.sleep(float(os.environ.get("HIGHLANDER_TEST_SERVE_AFTER", "0")))
highlander.mcp.run(server, hl)
