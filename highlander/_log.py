"""Structured logs on stderr, never stdout (stdout is the MCP JSON-RPC stream).

structlog is imported on first use, so a process that never logs never pays
for it.  The application's own structlog configuration is left alone: this
module wraps its own logger instead of calling ``structlog.configure``.
"""

from __future__ import annotations

import sys
from typing import Any

_warned: set[str] = set()


def get_logger() -> Any:
    """Return a structlog logger that writes one line per event to ``sys.stderr``."""
    import structlog  # noqa: PLC0415 - lazy: most processes never log

    return structlog.wrap_logger(
        structlog.PrintLogger(file=sys.stderr),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.KeyValueRenderer(key_order=["timestamp", "level", "event"]),
        ],
        context_class=dict,
    ).bind(logger="highlander")


def warn_once(key: str, event: str, **fields: Any) -> bool:
    """Log ``event`` as a warning the first time ``key`` is seen in this process.

    Returns whether it was logged.
    """
    if key in _warned:
        return False
    _warned.add(key)
    get_logger().warning(event, **fields)
    return True
