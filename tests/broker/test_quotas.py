"""broker/quotas.py on its own: Kafka's order of precedence between quota
entities, its windowed rate and throttle time, the file the quotas live in."""

from __future__ import annotations

import json

import pytest

from broker.quotas import QUOTAS_FILE, ClientQuotas, entity_of
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
