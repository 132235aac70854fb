"""What an etcd newcomer loads while etcd answers it: the backend's and the conversation's code.

A fresh newcomer's own work before the holder's HELLO is mostly imports:
the etcd backend, the conversation's code and the cipher (cryptography's
binding), some 15 ms on the bench machine (docs/performance.md).  Its
first request (:mod:`highlander._shell.etcd_first`) needs little of it, so
that request goes out first and the rest is loaded while the thread would
wait for the lease grant, the watch and the claim, a step at a time
(:meth:`highlander._etcd.session.Session.meanwhile`): the session's thread,
which reads etcd's answer, needs the interpreter's lock, so an answer waits
at most for the step under way.

Steps are in the order they are needed.  A step that fails is not retried
here: what it loads fails again where it is used, and says why there.
A free claim leaves the rest undone.
"""

from __future__ import annotations

from collections.abc import Callable

#: Modules, in the order the newcomer needs them (the key and the cipher between).
EARLY = (
    "highlander._shell.etcd_backend",
    "highlander._shell.etcd_opened",
)
CONVERSATION = (
    "highlander._shell.newcomer",
    "highlander._shell.etcd_peer",
)
#: After HELLO: the takeover's code and the reign's (also loaded while the holder saves).
LATE = ("highlander._shell.etcd_takeover", "highlander._etcd.holding")


def _importing(name: str) -> Callable[[], object]:
    return lambda: __import__(name)


def _cipher() -> None:
    from highlander._core.sealing import load  # noqa: PLC0415 - the point is loading late

    load()


class Preload:
    """The steps left; call it to run the next one (``False`` once none is left)."""

    def __init__(self, channel_key: Callable[[], object], frames_key: Callable[[], object]) -> None:
        """``channel_key``, ``frames_key``: derive the project's two keys, loading what they use."""
        steps: list[Callable[[], object]] = [_importing(name) for name in EARLY]
        steps.append(channel_key)
        steps += [_importing(name) for name in CONVERSATION]
        steps.append(frames_key)
        steps.append(_cipher)
        steps += [_importing(name) for name in LATE]
        steps.reverse()
        self._steps = steps

    def __call__(self) -> bool:
        """Run the next step; whether any is left."""
        if self._steps:
            step = self._steps.pop()
            try:
                step()
            except Exception:  # it fails again where it is needed, and says why there
                self._steps.clear()
        return bool(self._steps)
