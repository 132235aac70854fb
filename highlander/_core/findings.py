"""What one failed attempt found: the setbacks the newcomer's policy settles.

Split from :mod:`highlander._core.policy` so that a newcomer's first attempt,
which usually succeeds, loads the names of what can go wrong and not the
machinery that decides what to do about it (imported after a setback).

A backend's setbacks subclass these and add how to reach the holder (the
local backend: the verified identity to signal); the policy never needs it.
Pure code.
"""

from __future__ import annotations

from highlander._core.values import Value


class Setback(Value):
    """What one failed attempt found."""


class Leaving(Setback):
    """BUSY: another succession runs; wait for ``pid`` to exit, then try again."""

    pid: int


class Missed(Setback):
    """A verified holder missed its ``phase`` deadline (``halted``: stopped meanwhile)."""

    phase: str
    halted: bool


class Fresh(Setback):
    """A silent holder that claimed after we connected: it may not be serving yet.

    A successor starts answering only once its claim is complete, so a
    connection made during the handover can time out on a holder that is
    fine.  It gets one fresh connection per generation before it counts as hung.
    """

    generation: int


class Unseen(Setback):
    """A silent holder nothing here can look at: it runs on another host.

    No kernel shows whether it is working or hung, and a loaded machine or
    cluster makes a healthy holder late: like :class:`Fresh`, it gets one
    more connection per generation (the same pardon) before it counts as hung.
    """

    generation: int


class Starved(Setback):
    """The holder missed HELLO but the kernel says it was working (a loaded machine).

    It is spared until it has used ``ceiling`` seconds of CPU under one
    record (the longest anything may take) without answering, and at most 4
    x ``ceiling`` of wall time: long enough for a storm's load to pass, while
    a holder spinning without answering is still ended.  A holder
    that is stopped, or asleep without gaining CPU time, gets no such grace.
    """


class Transition(Setback):
    """A silent listener in the middle of a handover: wait, bounded, never signal.

    Either the record names another process than ``pid`` (a successor serves
    the inherited listener before writing its record), or the recorded holder
    ``recorded`` committed a handover and let go of the lock while its
    successor has not taken the listener yet (it does once its predecessor left).
    """

    pid: int
    recorded: int


class Impostor(Setback):
    """The process at the socket (``pid``) is not the holder it claims to be: ``problem``.

    A client that connected while the listener was being handed over sees
    the predecessor's credentials; a fresh connection sees the holder's.
    """

    pid: int
    problem: str


class Changed(Setback):
    """The holder changed or vanished under us: try again."""


class Nobody(Setback):
    """The lock is held and nobody listens on the socket path."""


class Crowded(Setback):
    """The holder's queue of pending connections is full (a storm, or it stopped accepting)."""
