/* The per-entry fast paths of storage/records in C: the shallow scan, the
 * offset assignment of uncompressed classic messages, and the choice of index
 * points. A set of small classic messages holds about a thousand entries per
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
 * The layouts are those of storage/records/framing.py, classic.py and batch.py:
 *
 *   every entry   0 offset:int64 | 8 size:int32 | 12 crc or epoch:int32 | 16 magic:int8
 *   magic 0/1     17 attributes:int8 | [18 timestamp:int64, v1] | keyLength:int32 key
 *                 valueLength:int32 value; CRC32 (IEEE) over magic..end
 *   magic 2       17 crc:uint32 | 21 attributes:int16 | 23 lastOffsetDelta:int32 |
 *                 27 baseTimestamp | 35 maxTimestamp | 43 producerId | 51 producerEpoch:int16
 *                 | 53 baseSequence:int32 | 57 recordCount:int32 | 61 records;
 *                 CRC32C over attributes..end
 *
 * CRCs are computed by the Python callables the caller passes (ISA-L's crc32,
 * the crc32c package): both are faster than a table-driven C loop, and the call
 * costs less than the CRC of a 1 KiB message would in portable C.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define LOG_OVERHEAD 12
#define MAGIC_OFFSET 16
#define MIN_ENTRY_SIZE_FIELD 14
#define CLASSIC_CRC_OFFSET 12
#define CLASSIC_ATTRIBUTES_OFFSET 17
#define V1_TIMESTAMP_OFFSET 18
#define BATCH_CRC_OFFSET 17
#define BATCH_CRC_START 21
#define BATCH_LAST_DELTA_OFFSET 23
#define BATCH_MAX_TIMESTAMP_OFFSET 35
#define BATCH_RECORD_COUNT_OFFSET 57
#define MIN_BATCH_LENGTH 49
#define CODEC_MASK 0x07
#define TIMESTAMP_TYPE_BIT 0x08
#define BATCH_CODECS 5
#define CLASSIC_CODECS 4
#define NO_TIMESTAMP (-1)

static const Py_ssize_t KEY_LENGTH_OFFSET[2] = {18, 26};
static const Py_ssize_t MIN_SIZE_FIELD[2] = {14, 22};

static inline uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline int32_t sbe32(const unsigned char *p) { return (int32_t)be32(p); }

static inline int64_t sbe64(const unsigned char *p) {
    return (int64_t)(((uint64_t)be32(p) << 32) | (uint64_t)be32(p + 4));
}

static inline void put64(unsigned char *p, int64_t value) {
    uint64_t v = (uint64_t)value;
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xFF);
        v >>= 8;
    }
}

/* ---- CRC32 (IEEE, reflected; zlib's) ------------------------------------------
 *
 * A classic message needs its own CRC32. Through a Python callable that is about
 * 250 ns a message (the call and a memoryview), most of a 1 KiB message's cost;
 * here it is carry-less multiplication (PCLMULQDQ) folding, the method of
 * Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ": 64
 * bytes folded per step in four lanes, the lanes folded into one, then
 * reduced to 32 bits (Barrett). The constants are x^k mod P for the reflected
 * polynomial P = 0x104C11DB7. Where the CPU lacks PCLMULQDQ (or this is not
 * x86-64), the caller's callable (ISA-L's crc32) is used; a byte table
 * handles lengths the folding does not cover. tests/storage/test_crecords.py
 * checks it against ISA-L on every length up to several KiB. */
static uint32_t crc_table[256];

static void init_crc_table(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

/* The register form: state = ~crc before and after, as inside zlib's loop. */
static uint32_t crc_bytes(uint32_t state, const unsigned char *p, Py_ssize_t n) {
    while (n-- > 0)
        state = crc_table[(state ^ *p++) & 0xFF] ^ (state >> 8);
    return state;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_CLMUL_PATH 1

/* `n` is at least 64 and a multiple of 16. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc_fold(uint32_t state, const unsigned char *p,
                                                                    Py_ssize_t n) {
    const __m128i fold_by_4 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL);
    const __m128i fold_by_1 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
    const __m128i k5 = _mm_set_epi64x(0, 0x163cd6124LL);
    const __m128i barrett = _mm_set_epi64x(0x1f7011641LL, 0x1db710641LL); /* mu, P */
    const __m128i low32 = _mm_setr_epi32(-1, 0, -1, 0);
    __m128i a = _mm_loadu_si128((const __m128i *)(p + 0));
    __m128i b = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(p + 48));
    a = _mm_xor_si128(a, _mm_cvtsi32_si128((int)state));
    p += 64;
    n -= 64;
    for (; n >= 64; p += 64, n -= 64) {
#define FOLD(x, k, next) _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), \
                                                     _mm_clmulepi64_si128(x, k, 0x11)), next)
        a = FOLD(a, fold_by_4, _mm_loadu_si128((const __m128i *)(p + 0)));
        b = FOLD(b, fold_by_4, _mm_loadu_si128((const __m128i *)(p + 16)));
        c = FOLD(c, fold_by_4, _mm_loadu_si128((const __m128i *)(p + 32)));
        d = FOLD(d, fold_by_4, _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    a = FOLD(a, fold_by_1, b);
    a = FOLD(a, fold_by_1, c);
    a = FOLD(a, fold_by_1, d);
    for (; n >= 16; p += 16, n -= 16)
        a = FOLD(a, fold_by_1, _mm_loadu_si128((const __m128i *)p));
#undef FOLD
    /* 128 -> 64 bits, then the 32-bit step with k5. */
    a = _mm_xor_si128(_mm_srli_si128(a, 8), _mm_clmulepi64_si128(a, fold_by_1, 0x10));
    a = _mm_xor_si128(_mm_srli_si128(a, 4), _mm_clmulepi64_si128(_mm_and_si128(a, low32), k5, 0x00));
    /* Barrett reduction to 32 bits. */
    __m128i t = _mm_clmulepi64_si128(_mm_and_si128(a, low32), barrett, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, low32), barrett, 0x00);
    return (uint32_t)_mm_extract_epi32(_mm_xor_si128(a, t), 1);
}
#endif

static int clmul_usable = 0;

/* CRC32 of data[0:n] in C; only when clmul_usable or the caller accepts the table. */
static uint32_t crc32_native(const unsigned char *p, Py_ssize_t n) {
    uint32_t state = 0xFFFFFFFFu;
#ifdef HAVE_CLMUL_PATH
    if (clmul_usable && n >= 64) {
        Py_ssize_t folded = n & ~(Py_ssize_t)15;
        state = crc_fold(state, p, folded);
        p += folded;
        n -= folded;
    }
#endif
    return ~crc_bytes(state, p, n);
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

/* An EntryInfo (a NamedTuple, so a tuple subtype) built as tuple.__new__ would. */
static PyObject *new_entry(PyTypeObject *entry_type, Py_ssize_t position, Py_ssize_t size, int magic,
                           int64_t last_offset, int64_t max_timestamp, int codec) {
    PyObject *entry = entry_type->tp_alloc(entry_type, 6);
    if (entry == NULL)
        return NULL;
    PyObject *fields[6] = {PyLong_FromSsize_t(position), PyLong_FromSsize_t(size), PyLong_FromLong(magic),
                           PyLong_FromLongLong(last_offset), PyLong_FromLongLong(max_timestamp),
                           PyLong_FromLong(codec)};
    for (int i = 0; i < 6; i++) {
        if (fields[i] == NULL) {
            for (int j = 0; j < 6; j++)
                Py_XDECREF(fields[j]);
            Py_DECREF(entry);
            return NULL;
        }
        PyTuple_SET_ITEM(entry, i, fields[i]);
    }
    /* It holds ints only, so it can never be part of a cycle: untracked, the
     * thousands made per MiB of small messages cost the cyclic GC nothing
     * (CPython untracks such tuples itself, but only at its next collection). */
    PyObject_GC_UnTrack(entry);
    return entry;
}

static int append_entry(PyObject *entries, PyTypeObject *entry_type, Py_ssize_t position, Py_ssize_t size,
                        int magic, int64_t last_offset, int64_t max_timestamp, int codec) {
    PyObject *entry = new_entry(entry_type, position, size, magic, last_offset, max_timestamp, codec);
    if (entry == NULL)
        return -1;
    int failed = PyList_Append(entries, entry);
    Py_DECREF(entry);
    return failed;
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

static int check_type(PyObject *entries, PyObject *entry_type) {
    if (!PyList_Check(entries)) {
        PyErr_SetString(PyExc_TypeError, "entries must be a list");
        return -1;
    }
    if (!PyType_Check(entry_type) || !PyType_IsSubtype((PyTypeObject *)entry_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "entry_type must be a tuple subtype");
        return -1;
    }
    return 0;
}

/* scan_run(buf, pos, end, previous_last, check_crc, check_lengths, entries, crc32, crc32c,
 *          entry_type) -> (pos, previous_last)
 *
 * records.entries.scan_entries' loop for good entries: appends an EntryInfo per
 * good entry and returns where it stopped (`end`, or the first entry that is not
 * good and whole) and the last offset of the last good entry. */
static PyObject *scan_run(PyObject *self, PyObject *args) {
    Py_buffer buffer;
    Py_ssize_t pos, end;
    long long previous_last;
    int check_crc, check_lengths;
    PyObject *entries, *crc32, *crc32c, *entry_type;
    if (!PyArg_ParseTuple(args, "y*nnLppOOOO", &buffer, &pos, &end, &previous_last, &check_crc,
                          &check_lengths, &entries, &crc32, &crc32c, &entry_type))
        return NULL;
    PyObject *result = NULL;
    if (check_type(entries, entry_type) < 0)
        goto done;
    if (pos < 0 || end > buffer.len || pos > end) {
        PyErr_SetString(PyExc_ValueError, "pos and end must lie inside the buffer");
        goto done;
    }
    const unsigned char *b = buffer.buf;
    while (end - pos > MAGIC_OFFSET) {
        int64_t offset = sbe64(b + pos);
        int32_t size = sbe32(b + pos + 8);
        int magic = b[pos + MAGIC_OFFSET];
        if (size < MIN_ENTRY_SIZE_FIELD || size > end - pos - LOG_OVERHEAD)
            break;
        Py_ssize_t entry_end = pos + LOG_OVERHEAD + size;
        int64_t last, max_timestamp;
        int codec;
        if (magic == 2) {
            if (size < MIN_BATCH_LENGTH)
                break;
            codec = b[pos + BATCH_CRC_START + 1] & CODEC_MASK; /* the low byte of the int16 attributes */
            int32_t last_delta = sbe32(b + pos + BATCH_LAST_DELTA_OFFSET);
            int32_t count = sbe32(b + pos + BATCH_RECORD_COUNT_OFFSET);
            if (codec >= BATCH_CODECS || last_delta < 0 || count < 0 || offset <= previous_last)
                break;
            if (check_crc) {
                int64_t crc = call_crc(crc32c, b, pos + BATCH_CRC_START, entry_end);
                if (crc < 0)
                    goto done;
                if ((uint32_t)crc != be32(b + pos + BATCH_CRC_OFFSET))
                    break;
            }
            last = offset + last_delta;
            max_timestamp = sbe64(b + pos + BATCH_MAX_TIMESTAMP_OFFSET);
        } else if (magic <= 1) {
            int32_t key_len;
            if (size < MIN_SIZE_FIELD[magic])
                break;
            if (check_lengths && !classic_lengths_fit(b, pos, entry_end, magic, &key_len))
                break;
            codec = b[pos + CLASSIC_ATTRIBUTES_OFFSET] & CODEC_MASK;
            if (codec >= CLASSIC_CODECS || offset <= previous_last)
                break;
            if (check_crc) {
                int64_t crc = clmul_usable ? (int64_t)crc32_native(b + pos + MAGIC_OFFSET, entry_end - pos - MAGIC_OFFSET)
                                           : call_crc(crc32, b, pos + MAGIC_OFFSET, entry_end);
                if (crc < 0)
                    goto done;
                if ((uint32_t)crc != be32(b + pos + CLASSIC_CRC_OFFSET))
                    break;
            }
            last = offset;
            max_timestamp = magic ? sbe64(b + pos + V1_TIMESTAMP_OFFSET) : NO_TIMESTAMP;
        } else {
            break;
        }
        if (append_entry(entries, (PyTypeObject *)entry_type, pos, entry_end - pos, magic, last,
                         max_timestamp, codec) < 0)
            goto done;
        previous_last = last;
        pos = entry_end;
    }
    result = Py_BuildValue("nL", pos, previous_last);
done:
    PyBuffer_Release(&buffer);
    return result;
}

/* assign_classic_run(buf, pos, end, next_offset, max_bytes, compact, log_append, shift,
 *                    max_timestamp, offset_of_max, entries, crc32, entry_type)
 *   -> (pos, next_offset, max_timestamp, offset_of_max)
 *
 * records.validator's inline loop for uncompressed classic messages that need
 * nothing but their offset: checks size, lengths, CRC and max.message.bytes,
 * restamps the offset (outside the CRC) and appends an EntryInfo at
 * position + shift. Stops at a batch, a compressed message, a keyless message on
 * a compacted topic, a v1 message whose timestamp or type bit must change, and
 * at anything bad. */
static PyObject *assign_classic_run(PyObject *self, PyObject *args) {
    Py_buffer buffer;
    Py_ssize_t pos, end, max_bytes, shift;
    long long next_offset, max_timestamp, offset_of_max;
    int compact, log_append;
    PyObject *entries, *crc32, *entry_type;
    if (!PyArg_ParseTuple(args, "w*nnLnppnLLOOO", &buffer, &pos, &end, &next_offset, &max_bytes, &compact,
                          &log_append, &shift, &max_timestamp, &offset_of_max, &entries, &crc32,
                          &entry_type))
        return NULL;
    PyObject *result = NULL;
    if (check_type(entries, entry_type) < 0)
        goto done;
    if (pos < 0 || end > buffer.len || pos > end) {
        PyErr_SetString(PyExc_ValueError, "pos and end must lie inside the buffer");
        goto done;
    }
    unsigned char *b = buffer.buf;
    while (end - pos > MAGIC_OFFSET) {
        int32_t size = sbe32(b + pos + 8);
        int magic = b[pos + MAGIC_OFFSET];
        if (magic > 1 || size < MIN_SIZE_FIELD[magic] || size > end - pos - LOG_OVERHEAD)
            break;
        Py_ssize_t entry_end = pos + LOG_OVERHEAD + size;
        int32_t key_len;
        if (entry_end - pos > max_bytes || !classic_lengths_fit(b, pos, entry_end, magic, &key_len))
            break;
        int attributes = b[pos + CLASSIC_ATTRIBUTES_OFFSET];
        if ((attributes & CODEC_MASK) || (compact && key_len < 0))
            break;
        if (magic == 1 && (log_append || (attributes & TIMESTAMP_TYPE_BIT)))
            break;
        int64_t crc = clmul_usable ? (int64_t)crc32_native(b + pos + MAGIC_OFFSET, entry_end - pos - MAGIC_OFFSET)
                                   : call_crc(crc32, b, pos + MAGIC_OFFSET, entry_end);
        if (crc < 0)
            goto done;
        if ((uint32_t)crc != be32(b + pos + CLASSIC_CRC_OFFSET))
            break;
        int64_t timestamp = magic ? sbe64(b + pos + V1_TIMESTAMP_OFFSET) : NO_TIMESTAMP;
        put64(b + pos, next_offset);
        if (append_entry(entries, (PyTypeObject *)entry_type, pos + shift, entry_end - pos, magic, next_offset,
                         timestamp, 0) < 0)
            goto done;
        if (timestamp > max_timestamp) {
            max_timestamp = timestamp;
            offset_of_max = next_offset;
        }
        next_offset++;
        pos = entry_end;
    }
    result = Py_BuildValue("nLLL", pos, next_offset, max_timestamp, offset_of_max);
done:
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

/* index_points(entries, interval, since, best_timestamp, best_offset)
 *   -> (points, since, best_timestamp, best_offset)
 *
 * Kafka's rule for the sparse indexes, over entries just written: once more
 * than `interval` bytes were written since the last index entry, the entry
 * gets one. `points` lists (last_offset, position, best_timestamp, best_offset)
 * for each such entry, where best_* is the running largest timestamp (the first
 * entry reaching it wins) up to and including that entry, which is what the
 * time index takes at that point. `since` carries the bytes written since the
 * last index entry over to the next append. Same results as
 * LogSegment._index_points_py. */
static PyObject *index_points(PyObject *self, PyObject *args) {
    PyObject *entries;
    long long interval, since, best_timestamp, best_offset;
    if (!PyArg_ParseTuple(args, "O!LLLL", &PyList_Type, &entries, &interval, &since, &best_timestamp,
                          &best_offset))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(entries);
    PyObject *points = PyList_New(0);
    if (points == NULL)
        return NULL;
    if (count == 0)
        return Py_BuildValue("NLLL", points, since, best_timestamp, best_offset);
    long long first_position, position = 0, size = 0, last_offset, timestamp;
    if (entry_field(PyList_GET_ITEM(entries, 0), 0, &first_position) < 0)
        goto failed;
    long long threshold = first_position + interval - since;
    long long indexed_position = -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *entry = PyList_GET_ITEM(entries, i);
        if (entry_field(entry, 0, &position) < 0 || entry_field(entry, 1, &size) < 0 ||
            entry_field(entry, 3, &last_offset) < 0 || entry_field(entry, 4, &timestamp) < 0)
            goto failed;
        if (timestamp > best_timestamp) {
            best_timestamp = timestamp;
            best_offset = last_offset;
        }
        if (position > threshold) {
            PyObject *point = Py_BuildValue("(LLLL)", last_offset, position, best_timestamp, best_offset);
            if (point == NULL || PyList_Append(points, point) < 0) {
                Py_XDECREF(point);
                goto failed;
            }
            Py_DECREF(point);
            threshold = position + interval;
            indexed_position = position;
        }
    }
    long long last_end = position + size;
    since = indexed_position < 0 ? since + last_end - first_position : last_end - indexed_position;
    return Py_BuildValue("NLLL", points, since, best_timestamp, best_offset);
failed:
    Py_DECREF(points);
    return NULL;
}

static inline void put32(unsigned char *p, int32_t value) {
    uint32_t v = (uint32_t)value;
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Field `index` of point `i` (a tuple from index_points) as an int64. */
static int point_field(PyObject *points, Py_ssize_t i, Py_ssize_t index, long long *out) {
    return entry_field(PyList_GET_ITEM(points, i), index, out);
}

/* pack_offset_points(points, base_offset, base_position) -> bytes
 *
 * The offset index entries (relativeOffset:int32, position:int32) of the
 * points, each at base_position + its position. The caller (OffsetIndex)
 * checked that the offsets and positions fit. */
static PyObject *pack_offset_points(PyObject *self, PyObject *args) {
    PyObject *points;
    long long base_offset, base_position;
    if (!PyArg_ParseTuple(args, "O!LL", &PyList_Type, &points, &base_offset, &base_position))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(points);
    PyObject *packed = PyBytes_FromStringAndSize(NULL, count * 8);
    if (packed == NULL)
        return NULL;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(packed);
    for (Py_ssize_t i = 0; i < count; i++) {
        long long offset, position;
        if (point_field(points, i, 0, &offset) < 0 || point_field(points, i, 1, &position) < 0) {
            Py_DECREF(packed);
            return NULL;
        }
        put32(out + 8 * i, (int32_t)(offset - base_offset));
        put32(out + 8 * i + 4, (int32_t)(base_position + position));
    }
    return packed;
}

/* pack_time_points(points, base_offset, last_timestamp) -> bytes
 *
 * The time index entries (timestamp:int64, relativeOffset:int32) of the points
 * whose timestamp is above every earlier one (and above last_timestamp): the
 * time index takes only strictly increasing timestamps. */
static PyObject *pack_time_points(PyObject *self, PyObject *args) {
    PyObject *points;
    long long base_offset, newest;
    if (!PyArg_ParseTuple(args, "O!LL", &PyList_Type, &points, &base_offset, &newest))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(points);
    PyObject *packed = PyBytes_FromStringAndSize(NULL, count * 12);
    if (packed == NULL)
        return NULL;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(packed);
    Py_ssize_t taken = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        long long timestamp, offset;
        if (point_field(points, i, 2, &timestamp) < 0 || point_field(points, i, 3, &offset) < 0) {
            Py_DECREF(packed);
            return NULL;
        }
        if (timestamp > newest) {
            newest = timestamp;
            put64(out + 12 * taken, timestamp);
            put32(out + 12 * taken + 8, (int32_t)(offset - base_offset));
            taken++;
        }
    }
    if (taken < count && _PyBytes_Resize(&packed, taken * 12) < 0)
        return NULL;
    return packed;
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

/* crc32(data, use_table=False) -> int: zlib's CRC32 computed here (for tests and
 * checks); use_table forces the byte-table path. */
static PyObject *crc32_py(PyObject *self, PyObject *args) {
    Py_buffer buffer;
    int use_table = 0;
    if (!PyArg_ParseTuple(args, "y*|p", &buffer, &use_table))
        return NULL;
    int saved = clmul_usable;
    if (use_table)
        clmul_usable = 0;
    uint32_t crc = crc32_native(buffer.buf, buffer.len);
    clmul_usable = saved;
    PyBuffer_Release(&buffer);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"summarize_records", summarize_records, METH_VARARGS, "A batch's records summarised, or None if malformed."},
    {"find_timestamp", find_timestamp, METH_VARARGS, "The first record at or after a timestamp and offset."},
    {"crc32", crc32_py, METH_VARARGS, "zlib's CRC32 of a buffer, computed in C."},
    {"pack_offset_points", pack_offset_points, METH_VARARGS, "Offset index entries of index points."},
    {"pack_time_points", pack_time_points, METH_VARARGS, "Time index entries of index points."},
    {"scan_run", scan_run, METH_VARARGS, "The shallow scan's loop over good entries."},
    {"assign_classic_run", assign_classic_run, METH_VARARGS,
     "Offset assignment over plain uncompressed classic messages."},
    {"index_points", index_points, METH_VARARGS, "The sparse-index points of entries just written."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_crecords",
                                    "C fast paths of storage/records (see the source's header).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__crecords(void) {
    init_crc_table();
#ifdef HAVE_CLMUL_PATH
    __builtin_cpu_init();
    clmul_usable = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "CLMUL", clmul_usable) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
