"""kafka_format.codecs: round trips, Kafka's framings, and kafka-python cross-decoding."""

import gzip
import os
import struct

import cramjam
import lz4.frame
import pytest
import zstandard
from xxhash import xxh32_intdigest as xxh32

from kafka_format.codecs import Codec, compress, decompress
from kafka_format.errors import CorruptRecordError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python's imports

PAYLOADS = {
    "empty": b"",
    "one byte": b"x",
    "text": b"the quick brown fox jumps over the lazy dog " * 50,
    "random 100 KiB": os.urandom(100 * 1024),  # spans several snappy and lz4 blocks
    "repetitive 200 KiB": bytes(range(256)) * 800,
}
CODEC_MAGICS = [(c, m) for c in Codec for m in (0, 1, 2) if not (c is Codec.ZSTD and m < 2)]


@pytest.mark.parametrize("codec,magic", CODEC_MAGICS, ids=lambda v: str(getattr(v, "name", v)))
@pytest.mark.parametrize("name", PAYLOADS)
def test_round_trip(codec, magic, name):
    data = PAYLOADS[name]
    packed = compress(codec, data, magic=magic)
    assert isinstance(packed, bytes)
    assert decompress(codec, packed, magic=magic) == data


@pytest.mark.parametrize("codec", list(Codec))
@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_accepts_any_bytes_like(codec, kind):
    data = PAYLOADS["text"]
    packed = compress(codec, kind(data))
    assert decompress(codec, kind(packed)) == data


def test_none_is_identity():
    assert compress(Codec.NONE, b"abc") == b"abc"
    assert decompress(Codec.NONE, memoryview(b"abc")) == b"abc"


# ---- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
@pytest.mark.parametrize("garbage", [b"", b"\x00", b"definitely not compressed data" * 3])
def test_garbage_raises_corrupt_record(codec, garbage):
    if codec is Codec.SNAPPY and garbage == b"\x00":
        assert decompress(codec, garbage) == b""  # a raw snappy block of length 0
        return
    with pytest.raises(CorruptRecordError):
        decompress(codec, garbage)


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_cut_short_payload_raises_corrupt_record(codec):
    packed = compress(codec, PAYLOADS["random 100 KiB"])
    with pytest.raises(CorruptRecordError):
        decompress(codec, packed[: len(packed) // 2])


@pytest.mark.parametrize("codec", [5, 6, 7, -1])
def test_unknown_codec(codec):
    with pytest.raises(CorruptRecordError, match="unknown compression codec"):
        compress(codec, b"x")
    with pytest.raises(CorruptRecordError, match="unknown compression codec"):
        decompress(codec, b"x")


@pytest.mark.parametrize("magic", [0, 1])
def test_zstd_needs_magic_2(magic):
    with pytest.raises(CorruptRecordError, match="magic 2"):
        compress(Codec.ZSTD, b"x", magic=magic)
    with pytest.raises(CorruptRecordError, match="magic 2"):
        decompress(Codec.ZSTD, compress(Codec.ZSTD, b"x"), magic=magic)


# ---- snappy: xerial framing -----------------------------------------------------------------


def test_snappy_writes_xerial_blocks_of_32k_input():
    data = PAYLOADS["random 100 KiB"]
    packed = compress(Codec.SNAPPY, data)
    assert packed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, blocks = 16, []
    while pos < len(packed):
        (length,) = struct.unpack_from(">i", packed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(packed[pos + 4:pos + 4 + length])))
        pos += 4 + length
    assert pos == len(packed)
    assert [len(b) for b in blocks] == [32768, 32768, 32768, 4096]
    assert b"".join(blocks) == data


def test_snappy_empty_input_is_just_the_header():
    assert compress(Codec.SNAPPY, b"") == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)


def test_snappy_reads_a_plain_raw_block():
    data = PAYLOADS["text"]
    assert decompress(Codec.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data


def test_snappy_reads_concatenated_xerial_streams_and_little_endian_versions():
    a, b = PAYLOADS["text"], PAYLOADS["one byte"]
    first = compress(Codec.SNAPPY, a)
    second = bytearray(compress(Codec.SNAPPY, b))
    second[8:16] = struct.pack("<ii", 1, 1)  # as some producers write it
    assert decompress(Codec.SNAPPY, first + bytes(second)) == a + b


def test_snappy_block_overrunning_the_payload_is_corrupt():
    packed = bytearray(compress(Codec.SNAPPY, PAYLOADS["text"]))
    struct.pack_into(">i", packed, 16, len(packed))
    with pytest.raises(CorruptRecordError, match="overruns"):
        decompress(Codec.SNAPPY, packed)


# ---- lz4: Kafka's frame, and the broken magic-0 header checksum ------------------------------


@pytest.mark.parametrize("store_size", [False, True])
@pytest.mark.parametrize("block_size", [4, 5, 6, 7])
def test_xxh32_matches_the_header_checksum_lz4_writes(store_size, block_size):
    frame = lz4.frame.compress(b"data" * 100, block_size=block_size, store_size=store_size)
    descriptor_len = 10 if store_size else 2
    hc = frame[4 + descriptor_len]
    assert (xxh32(frame[4:4 + descriptor_len]) >> 8) & 0xFF == hc


def test_lz4_frame_is_kafkas():
    packed = compress(Codec.LZ4, PAYLOADS["random 100 KiB"], magic=1)
    # magic, FLG = version 01 + independent blocks (no checksums, no size), BD = 64 KB
    assert packed[:6] == b"\x04\x22\x4d\x18\x60\x40"
    assert packed[6] == (xxh32(packed[4:6]) >> 8) & 0xFF
    info = lz4.frame.get_frame_info(packed)
    assert info["block_size_id"] == lz4.frame.BLOCKSIZE_MAX64KB
    assert not info["block_linked"] and not info["content_checksum"] and not info["block_checksum"]
    assert info["content_size"] == 0  # not stored
    assert packed.endswith(b"\x00\x00\x00\x00")  # the end mark


def test_lz4_magic_0_writes_the_broken_header_checksum():
    packed = compress(Codec.LZ4, PAYLOADS["text"], magic=0)
    assert packed[:6] == b"\x04\x22\x4d\x18\x60\x40"
    assert packed[6] == (xxh32(packed[:6]) >> 8) & 0xFF  # over the frame magic too
    assert packed[6] != (xxh32(packed[4:6]) >> 8) & 0xFF
    with pytest.raises(RuntimeError):  # a correct LZ4 reader refuses it
        lz4.frame.decompress(packed)
    with pytest.raises(CorruptRecordError):  # and so does a magic 1 reader
        decompress(Codec.LZ4, packed, magic=1)


def test_lz4_magic_0_reader_ignores_the_header_checksum_it_finds():
    data = PAYLOADS["text"]
    correct = compress(Codec.LZ4, data, magic=1)
    assert decompress(Codec.LZ4, correct, magic=0) == data
    with_size = lz4.frame.compress(data, store_size=True, block_linked=False)
    assert decompress(Codec.LZ4, with_size, magic=0) == data


def test_lz4_accepts_frames_with_content_size_and_checksums():
    data = PAYLOADS["repetitive 200 KiB"]
    frame = lz4.frame.compress(data, store_size=True, content_checksum=True, block_checksum=True)
    assert decompress(Codec.LZ4, frame) == data


# ---- zstd and gzip ---------------------------------------------------------------------------


def test_zstd_frame_without_content_size():
    data = PAYLOADS["repetitive 200 KiB"]
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert zstandard.get_frame_parameters(no_size).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress(Codec.ZSTD, no_size) == data
    streamer = zstandard.ZstdCompressor().compressobj()  # like Kafka's ZstdOutputStream
    streamed = b"".join(streamer.compress(data[i:i + 8192]) for i in range(0, len(data), 8192))
    assert decompress(Codec.ZSTD, streamed + streamer.flush()) == data


def test_zstd_concatenated_frames():
    one = compress(Codec.ZSTD, b"abc")
    assert decompress(Codec.ZSTD, one + one) == b"abcabc"


def test_gzip_stream_and_multiple_members():
    data = PAYLOADS["text"]
    packed = compress(Codec.GZIP, data)
    assert packed[:3] == b"\x1f\x8b\x08"
    assert gzip.decompress(packed) == data
    assert decompress(Codec.GZIP, gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"
    assert decompress(Codec.GZIP, packed + b"\x00\x00") == data  # trailing padding


def test_gzip_corrupt_trailer_crc():
    packed = bytearray(compress(Codec.GZIP, PAYLOADS["text"]))
    packed[-8] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        decompress(Codec.GZIP, packed)


# ---- kafka-python cross-decoding -------------------------------------------------------------

CROSS = ["empty", "text", "random 100 KiB"]


@pytest.mark.parametrize("name", CROSS)
def test_gzip_cross(kafka_codec, name):
    data = PAYLOADS[name]
    assert kafka_codec.gzip_decode(compress(Codec.GZIP, data)) == data
    assert decompress(Codec.GZIP, kafka_codec.gzip_encode(data)) == data


@pytest.mark.parametrize("name", CROSS)
def test_snappy_cross(kafka_codec, name):
    data = PAYLOADS[name]
    ours = compress(Codec.SNAPPY, data)
    assert kafka_codec.snappy_decode(ours) == data if data else True
    theirs = kafka_codec.snappy_encode(data)
    assert theirs == ours  # xerial framing, block for block
    assert decompress(Codec.SNAPPY, theirs) == data
    raw = kafka_codec.snappy_encode(data, xerial_compatible=False)
    assert decompress(Codec.SNAPPY, raw) == data


@pytest.mark.parametrize("name", CROSS)
def test_lz4_cross(kafka_codec, name):
    data = PAYLOADS[name]
    assert kafka_codec.lz4_decode(compress(Codec.LZ4, data, magic=1)) == data
    assert decompress(Codec.LZ4, kafka_codec.lz4_encode(data), magic=1) == data


@pytest.mark.parametrize("name", CROSS)
def test_lz4_old_kafka_cross(kafka_codec, name):
    data = PAYLOADS[name]
    ours = compress(Codec.LZ4, data, magic=0)
    assert kafka_codec.lz4_decode_old_kafka(ours) == data
    theirs = kafka_codec.lz4_encode_old_kafka(data)
    assert theirs[:7] == ours[:7]  # same descriptor, same broken HC
    assert decompress(Codec.LZ4, theirs, magic=0) == data


@pytest.mark.parametrize("name", CROSS)
def test_zstd_cross(kafka_codec, name):
    data = PAYLOADS[name]
    assert kafka_codec.zstd_decode(compress(Codec.ZSTD, data)) == data
    assert decompress(Codec.ZSTD, kafka_codec.zstd_encode(data)) == data
