"""Connection creation rates (KIP-612, Kafka's ConnectionQuotas) against the real
broker and on their own:

- an IP over its `connection_creation_rate` client quota (AlterClientQuotas, `ip`
  entity) is not admitted: its new connection is read from never and closed
  after the throttle time, as Kafka's acceptor delays closing it;
- `max.connection.creation.rate` (and `listener.name.<l>.max.connection.creation.rate`)
  makes a new connection wait before the broker reads it, then serves it.

The assertions look at what the broker answered and at its counters, never at
how long anything took."""

from __future__ import annotations

import socket
import time

from broker.net.connection_rates import ADMITTED, ConnectionRates
from tests.kafka.test_client_quotas import alter, metric
from tests.kafka.wire import KafkaWire

WAIT = 30.0  # a guard against hangs, not a speed assumption


def test_an_ip_over_its_quota_is_not_admitted_and_counts_nowhere():
    quotas = {"10.0.0.1": 1.0}
    rates = ConnectionRates(quotas.get, broker_rate=100, window_samples=11, window_seconds=1)
    # 1/s over the 10 s minimum window: ten connections at once are within it.
    assert [rates.admit("plaintext", "10.0.0.1", now_ms=0) for _ in range(10)] == [ADMITTED] * 10
    over = rates.admit("plaintext", "10.0.0.1", now_ms=0)
    assert over.delay_ms == 0 and 0 < over.close_after_ms <= 1000  # capped at one sample
    assert rates.throttled == 1
    # Another IP has no quota; the refused one did not count on the broker rate.
    assert rates.admit("plaintext", "10.0.0.2", now_ms=0) == ADMITTED
    assert rates.admit("plaintext", "10.0.0.1", now_ms=0).close_after_ms > 0


def test_broker_and_listener_rates_delay_new_connections():
    rates = ConnectionRates(lambda ip: None, broker_rate=5, listener_rates={"Internal": 1})
    # Listener: 1/s over 10 s; the eleventh connection on it waits, others do not.
    assert [rates.admit("internal", "10.0.0.1", now_ms=0).delay_ms for _ in range(10)] == [0] * 10
    assert 0 < rates.admit("INTERNAL", "10.0.0.1", now_ms=0).delay_ms <= 1000
    assert rates.delayed == 1
    # Broker-wide: 5/s, 50 in the window; each still admitted (delay only, never closed).
    admissions = [rates.admit("plaintext", "10.0.0.1", now_ms=0) for _ in range(45)]
    assert all(a.close_after_ms == 0 for a in admissions)
    assert admissions[-1].delay_ms > 0 and admissions[0].delay_ms == 0


def _answered(address: tuple[str, int]) -> bool:
    """A new Kafka connection answers ApiVersions (False: the broker closed it unanswered)."""
    from kio.index import load_request_schema

    from broker.kafka.codec import make

    try:
        with KafkaWire(*address, timeout=WAIT) as conn:
            conn.call(make(load_request_schema(18, 3), client_software_name="t", client_software_version="1"))
            return True
    except (ConnectionError, OSError, EOFError, AssertionError):
        return False


def test_connections_over_the_ip_quota_are_closed_unanswered(broker):
    server = broker("--set", "quota.window.num=2")  # a 1 s window: the second connection is over 1/s
    assert alter(server, [({"ip": "127.0.0.1"}, {"connection_creation_rate": 1})]) == [(0, None)]
    throttled = metric(server, "kafka_network_socketserver_connections_throttled_total")
    results = []
    while all(results) and len(results) < 20:
        results.append(_answered(server.kafka_address))
    assert results[-1] is False, "no connection was throttled"
    assert metric(server, "kafka_network_socketserver_connections_throttled_total") >= throttled + 1
    # The native listener counts on the same quota.
    sock = socket.create_connection(server.address, timeout=WAIT)
    sock.settimeout(WAIT)
    try:
        assert sock.recv(1) == b""  # held unread, then closed
    except ConnectionResetError:
        pass
    finally:
        sock.close()
    events = [e for e in server.log_events() if e.get("event") == "connection_throttled"]
    assert events and "127.0.0.1" in events[0]["reason"]
    # Removing the quota admits the IP again (once a connection gets through to ask).
    deadline = time.monotonic() + WAIT
    while True:
        try:
            if alter(server, [({"ip": "127.0.0.1"}, {"connection_creation_rate": None})]) == [(0, None)]:
                break
        except (ConnectionError, OSError, EOFError, AssertionError):
            assert time.monotonic() < deadline
            time.sleep(0.2)
    assert all(_answered(server.kafka_address) for _ in range(5))


def test_the_broker_wide_rate_delays_connections_and_still_serves_them(broker):
    server = broker("--set", "max.connection.creation.rate=1", "--set", "quota.window.num=2")
    delayed = metric(server, "kafka_network_socketserver_connections_delayed_total")
    assert all(_answered(server.kafka_address) for _ in range(4))  # every one is served
    assert metric(server, "kafka_network_socketserver_connections_delayed_total") >= delayed + 1


def test_a_listener_rate_is_read_from_its_listener_name_key(broker):
    server = broker("--set", "listener.name.plaintext.max.connection.creation.rate=1", "--set", "quota.window.num=2")
    assert all(_answered(server.kafka_address) for _ in range(4))
    assert metric(server, "kafka_network_socketserver_connections_delayed_total", protocol="kafka") >= 1
    assert metric(server, "kafka_network_socketserver_connections_delayed_total", protocol="native") == 0
