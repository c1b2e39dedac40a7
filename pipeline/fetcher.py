"""Reading one offset range of one partition from the broker, on an executor.

Contract:
- `BrokerLink(bootstrap, timeout_ms)` is one blocking TCP connection speaking
  the native protocol through the `protocol` codec (no event loop and no
  thread: Spark's Python workers fork and are reused, and a plain socket is
  the cheapest thing to carry across that). It connects on first use to the
  first reachable address of `bootstrap` (`client.parse_bootstrap`); requests
  are pipelined and answers come back in order. With `security` (the source's
  kafka.security.protocol, kafka.ssl.*, kafka.sasl.*) it connects with TLS and,
  on a SASL listener, authenticates (SASL_AUTHENTICATE, client/sasl.py) right
  after its version-2 HANDSHAKE.
- `read_range(options, topic, partition, start, end)` yields pyarrow
  RecordBatches (schema.arrow_schema) holding exactly the records with
  offsets in [start, end), in order, skipping records below `start` inside
  entries and stopping at `end`. While one answer is decoded the next FETCH
  is already on its way (its offset is read from the entry headers first).
  An answer holding only a cut-short entry doubles the fetch size (up to
  64 MiB, then MESSAGE_TOO_LARGE).
- read_committed (`isolation.level`): the link HANDSHAKEs to version 2 (a
  broker that cannot is refused with a clear error) and every FETCH asks for
  isolation 1; the broker stops at the last stable offset (planned ranges end
  at or below it) and names the aborted transactions of each answer, whose
  records are dropped with the markers (decode.py).
- Data loss, as Spark's Kafka source: the range start below the log start
  (retention or DELETE_RECORDS removed records), the log end below a wanted
  offset, or the topic gone. With `failOnDataLoss` (the default) the task
  fails with DataLossError and Spark's advice; without it a warning is logged
  and the read goes on from the log start (or stops when nothing is left).
- Transport failures (connection refused or broken, timeouts) reconnect and
  resume from the current position, `fetchOffset.numRetries` times with
  `fetchOffset.retryIntervalMs` between attempts; broker error codes other
  than the ones above raise StrataClientError.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import struct
import time
from collections import deque
from collections.abc import Iterator

from client import parse_bootstrap
from client.connection import CLIENT_ID
from client.errors import AuthenticationFailed, BrokerUnreachable, StrataClientError, raise_for
from client.sasl import SaslFailed, run_exchange, sasl_credentials
from client.security import ssl_context
from kafka_format.framing import ENTRY_PREFIX, LOG_OVERHEAD, MAGIC_OFFSET, MAGIC_V2
from protocol import (
    PROTOCOL_VERSION,
    ErrorCode,
    FetchRequest,
    HandshakeRequest,
    OffsetsRequest,
    ProtocolError,
    encode_request,
    parse_response,
)
from protocol.requests import IsolationLevel, RequestType, SaslAuthenticateRequest

from .decode import decode_into
from .options import ReadOptions
from .schema import Columns

__all__ = ["BrokerLink", "DataLossError", "read_range", "data_loss", "ROWS_PER_BATCH"]

log = logging.getLogger("pipeline")

ROWS_PER_BATCH = 16384
MAX_FETCH_BYTES = 64 * 1024 * 1024
SIZE = struct.Struct(">i")
ERROR = struct.Struct(">h")
FETCH_V2_OFFSETS = struct.Struct(">qqqi")  # highWatermark, lastStableOffset, logStartOffset, abortedCount
ABORTED = struct.Struct(">qq")  # producerId, firstOffset
LAST_DELTA = struct.Struct(">i")
LAST_DELTA_AT = 23
DATA_LOSS_ADVICE = (
    "Some data may have been lost because they are not available in Strata any more; either the "
    "data was aged out by retention or removed with DELETE_RECORDS, or the topic may have been "
    "deleted before all the data in the topic was processed. If you want your query to go on "
    "in such cases, set the source option \"failOnDataLoss\" to \"false\".")


class DataLossError(StrataClientError):
    """Records a query should have read are gone (failOnDataLoss=true)."""


def data_loss(message: str, fail: bool) -> None:
    """Fail with Spark's advice, or log a warning and go on."""
    if fail:
        raise DataLossError(f"{message} {DATA_LOSS_ADVICE}")
    log.warning("%s Some data may have been lost; failOnDataLoss is false, going on.", message)


class BrokerLink:
    def __init__(self, bootstrap: str, timeout_ms: int = 120_000, version: int = 1,
                 security: tuple[tuple[str, str], ...] = ()):
        self.bootstrap = bootstrap
        self.timeout_ms = timeout_ms
        settings = dict(security)
        self._ssl = ssl_context(settings)
        self._sasl = sasl_credentials(settings)
        self.wanted_version = version  # 2: HANDSHAKE on connecting, and refuse a broker without it
        self.version = 1
        self._sock: socket.socket | None = None
        self._pending: deque[int] = deque()  # request types of unanswered requests
        self.address = ""

    def _connect(self) -> socket.socket:
        problems = []
        for host, port in parse_bootstrap(self.bootstrap):
            try:
                sock = socket.create_connection((host, port),
                                                timeout=min(self.timeout_ms, 10_000) / 1000)
            except OSError as e:
                problems.append(f"{host}:{port}: {e.strerror or e}")
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
            sock.settimeout(self.timeout_ms / 1000)
            self.address = f"{host}:{port}"
            if self._ssl is not None:
                try:
                    sock = self._ssl.wrap_socket(sock, server_hostname=host)
                except (OSError, ssl.SSLError) as e:
                    sock.close()
                    problems.append(f"{host}:{port}: TLS handshake failed ({e})")
                    continue
            if self.wanted_version >= 2 or self._sasl is not None:
                self._handshake(sock)
            return sock
        raise BrokerUnreachable("cannot reach broker at " + "; ".join(problems))

    def _handshake(self, sock: socket.socket) -> None:
        """Settle version 2 on a new connection (before any other request)."""
        self._sock, self.version = sock, 1
        try:
            sock.sendall(encode_request(HandshakeRequest(PROTOCOL_VERSION, CLIENT_ID)))
        except OSError as e:
            self.close()
            raise BrokerUnreachable(f"connection to broker at {self.address} lost: {e}") from None
        self._pending.append(RequestType.HANDSHAKE)
        response = self.receive()
        if response.error == ErrorCode.NONE and response.mechanisms:
            if self._sasl is None or self._sasl.mechanism not in response.mechanisms:
                self.close()
                raise AuthenticationFailed(f"broker at {self.address} requires SASL "
                                           f"({', '.join(response.mechanisms)}): set kafka.security.protocol, "
                                           "kafka.sasl.mechanism, kafka.sasl.username and kafka.sasl.password")
            self.version = response.version
            self._authenticate()
        self._sock = None
        version = response.version if response.error == ErrorCode.NONE else 1
        if version < self.wanted_version:
            sock.close()
            raise StrataClientError(f"isolation.level read_committed needs a broker that speaks native "
                                    f"protocol version {self.wanted_version} (the one at {self.address} "
                                    f"speaks {version})", ErrorCode.INVALID_REQUEST)
        self.version = version

    def _authenticate(self) -> None:
        """The SASL exchange, right after the HANDSHAKE (the socket is `_sock`)."""
        credentials = self._sasl
        assert credentials is not None

        def round_trip(message: bytes) -> bytes:
            answer = self.request(SaslAuthenticateRequest(credentials.mechanism, message))
            if answer.error != ErrorCode.NONE:
                self.close()
                raise AuthenticationFailed(f"SASL authentication with broker at {self.address} failed: "
                                           f"{answer.message or ErrorCode(answer.error).name}")
            return bytes(answer.auth_bytes)

        try:
            run_exchange(credentials, round_trip)
        except SaslFailed as e:
            self.close()
            raise AuthenticationFailed(f"SASL authentication with broker at {self.address} failed: {e}") from None

    def send(self, request) -> None:
        if self._sock is None:
            self._sock = self._connect()
        try:
            self._sock.sendall(encode_request(request, self.version))
        except OSError as e:
            self.close()
            raise BrokerUnreachable(f"connection to broker at {self.address} lost: {e}") from None
        self._pending.append(request.TYPE)

    def _receive_frame(self) -> tuple[int, bytearray]:
        if not self._pending:
            raise StrataClientError("nothing was asked of the broker")
        try:
            head = self._read_exactly(SIZE.size)
            frame = self._read_exactly(SIZE.unpack(head)[0])
        except TimeoutError:
            self.close()
            raise BrokerUnreachable(f"no answer from broker at {self.address} within "
                                    f"{self.timeout_ms} ms") from None
        except OSError as e:
            self.close()
            raise BrokerUnreachable(f"connection to broker at {self.address} lost: {e}") from None
        return self._pending.popleft(), frame

    def _read_exactly(self, n: int) -> bytearray:
        sock = self._sock
        assert sock is not None  # a request is pending: send connected, and close clears both
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            chunk = sock.recv_into(view[got:])
            if not chunk:
                raise OSError("connection closed by the broker")
            got += chunk
        return buf

    def receive(self):
        """The parsed answer to the oldest unanswered request."""
        request_type, frame = self._receive_frame()
        try:
            return parse_response(request_type, frame, self.version)
        except ProtocolError as e:
            self.close()
            raise StrataClientError(f"bad answer from broker at {self.address}: {e.message}",
                                    ErrorCode.CORRUPT_MESSAGE) from None

    def receive_fetch(self) -> tuple[int, bytes, list[tuple[int, int]] | None]:
        """(error, message set as bytes, aborted list) of the oldest unanswered FETCH;
        the aborted list (producer id, first offset) comes with version 2 (else None)."""
        request_type, frame = self._receive_frame()
        if request_type != RequestType.FETCH or len(frame) < ERROR.size:
            self.close()
            raise StrataClientError("bad answer to FETCH", ErrorCode.CORRUPT_MESSAGE)
        (error,) = ERROR.unpack_from(frame)
        if self.version < 2:
            return error, bytes(memoryview(frame)[ERROR.size:]), None
        if error != ErrorCode.NONE:
            return error, b"", []  # version 2: the body is the error's message
        pos = ERROR.size + FETCH_V2_OFFSETS.size
        if len(frame) < pos:
            self.close()
            raise StrataClientError("bad answer to FETCH", ErrorCode.CORRUPT_MESSAGE)
        count = FETCH_V2_OFFSETS.unpack_from(frame, ERROR.size)[3]
        if count < 0 or len(frame) < pos + count * ABORTED.size:
            self.close()
            raise StrataClientError("bad answer to FETCH", ErrorCode.CORRUPT_MESSAGE)
        aborted = [ABORTED.unpack_from(frame, pos + i * ABORTED.size) for i in range(count)]
        return error, bytes(memoryview(frame)[pos + count * ABORTED.size:]), aborted

    def request(self, request):
        self.send(request)
        return self.receive()

    def offset(self, topic: str, partition: int, time_: int) -> int | None:
        response = self.request(OffsetsRequest(topic, partition, time_, 1))
        raise_for(response.error, f"offsets of {topic}-{partition}")
        return response.offsets[0] if response.offsets else None

    def close(self) -> None:
        sock, self._sock = self._sock, None
        self._pending.clear()
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def __enter__(self) -> BrokerLink:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def next_offset_of(data: bytes, start: int) -> tuple[int, int]:
    """(one past the last offset of the last whole entry, whole entries): headers only."""
    pos, end, last, whole = 0, len(data), start - 1, 0
    unpack = ENTRY_PREFIX.unpack_from
    while end - pos > MAGIC_OFFSET:
        offset, size = unpack(data, pos)
        entry_end = pos + LOG_OVERHEAD + size
        if size <= 0 or entry_end > end:
            break
        if data[pos + MAGIC_OFFSET] == MAGIC_V2:
            if entry_end < pos + LAST_DELTA_AT + LAST_DELTA.size:
                break
            offset += LAST_DELTA.unpack_from(data, pos + LAST_DELTA_AT)[0]
        last = max(last, offset)  # a classic entry's offset field is its last offset
        whole += 1
        pos = entry_end
    return max(start, last + 1), whole


class _RangeReader:
    def __init__(self, options: ReadOptions, topic: str, partition: int, start: int, end: int):
        self.options = options
        self.topic = topic
        self.partition = partition
        self.where = f"{topic}-{partition}"
        self.start = start
        self.end = end
        self.link = BrokerLink(options.bootstrap, options.request_timeout_ms,
                               version=2 if options.read_committed else 1, security=options.security)
        self.isolation = (IsolationLevel.READ_COMMITTED if options.read_committed
                          else IsolationLevel.READ_UNCOMMITTED)
        self.failures = 0

    def fetch(self, offset: int, size: int) -> None:
        self.link.send(FetchRequest(self.topic, self.partition, offset, size, 0, self.isolation))

    def out_of_range(self, position: int) -> int:
        """Where to go on after OFFSET_OUT_OF_RANGE at `position` (`end`: stop)."""
        earliest = self.link.offset(self.topic, self.partition, OffsetsRequest.EARLIEST)
        latest = self.link.offset(self.topic, self.partition, OffsetsRequest.LATEST)
        if earliest is not None and position < earliest:
            data_loss(f"Cannot fetch offset {position} of {self.where}: the log now starts at "
                      f"offset {earliest}, so offsets {position} to "
                      f"{min(earliest, self.end) - 1} are gone.", self.options.fail_on_data_loss)
            return min(earliest, self.end)
        if latest is not None and position > latest:
            self.log_ends_early(position, latest)
            return self.end
        self.retry_later(f"offset {position} of {self.where} is out of range "
                         f"[{earliest}, {latest}]")
        return position  # the log moved meanwhile: try again

    def log_ends_early(self, position: int, latest: int) -> None:
        data_loss(f"Cannot fetch offsets {position} to {self.end - 1} of {self.where}: the log "
                  f"ends at offset {latest}.", self.options.fail_on_data_loss)

    def transport_failed(self, error: StrataClientError) -> None:
        self.link.close()
        self.failures += 1
        if self.failures > self.options.fetch_retries:
            raise error
        time.sleep(self.options.retry_interval_ms / 1000)

    def retry_later(self, problem: str) -> None:
        self.transport_failed(StrataClientError(f"{problem}, after {self.failures} retries"))

    def batches(self) -> Iterator:
        columns = Columns(self.options.include_headers)
        position, end = self.start, self.end
        size = self.options.fetch_bytes
        pending: int | None = None  # the offset of the FETCH on its way
        try:
            while position < end:
                try:
                    if pending is not None and pending != position:
                        self.link.close()  # a stale answer is on its way: drop it
                        pending = None
                    if pending is None:
                        self.fetch(position, size)
                    pending = None
                    error, data, aborted = self.link.receive_fetch()
                    if error == ErrorCode.OFFSET_OUT_OF_RANGE:
                        position = self.out_of_range(position)
                        continue
                    if error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                        data_loss(f"Cannot fetch offsets {position} to {end - 1} of {self.where}: "
                                  f"the topic or partition is gone.",
                                  self.options.fail_on_data_loss)
                        break
                    raise_for(error, f"fetch {self.where} at offset {position}")
                    if not data:
                        latest = self.link.offset(self.topic, self.partition, OffsetsRequest.LATEST)
                        if latest is not None and latest <= position:
                            self.log_ends_early(position, latest)
                            break
                        self.retry_later(f"empty answer at offset {position} of {self.where}")
                        continue
                    following, whole = next_offset_of(data, position)
                    if not whole:
                        if size >= MAX_FETCH_BYTES:
                            raise StrataClientError(
                                f"the entry at offset {position} of {self.where} is larger than "
                                f"the largest fetch size ({MAX_FETCH_BYTES} bytes)",
                                ErrorCode.MESSAGE_TOO_LARGE)
                        size = min(size * 2, MAX_FETCH_BYTES)
                        continue
                    size = self.options.fetch_bytes
                    if following < end:
                        self.fetch(following, size)  # on its way while this one is decoded
                        pending = following
                except BrokerUnreachable as e:
                    pending = None
                    self.transport_failed(e)
                    continue
                walked = decode_into(data, position, end, columns, aborted=aborted)
                position = max(position, walked.next_offset)
                self.failures = 0
                if len(columns) >= ROWS_PER_BATCH:
                    yield columns.to_batch(self.topic, self.partition)
        finally:
            self.link.close()
        if len(columns):
            yield columns.to_batch(self.topic, self.partition)


def read_range(options: ReadOptions, topic: str, partition: int, start: int,
               end: int) -> Iterator:
    """RecordBatches of the records of topic-partition with offsets in [start, end)."""
    if start >= end:
        return iter(())
    return _RangeReader(options, topic, partition, start, end).batches()
