"""The ``highlander`` command line (the only module that writes to stdout).

For now it describes itself; the subcommands (status, stop, events, doctor,
token, run) arrive with the socket shell.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from highlander import __version__


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``highlander`` command."""
    parser = argparse.ArgumentParser(
        prog="highlander",
        description=(
            "There can be only one: exactly one instance of a per-project daemon, "
            "handed over instead of shot. Subcommands (status, stop, events, doctor, "
            "token, run) are not available in this version yet."
        ),
    )
    parser.add_argument("--version", action="version", version=f"highlander {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit status."""
    parser = build_parser()
    parser.parse_args(argv)
    parser.print_help(sys.stdout)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
