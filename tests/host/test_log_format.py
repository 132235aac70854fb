"""The stderr line format: rendered without structlog, byte for byte what structlog made.

Highlander rendered its lines with structlog's ``KeyValueRenderer`` until
issue #16 (structlog's import cost every idle holder 1.9 MB). Readers of those
lines (people, log shippers, our own tests) must not see a difference, so
structlog itself is the oracle here: the same pipeline the library used to
build, fed the same event.
"""

from __future__ import annotations

import datetime
import subprocess
import sys
from typing import Any

import structlog
from hypothesis import given
from hypothesis import strategies as st

from highlander._host.log import render

#: Keys the line itself owns; an event never passes them as fields.
RESERVED = {"timestamp", "level", "event"}


def _old_line(when: float, level: str, event: str, fields: dict[str, Any]) -> str:
    """The line as the structlog pipeline of Highlander <= 0efd1c6 rendered it."""
    lines: list[str] = []

    class Out:
        def msg(self, message: str) -> None:
            lines.append(message)

        info = warning = msg

    def iso(_logger: Any, _method: str, event_dict: Any) -> Any:
        stamp = datetime.datetime.fromtimestamp(event_dict["timestamp"], tz=datetime.UTC)
        event_dict["timestamp"] = stamp.isoformat(timespec="microseconds").replace("+00:00", "Z")
        return event_dict

    logger = structlog.wrap_logger(
        Out(),
        processors=[
            structlog.processors.add_log_level,
            iso,
            structlog.processors.KeyValueRenderer(key_order=["timestamp", "level", "event"]),
        ],
        context_class=dict,
    ).bind(logger="highlander")
    getattr(logger, level)(event, timestamp=when, **fields)
    (line,) = lines
    return line


values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
field_names = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=12
).filter(lambda key: key not in RESERVED and key.isidentifier())


@given(
    when=st.floats(min_value=0, max_value=4e9, allow_nan=False),
    level=st.sampled_from(["info", "warning"]),
    event=st.text(min_size=1, max_size=20),
    fields=st.dictionaries(field_names, values, max_size=6),
)
def test_lines_are_what_structlog_rendered(
    when: float, level: str, event: str, fields: dict[str, Any]
) -> None:
    assert render(when, level, event, fields) == _old_line(when, level, event, fields)


def test_a_field_named_logger_replaces_the_default_in_place() -> None:
    fields = {"app": "a", "logger": "mine"}
    assert render(0.5, "info", "claimed", fields) == _old_line(0.5, "info", "claimed", fields)
    assert render(0.5, "info", "claimed", fields) == (
        "timestamp='1970-01-01T00:00:00.500000Z' level='info' event='claimed' logger='mine' app='a'"
    )


def test_rendering_never_imports_structlog() -> None:
    """The point of the change: the log thread renders with the standard library."""
    code = (
        "import sys\n"
        "from highlander._host.log import render\n"
        "render(1.0, 'info', 'x', {'a': 1})\n"
        "assert 'structlog' not in sys.modules, 'structlog imported'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
