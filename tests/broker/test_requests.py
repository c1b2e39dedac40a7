"""Every request type against the real broker process, over a real socket."""

from __future__ import annotations

import struct
import threading

import pytest

from kafka_format import build_batch, build_classic, iter_entries, iter_records
from kafka_format.codecs import Codec
from protocol import (
    AlterConfigRequest,
    CommitOffsetRequest,
    CreateTopicRequest,
    DeleteRecordsRequest,
    DeleteTopicRequest,
    DescribeConfigRequest,
    ErrorCode,
    FetchItem,
    FetchOffsetRequest,
    FetchRequest,
    MetadataRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceItem,
    ProduceRequest,
    RequestType,
    encode_request,
)
from storage.config import KEYS as TOPIC_KEYS
from tests.broker.conftest import SHARED_MAX_FRAME, batch
from tests.broker.wire import raw_frame

NONE = ErrorCode.NONE


def values(message_set) -> list[bytes]:
    return [r.value for r in iter_records(bytes(message_set))]


def offsets(message_set) -> list[int]:
    return [r.offset for r in iter_records(bytes(message_set))]


# ---- PRODUCE / FETCH ----------------------------------------------------------------------

def test_produce_fetch_round_trip_every_magic(connect, new_topic):
    c = connect()
    topic = new_topic()
    sets = [batch(b"a", b"b"), build_classic([(None, b"c")], magic=0),
            build_classic([(b"k", b"d", 1234)], magic=1),
            build_batch([(b"k", b"e"), (b"k", b"f")], codec=Codec.GZIP),
            build_classic([(None, b"g"), (None, b"h")], magic=1, codec=Codec.SNAPPY)]
    bases = [c.call(ProduceRequest(topic, 0, s)) for s in sets]
    assert [r.error for r in bases] == [NONE] * 5
    assert [r.base_offset for r in bases] == [0, 2, 3, 4, 6]
    assert all(r.log_append_time == -1 for r in bases)
    fetched = c.call(FetchRequest(topic, 0, 0, 1 << 20, 0))
    assert fetched.error == NONE
    assert values(fetched.message_set) == [b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h"]
    assert offsets(fetched.message_set) == list(range(8))
    # From the middle: the entry holding the offset comes first.
    middle = c.call(FetchRequest(topic, 0, 3, 1 << 20, 0))
    assert offsets(middle.message_set)[0] == 3
    # At the log end: empty at once; past it: OFFSET_OUT_OF_RANGE with an empty set.
    assert c.call(FetchRequest(topic, 0, 8, 1 << 20, 0)).message_set == b""
    out = c.call(FetchRequest(topic, 0, 9, 1 << 20, 0))
    assert out.error == ErrorCode.OFFSET_OUT_OF_RANGE and out.message_set == b""


def test_fetch_max_bytes_cuts_the_first_entry_short(connect, new_topic):
    c = connect()
    topic = new_topic()
    entry = batch(b"x" * 1000)
    c.call(ProduceRequest(topic, 0, entry))
    c.call(ProduceRequest(topic, 0, batch(b"y")))
    cut = c.call(FetchRequest(topic, 0, 0, 100, 0))
    assert cut.error == NONE and len(cut.message_set) == 100
    size = struct.unpack_from(">qi", bytes(cut.message_set))[1]
    assert size + 12 == len(entry)  # the client learns the entry's size and retries
    whole = c.call(FetchRequest(topic, 0, 0, len(entry) + 10, 0))
    assert len(whole.message_set) == len(entry)  # whole entries only after the first


def test_log_append_time_topic_reports_the_time(connect, new_topic):
    c = connect()
    topic = new_topic(configs=[("message.timestamp.type", "LogAppendTime")])
    produced = c.call(ProduceRequest(topic, 0, batch(b"a", timestamp=5)))
    assert produced.error == NONE and produced.log_append_time > 1_600_000_000_000
    (record,) = iter_records(bytes(c.call(FetchRequest(topic, 0, 0, 4096, 0)).message_set))
    assert record.timestamp == produced.log_append_time


def test_produce_errors(connect, new_topic):
    c = connect()
    topic = new_topic(configs=[("max.message.bytes", "200")])
    assert c.call(ProduceRequest("nope", 0, batch(b"a"))).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert c.call(ProduceRequest(topic, 1, batch(b"a"))).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert c.call(ProduceRequest(topic, -1, batch(b"a"))).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert c.call(ProduceRequest("bad name", 0, batch(b"a"))).error == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert c.call(ProduceRequest("__consumer_offsets", 0, batch(b"a"))).error == \
        ErrorCode.INVALID_TOPIC_EXCEPTION
    assert c.call(ProduceRequest(topic, 0, batch(b"x" * 300))).error == ErrorCode.MESSAGE_TOO_LARGE
    small = new_topic(configs=[("segment.bytes", "100")])
    assert c.call(ProduceRequest(small, 0, batch(b"x" * 100))).error == ErrorCode.RECORD_LIST_TOO_LARGE
    compacted = new_topic(configs=[("cleanup.policy", "compact")])
    assert c.call(ProduceRequest(compacted, 0, batch(b"keyless"))).error == ErrorCode.INVALID_RECORD
    assert c.call(ProduceRequest(topic, 0, b"")).error == ErrorCode.CORRUPT_MESSAGE
    for name in (topic, small, compacted):
        (meta,) = c.call(MetadataRequest([name])).topics
        assert meta.partitions[0].log_end_offset == 0  # nothing was written


def test_corrupt_message_set_writes_nothing(connect, new_topic):
    c = connect()
    topic = new_topic()
    good = batch(b"fine")
    bad = bytearray(batch(b"bad crc"))
    bad[-1] ^= 0xFF
    truncated = batch(b"cut")[:-3]
    for corrupt in (bytes(bad), good + bytes(bad), truncated, b"\x00" * 40):
        assert c.call(ProduceRequest(topic, 0, corrupt)).error == ErrorCode.CORRUPT_MESSAGE
    assert c.call(OffsetsRequest(topic, 0, -1, 1)).offsets == (0,)
    assert c.call(FetchRequest(topic, 0, 0, 4096, 0)).message_set == b""
    assert c.call(ProduceRequest(topic, 0, good)).base_offset == 0  # the connection still works


# ---- malformed requests and framing ------------------------------------------------------

def test_garbage_and_unknown_types_get_invalid_request_and_the_connection_stays(connect, new_topic):
    c = connect()
    topic = new_topic()
    c.send_raw(raw_frame(RequestType.FETCH, b"\xff\xff\xff"), RequestType.FETCH)  # truncated body
    c.send_raw(raw_frame(99, b"whatever"), RequestType.FETCH)  # unknown type
    c.send_raw(raw_frame(-1, b""), RequestType.FETCH)
    c.send_raw(struct.pack(">i", 1) + b"\x00", RequestType.FETCH)  # a frame too short for a type
    c.send_raw(raw_frame(RequestType.PRODUCE, b"\x00\x01a\x00\x00\x00\x00\x7f\xff\xff\xff"),
               RequestType.PRODUCE)  # setSize past the frame
    for _ in range(5):
        response = c.recv()
        assert response.error == ErrorCode.INVALID_REQUEST
    assert c.call(MetadataRequest([topic])).topics[0].error == NONE  # same connection, still in step


def test_body_with_trailing_bytes_is_invalid_request(connect, new_topic):
    c = connect()
    topic = new_topic()
    body = encode_request(MetadataRequest([topic]))[6:] + b"xx"
    c.send_raw(raw_frame(RequestType.METADATA, body), RequestType.METADATA)
    assert c.recv().error == ErrorCode.INVALID_REQUEST
    assert c.call(MetadataRequest([topic])).topics[0].error == NONE


def test_frame_over_the_limit_is_answered_then_closed(connect, new_topic):
    c = connect()
    topic = new_topic()
    c.send(ProduceRequest(topic, 0, batch(b"before")))
    c.send_raw(struct.pack(">ih", SHARED_MAX_FRAME + 1, RequestType.PRODUCE), RequestType.PRODUCE)
    assert c.recv().error == NONE  # the request before it is still answered, in order
    assert c.recv().error == ErrorCode.INVALID_REQUEST
    assert c.at_eof()
    other = connect()  # everyone else is fine
    assert other.call(OffsetsRequest(topic, 0, -1, 1)).offsets == (1,)


def test_frame_exactly_at_the_limit_is_read(connect, new_topic):
    c = connect()
    topic = new_topic()
    header = encode_request(ProduceRequest(topic, 0, b""))
    padding = SHARED_MAX_FRAME - (len(header) - 4)
    frame = encode_request(ProduceRequest(topic, 0, b"\x00" * padding))
    assert struct.unpack_from(">i", frame)[0] == SHARED_MAX_FRAME
    c.send_raw(frame, RequestType.PRODUCE)
    assert c.recv().error == ErrorCode.CORRUPT_MESSAGE  # read whole, refused by storage


def test_pipelined_requests_are_answered_in_order(connect, new_topic):
    c = connect()
    topic = new_topic()
    expected = []
    for i in range(60):
        kind = i % 4
        if kind == 0:
            c.send(ProduceRequest(topic, 0, batch(b"v%d" % i)))
        elif kind == 1:
            c.send(OffsetsRequest(topic, 0, -1, 1))
        elif kind == 2:
            c.send(FetchRequest(topic, 0, i // 4, 4096, 0))
        else:
            c.send(MetadataRequest([topic]))
        expected.append(kind)
    produced = 0
    for i, kind in enumerate(expected):
        response = c.recv()
        assert response.error == NONE
        if kind == 0:
            assert response.base_offset == produced
            produced += 1
        elif kind == 1:
            assert response.offsets == (produced,)  # sees every earlier produce
        elif kind == 2:
            assert values(response.message_set)[0] == b"v%d" % (4 * (i // 4))
        else:
            assert response.topics[0].partitions[0].log_end_offset == produced


# ---- long-poll FETCH -----------------------------------------------------------------------

def test_long_poll_is_woken_by_a_produce_on_another_connection(connect, new_topic):
    topic = new_topic()
    waiter, producer = connect(), connect()
    waiter.send(FetchRequest(topic, 0, 0, 4096, 60_000))
    # The broker answers a FETCH at the log end only after data or the timeout; a
    # METADATA on the same connection queues behind it, so once the produce is done
    # the first answer must be the data, long before the 60 s guard.
    produced = producer.call(ProduceRequest(topic, 0, batch(b"wake up")))
    assert produced.error == NONE
    fetched = waiter.recv()
    assert fetched.error == NONE and values(fetched.message_set) == [b"wake up"]


def test_long_poll_times_out_with_an_empty_set(connect, new_topic):
    topic = new_topic()
    c = connect()
    response = c.call(FetchRequest(topic, 0, 0, 4096, 200))
    assert response.error == NONE and response.message_set == b""
    # Not at the log end: no wait at all, data comes back.
    c.call(ProduceRequest(topic, 0, batch(b"x")))
    assert values(c.call(FetchRequest(topic, 0, 0, 4096, 60_000)).message_set) == [b"x"]


def test_long_poll_does_not_block_other_connections(connect, new_topic):
    topic = new_topic()
    waiter, other = connect(), connect()
    waiter.send(FetchRequest(topic, 0, 0, 4096, 60_000))
    for _ in range(5):
        assert other.call(MetadataRequest([topic])).error == NONE
    other.call(ProduceRequest(topic, 0, batch(b"done")))
    assert values(waiter.recv().message_set) == [b"done"]


def test_long_poll_ends_when_the_topic_is_deleted(connect, new_topic):
    topic = new_topic()
    waiter = connect()
    waiter.send(FetchRequest(topic, 0, 0, 4096, 60_000))
    assert connect().call(DeleteTopicRequest(topic)).error == NONE
    assert waiter.recv().error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_concurrent_long_polls_on_one_partition(connect, new_topic):
    topic = new_topic()
    waiters = [connect() for _ in range(10)]
    for w in waiters:
        w.send(FetchRequest(topic, 0, 0, 4096, 60_000))
    results = []
    threads = [threading.Thread(target=lambda w=w: results.append(w.recv())) for w in waiters]
    for t in threads:
        t.start()
    connect().call(ProduceRequest(topic, 0, batch(b"all")))
    for t in threads:
        t.join(60)
    assert [values(r.message_set) for r in results] == [[b"all"]] * 10


# ---- MULTIFETCH / MULTIPRODUCE ---------------------------------------------------------------

def test_multiproduce_and_multifetch_errors_per_item_in_order(connect, new_topic):
    c = connect()
    topic = new_topic(partitions=2)
    bad = bytearray(batch(b"bad"))
    bad[-1] ^= 1
    response = c.call(MultiProduceRequest([
        ProduceItem(topic, 0, batch(b"a0")),
        ProduceItem("missing", 0, batch(b"x")),
        ProduceItem(topic, 1, batch(b"b0", b"b1")),
        ProduceItem(topic, 0, bytes(bad)),
        ProduceItem(topic, 7, batch(b"x")),
        ProduceItem("in valid", 0, batch(b"x")),
        ProduceItem(topic, 0, batch(b"a1")),
    ]))
    assert response.error == NONE
    assert [(i.error, i.base_offset) for i in response.items] == [
        (NONE, 0), (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1), (NONE, 0), (ErrorCode.CORRUPT_MESSAGE, -1),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1), (ErrorCode.INVALID_TOPIC_EXCEPTION, -1), (NONE, 1)]
    fetched = c.call(MultiFetchRequest([
        FetchItem(topic, 0, 0, 4096),
        FetchItem(topic, 1, 1, 4096),
        FetchItem("missing", 0, 0, 4096),
        FetchItem(topic, 0, 99, 4096),
        FetchItem(topic, 1, 2, 4096),
        FetchItem(topic, 0, 0, -1),
    ]))
    assert fetched.error == NONE
    assert [i.error for i in fetched.items] == [NONE, NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                ErrorCode.OFFSET_OUT_OF_RANGE, NONE, ErrorCode.INVALID_REQUEST]
    assert values(fetched.items[0].message_set) == [b"a0", b"a1"]
    assert values(fetched.items[1].message_set) == [b"b0", b"b1"]  # a batch keeps its range
    assert [bytes(i.message_set) for i in fetched.items[2:]] == [b""] * 4
    empty = c.call(MultiFetchRequest([]))
    assert empty.error == NONE and empty.items == ()


# ---- OFFSETS ----------------------------------------------------------------------------------

def test_offsets_by_time(connect, new_topic):
    c = connect()
    topic = new_topic()
    for i, ts in enumerate((1000, 2000, 3000)):
        c.call(ProduceRequest(topic, 0, build_batch([(None, b"%d" % i, ts), (None, b"x", ts + 1)])))
    assert c.call(OffsetsRequest(topic, 0, -1, 1)).offsets == (6,)
    assert c.call(OffsetsRequest(topic, 0, -2, 1)).offsets == (0,)
    assert c.call(OffsetsRequest(topic, 0, 0, 1)).offsets == (0,)
    assert c.call(OffsetsRequest(topic, 0, 1500, 1)).offsets == (2,)
    assert c.call(OffsetsRequest(topic, 0, 2001, 5)).offsets == (3,)
    assert c.call(OffsetsRequest(topic, 0, 3002, 1)).offsets == ()
    assert c.call(OffsetsRequest(topic, 0, -1, 0)).offsets == ()  # maxNumber caps the count
    assert c.call(OffsetsRequest(topic, 0, 1500, -3)).offsets == ()
    assert c.call(OffsetsRequest(topic, 0, -3, 1)).error == ErrorCode.INVALID_REQUEST
    assert c.call(OffsetsRequest("missing", 0, -1, 1)).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# ---- topics, METADATA, configs -----------------------------------------------------------------

def test_create_topic_errors(connect, new_topic):
    c = connect()
    topic = new_topic()
    cases = [
        (CreateTopicRequest(topic, 1), ErrorCode.TOPIC_ALREADY_EXISTS),
        (CreateTopicRequest("bad name", 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (CreateTopicRequest("", 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (CreateTopicRequest("a" * 250, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (CreateTopicRequest("p0", 0), ErrorCode.INVALID_PARTITIONS),
        (CreateTopicRequest("p0", -5), ErrorCode.INVALID_PARTITIONS),
        (CreateTopicRequest("p0", 1, [("retention.ms", "abc")]), ErrorCode.INVALID_CONFIG),
        (CreateTopicRequest("p0", 1, [("unknown.key", "1")]), ErrorCode.INVALID_CONFIG),
        (CreateTopicRequest("p0", 1, [("retention.ms", None)]), ErrorCode.INVALID_CONFIG),
        (CreateTopicRequest("__consumer_offsets", 1), ErrorCode.TOPIC_ALREADY_EXISTS),
    ]
    for request, error in cases:
        assert c.call(request).error == error, request
    c.call(CreateTopicRequest("dot.collide", 1))
    assert c.call(CreateTopicRequest("dot_collide", 1)).error == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert c.call(CreateTopicRequest("defaulted", -1)).error == NONE  # -1 = num.partitions
    assert len(c.call(MetadataRequest(["defaulted"])).topics[0].partitions) == 1


def test_metadata(connect, new_topic):
    c = connect()
    a, b = new_topic(partitions=3), new_topic()
    c.call(ProduceRequest(a, 2, batch(b"1", b"2")))
    everything = c.call(MetadataRequest())
    names = [t.topic for t in everything.topics]
    assert a in names and b in names and "__consumer_offsets" not in names
    assert names == sorted(names)
    response = c.call(MetadataRequest([a, "missing", "bad name", "__consumer_offsets"]))
    ta, missing, bad, internal = response.topics
    assert [(p.partition, p.log_start_offset, p.log_end_offset) for p in ta.partitions] == \
        [(0, 0, 0), (1, 0, 0), (2, 0, 2)]
    assert (missing.error, missing.partitions) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ())
    assert (bad.error, bad.partitions) == (ErrorCode.INVALID_TOPIC_EXCEPTION, ())
    assert internal.error == NONE and len(internal.partitions) == 50


def test_describe_alter_delete(connect, new_topic):
    c = connect()
    topic = new_topic(configs=[("retention.ms", "1000")])
    described = dict(c.call(DescribeConfigRequest(topic)).configs)
    assert described["retention.ms"] == "1000" and described["cleanup.policy"] == "delete"
    assert set(described) == {key.name for key in TOPIC_KEYS}  # every effective setting
    assert c.call(AlterConfigRequest(topic, [("retention.ms", None), ("segment.bytes", "2000")])).error == NONE
    described = dict(c.call(DescribeConfigRequest(topic)).configs)
    assert described["retention.ms"] == "604800000" and described["segment.bytes"] == "2000"
    assert c.call(AlterConfigRequest(topic, [("segment.bytes", "1")])).error == ErrorCode.INVALID_CONFIG
    assert c.call(AlterConfigRequest(topic, [("nope", "1")])).error == ErrorCode.INVALID_CONFIG
    assert c.call(AlterConfigRequest(topic, [("flush.ms", "1"), ("flush.ms", "2")])).error == \
        ErrorCode.INVALID_REQUEST
    assert c.call(AlterConfigRequest("missing", [])).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert c.call(DescribeConfigRequest("missing")).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert c.call(DescribeConfigRequest("bad name")).error == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert dict(c.call(DescribeConfigRequest("__consumer_offsets")).configs)["cleanup.policy"] == "compact"
    assert c.call(DeleteTopicRequest(topic)).error == NONE
    assert c.call(DeleteTopicRequest(topic)).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert c.call(DeleteTopicRequest("__consumer_offsets")).error == ErrorCode.INVALID_REQUEST
    assert c.call(ProduceRequest(topic, 0, batch(b"x"))).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert c.call(CreateTopicRequest(topic, 2)).error == NONE  # the name is free again
    assert c.call(OffsetsRequest(topic, 1, -1, 1)).offsets == (0,)


def test_delete_records(connect, new_topic):
    c = connect()
    topic = new_topic()
    assert c.call(DeleteRecordsRequest(topic, 0, -1)).log_start_offset == 0  # empty log: end == start
    c.call(ProduceRequest(topic, 0, batch(b"a", b"b")))
    assert c.call(DeleteRecordsRequest(topic, 0, 0)).log_start_offset == 0
    assert c.call(DeleteRecordsRequest(topic, 0, 3)).error == ErrorCode.OFFSET_OUT_OF_RANGE
    assert c.call(DeleteRecordsRequest(topic, 0, -2)).error == ErrorCode.OFFSET_OUT_OF_RANGE
    assert c.call(DeleteRecordsRequest(topic, 0, 1)).log_start_offset == 1
    assert c.call(DeleteRecordsRequest(topic, 0, 0)).log_start_offset == 1  # never moves back
    assert c.call(FetchRequest(topic, 0, 0, 1000, 0)).error == ErrorCode.OFFSET_OUT_OF_RANGE
    assert c.call(OffsetsRequest(topic, 0, -2, 1)).offsets == (1,)
    assert c.call(DeleteRecordsRequest(topic, 0, -1)).log_start_offset == 2
    assert c.call(DeleteRecordsRequest("missing", 0, 0)).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# ---- committed offsets --------------------------------------------------------------------------

def test_commit_and_fetch_offsets(connect, new_topic):
    c = connect()
    topic = new_topic(partitions=2)
    nothing = c.call(FetchOffsetRequest("g", topic, 0))
    assert (nothing.error, nothing.offset, nothing.metadata) == (NONE, -1, None)
    assert c.call(CommitOffsetRequest("g", topic, 0, 10, "meta")).error == NONE
    assert c.call(CommitOffsetRequest("g", topic, 1, 20, None)).error == NONE
    assert c.call(CommitOffsetRequest("g", topic, 0, 11, "")).error == NONE
    assert c.call(CommitOffsetRequest("h", topic, 0, 99, "other group")).error == NONE
    got = [c.call(FetchOffsetRequest(g, topic, p)) for g, p in (("g", 0), ("g", 1), ("h", 0), ("h", 1))]
    assert [(r.offset, r.metadata) for r in got] == [(11, ""), (20, None), (99, "other group"), (-1, None)]
    assert c.call(CommitOffsetRequest("g", "missing", 0, 1, None)).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert c.call(CommitOffsetRequest("g", topic, 2, 1, None)).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert c.call(CommitOffsetRequest("g", "bad name", 0, 1, None)).error == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert c.call(CommitOffsetRequest("", topic, 0, 1, None)).error == 24  # Kafka's INVALID_GROUP_ID
    assert c.call(CommitOffsetRequest("g", topic, 0, 1, "m" * 5000)).error == 12  # OFFSET_METADATA_TOO_LARGE
    assert c.call(FetchOffsetRequest("g", topic, 0)).offset == 11  # refused commits changed nothing
    # The commits are records in __consumer_offsets, readable like any partition.
    meta = {p.partition: p.log_end_offset for p in c.call(MetadataRequest(["__consumer_offsets"])).topics[0].partitions}
    assert sum(meta.values()) >= 4
    # Deleting the topic drops its committed offsets.
    c.call(DeleteTopicRequest(topic))
    c.call(CreateTopicRequest(topic, 1))
    assert c.call(FetchOffsetRequest("g", topic, 0)).offset == -1


def test_offsets_topic_records_use_kafka_layout(connect, new_topic):
    from broker.state.group_offsets import decode_key, decode_value, partition_for
    c = connect()
    topic = new_topic()
    group = "layout-group"
    c.call(CommitOffsetRequest(group, topic, 0, 1234, "hello"))
    partition = partition_for(group, 50)
    end = c.call(OffsetsRequest("__consumer_offsets", partition, -1, 1)).offsets[0]
    fetched = c.call(FetchRequest("__consumer_offsets", partition, end - 1, 1 << 20, 0))
    entries = list(iter_entries(bytes(fetched.message_set)))
    assert entries[-1].magic == 2
    record = [r for e in entries for r in e.records()][-1]
    assert decode_key(record.key) == (group, topic, 0)
    value = decode_value(record.value)
    assert (value.offset, value.metadata, value.leader_epoch) == (1234, "hello", -1)  # native: no epoch
    assert record.value[:2] == b"\x00\x03" and record.key[:2] == b"\x00\x01"


def test_fetch_from_unknown_and_bad_names(connect):
    c = connect()
    assert c.call(FetchRequest("missing", 0, 0, 10, 0)).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert c.call(FetchRequest("bad/name", 0, 0, 10, 0)).error == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert c.call(FetchOffsetRequest("g", "bad/name", 0)).error == ErrorCode.INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize("max_bytes", [-1])
def test_negative_fetch_max_bytes(connect, new_topic, max_bytes):
    topic = new_topic()
    assert connect().call(FetchRequest(topic, 0, 0, max_bytes, 0)).error == ErrorCode.INVALID_REQUEST
