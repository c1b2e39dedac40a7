"""Remote log metadata: Kafka's __remote_log_metadata record bytes, the state
machine, and the durable store's replay after a restart."""

from __future__ import annotations

import struct
import uuid

import pytest

from kafka_format.errors import CorruptRecordError
from storage.remote.errors import RemoteStorageError
from storage.remote.metadata import (
    PartitionDeleteState,
    RemoteLogMetadataStore,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    SegmentState,
    decode_record,
    encode_record,
    uuid_string,
)
from tests.storage.remote.helpers import TP, segment_metadata


def update(metadata, state, ts=1_700_000_001_000):
    return RemoteLogSegmentMetadataUpdate(metadata.segment_id, ts, state, 0)


def test_update_record_bytes_are_kafkas_layout():
    metadata = segment_metadata(0, 9, 100)
    data = encode_record(update(metadata, SegmentState.COPY_SEGMENT_FINISHED, 7))
    name = b"events"
    expected = (b"\x01\x01\x00"  # frame version 1, apiKey 1, version 0 (unsigned varints)
                + bytes([len(name) + 1]) + name + TP.topic_id.bytes + struct.pack(">i", 3) + b"\x00"
                + metadata.segment_id.id.bytes + b"\x00"
                + struct.pack(">iq", 0, 7) + b"\x00"  # BrokerId, EventTimestampMs, CustomMetadata null
                + b"\x01" + b"\x00")  # RemoteLogSegmentState, tagged fields
    assert data == expected


def test_segment_record_bytes_are_kafkas_layout():
    metadata = segment_metadata(100, 199, 4096)
    data = encode_record(metadata)
    assert data[:3] == b"\x01\x00\x00"
    body = data[3 + 1 + 6 + 16 + 4 + 1 + 16 + 1:]
    start, end, broker, max_ts, event_ts = struct.unpack_from(">qqiqq", body)
    assert (start, end, broker, max_ts, event_ts) == (100, 199, 0, 1_700_000_000_000, 1_700_000_000_500)
    rest = body[struct.calcsize(">qqiqq"):]
    assert rest == (b"\x02" + struct.pack(">iq", 0, 100) + b"\x00"  # one SegmentLeaderEpochs entry
                    + struct.pack(">i", 4096) + b"\x00" + b"\x00" + b"\x00")  # size, null custom, state, tags


@pytest.mark.parametrize("event", [
    segment_metadata(100, 199, 4096),
    RemoteLogSegmentMetadataUpdate(segment_metadata(0, 1, 2).segment_id, 5, SegmentState.DELETE_SEGMENT_STARTED,
                                   1, b"custom"),
    RemotePartitionDeleteMetadata(TP, PartitionDeleteState.DELETE_PARTITION_MARKED, 9, 0),
])
def test_records_round_trip(event):
    assert decode_record(encode_record(event)) == event


@pytest.mark.parametrize("data, message", [
    (b"\x02\x00\x00", "unknown frame version 2"),
    (b"\x01\x07\x00", "unknown apiKey 7"),
    (b"\x01\x00\x01", "version 1 is not supported"),
    (b"\x01\x01\x00\x07ev", "ends early"),
])
def test_bad_records_are_named(data, message):
    with pytest.raises(CorruptRecordError, match=message):
        decode_record(data)


def test_trailing_bytes_are_refused():
    with pytest.raises(CorruptRecordError, match="1 bytes after the message"):
        decode_record(encode_record(segment_metadata(0, 1, 2)) + b"\x00")


def test_uuid_string_is_kafkas_base64():
    assert uuid_string(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"


def test_only_finished_copies_are_readable_and_the_store_replays_after_restart(tmp_path):
    store = RemoteLogMetadataStore(str(tmp_path / "__remote_log_metadata-0"))
    first, second, crashed = segment_metadata(0, 99, 1000), segment_metadata(100, 199, 1000), \
        segment_metadata(200, 299, 1000)
    for m in (first, second, crashed):
        store.add_segment(m)
    assert store.readable_segments(TP) == [] and store.highest_copied_offset(TP) == -1
    store.update_segment(update(first, SegmentState.COPY_SEGMENT_FINISHED))
    store.update_segment(update(second, SegmentState.COPY_SEGMENT_FINISHED))
    assert [m.start_offset for m in store.readable_segments(TP)] == [0, 100]
    assert store.segment_for_offset(TP, 150).segment_id == second.segment_id
    assert store.segment_for_offset(TP, 250) is None  # COPY_SEGMENT_STARTED is never read
    store.update_segment(update(first, SegmentState.DELETE_SEGMENT_STARTED))
    assert store.remote_log_start_offset(TP) == 100 and store.highest_copied_offset(TP) == 199
    store.close()

    reopened = RemoteLogMetadataStore(str(tmp_path / "__remote_log_metadata-0"))
    assert [m.start_offset for m in reopened.readable_segments(TP)] == [100]
    assert {m.start_offset: m.state for m in reopened.unfinished_segments(TP)} == {
        0: SegmentState.DELETE_SEGMENT_STARTED, 200: SegmentState.COPY_SEGMENT_STARTED}
    assert reopened.remote_size_bytes(TP) == 1000
    reopened.update_segment(update(first, SegmentState.DELETE_SEGMENT_FINISHED))
    reopened.close()
    again = RemoteLogMetadataStore(str(tmp_path / "__remote_log_metadata-0"))
    assert [m.state for m in again.segments(TP)][0] == SegmentState.DELETE_SEGMENT_FINISHED
    again.close()


def test_invalid_transitions_are_refused_and_not_written(tmp_path):
    store = RemoteLogMetadataStore(str(tmp_path / "m"))
    m = segment_metadata(0, 9, 10)
    with pytest.raises(RemoteStorageError, match="is not known"):
        store.update_segment(update(m, SegmentState.COPY_SEGMENT_FINISHED))
    store.add_segment(m)
    with pytest.raises(RemoteStorageError, match="already exists"):
        store.add_segment(m)
    with pytest.raises(RemoteStorageError, match="COPY_SEGMENT_STARTED -> DELETE_SEGMENT_FINISHED"):
        store.update_segment(update(m, SegmentState.DELETE_SEGMENT_FINISHED))
    end = store.log.log_end_offset
    store.close()
    reopened = RemoteLogMetadataStore(str(tmp_path / "m"))
    assert reopened.log.log_end_offset == end == 1
    reopened.close()


def test_partition_delete_events_are_kept(tmp_path):
    store = RemoteLogMetadataStore(str(tmp_path / "m"))
    store.put_partition_delete(RemotePartitionDeleteMetadata(TP, PartitionDeleteState.DELETE_PARTITION_STARTED, 1, 0))
    store.close()
    reopened = RemoteLogMetadataStore(str(tmp_path / "m"))
    assert reopened.partition_delete(TP).state == PartitionDeleteState.DELETE_PARTITION_STARTED
    reopened.close()
