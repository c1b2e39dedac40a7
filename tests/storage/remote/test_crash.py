"""kill -9 of a copier in the middle of a copy: after a restart nothing is lost,
the interrupted copy's objects are never read and are cleaned up, and every
segment ends up in the store once. kill -9 in the middle of total retention's
deletion of a segment: what is left of it is never read and the next pass
deletes it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from kafka_format import iter_records
from storage.remote.catalog import list_segments
from storage.remote.copier import RemotePartition
from storage.remote.metadata import RemoteLogMetadataStore, SegmentState, uuid_string
from storage.remote.reader import RemoteLogReader
from tests.storage.remote.conftest import open_rsm
from tests.storage.remote.helpers import LOG_TP, fill, open_tiered_log, tiered_config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def settings_of(config) -> dict:
    props = {"remote.log.storage.system.enable": "true", "rsm.config.url": str(config.location)}
    if config.s3_endpoint:
        props["rsm.config.s3.endpoint"] = config.s3_endpoint
    return props


def run_until_paused_then_kill(tmp_path, remote_config, log_dir, metadata_dir, pause_at: int,
                               mode: str = "copy") -> str:
    """Run copier_process until it pauses, kill -9 it; the paused segment's .log key."""
    marker = tmp_path / "paused"
    env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
               PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    process = subprocess.Popen([sys.executable, "-m", "tests.storage.remote.copier_process", str(log_dir),
                                str(metadata_dir), json.dumps(settings_of(remote_config)), str(pause_at),
                                str(marker), mode], cwd=REPO, env=env)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert process.poll() is None, f"the copier exited with {process.returncode} before pausing"
            assert time.monotonic() < deadline, "the copier did not reach the pause"
            time.sleep(0.05)
        os.kill(process.pid, signal.SIGKILL)
        assert process.wait(timeout=30) == -signal.SIGKILL
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return marker.read_text()


def test_kill_9_during_a_copy_loses_nothing_and_reads_no_orphan(tmp_path, remote_config):
    log_dir, metadata_dir = tmp_path / "clicks-0", tmp_path / "__remote_log_metadata-0"
    log = open_tiered_log(log_dir)
    fill(log, 4)
    end = log.log_end_offset
    log.close()
    orphan_key = run_until_paused_then_kill(tmp_path, remote_config, log_dir, metadata_dir, 100)

    # After the crash: two segments finished, the third is COPY_SEGMENT_STARTED and its
    # objects (all of them, .log included) are in the store, but nothing reads them.
    rsm = open_rsm(remote_config)
    metadata = RemoteLogMetadataStore(str(metadata_dir))
    states = {m.start_offset: m.state for m in metadata.segments(LOG_TP)}
    assert states == {0: SegmentState.COPY_SEGMENT_FINISHED, 50: SegmentState.COPY_SEGMENT_FINISHED,
                      100: SegmentState.COPY_SEGMENT_STARTED}
    orphan = next(m for m in metadata.segments(LOG_TP) if m.state == SegmentState.COPY_SEGMENT_STARTED)
    assert uuid_string(orphan.segment_id.id) in orphan_key
    assert any(k.endswith(orphan_key.rsplit("/", 1)[-1]) for k in rsm.list_keys())
    reader = RemoteLogReader(rsm, metadata, cache_bytes=1 << 20, chunk_bytes=4096)
    assert metadata.segment_for_offset(LOG_TP, 120) is None
    # Offline readers (storage/remote/catalog.py) see the two finished segments only: the
    # orphan has every object but no manifest.
    assert [(m.start_offset, m.state) for m in list_segments(rsm)[LOG_TP]] == [
        (0, SegmentState.COPY_SEGMENT_FINISHED), (50, SegmentState.COPY_SEGMENT_FINISHED)]

    # Restart: the log recovers, the copier cleans the orphan and copies the rest once.
    log = open_tiered_log(log_dir)
    assert log.log_end_offset == end
    partition = RemotePartition(log, LOG_TP, rsm, metadata)
    result = partition.copy_pass()
    assert result.cleaned == 1 and [m.start_offset for m in result.copied] == [100, 150]
    assert partition.copy_pass().copied == []
    readable = metadata.readable_segments(LOG_TP)
    assert [(m.start_offset, m.end_offset) for m in readable] == [(0, 49), (50, 99), (100, 149), (150, 199)]
    assert orphan.segment_id not in {m.segment_id for m in readable}
    keys = rsm.list_keys()
    assert not any(uuid_string(orphan.segment_id.id) in k for k in keys)
    # Six objects per segment, each segment once, plus one manifest per finished segment.
    assert len([k for k in keys if not k.endswith(".manifest")]) == 6 * 4
    assert [m.start_offset for m in list_segments(rsm)[LOG_TP]] == [0, 50, 100, 150]
    offsets = []
    offset = 0
    while offset < end:
        got = [r.offset for r in iter_records(reader.read(LOG_TP, offset, 4000)) if r.offset >= offset]
        offsets += got
        offset = got[-1] + 1
    assert offsets == list(range(end))
    log.close()
    metadata.close()


def test_kill_9_during_a_remote_deletion_reads_no_leftover_and_finishes_it(tmp_path, remote_config):
    from tests.storage.remote.copier_process import RETENTION_BYTES

    log_dir, metadata_dir = tmp_path / "clicks-0", tmp_path / "__remote_log_metadata-0"
    config = tiered_config(retention_bytes=RETENTION_BYTES)
    log = open_tiered_log(log_dir, config)
    fill(log, 4)
    log.close()
    leftover_key = run_until_paused_then_kill(tmp_path, remote_config, log_dir, metadata_dir, 50, "delete")

    # After the crash: the first segment is deleted, the second DELETE_SEGMENT_STARTED with
    # some of its objects still in the store; nothing reads them.
    rsm = open_rsm(remote_config)
    metadata = RemoteLogMetadataStore(str(metadata_dir))
    states = {m.start_offset: m.state for m in metadata.segments(LOG_TP)}
    assert states == {0: SegmentState.DELETE_SEGMENT_FINISHED, 50: SegmentState.DELETE_SEGMENT_STARTED,
                      100: SegmentState.COPY_SEGMENT_FINISHED, 150: SegmentState.COPY_SEGMENT_FINISHED}
    leftover = next(m for m in metadata.segments(LOG_TP) if m.state == SegmentState.DELETE_SEGMENT_STARTED)
    assert uuid_string(leftover.segment_id.id) in leftover_key
    assert any(uuid_string(leftover.segment_id.id) in k for k in rsm.list_keys())
    assert metadata.segment_for_offset(LOG_TP, 60) is None
    assert [m.start_offset for m in list_segments(rsm)[LOG_TP]] == [100, 150]

    # Restart: the log start is where the killed pass left it (it moves once the pass
    # ends); the next pass finishes the deletion and moves it past the deleted segments,
    # the local copies of which go.
    log = open_tiered_log(log_dir, config)
    partition = RemotePartition(log, LOG_TP, rsm, metadata)
    assert partition.log_start_offset == 0
    assert partition.copy_pass().cleaned == 1
    assert partition.log_start_offset == log.log_start_offset == 100
    assert log.segments.snapshot().segments[0].base_offset == 100
    assert metadata.segment_for_offset(LOG_TP, 60) is None
    assert {m.start_offset: m.state for m in metadata.segments(LOG_TP)}[50] == SegmentState.DELETE_SEGMENT_FINISHED
    keys = rsm.list_keys()
    assert not any(uuid_string(leftover.segment_id.id) in k for k in keys)
    assert len(keys) == 7 * 2  # the two segments left: six objects and a manifest each
    reader = RemoteLogReader(rsm, metadata, cache_bytes=1 << 20, chunk_bytes=4096)
    assert [r.offset for r in iter_records(reader.read(LOG_TP, 100, 4000))][0] == 100
    log.close()
    metadata.close()
