"""``python -m scripts.mutate``: mutation testing's command line (scripts/mutate/main.py)."""

import sys

from scripts.mutate.main import main

sys.exit(main())
