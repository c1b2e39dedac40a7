/* The per-entry fast paths of kafka_format in C: the shallow scan, the
 * offset assignment of uncompressed classic messages and batches, and the
 * sparse index entries of a write. A set of small classic messages holds about a thousand entries per
 * MiB; in Python each one costs about a microsecond of bytecode, here tens of
 * nanoseconds plus its CRC.
 *
 * Contract: every function walks *good, plain* entries only and stops, without
 * raising, at the first entry it does not take (bad, cut short, compressed, a
 * batch where it wants a message, one needing a timestamp rewrite). The Python
 * caller then handles that one entry with its own code, which gives the same
 * errors and messages as without this module, and calls back in for the rest.
 * So the C paths never decide an error; they only skip Python for entries
 * Python would have accepted unchanged, and the tests compare both on random
 * and corrupt input (tests/storage/test_crecords.py).
 *
 * The layouts (field positions, sizes, attribute bits) come from format.h,
 * shared with storage/_ccleaner.c.
 *
 * CRCs are computed here by crc_fold.h where the CPU allows (CRC32 with
 * PCLMULQDQ, CRC32C with AVX-512 VPCLMULQDQ), else by the Python callables the
 * caller passes (zlib's crc32, the crc32c package), which beat a table loop.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "format.h"

static const Py_ssize_t KEY_LENGTH_OFFSET[2] = {V0_KEY_LENGTH_OFFSET, V1_KEY_LENGTH_OFFSET};
static const Py_ssize_t MIN_SIZE_FIELD[2] = {V0_MIN_SIZE_FIELD, V1_MIN_SIZE_FIELD};

static inline uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline int32_t sbe32(const unsigned char *p) { return (int32_t)be32(p); }

static inline int64_t sbe64(const unsigned char *p) {
    return (int64_t)(((uint64_t)be32(p) << 32) | (uint64_t)be32(p + 4));
}

static inline void put32(unsigned char *p, int32_t value) {
    uint32_t v = (uint32_t)value;
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static inline void put64(unsigned char *p, int64_t value) {
    uint64_t v = (uint64_t)value;
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xFF);
        v >>= 8;
    }
}

/* ---- CRCs ----------------------------------------------------------------------
 *
 * CRC32 (classic messages) and CRC32C (batches) by carry-less multiply folding:
 * crc_fold.h. CRC32 is computed here whenever the CPU has PCLMULQDQ (a call
 * through Python per 1 KiB message would cost more than the CRC); CRC32C only
 * on the AVX-512 path, since below it the crc32c package (the SSE4.2 crc32
 * instruction) is faster than 128-bit folding. Otherwise the caller's callable
 * (ISA-L's crc32, the crc32c package) is used. */
#include "crc_fold.h"

static inline int crc32_in_c(void) { return crc_best_path >= CRC_SSE; }
static inline int crc32c_in_c(void) { return crc_best_path >= CRC_AVX512; }

static uint32_t crc32_native(const unsigned char *p, Py_ssize_t n) {
    return crc_compute(&crc32_ieee, crc_best_path, p, (size_t)n);
}

static uint32_t crc32c_native(const unsigned char *p, Py_ssize_t n) {
    return crc_compute(&crc32_castagnoli, crc_best_path, p, (size_t)n);
}

/* crc(data[start:end]) through a Python callable; -1 with an exception set on failure. */
static int64_t call_crc(PyObject *crc, const unsigned char *data, Py_ssize_t start, Py_ssize_t end) {
    PyObject *view = PyMemoryView_FromMemory((char *)data + start, end - start, PyBUF_READ);
    if (view == NULL)
        return -1;
    PyObject *result = PyObject_CallOneArg(crc, view);
    Py_DECREF(view);
    if (result == NULL)
        return -1;
    unsigned long long value = PyLong_AsUnsignedLongLong(result);
    Py_DECREF(result);
    if (value == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    return (int64_t)(value & 0xFFFFFFFFu);
}

/* Whether an entry's stored CRC matches its bytes (a batch: CRC32C over
 * attributes..end; a classic message: CRC32 over magic..end): 1 yes, 0 no, -1
 * with an exception set (a Python callable, used without the C path, failed). */
static int entry_crc_ok(const unsigned char *b, Py_ssize_t pos, Py_ssize_t entry_end, int magic, PyObject *crc32,
                        PyObject *crc32c) {
    int64_t crc;
    if (magic == MAGIC_V2)
        crc = crc32c_in_c() ? (int64_t)crc32c_native(b + pos + BATCH_CRC_START, entry_end - pos - BATCH_CRC_START)
                            : call_crc(crc32c, b, pos + BATCH_CRC_START, entry_end);
    else
        crc = crc32_in_c() ? (int64_t)crc32_native(b + pos + MAGIC_OFFSET, entry_end - pos - MAGIC_OFFSET)
                           : call_crc(crc32, b, pos + MAGIC_OFFSET, entry_end);
    return crc < 0 ? -1 : (uint32_t)crc == be32(b + pos + (magic == MAGIC_V2 ? BATCH_CRC_OFFSET : CLASSIC_CRC_OFFSET));
}

/* The index files' entries (offset_index.OffsetIndex.ENTRY, time_index.TimeIndex.ENTRY). */
#define OFFSET_ENTRY_BYTES 8
#define TIME_ENTRY_BYTES 12

/* Whether a value fits an index field: a relative offset or a position, 0..INT32_MAX. */
static inline int fits_index_field(long long value) { return 0 <= value && value <= INT32_MAX; }

/* The fields of an EntryTable row (records.entries.ENTRY_ROW: six native int64s). */
enum { ROW_POSITION, ROW_SIZE, ROW_MAGIC, ROW_LAST_OFFSET, ROW_MAX_TIMESTAMP, ROW_CODEC, ROW_FIELDS };
#define ROW_BYTES ((Py_ssize_t)(ROW_FIELDS * sizeof(int64_t)))

/* Rows appended to an EntryTable's bytearray during one walk. The bytearray is
 * grown by doubling and cut to the rows written when the walk ends (rows_end,
 * on every way out): CPython grows a bytearray by an eighth, so a thousand
 * 48-byte appends (a MiB of 1 KiB messages) would reallocate and copy it
 * dozens of times. */
typedef struct {
    PyObject *rows;
    Py_ssize_t used; /* bytes of real rows; the bytearray may be longer until rows_end */
} row_writer;

static void rows_begin(row_writer *writer, PyObject *rows) {
    writer->rows = rows;
    writer->used = PyByteArray_GET_SIZE(rows);
}

/* Field `index` of a packed row of native int64s. */
static inline void put_native64(char *row, int index, int64_t value) {
    memcpy(row + index * sizeof(int64_t), &value, sizeof(value));
}

static int append_row(row_writer *writer, Py_ssize_t position, Py_ssize_t size, int magic, int64_t last_offset,
                      int64_t max_timestamp, int codec) {
    Py_ssize_t room = PyByteArray_GET_SIZE(writer->rows);
    if (writer->used + ROW_BYTES > room &&
        PyByteArray_Resize(writer->rows, room > 32 * ROW_BYTES ? 2 * room : 64 * ROW_BYTES) < 0)
        return -1;
    /* Field by field into place: a row built on the stack and copied whole
     * is read back with 16-byte loads over 8-byte stores, which cannot be
     * store-forwarded. */
    char *row = PyByteArray_AS_STRING(writer->rows) + writer->used;
    put_native64(row, ROW_POSITION, position);
    put_native64(row, ROW_SIZE, size);
    put_native64(row, ROW_MAGIC, magic);
    put_native64(row, ROW_LAST_OFFSET, last_offset);
    put_native64(row, ROW_MAX_TIMESTAMP, max_timestamp);
    put_native64(row, ROW_CODEC, codec);
    writer->used += ROW_BYTES;
    return 0;
}

/* Cuts the bytearray to its rows (keeping its allocation); keeps an exception
 * already set. */
static int rows_end(row_writer *writer) {
    if (PyByteArray_GET_SIZE(writer->rows) == writer->used)
        return 0;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    int failed = PyByteArray_Resize(writer->rows, writer->used) < 0;
    if (type != NULL) {
        if (failed)
            PyErr_Clear();
        PyErr_Restore(type, value, traceback);
    }
    return failed ? -1 : 0;
}

/* Whether a classic message's key and value lengths fill its size exactly. */
static int classic_lengths_fit(const unsigned char *b, Py_ssize_t pos, Py_ssize_t entry_end, int magic,
                               int32_t *key_length) {
    Py_ssize_t key_at = pos + KEY_LENGTH_OFFSET[magic];
    int32_t key_len = sbe32(b + key_at);
    if (key_len < -1)
        return 0;
    Py_ssize_t value_at = key_at + 4 + (key_len > 0 ? key_len : 0);
    if (value_at + 4 > entry_end)
        return 0;
    int32_t value_len = sbe32(b + value_at);
    if (value_len < -1 || value_at + 4 + (value_len > 0 ? value_len : 0) != entry_end)
        return 0;
    *key_length = key_len;
    return 1;
}


/* scan_run(buf, pos, end, previous_last, check_crc, check_lengths, rows, crc32, crc32c)
 *   -> (pos, previous_last)
 *
 * records.entries.scan_entries' loop for good entries: appends a row per good
 * entry to `rows` (an EntryTable's bytearray) and returns where it stopped (`end`, or the first entry that is not
 * good and whole) and the last offset of the last good entry. */
static PyObject *scan_run(PyObject *self, PyObject *args) {
    Py_buffer buffer;
    Py_ssize_t pos, end;
    long long previous_last;
    int check_crc, check_lengths;
    PyObject *rows, *crc32, *crc32c;
    if (!PyArg_ParseTuple(args, "y*nnLppO!OO", &buffer, &pos, &end, &previous_last, &check_crc,
                          &check_lengths, &PyByteArray_Type, &rows, &crc32, &crc32c))
        return NULL;
    PyObject *result = NULL;
    row_writer writer;
    rows_begin(&writer, rows);
    if (pos < 0 || end > buffer.len || pos > end) {
        PyErr_SetString(PyExc_ValueError, "pos and end must lie inside the buffer");
        goto done;
    }
    const unsigned char *b = buffer.buf;
    while (end - pos > MAGIC_OFFSET) {
        int64_t offset = sbe64(b + pos);
        int32_t size = sbe32(b + pos + SIZE_OFFSET);
        int magic = b[pos + MAGIC_OFFSET];
        if (size < MIN_ENTRY_SIZE_FIELD || size > end - pos - LOG_OVERHEAD)
            break;
        Py_ssize_t entry_end = pos + LOG_OVERHEAD + size;
        int64_t last, max_timestamp;
        int codec;
        if (magic == MAGIC_V2) {
            if (size < MIN_BATCH_LENGTH)
                break;
            codec = b[pos + BATCH_ATTRIBUTES_OFFSET + 1] & CODEC_MASK; /* the low byte of the int16 attributes */
            int32_t last_delta = sbe32(b + pos + BATCH_LAST_DELTA_OFFSET);
            int32_t count = sbe32(b + pos + BATCH_RECORD_COUNT_OFFSET);
            if (codec >= BATCH_CODECS || last_delta < 0 || count < 0 || offset <= previous_last)
                break;
            last = offset + last_delta;
            max_timestamp = sbe64(b + pos + BATCH_MAX_TIMESTAMP_OFFSET);
        } else if (magic <= MAGIC_V1) {
            int32_t key_len;
            if (size < MIN_SIZE_FIELD[magic])
                break;
            if (check_lengths && !classic_lengths_fit(b, pos, entry_end, magic, &key_len))
                break;
            codec = b[pos + CLASSIC_ATTRIBUTES_OFFSET] & CODEC_MASK;
            if (codec >= CLASSIC_CODECS || offset <= previous_last)
                break;
            last = offset;
            max_timestamp = magic ? sbe64(b + pos + V1_TIMESTAMP_OFFSET) : NO_TIMESTAMP;
        } else {
            break;
        }
        if (check_crc) {
            int ok = entry_crc_ok(b, pos, entry_end, magic, crc32, crc32c);
            if (ok < 0)
                goto done;
            if (!ok)
                break;
        }
        if (append_row(&writer, pos, entry_end - pos, magic, last, max_timestamp, codec) < 0)
            goto done;
        previous_last = last;
        pos = entry_end;
    }
    result = Py_BuildValue("nL", pos, previous_last);
done:
    if (rows_end(&writer) < 0)
        Py_CLEAR(result);
    PyBuffer_Release(&buffer);
    return result;
}

/* assign_plain_run(buf, pos, end, next_offset, max_bytes, compact, log_append, now_ms, shift,
 *                  max_timestamp, offset_of_max, rows, crc32, crc32c)
 *   -> (pos, next_offset, max_timestamp, offset_of_max, record_count, has_producer_ids)
 *
 * records.validator's loop for the entries that need nothing but their offsets
 * (and a v1 message's timestamp): uncompressed classic messages and
 * uncompressed record batches. Checks size, max.message.bytes, lengths
 * (classic), the batch header's rules (count is lastOffsetDelta + 1, no control
 * batch, a producer id has a sequence) and the CRC; restamps the offset (a
 * batch: baseOffset and partitionLeaderEpoch 0), all outside the CRC; sets a v1
 * message's timestamp type bit and, under LogAppendTime, its timestamp to
 * `now_ms` (clears the bit under CreateTime), recomputing its CRC when either
 * changes; and appends a row at position + shift to `rows`, an EntryTable's
 * bytearray. Stops at a compressed entry, a keyless message on a compacted
 * topic (any batch on one: its records must be walked), a batch whose
 * timestamp or type bit must change, and at anything bad; the validator's
 * Python code takes that entry and raises every error. */
static PyObject *assign_plain_run(PyObject *self, PyObject *args) {
    Py_buffer buffer;
    Py_ssize_t pos, end, max_bytes, shift;
    long long next_offset, now_ms, max_timestamp, offset_of_max;
    int compact, log_append;
    PyObject *rows, *crc32, *crc32c;
    if (!PyArg_ParseTuple(args, "w*nnLnppLnLLO!OO", &buffer, &pos, &end, &next_offset, &max_bytes, &compact,
                          &log_append, &now_ms, &shift, &max_timestamp, &offset_of_max, &PyByteArray_Type, &rows,
                          &crc32, &crc32c))
        return NULL;
    PyObject *result = NULL;
    long long record_count = 0;
    int has_producer_ids = 0;
    row_writer writer;
    rows_begin(&writer, rows);
    if (pos < 0 || end > buffer.len || pos > end) {
        PyErr_SetString(PyExc_ValueError, "pos and end must lie inside the buffer");
        goto done;
    }
    unsigned char *b = buffer.buf;
    while (end - pos > MAGIC_OFFSET) {
        int32_t size = sbe32(b + pos + SIZE_OFFSET);
        int magic = b[pos + MAGIC_OFFSET];
        if (magic > MAGIC_V2 || size < MIN_ENTRY_SIZE_FIELD || size > end - pos - LOG_OVERHEAD)
            break;
        Py_ssize_t entry_end = pos + LOG_OVERHEAD + size;
        if (entry_end - pos > max_bytes)
            break;
        int64_t last_offset, timestamp, count, producer_id = -1, new_timestamp = 0;
        int new_attributes = 0;
        if (magic == MAGIC_V2) {
            if (size < MIN_BATCH_LENGTH || compact || log_append)
                break;
            int attributes = b[pos + BATCH_ATTRIBUTES_OFFSET + 1]; /* the low byte of the int16 attributes */
            int32_t last_delta = sbe32(b + pos + BATCH_LAST_DELTA_OFFSET);
            int32_t records = sbe32(b + pos + BATCH_RECORD_COUNT_OFFSET);
            producer_id = sbe64(b + pos + BATCH_PRODUCER_ID_OFFSET);
            if (b[pos + BATCH_CRC_START] != 0 || (attributes & (CODEC_MASK | TIMESTAMP_TYPE_BIT | CONTROL_BIT)) ||
                last_delta < 0 || records <= 0 || records != (int64_t)last_delta + 1 ||
                (producer_id >= 0 && sbe32(b + pos + BATCH_BASE_SEQUENCE_OFFSET) < 0))
                break;
            last_offset = next_offset + last_delta;
            timestamp = sbe64(b + pos + BATCH_MAX_TIMESTAMP_OFFSET);
            count = records;
        } else {
            int32_t key_len;
            if (size < MIN_SIZE_FIELD[magic] || !classic_lengths_fit(b, pos, entry_end, magic, &key_len))
                break;
            int attributes = b[pos + CLASSIC_ATTRIBUTES_OFFSET];
            if ((attributes & CODEC_MASK) || (compact && key_len < 0))
                break;
            last_offset = next_offset;
            timestamp = magic ? sbe64(b + pos + V1_TIMESTAMP_OFFSET) : NO_TIMESTAMP;
            if (magic == MAGIC_V1) {
                new_attributes = log_append ? attributes | TIMESTAMP_TYPE_BIT : attributes & ~TIMESTAMP_TYPE_BIT;
                new_timestamp = log_append ? now_ms : timestamp;
            }
            count = 1;
        }
        int ok = entry_crc_ok(b, pos, entry_end, magic, crc32, crc32c);
        if (ok < 0)
            goto done;
        if (!ok)
            break;
        if (magic == MAGIC_V1 && (new_attributes != b[pos + CLASSIC_ATTRIBUTES_OFFSET] || new_timestamp != timestamp)) {
            /* Inside the CRC (magic..end): patched, then the CRC computed anew. */
            b[pos + CLASSIC_ATTRIBUTES_OFFSET] = (unsigned char)new_attributes;
            put64(b + pos + V1_TIMESTAMP_OFFSET, new_timestamp);
            int64_t crc = crc32_in_c() ? (int64_t)crc32_native(b + pos + CLASSIC_CRC_START, entry_end - pos - CLASSIC_CRC_START)
                                       : call_crc(crc32, b, pos + CLASSIC_CRC_START, entry_end);
            if (crc < 0)
                goto done;
            put32(b + pos + CLASSIC_CRC_OFFSET, (int32_t)(uint32_t)crc);
            timestamp = new_timestamp;
        }
        put64(b + pos, next_offset); /* outside the CRC, as is a batch's leader epoch */
        if (magic == MAGIC_V2)
            put32(b + pos + BATCH_LEADER_EPOCH_OFFSET, 0); /* LEADER_EPOCH_ON_APPEND */
        if (producer_id >= 0)
            has_producer_ids = 1;
        if (append_row(&writer, pos + shift, entry_end - pos, magic, last_offset, timestamp, 0) < 0)
            goto done;
        if (timestamp > max_timestamp) {
            max_timestamp = timestamp;
            offset_of_max = last_offset;
        }
        record_count += count;
        next_offset = last_offset + 1;
        pos = entry_end;
    }
    result = Py_BuildValue("nLLLLO", pos, next_offset, max_timestamp, offset_of_max, record_count,
                           has_producer_ids ? Py_True : Py_False);
done:
    if (rows_end(&writer) < 0)
        Py_CLEAR(result);
    PyBuffer_Release(&buffer);
    return result;
}

/* Reads field `index` of entries[i] as an int64; -1 with an exception set on failure. */
static int entry_field(PyObject *entry, Py_ssize_t index, long long *out) {
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) <= index) {
        PyErr_SetString(PyExc_TypeError, "entries must hold EntryInfo tuples");
        return -1;
    }
    *out = PyLong_AsLongLong(PyTuple_GET_ITEM(entry, index));
    if (*out == -1 && PyErr_Occurred())
        return -1;
    return 0;
}

/* Entry i's position, size, last offset and max timestamp, from a list of
 * EntryInfo tuples or from EntryTable rows (a bytearray); -1 with an exception
 * set on failure. */
static int entry_fields(PyObject *entries, const int64_t *rows, Py_ssize_t i, long long *position,
                        long long *size, long long *last_offset, long long *timestamp) {
    if (rows != NULL) {
        const int64_t *row = rows + i * ROW_FIELDS;
        *position = row[ROW_POSITION];
        *size = row[ROW_SIZE];
        *last_offset = row[ROW_LAST_OFFSET];
        *timestamp = row[ROW_MAX_TIMESTAMP];
        return 0;
    }
    PyObject *entry = PyList_GET_ITEM(entries, i);
    if (entry_field(entry, 0, position) < 0 || entry_field(entry, 1, size) < 0 ||
        entry_field(entry, 3, last_offset) < 0 || entry_field(entry, 4, timestamp) < 0)
        return -1;
    return 0;
}

/* index_entries(entries, interval, since, best_timestamp, best_offset, base_offset,
 *               base_position, newest)
 *   -> (offset_entries, time_entries, since, best_timestamp, best_offset)
 *
 * Kafka's rule for the sparse indexes, over entries just written from
 * `base_position` of a segment whose base offset is `base_offset` (a list of
 * EntryInfo, or an EntryTable's rows): once more than `interval` bytes were
 * written since the last index entry, the entry gets one. Returned packed as
 * the files hold them, ready for IndexFile.append_entries:
 *   - offset_entries: relativeOffset:int32 | position:int32 (big-endian) of each
 *     such entry's last offset and position;
 *   - time_entries: timestamp:int64 | relativeOffset:int32 of the running largest
 *     timestamp up to and including each such entry (the first entry reaching it
 *     wins), only where it rises above every earlier one and above `newest`, the
 *     time index's last: the time index takes strictly increasing timestamps.
 * `since` carries the bytes written since the last index entry over to the next
 * append. OverflowError when a relative offset or a position does not fit an
 * int32 (LogSegment checks offsets before writing; segment.bytes is an int).
 * One call per append: computing points, then packing each index in its own
 * call, each with its Python checks, cost about 2 us more an append (the index
 * step of a 1 MiB append, measured: v2 7.5 -> 5.9 us, v1 12.4 -> 10.2 us; the
 * rest is the two pwrites). Same results as segment.index_entries_py. */
static PyObject *index_entries(PyObject *self, PyObject *args) {
    PyObject *entries;
    long long interval, since, best_timestamp, best_offset, base_offset, base_position, newest;
    if (!PyArg_ParseTuple(args, "OLLLLLLL", &entries, &interval, &since, &best_timestamp, &best_offset,
                          &base_offset, &base_position, &newest))
        return NULL;
    const int64_t *rows = NULL;
    Py_ssize_t count;
    if (PyByteArray_Check(entries)) {
        if (PyByteArray_GET_SIZE(entries) % ROW_BYTES) {
            PyErr_SetString(PyExc_ValueError, "rows must be whole EntryTable rows");
            return NULL;
        }
        rows = (const int64_t *)PyByteArray_AS_STRING(entries);
        count = PyByteArray_GET_SIZE(entries) / ROW_BYTES;
    } else if (PyList_Check(entries)) {
        count = PyList_GET_SIZE(entries);
    } else {
        PyErr_SetString(PyExc_TypeError, "entries must be a list of EntryInfo or an EntryTable's rows");
        return NULL;
    }
    /* At most one entry of each per entry written; cut to size at the end. */
    PyObject *offset_entries = PyBytes_FromStringAndSize(NULL, count * OFFSET_ENTRY_BYTES);
    PyObject *time_entries = PyBytes_FromStringAndSize(NULL, count * TIME_ENTRY_BYTES);
    if (offset_entries == NULL || time_entries == NULL)
        goto failed;
    unsigned char *offset_out = (unsigned char *)PyBytes_AS_STRING(offset_entries);
    unsigned char *time_out = (unsigned char *)PyBytes_AS_STRING(time_entries);
    Py_ssize_t offsets_taken = 0, times_taken = 0;
    if (count > 0) {
        long long first_position, position = 0, size = 0, last_offset, timestamp;
        if (entry_fields(entries, rows, 0, &first_position, &size, &last_offset, &timestamp) < 0)
            goto failed;
        long long threshold = first_position + interval - since;
        long long indexed_position = -1;
        for (Py_ssize_t i = 0; i < count; i++) {
            if (entry_fields(entries, rows, i, &position, &size, &last_offset, &timestamp) < 0)
                goto failed;
            if (timestamp > best_timestamp) {
                best_timestamp = timestamp;
                best_offset = last_offset;
            }
            if (position <= threshold)
                continue;
            threshold = position + interval;
            indexed_position = position;
            long long relative = last_offset - base_offset, file_position = base_position + position;
            if (!fits_index_field(relative) || !fits_index_field(file_position)) {
                PyErr_Format(PyExc_OverflowError,
                             "index entry (offset %lld, position %lld) does not fit a segment at base offset %lld",
                             last_offset, file_position, base_offset);
                goto failed;
            }
            put32(offset_out + OFFSET_ENTRY_BYTES * offsets_taken, (int32_t)relative);
            put32(offset_out + OFFSET_ENTRY_BYTES * offsets_taken + 4, (int32_t)file_position);
            offsets_taken++;
            if (best_timestamp > newest) {
                newest = best_timestamp;
                long long best_relative = best_offset - base_offset;
                if (!fits_index_field(best_relative)) {
                    PyErr_Format(PyExc_OverflowError, "time index offset %lld does not fit a segment at base offset %lld",
                                 best_offset, base_offset);
                    goto failed;
                }
                put64(time_out + TIME_ENTRY_BYTES * times_taken, best_timestamp);
                put32(time_out + TIME_ENTRY_BYTES * times_taken + 8, (int32_t)best_relative);
                times_taken++;
            }
        }
        long long last_end = position + size;
        since = indexed_position < 0 ? since + last_end - first_position : last_end - indexed_position;
    }
    if ((offsets_taken < count && _PyBytes_Resize(&offset_entries, offsets_taken * OFFSET_ENTRY_BYTES) < 0) ||
        (times_taken < count && _PyBytes_Resize(&time_entries, times_taken * TIME_ENTRY_BYTES) < 0))
        goto failed; /* _PyBytes_Resize cleared the reference it failed on */
    return Py_BuildValue("NNLLL", offset_entries, time_entries, since, best_timestamp, best_offset);
failed:
    Py_XDECREF(offset_entries);
    Py_XDECREF(time_entries);
    return NULL;
}

/* ---- the records of a batch (magic 2) ------------------------------------------
 *
 *   record: length:varint | attributes:int8 | timestampDelta:varlong |
 *           offsetDelta:varint | keyLength:varint key | valueLength:varint value |
 *           headerCount:varint [headerKeyLength:varint key headerValueLength:varint value]...
 *
 * Varints are zigzag, 7 bits a byte, low group first, at most 10 bytes. A walk
 * that meets anything malformed (or a varint whose value does not fit 64 bits)
 * gives up and returns "malformed"; the caller then runs the Python walk, which
 * names the problem in the words the rest of storage/ uses. */

static int read_varint(const unsigned char *b, Py_ssize_t *pos, Py_ssize_t limit, int64_t *out) {
    uint64_t result = 0;
    Py_ssize_t p = *pos;
    for (int i = 0; i < 10; i++) {
        if (p >= limit)
            return -1;
        unsigned char byte = b[p++];
        if (i == 9 && byte > 1)
            return -1;
        result |= (uint64_t)(byte & 0x7F) << (7 * i);
        if (byte < 0x80) {
            *out = (int64_t)((result >> 1) ^ (0 - (result & 1)));
            *pos = p;
            return 0;
        }
    }
    return -1;
}

/* Skips a length-prefixed field (-1: null) inside the record; -1 when malformed. */
static int skip_field(const unsigned char *b, Py_ssize_t *pos, Py_ssize_t record_end, int64_t *length) {
    if (read_varint(b, pos, record_end, length) < 0 || *length < -1 || (*length > 0 && *length > record_end - *pos))
        return -1;
    if (*length > 0)
        *pos += (Py_ssize_t)*length;
    return 0;
}

typedef struct {
    int64_t timestamp_delta, offset_delta, key_length;
} RecordFields;

/* One record from *pos (< end); *pos moves past it. 0, or -1 when malformed. */
static int walk_record(const unsigned char *b, Py_ssize_t *pos, Py_ssize_t end, RecordFields *fields) {
    int64_t length, value_length, header_count, skipped;
    Py_ssize_t p = *pos;
    if (read_varint(b, &p, end, &length) < 0 || length < 0 || length > end - p)
        return -1;
    Py_ssize_t record_end = p + (Py_ssize_t)length;
    p += 1; /* attributes: unused */
    if (read_varint(b, &p, record_end, &fields->timestamp_delta) < 0 ||
        read_varint(b, &p, record_end, &fields->offset_delta) < 0 ||
        skip_field(b, &p, record_end, &fields->key_length) < 0 || skip_field(b, &p, record_end, &value_length) < 0 ||
        read_varint(b, &p, record_end, &header_count) < 0 || header_count < 0)
        return -1;
    for (int64_t h = 0; h < header_count; h++) {
        if (skip_field(b, &p, record_end, &skipped) < 0 || skipped < 0 || skip_field(b, &p, record_end, &skipped) < 0)
            return -1;
    }
    if (p != record_end)
        return -1;
    *pos = p;
    return 0;
}

/* summarize_records(buf, pos, end, count) -> (max_timestamp_delta | None, has_null_key,
 *                                             offset_deltas_in_order) | None (malformed)
 * records.batch.summarize_records for well-formed records. */
static PyObject *summarize_records(PyObject *self, PyObject *args) {
    Py_buffer buffer;
    Py_ssize_t pos, end, count;
    if (!PyArg_ParseTuple(args, "y*nnn", &buffer, &pos, &end, &count))
        return NULL;
    PyObject *result = NULL;
    if (pos < 0 || end > buffer.len || pos > end) {
        PyErr_SetString(PyExc_ValueError, "pos and end must lie inside the buffer");
        goto done;
    }
    const unsigned char *b = buffer.buf;
    int64_t max_delta = 0;
    int null_key = 0, in_order = 1;
    RecordFields fields;
    for (Py_ssize_t index = 0; index < count; index++) {
        if (pos >= end || walk_record(b, &pos, end, &fields) < 0) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        if (index == 0 || fields.timestamp_delta > max_delta)
            max_delta = fields.timestamp_delta;
        null_key |= fields.key_length < 0;
        in_order &= fields.offset_delta == index;
    }
    if (pos != end) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (count > 0)
        result = Py_BuildValue("(LNN)", (long long)max_delta, PyBool_FromLong(null_key), PyBool_FromLong(in_order));
    else
        result = Py_BuildValue("(ONN)", Py_None, PyBool_FromLong(null_key), PyBool_FromLong(in_order));
done:
    PyBuffer_Release(&buffer);
    return result;
}

/* find_timestamp(buf, pos, end, count, min_timestamp_delta, min_offset_delta)
 *   -> (1, timestamp_delta, offset_delta) for the first record with both deltas at
 *      least the given ones, (0, 0, 0) when none has, (-1, 0, 0) when malformed.
 * The time index lookup's last step, without decoding keys and values. */
static PyObject *find_timestamp(PyObject *self, PyObject *args) {
    Py_buffer buffer;
    Py_ssize_t pos, end, count;
    long long min_timestamp_delta, min_offset_delta;
    if (!PyArg_ParseTuple(args, "y*nnnLL", &buffer, &pos, &end, &count, &min_timestamp_delta, &min_offset_delta))
        return NULL;
    PyObject *result = NULL;
    if (pos < 0 || end > buffer.len || pos > end) {
        PyErr_SetString(PyExc_ValueError, "pos and end must lie inside the buffer");
        goto done;
    }
    const unsigned char *b = buffer.buf;
    RecordFields fields;
    int status = 0;
    for (Py_ssize_t index = 0; index < count; index++) {
        if (pos >= end || walk_record(b, &pos, end, &fields) < 0) {
            status = -1;
            break;
        }
        if (fields.timestamp_delta >= min_timestamp_delta && fields.offset_delta >= min_offset_delta) {
            status = 1;
            break;
        }
    }
    result = status == 1 ? Py_BuildValue("(iLL)", 1, (long long)fields.timestamp_delta, (long long)fields.offset_delta)
                         : Py_BuildValue("(iii)", status, 0, 0);
done:
    PyBuffer_Release(&buffer);
    return result;
}

/* crc32(data, path=-1) / crc32c(data, path=-1) -> int: the CRC computed here
 * (for the validator's Python path and tests); `path` forces a slower path
 * (0 table, 1 SSE, 2 AVX-512: at most CRC_PATH), -1 takes the best. */
static PyObject *crc_py(const crc_params *params, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "crc32(data, path=-1) takes one or two arguments");
        return NULL;
    }
    int path = -1;
    if (nargs == 2 && (path = _PyLong_AsInt(args[1])) == -1 && PyErr_Occurred())
        return NULL;
    if (path < 0 || path > crc_best_path)
        path = crc_best_path;
    Py_buffer buffer;
    if (PyObject_GetBuffer(args[0], &buffer, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t crc;
    if (buffer.len >= 65536) { /* long enough to be worth letting other threads run */
        Py_BEGIN_ALLOW_THREADS
        crc = crc_compute(params, path, buffer.buf, (size_t)buffer.len);
        Py_END_ALLOW_THREADS
    } else {
        crc = crc_compute(params, path, buffer.buf, (size_t)buffer.len);
    }
    PyBuffer_Release(&buffer);
    return PyLong_FromUnsignedLong(crc);
}

static PyObject *crc32_py(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return crc_py(&crc32_ieee, args, nargs);
}

static PyObject *crc32c_py(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return crc_py(&crc32_castagnoli, args, nargs);
}

/* set_crc_path(path) -> the previous path: for tests, runs the entry walks on a
 * slower CRC path than this CPU's best (0: the callers' Python callables for both
 * CRCs; 1: CRC32 folded with SSE, CRC32C by callable), clamped to what the CPU has. */
static int crc_detected_path = CRC_TABLE;

static PyObject *set_crc_path(PyObject *self, PyObject *arg) {
    int path = _PyLong_AsInt(arg);
    if (path == -1 && PyErr_Occurred())
        return NULL;
    int previous = crc_best_path;
    crc_best_path = path < 0 ? CRC_TABLE : path > crc_detected_path ? crc_detected_path : path;
    return PyLong_FromLong(previous);
}

static PyMethodDef methods[] = {
    {"summarize_records", summarize_records, METH_VARARGS, "A batch's records summarised, or None if malformed."},
    {"find_timestamp", find_timestamp, METH_VARARGS, "The first record at or after a timestamp and offset."},
    {"crc32", (PyCFunction)(void (*)(void))crc32_py, METH_FASTCALL, "zlib's CRC32 of a buffer, computed in C."},
    {"set_crc_path", set_crc_path, METH_O, "Tests: run the walks on a slower CRC path."},
    {"crc32c", (PyCFunction)(void (*)(void))crc32c_py, METH_FASTCALL, "The CRC32C (Castagnoli) of a buffer, computed in C."},
    {"scan_run", scan_run, METH_VARARGS, "The shallow scan's loop over good entries."},
    {"assign_plain_run", assign_plain_run, METH_VARARGS,
     "Offset assignment over uncompressed classic messages and record batches."},
    {"index_entries", index_entries, METH_VARARGS, "The sparse-index entries of entries just written, packed."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_crecords",
                                    "C fast paths of kafka_format (see the source's header).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__crecords(void) {
    crc_init();
    crc_detected_path = crc_best_path;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && (PyModule_AddIntConstant(m, "CLMUL", crc32_in_c()) < 0 ||
                      PyModule_AddIntConstant(m, "CRC_PATH", crc_best_path) < 0 ||
                      PyModule_AddIntConstant(m, "CRC32C_IN_C", crc32c_in_c()) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
