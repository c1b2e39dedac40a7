"""broker/core/quotas.py on its own: Kafka's order of precedence between quota
entities, its windowed rate and throttle time, the file the quotas live in."""

from __future__ import annotations

import json

import pytest

from broker.core.quotas import QUOTAS_FILE, ClientQuotas, entity_of
from kafka_format.errors import InvalidConfigError, InvalidRequestError

PRODUCE = "producer_byte_rate"


def quotas_with(**by_entity: float) -> ClientQuotas:
    """Keys like "user=u,client-id=c" ("*" for the default) -> producer_byte_rate."""
    quotas = {}
    for text, value in by_entity.items():
        pairs = [part.split("=") for part in text.replace("__", "-").split(",")]
        quotas[entity_of((t, None if n == "*" else n) for t, n in pairs)] = {PRODUCE: value}
    return ClientQuotas(None, quotas)


def test_precedence_is_kafkas():
    every = {"user=u,client__id=c": 1, "user=u,client__id=*": 2, "user=u": 3, "user=*,client__id=c": 4,
             "user=*,client__id=*": 5, "user=*": 6, "client__id=c": 7, "client__id=*": 8}
    order = list(every)
    for i in range(len(order)):
        quotas = quotas_with(**{k: every[k] for k in order[i:]})
        assert quotas.quota_for(PRODUCE, "u", "c")[0] == i + 1
    assert quotas_with(**{"client__id=*": 8}).quota_for(PRODUCE, "u", "c") == (8, "", "c")
    assert quotas_with(**{"user=*": 6}).quota_for(PRODUCE, "u", "c") == (6, "u", "")
    assert quotas_with(**{"user=v": 6}).quota_for(PRODUCE, "u", "c") is None


def test_throttle_time_is_kafkas_over_the_minimum_window():
    quotas = quotas_with(**{"client__id=c": 1000})
    # 10 s minimum window (11 samples of 1 s): 9000 bytes = 900 B/s, under the quota.
    assert quotas.throttle_ms("produce", "User:ANONYMOUS", "c", 9000, now_ms=0) == 0
    # 11000 bytes over 10.01 s: (rate - quota) / quota x window.
    assert quotas.throttle_ms("produce", "User:ANONYMOUS", "c", 2000, now_ms=10) == 990
    assert quotas.throttled["produce"] == 1 and quotas.throttle_ms_total["produce"] == 990
    # Another client id under the same default has its own rate; fetches are not limited.
    assert quotas.throttle_ms("produce", "User:ANONYMOUS", "d", 2000, now_ms=10) == 0
    assert quotas.throttle_ms("fetch", "User:ANONYMOUS", "c", 10**9, now_ms=10) == 0


def test_the_throttle_time_is_capped_at_the_whole_window():
    quotas = quotas_with(**{"client__id=*": 1})
    assert quotas.throttle_ms("produce", "User:ANONYMOUS", None, 10**9, now_ms=0) == 11_000


@pytest.mark.parametrize("pairs, reason", [
    ([], "empty"), ([("group", "g")], "group"), ([("ip", "1.2.3.4"), ("user", "u")], "IP"),
    ([("user", "")], "Empty user"), ([("user", "a"), ("user", "b")], "Duplicate")])
def test_bad_entities_are_refused(pairs, reason):
    with pytest.raises(InvalidRequestError, match=reason):
        entity_of(pairs)


def test_alter_replaces_the_file_and_open_reads_it(tmp_path):
    quotas = ClientQuotas.open(str(tmp_path))
    entity = entity_of([("client-id", None)])
    quotas.alter({entity: quotas.check(entity, [(PRODUCE, 2048.0)])})
    assert json.loads((tmp_path / QUOTAS_FILE).read_text())["quotas"] == [
        {"entity": [{"type": "client-id", "name": None}], "values": {PRODUCE: 2048.0}}]
    assert ClientQuotas.open(str(tmp_path)).describe([], False) == [(entity, {PRODUCE: 2048.0})]
    quotas.alter({entity: quotas.check(entity, [(PRODUCE, None)])})
    assert ClientQuotas.open(str(tmp_path)).describe([], False) == []
    (tmp_path / QUOTAS_FILE).write_text('{"version": 1, "quotas": [{"entity": 3}]}')
    with pytest.raises(InvalidConfigError, match="damaged"):
        ClientQuotas.open(str(tmp_path))


def test_request_time_is_a_percentage_of_one_thread_capped_at_one_sample():
    quotas = ClientQuotas(None, {entity_of([("client-id", "c")]): {"request_percentage": 10.0}})
    assert quotas.request_quotas
    # 0.9 s of handler time over the 10 s minimum window: 9%, under 10%.
    assert quotas.throttle_ms("request", "User:ANONYMOUS", "c", 0.9, now_ms=0) == 0
    # 1.2 s: 12% over 10.01 s, (12/10.01*10... - 10) / 10 x window, at most one sample (1 s).
    assert 0 < quotas.throttle_ms("request", "User:ANONYMOUS", "c", 0.3, now_ms=10) <= 1000
    assert quotas.throttle_ms("request", "User:ANONYMOUS", "c", 100, now_ms=20) == 1000
    assert quotas.throttled["request"] == 2


def test_a_throttled_fetch_is_unrecorded_and_the_fetch_size_is_bounded():
    quotas = ClientQuotas(None, {entity_of([("client-id", "c")]): {"consumer_byte_rate": 1000.0}})
    assert quotas.max_fetch_bytes("User:ANONYMOUS", "c") == 10_000  # quota x (samples - 1) x 1 s
    assert quotas.max_fetch_bytes("User:ANONYMOUS", "d") is None
    assert quotas.throttle_ms("fetch", "User:ANONYMOUS", "c", 12_000, now_ms=0) > 0
    quotas.unrecord("fetch", "User:ANONYMOUS", "c", 12_000, now_ms=0)
    assert quotas.throttle_ms("fetch", "User:ANONYMOUS", "c", 9_000, now_ms=1) == 0


def test_the_handler_clock_counts_steps_not_waits():
    import asyncio
    import time

    from broker.net.handler_clock import HandlerClock

    async def handler(gate):
        await gate
        return "answer"

    async def main():
        clock = HandlerClock()
        gate = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(clock.timed(handler(gate)))
        await asyncio.sleep(0)
        started = time.perf_counter()
        await asyncio.sleep(0.05)  # the handler waits meanwhile
        gate.set_result(None)
        assert await task == "answer"
        return clock.seconds, time.perf_counter() - started

    counted, waited = asyncio.run(main())
    assert 0 < counted < waited

    async def cancelled():
        clock = HandlerClock()
        task = asyncio.ensure_future(clock.timed(handler(asyncio.get_running_loop().create_future())))
        await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    assert asyncio.run(cancelled())


def test_controller_mutations_use_kafkas_token_bucket():
    """Burst = quota × samples × sample size (2 × 11 × 1 = 22); strict checks the
    bucket before taking (one request may overdraw it), permissive takes first;
    the throttle is the time back to zero, -tokens / quota."""
    mutation = {entity_of([("client-id", "c")]): {"controller_mutation_rate": 2.0}}
    quotas = ClientQuotas(None, mutation)
    user = "User:ANONYMOUS"
    assert quotas.record_mutation(user, "c", 20, strict=True, now_ms=0) == (True, 0)
    assert quotas.record_mutation(user, "c", 10, strict=True, now_ms=0) == (True, 0)  # 2 - 10 = -8
    assert quotas.record_mutation(user, "c", 1, strict=True, now_ms=1000) == (False, 3000)  # -6 left
    assert quotas.record_mutation(user, "c", 1, strict=False, now_ms=1000) == (True, 3500)  # -7
    assert quotas.record_mutation(user, "c", 1, strict=True, now_ms=4500) == (True, 0)  # back to 0
    assert quotas.record_mutation(user, "other", 1000, strict=True, now_ms=0) == (True, 0)  # no quota
    # A full bucket stays at the burst however long it rests.
    assert quotas.record_mutation(user, "c", 22, strict=False, now_ms=10**9) == (True, 0)
    assert quotas.record_mutation(user, "c", 1, strict=False, now_ms=10**9) == (True, 500)
