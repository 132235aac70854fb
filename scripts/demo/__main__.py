"""``python -m scripts.demo``: the tour (scripts/demo/main.py)."""

import sys

from scripts.demo.main import main

sys.exit(main())
