"""SessionHandlers (broker/native/session.py) over a stand-in for the shared handlers:
which frames a connection may key for an early begin."""

from __future__ import annotations

from broker.core import INLINE_APPEND_MAX_BYTES
from broker.native import SessionHandlers
from broker.net.listeners import ConnectionContext

KEY = ("t", 0)
FRAME = b"f" * (INLINE_APPEND_MAX_BYTES + 1)  # only a PRODUCE over this size is ever keyed


class KeysEverything:
    """Shared handlers whose run_key keys every frame."""

    loop = None
    partitions = None
    produce_now = fetch_now = None

    def run_key(self, frame):
        return KEY


def test_a_connections_first_request_is_never_keyed():
    session = SessionHandlers(KeysEverything(), ConnectionContext(None))  # type: ignore[arg-type]
    assert session.run_key(FRAME) is None  # the first request goes to `handle` (it may be a HANDSHAKE)
    session.session.seen = 1
    assert session.run_key(FRAME) == KEY


def test_an_unauthenticated_connection_keys_nothing():
    context = ConnectionContext(None)
    context.authenticated = False  # a SASL listener before the exchange succeeds
    session = SessionHandlers(KeysEverything(), context)  # type: ignore[arg-type]
    session.session.seen = 3
    assert session.run_key(FRAME) is None


def test_a_frame_an_inline_append_takes_is_never_keyed():
    session = SessionHandlers(KeysEverything(), ConnectionContext(None))  # type: ignore[arg-type]
    session.session.seen = 1
    assert session.run_key(FRAME[:INLINE_APPEND_MAX_BYTES]) is None
