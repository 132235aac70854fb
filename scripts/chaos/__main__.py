"""``python -m scripts.chaos``: the chaos harness's command line (scripts/chaos/main.py)."""

import sys

from scripts.chaos.main import main

sys.exit(main())
