"""Mutants of the core that change no behaviour, each with the reason (`make mutate`).

Keyed by the mutant's description (``module:scope: before -> after``, see
:attr:`scripts.mutate.ops.Mutant.key`), not by line number, so an entry survives
unrelated edits; an entry that matches no mutant any more is reported.
An entry belongs here only if no test could tell the mutant from the code:
a gap a test could close is closed by a test instead.
"""

# ruff: noqa: E501 - a key is a mutant's description as the report prints it, greppable whole

from __future__ import annotations

_NEVER_READ = (
    "the enum's values are never shown, parsed or compared: members are compared by identity"
)

EQUIVALENT: dict[str, str] = {
    # -- codec
    "codec:NeedData: 'NEED_DATA' -> ''": "the sentinel is compared by identity; its value is never read",
    "codec:FrameDecoder.next_frame: len(self._buffer) < HEADER.size -> len(self._buffer) <= HEADER.size": (
        "with exactly a header buffered the body (>= 34 bytes, checked just before) is missing "
        "either way: NEED_DATA"
    ),
    "codec:decode_payload: raise RemoteProtocolError(f'{kind}: {exc}') from None -> pass": (
        "unreachable: from_fields checks the field names before it calls the constructor"
    ),
    # -- commit
    "commit:Verdict: 'abort' -> ''": _NEVER_READ,
    "commit:Verdict: 'end_incumbent' -> ''": _NEVER_READ,
    "commit:Ending: 'ack_in_time' -> ''": _NEVER_READ,
    "commit:Ending: 'deadline' -> ''": _NEVER_READ,
    "commit:Ending: 'peer_refused' -> ''": _NEVER_READ,
    "commit:Ending: 'peer_closed' -> ''": _NEVER_READ,
    "commit:Ending: 'bad_frame' -> ''": _NEVER_READ,
    "commit:Decision: 'commit' -> ''": _NEVER_READ,
    "commit:Decision: 'keep' -> ''": _NEVER_READ,
    # -- connection
    "connection:Connection.__init__: 1 -> 2": (
        "a PROGRESS counter is >= 0 (the message checks it), so any start below 0 lets the "
        "first one through"
    ),
    "connection:Connection.deadline: (State.ERROR, State.CLOSED) -> (State.ERROR,)": (
        "entering CLOSED also enters no watchdog phase, so the watch has no deadline either"
    ),
    "connection:Connection._authenticate: seq < expected -> seq <= expected": (
        "only reached when seq != expected"
    ),
    # -- deadlines
    "deadlines:Watch.__init__: 0.0 -> 1.0": (
        "the start time is read only in a phase, and entering a phase sets it"
    ),
    # -- errors
    **{
        f"errors:{cls}.__init__: super().__init__(message) -> pass": (
            "BaseException.__new__ already keeps the message in args, and str() shows it"
        )
        for cls in ("ProtocolError", "UnsafeRuntimeDirError", "SuccessionRefused")
    },
    # -- messages
    "messages:Message.from_fields: raise LocalProtocolError(f'{cls.TYPE} field {name!r} must be one of {… -> pass": (
        "the constructor's _enum check then raises the same error, word for word"
    ),
    # -- patience
    **{
        f"patience:Patience.__init__: {before} -> {after}": (
            "every read follows _look, which sets count and cpu while since is None, as it is "
            "until the first look"
        )
        for before, after in (("0", "1"), ("0.0", "1.0"))
    },
    # -- policy
    **{
        f"policy:Why: '{value}' -> ''": _NEVER_READ
        + " (the shell's error comes from the setback, not from GiveUp.why)"
        for value in ("impostor", "silent", "blocked", "exhausted")
    },
    # -- state
    "state:Move: 'sent' -> ''": _NEVER_READ,
    "state:Move: 'received' -> ''": _NEVER_READ,
    # -- values
    "values:<module>: False -> True": (
        "TYPE_CHECKING: the typing names imported under it exist at run time too"
    ),
    "values:<module>: True -> False": "dataclass_transform's arguments: a no-op at run time",
    "values:Value.__init_subclass__: super().__init_subclass__(**kwargs) -> pass": (
        "object.__init_subclass__ does nothing (no Value subclass passes class keywords)"
    ),
    "values:Value.__hash__: (type(self).__name__, self._values()) -> (self._values(),)": (
        "a hash need only agree with ==: a coarser one collides more, and behaves the same"
    ),
    "values:Value.__hash__: (type(self).__name__, self._values()) -> (type(self).__name__,)": (
        "a hash need only agree with ==: a coarser one collides more, and behaves the same"
    ),
}
