"""One side of a Highlander conversation, sans I/O (compare h11's ``Connection``).

The I/O shell owns the socket and the clock; a :class:`Connection` owns
everything else.  The shell calls:

* :meth:`Connection.send` with a message, and writes the returned bytes;
* :meth:`Connection.receive_data` with bytes it read (``b""`` at end of
  stream), then :meth:`Connection.next_event` until it returns
  :data:`NEED_DATA`;
* :attr:`Connection.deadline` to learn how long it may wait for the peer.

Randomness and time come in as arguments (``nonce``, ``now``), so every
transition is reproducible in a test.
"""

from __future__ import annotations

from highlander._core.codec import (
    DEFAULT_MAX_FRAME,
    NEED_DATA,
    FrameDecoder,
    NeedData,
    decode_payload,
    encode_frame,
    encode_payload,
    split_body,
)
from highlander._core.deadlines import Deadline, Timeouts, Watch
from highlander._core.errors import (
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    SignatureError,
)
from highlander._core.messages import (
    NONCE_BYTES,
    Attach,
    Hello,
    Message,
    ProgressReport,
    Save,
    Status,
)
from highlander._core.signing import NO_NONCE, Direction, sign, verify
from highlander._core.state import ENDINGS, Move, Role, State, StateMachine
from highlander._core.values import Value


class Closed(Value):
    """The peer closed the stream.

    ``expected`` is true when the conversation had reached an ending (for the
    newcomer after ACK_SUCCESSION this is the incumbent leaving); false means
    the peer vanished mid-conversation, e.g. an incumbent that died while
    saving.  ``state`` is where this side was.
    """

    expected: bool
    state: State


_SENDS: dict[Role, Direction] = {
    Role.NEWCOMER: Direction.NEWCOMER_TO_INCUMBENT,
    Role.INCUMBENT: Direction.INCUMBENT_TO_NEWCOMER,
}


class Connection:
    """The protocol state of one connection, for one role.

    ``key`` is the derived HMAC key (:func:`highlander._core.signing.derive_key`),
    ``nonce`` this side's 16 fresh random bytes, ``now`` the shell's monotonic
    time when the connection was opened.
    """

    def __init__(
        self,
        role: Role,
        *,
        key: bytes,
        nonce: bytes,
        now: float,
        timeouts: Timeouts | None = None,
        max_frame: int = DEFAULT_MAX_FRAME,
    ) -> None:
        if len(nonce) != NONCE_BYTES:
            raise LocalProtocolError(f"nonce must be {NONCE_BYTES} random bytes")
        self.role = role
        self.local_nonce = nonce
        #: The peer's nonce, once HELLO (newcomer) or the request (incumbent) told us.
        self.peer_nonce: bytes | None = None
        self.max_frame = max_frame
        self._key = key
        self._machine = StateMachine(role)
        self._decoder = FrameDecoder(max_frame=max_frame)
        self._watch = Watch(timeouts or Timeouts())
        self._watch.enter(self._machine.waiting_for, now)
        self._send_seq = 0
        self._recv_seq = 0
        self._sent_counter = -1
        self._eof = False

    @property
    def state(self) -> State:
        """This side's current :class:`State`."""
        return self._machine.state

    @property
    def deadline(self) -> Deadline | None:
        """When the peer's next move is due, or ``None`` if nothing is owed."""
        if self._machine.state in (State.ERROR, State.CLOSED):
            return None
        return self._watch.deadline

    def overdue(self, now: float) -> Deadline | None:
        """Return the deadline the peer has missed at ``now``, or ``None``."""
        deadline = self.deadline
        return deadline if deadline is not None and now >= deadline.at else None

    def spare(self, now: float) -> bool:
        """Restart a missed STALL or EXIT deadline (a starved peer); see :meth:`Watch.spare`."""
        return self._watch.spare(now)

    @property
    def last_progress(self) -> int:
        """The highest PROGRESS counter received in the current save (-1 before any)."""
        return self._watch.last_counter

    def _send_nonces(self) -> tuple[bytes, bytes]:
        """Return ``(incumbent nonce, newcomer nonce)`` for a frame this side sends."""
        if self.role is Role.INCUMBENT:
            return self.local_nonce, self.peer_nonce or NO_NONCE
        # The table lets a newcomer send only after HELLO told it the peer's nonce.
        assert self.peer_nonce is not None
        return self.peer_nonce, self.local_nonce

    # -- sending -----------------------------------------------------------------

    def send(self, message: Message, now: float) -> bytes:
        """Return the signed frame for ``message`` and advance the state.

        Raises :class:`LocalProtocolError` (and enters ERROR) if the message is
        illegal now or too large.
        """
        target = self._machine.next_state(Move.SENT, message.TYPE)
        try:
            self._check_outgoing(message)
            payload = encode_payload(message, self._send_seq)
            inc, new = self._send_nonces()
            tag = sign(self._key, _SENDS[self.role], inc, new, self._send_seq, payload)
            frame = encode_frame(payload + tag, max_frame=self.max_frame)
        except ProtocolError:
            self._machine.move(State.ERROR)
            raise
        self._send_seq += 1
        if isinstance(message, ProgressReport):
            self._sent_counter = message.counter
        self._enter(target, now)
        return frame

    def _check_outgoing(self, message: Message) -> None:
        if isinstance(message, ProgressReport) and message.counter < self._sent_counter:
            raise LocalProtocolError(
                f"PROGRESS counter must not go backwards ({message.counter} after "
                f"{self._sent_counter})"
            )
        self._check_outgoing_nonces(message)

    def _check_outgoing_nonces(self, message: Message) -> None:
        if isinstance(message, Hello) and message.nonce != self.local_nonce.hex():
            raise LocalProtocolError("HELLO must carry this connection's nonce (local_nonce)")
        if isinstance(message, Save | Status | Attach):
            if message.nonce != self.local_nonce.hex():
                raise LocalProtocolError(
                    f"{message.TYPE} must carry this connection's nonce (local_nonce)"
                )
            if self.peer_nonce is None or message.echo != self.peer_nonce.hex():
                raise LocalProtocolError(
                    f"{message.TYPE} must echo the incumbent's HELLO nonce (peer_nonce)"
                )

    def _enter(self, state: State, now: float) -> None:
        self._machine.move(state)
        self._watch.enter(self._machine.waiting_for, now)

    def unframed(self) -> bytes:
        """After ATTACHED: the peer's bytes already read past it (the client's JSON-RPC).

        From RELAYING on the stream is no longer framed; what the decoder
        buffered belongs to the relay.  Raises :class:`LocalProtocolError` before.
        """
        if self._machine.state is not State.RELAYING:
            raise LocalProtocolError(
                f"the stream is framed until ATTACHED (state {self._machine.state.value})"
            )
        return self._decoder.take_rest()

    # -- receiving ---------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Feed bytes read from the peer; ``b""`` means end of stream.

        An announced frame length above the cap raises
        :class:`RemoteProtocolError` at once, before its body is buffered.
        """
        if self._eof:
            raise LocalProtocolError("received data after end of stream")
        if not data:
            self._eof = True
            return
        try:
            self._decoder.feed(data)
        except ProtocolError:
            self._machine.move(State.ERROR)
            raise

    def next_event(self, now: float) -> Message | NeedData | Closed:
        """Return the next authenticated message, :data:`NEED_DATA` or :class:`Closed`.

        A defect in the peer's data raises :class:`RemoteProtocolError` (an
        unauthentic frame :class:`SignatureError`) and the side enters ERROR.
        """
        if self._machine.state is State.ERROR:
            raise LocalProtocolError(
                "this connection already failed; open a new one instead of reusing it"
            )
        if self._machine.state is State.CLOSED:
            raise LocalProtocolError("the peer already closed this connection")
        try:
            return self._next_event(now)
        except ProtocolError:
            self._machine.move(State.ERROR)
            raise

    def _next_event(self, now: float) -> Message | NeedData | Closed:
        body = self._decoder.next_frame()
        if body is NEED_DATA:
            if not self._eof:
                return NEED_DATA
            if self._decoder.buffered:
                raise RemoteProtocolError(
                    f"truncated frame: stream ended after {self._decoder.describe_partial()}"
                )
            was = self._machine.state
            self._enter(State.CLOSED, now)
            return Closed(expected=was in ENDINGS, state=was)
        assert isinstance(body, bytes)
        payload, tag = split_body(body)
        seq, message = decode_payload(payload)
        self._authenticate(message, seq, payload, tag)
        target = self._machine.next_state(Move.RECEIVED, message.TYPE)
        if isinstance(message, ProgressReport) and message.counter < self._watch.last_counter:
            raise RemoteProtocolError(
                f"PROGRESS counter went backwards ({message.counter} after "
                f"{self._watch.last_counter})"
            )
        self._learn_peer_nonce(message)
        self._recv_seq += 1
        self._enter(target, now)
        if isinstance(message, ProgressReport):
            self._watch.progress(message.counter, now)
        return message

    def _receive_nonces(self, message: Message) -> tuple[bytes, bytes] | None:
        """Return ``(incumbent nonce, newcomer nonce)`` a received frame must be signed with.

        ``None`` when the message carries no nonce we could learn: it is then
        illegal in this state anyway.
        """
        if self.peer_nonce is not None:
            if self.role is Role.INCUMBENT:
                return self.local_nonce, self.peer_nonce
            return self.peer_nonce, self.local_nonce
        if self.role is Role.NEWCOMER:
            return (bytes.fromhex(message.nonce), NO_NONCE) if isinstance(message, Hello) else None
        if isinstance(message, Save | Status | Attach):
            if message.echo != self.local_nonce.hex():
                raise SignatureError(
                    f"{message.TYPE} echoes the nonce of another session: it was replayed "
                    "from an earlier exchange"
                )
            return self.local_nonce, bytes.fromhex(message.nonce)
        if isinstance(message, Hello) and message.nonce == self.local_nonce.hex():
            raise SignatureError("reflected frame: our own HELLO came back to us")
        return None

    def _authenticate(self, message: Message, seq: int, payload: bytes, tag: bytes) -> None:
        nonces = self._receive_nonces(message)
        if nonces is None:
            # next_state raises the protocol error that names the illegal message.
            self._machine.next_state(Move.RECEIVED, message.TYPE)
            raise AssertionError("unreachable: a message without nonce was legal")
        inc_nonce, new_nonce = nonces
        incoming = _SENDS[self.role.peer]
        expected = self._recv_seq
        if verify(self._key, tag, incoming, inc_nonce, new_nonce, expected, payload):
            if seq != expected:
                raise RemoteProtocolError(
                    f"{message.TYPE} claims sequence {seq} but was signed as {expected}"
                )
            return
        if seq != expected and verify(self._key, tag, incoming, inc_nonce, new_nonce, seq, payload):
            what = "replayed" if seq < expected else "reordered"
            raise SignatureError(
                f"{what} frame: {message.TYPE} has sequence {seq}, expected {expected}"
            )
        if verify(self._key, tag, incoming.reverse, inc_nonce, new_nonce, seq, payload):
            raise SignatureError(f"reflected frame: {message.TYPE} was sent by this side")
        raise SignatureError(
            f"bad MAC on {message.TYPE}: the peer does not share this HIGHLANDER_TOKEN "
            "(or the frame was altered); give every client the same token"
        )

    def _learn_peer_nonce(self, message: Message) -> None:
        if self.peer_nonce is not None:
            return
        if isinstance(message, Hello | Save | Status | Attach):
            self.peer_nonce = bytes.fromhex(message.nonce)
