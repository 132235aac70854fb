"""Coverage-guided fuzzing of the protocol core with atheris (optional: `pip install atheris`).

Each input picks a role and either raw bytes or edits (byte flips, cuts,
insertions) applied to a *valid* recorded conversation, so the fuzzer also
reaches the states behind a verified HELLO.  The stream is fed, in chunks,
to a fresh `Connection` (newcomer or incumbent, real key, real nonces) and
to the payload decoder.  The property: nothing but `ProtocolError` ever
escapes, the decoder never buffers beyond one frame, and a connection that
raised is in ERROR for good.

    .venv/bin/pip install atheris
    .venv/bin/python scripts/fuzz.py -atheris_runs=1000000

Results of the last long run are in docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import sys

import atheris  # type: ignore[import-untyped, import-not-found, unused-ignore]

with atheris.instrument_imports():
    from highlander._core.codec import HEADER, NEED_DATA, decode_payload
    from highlander._core.connection import Connection
    from highlander._core.errors import ProtocolError
    from highlander._core.messages import AckSuccession, Hello, Intent, ProgressReport, Save, Saved
    from highlander._core.pair import ConnectionPair
    from highlander._core.signing import derive_key
    from highlander._core.state import Role, State

KEY = derive_key(b"fuzz-token-0123456789", hashlib.sha256(b"/fuzz/project").digest())
NONCES = {Role.NEWCOMER: bytes(range(16)), Role.INCUMBENT: bytes(range(16, 32))}
MAX_FRAME = 4096
HELLO = Hello(
    pid=42,
    start_time=7,
    exe="/x",
    app="fuzz",
    generation=1,
    since_ms=0,
    nonce=NONCES[Role.INCUMBENT].hex(),
)


def _transcript() -> dict[Role, bytes]:
    """What each side receives in a valid succession with fixed nonces."""
    pair = ConnectionPair(
        key=KEY,
        newcomer_nonce=NONCES[Role.NEWCOMER],
        incumbent_nonce=NONCES[Role.INCUMBENT],
        clock=lambda: 0.0,
    )
    received = {Role.NEWCOMER: b"", Role.INCUMBENT: b""}

    def send(sender: Role, message: object) -> None:
        data = pair.sides[sender].send(message, 0.0)  # type: ignore[arg-type]
        received[sender.peer] += data
        pair.deliver(sender.peer, data)

    send(Role.INCUMBENT, HELLO)
    inc_hex = NONCES[Role.INCUMBENT].hex()
    send(Role.NEWCOMER, Save(43, 8, NONCES[Role.NEWCOMER].hex(), inc_hex, Intent.SUCCEED, "fuzz"))
    send(Role.INCUMBENT, ProgressReport(counter=0, note="saving"))
    send(Role.INCUMBENT, ProgressReport(counter=1, done=1, total=2))
    send(Role.INCUMBENT, Saved(handoff={"k": [1, 2.5, None, "v"]}, generation=1))
    send(Role.NEWCOMER, AckSuccession())
    return received


VALID = _transcript()


def _mutate(fdp: atheris.FuzzedDataProvider, stream: bytes) -> bytes:
    data = bytearray(stream)
    for _ in range(fdp.ConsumeIntInRange(0, 4)):
        if not data:
            break
        at = fdp.ConsumeIntInRange(0, len(data) - 1)
        action = fdp.ConsumeIntInRange(0, 2)
        if action == 0:
            data[at] ^= fdp.ConsumeIntInRange(1, 255)
        elif action == 1:
            del data[at:]
        else:
            data[at:at] = fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 8))
    return bytes(data)


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    role = Role.NEWCOMER if fdp.ConsumeBool() else Role.INCUMBENT
    chunk = fdp.ConsumeIntInRange(1, 64)
    if fdp.ConsumeBool():
        stream = _mutate(fdp, VALID[role])
    else:
        stream = fdp.ConsumeBytes(fdp.remaining_bytes())
    with contextlib.suppress(ProtocolError):
        decode_payload(stream)
    conn = Connection(role, key=KEY, nonce=NONCES[role], now=0.0, max_frame=MAX_FRAME)
    if role is Role.INCUMBENT:
        conn.send(HELLO, 0.0)
    try:
        for start in range(0, len(stream), chunk):
            conn.receive_data(stream[start : start + chunk])
            assert conn._decoder.buffered <= HEADER.size + MAX_FRAME + chunk
            while conn.next_event(0.0) is not NEED_DATA:
                pass
    except ProtocolError:
        assert conn.state is State.ERROR


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
