"""Kafka's compression codecs, framed exactly as Kafka frames them.

Contract:
- `compress(codec, data, *, magic=2)` returns the bytes Kafka's own writer would
  put in a compressed message's value (magic 0/1) or after a record batch's
  61-byte header (magic 2). `decompress` is its inverse and also accepts every
  framing Kafka's readers accept (see per-codec notes below).
- `data` may be bytes, bytearray or memoryview; results are always `bytes`.
- `level` (compress only): the codec's level as Kafka's compression.*.level
  settings give it (KIP-390); None is Kafka's default for the codec (gzip 6,
  lz4 9 = lz4's fast compressor as Kafka's default, zstd 3). Snappy has none.
- Every failure (unknown codec, zstd before magic 2, a corrupt or cut-short
  payload) raises `kafka_format.errors.CorruptRecordError` with a message saying what
  was wrong. Callers that need a different error class (the validator refuses
  zstd before magic 2 as an invalid record) check first.

Framings, per codec:

    GZIP    one gzip stream (RFC 1952) as java.util.zip.GZIPOutputStream writes
            it; on read, concatenated members and trailing zero padding are fine.

    SNAPPY  xerial blocks, as org.xerial.snappy.SnappyOutputStream writes them:

              0        8          12         16
              | magic  | version  | compat   | len:int32 | raw snappy | len | ...
              magic = 82 'SNAPPY' 00, version = compat = 1,
              each block holds at most 32 KiB of input.

            On read we also accept one plain raw snappy block (what some
            clients send) and a second xerial header in the middle of the
            stream (xerial's reader allows concatenated streams).

    LZ4     one LZ4 frame as Kafka's KafkaLZ4BlockOutputStream writes it:
            64 KB blocks, independent blocks, no block checksum, no content
            size, no content checksum. Magic 0 (Kafka < 0.10) computed the
            frame descriptor's header checksum (HC) over the frame magic too
            (KAFKA-3160); we write that broken HC for magic 0 and, like Kafka's
            reader, ignore whatever HC a magic-0 frame carries.

    ZSTD    one or more zstd frames; Kafka's streaming writer omits the content
            size, so the reader must not rely on it. Only legal with magic 2.
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum
from typing import Any

import cramjam
import lz4.frame
from xxhash import xxh32_intdigest as xxh32

from .errors import CorruptRecordError

__all__ = ["Codec", "compress", "decompress"]


class Codec(IntEnum):
    """The codec number stored in attribute bits 0-2 of every magic."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# Kafka's defaults: gzip uses Deflater.DEFAULT_COMPRESSION (6), zstd level 3; lz4's
# default level 9 keeps the fast compressor, other levels use lz4 HC (Kafka's Lz4Compression).
GZIP_LEVEL = 6
ZSTD_LEVEL = 3
LZ4_DEFAULT_LEVEL = 9
LZ4_MAX_FRAME_LEVEL = 16  # what the lz4 frame library accepts; higher levels compress as 16

# ---- snappy: xerial framing --------------------------------------------------

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, compatible version
XERIAL_VERSION = XERIAL_COMPAT = 1
XERIAL_BLOCK_INPUT = 32 * 1024  # SnappyOutputStream's default block size
XERIAL_BLOCK_LENGTH = struct.Struct(">i")
_XERIAL_PREFIX = XERIAL_HEADER.pack(XERIAL_MAGIC, XERIAL_VERSION, XERIAL_COMPAT)


def _snappy_compress(data: memoryview) -> bytes:
    out = [_XERIAL_PREFIX]
    for start in range(0, len(data), XERIAL_BLOCK_INPUT):
        block = bytes(cramjam.snappy.compress_raw(data[start:start + XERIAL_BLOCK_INPUT]))
        out.append(XERIAL_BLOCK_LENGTH.pack(len(block)))
        out.append(block)
    return b"".join(out)


def _snappy_decompress(data: memoryview) -> bytes:
    magic_len = len(XERIAL_MAGIC)
    if len(data) < XERIAL_HEADER.size or data[:magic_len] != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(data))
    # Version and compat are not checked: xerial only ever wrote 1, and some
    # producers are known to write them little-endian (kafka-python #2414).
    out = []
    pos, end = XERIAL_HEADER.size, len(data)
    while pos < end:
        if data[pos:pos + magic_len] == XERIAL_MAGIC:  # a concatenated stream
            pos += XERIAL_HEADER.size
            continue
        if end - pos < XERIAL_BLOCK_LENGTH.size:
            raise CorruptRecordError("snappy: xerial block length is cut short")
        (length,) = XERIAL_BLOCK_LENGTH.unpack_from(data, pos)
        pos += XERIAL_BLOCK_LENGTH.size
        if length < 0 or pos + length > end:
            raise CorruptRecordError(f"snappy: xerial block of {length} bytes overruns the payload")
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos:pos + length])))
        pos += length
    return b"".join(out)


# ---- gzip ----------------------------------------------------------------------

GZIP_WBITS = 31  # zlib's window bits for a gzip wrapper (16 + 15)


def _gzip_compress(data: memoryview, level: int | None = None) -> bytes:
    # zlib's gzip wrapper writes mtime 0 and no file name, as Java's does.
    deflater = zlib.compressobj(GZIP_LEVEL if level is None or level < 0 else level, zlib.DEFLATED, GZIP_WBITS)
    return deflater.compress(data) + deflater.flush()


def _gzip_decompress(data: memoryview) -> bytes:
    out = []
    rest: bytes | memoryview = data
    while True:
        inflater = zlib.decompressobj(GZIP_WBITS)
        out.append(inflater.decompress(rest))
        if not inflater.eof:
            raise CorruptRecordError("gzip: stream is cut short")
        rest = inflater.unused_data.lstrip(b"\x00")
        if not rest:
            return b"".join(out)


# ---- lz4 -------------------------------------------------------------------------

LZ4_FRAME_MAGIC_SIZE = 4
LZ4_FLG_POS = LZ4_FRAME_MAGIC_SIZE  # the frame descriptor starts with FLG, BD
LZ4_FLG_CONTENT_SIZE = 0x08
LZ4_FLG_DICT_ID = 0x01


def _lz4_compress(data: memoryview, magic: int, level: int | None = None) -> bytes:
    frame_level = 0 if level is None or level == LZ4_DEFAULT_LEVEL else min(level, LZ4_MAX_FRAME_LEVEL)
    frame = lz4.frame.compress(
        data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
        block_checksum=False, content_checksum=False, store_size=False, compression_level=frame_level)
    if magic != 0:
        return frame
    # Our descriptor is FLG, BD, then HC at byte 6; old Kafka hashed bytes 0..5.
    hc_pos = LZ4_FLG_POS + 2
    broken = bytearray(frame)
    broken[hc_pos] = (xxh32(frame[:hc_pos]) >> 8) & 0xFF
    return bytes(broken)


def _lz4_fix_header_checksum(data: memoryview) -> bytearray:
    """A copy of a magic-0 frame whose HC is right, whatever HC it carried."""
    if len(data) < LZ4_FLG_POS + 3:
        raise CorruptRecordError("lz4: frame header is cut short")
    flg = data[LZ4_FLG_POS]
    descriptor_len = 2 + (8 if flg & LZ4_FLG_CONTENT_SIZE else 0) + (4 if flg & LZ4_FLG_DICT_ID else 0)
    hc_pos = LZ4_FLG_POS + descriptor_len
    if len(data) <= hc_pos:
        raise CorruptRecordError("lz4: frame header is cut short")
    fixed = bytearray(data)
    fixed[hc_pos] = (xxh32(data[LZ4_FLG_POS:hc_pos]) >> 8) & 0xFF
    return fixed


# ---- the public pair -----------------------------------------------------------


def _check(codec: int, magic: int) -> Codec:
    try:
        known = Codec(codec)
    except ValueError:
        raise CorruptRecordError(f"unknown compression codec {codec}") from None
    if known is Codec.ZSTD and magic < 2:
        raise CorruptRecordError(f"zstd compression needs magic 2, not magic {magic}")
    return known


def _lz4_decompress(data: memoryview, magic: int) -> bytes:
    return lz4.frame.decompress(_lz4_fix_header_checksum(data) if magic == 0 else data)


# codec -> (compress(payload view, magic, level), decompress(payload view, magic))
_FRAMINGS: dict[Codec, tuple[Any, Any]] = {
    Codec.NONE: (lambda data, magic, level: bytes(data), lambda data, magic: bytes(data)),
    Codec.GZIP: (lambda data, magic, level: _gzip_compress(data, level),
                 lambda data, magic: _gzip_decompress(data)),
    Codec.SNAPPY: (lambda data, magic, level: _snappy_compress(data),
                   lambda data, magic: _snappy_decompress(data)),
    Codec.LZ4: (_lz4_compress, _lz4_decompress),
    Codec.ZSTD: (lambda data, magic, level: bytes(cramjam.zstd.compress(
                     data, level=ZSTD_LEVEL if level is None else level)),
                 lambda data, magic: bytes(cramjam.zstd.decompress(data))),
}


def _run(codec: int, data, magic: int, direction: int, failure: str, level: int | None = None) -> bytes:
    known = _check(codec, magic)
    try:
        if direction == 0:
            return _FRAMINGS[known][0](memoryview(data), magic, level)
        return _FRAMINGS[known][1](memoryview(data), magic)
    except CorruptRecordError:
        raise
    except Exception as e:  # the libraries raise a zoo of types
        raise CorruptRecordError(f"{known.name.lower()}: {failure}: {e}") from e


def compress(codec: int, data: bytes | bytearray | memoryview, *, magic: int = 2,
             level: int | None = None) -> bytes:
    """`data` compressed and framed the way Kafka's writer for `magic` does it."""
    return _run(codec, data, magic, 0, "cannot compress", level)


def decompress(codec: int, data: bytes | bytearray | memoryview, *, magic: int = 2) -> bytes:
    """The bytes `data` holds, compressed with `codec` by a writer for `magic`."""
    return _run(codec, data, magic, 1, "corrupt payload")
