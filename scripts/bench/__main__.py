"""``python -m scripts.bench``: the benchmarks' command line (scripts/bench/main.py)."""

import sys

from scripts.bench.main import main

sys.exit(main())
