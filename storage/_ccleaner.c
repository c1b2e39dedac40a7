/* storage._ccleaner: the log cleaner's hot loops in C (see storage/offset_map.py
 * and storage/cleaner.py, which keep the pure-Python twins as the reference).
 *
 * KeyMap: an exact key -> latest offset map for keys of at most `inline_key_limit`
 * bytes, plus pass 1's per-offset bit table (superseded records, and the batches
 * pass 2 may decide by those bits alone).
 *
 * Layout. An open-addressing table (linear probing, power-of-two size, at most 3/4
 * full) of 32-byte slots: offset (int64, -1 = empty), the upper 32 bits of the
 * key's hash, the key length, and either the key itself (up to 16 bytes) or the
 * position of its bytes in an arena of fixed-size chunks (longer keys). A probe
 * compares hash, length and then the key bytes, so two different keys are never
 * merged, whatever their hashes (set_hash_mask(0) makes every hash equal, for
 * the tests). Hash: CPython's bytes hash (SipHash-1-3, per-process random key),
 * the one the Python dict it replaces used.
 *
 * Memory. Every byte the map allocates is counted in `used_bytes` (table + arena
 * chunks + chunk directory + bit tables + what Python charges through `extra`),
 * and `fits()` says whether a batch of keys surely fits, counting the moment a
 * table resize holds the old and the new table. Per key: the table is at least
 * 3/8 full after a resize, so at most 32 * 8/3 = 86 bytes a key (128 at the
 * moment of a resize), plus the key bytes when longer than 16 (keys never
 * straddle chunks: a chunk wastes less than one key).
 *
 * Pass 1 (map_entries) and pass 2 (filter_entries) walk whole chunks of log
 * entries with the GIL released and stop at the first entry they leave to Python
 * (classic messages, compressed batches, keys longer than the limit, batches of
 * active producers, ...). Every length and varint read is bounds-checked;
 * structure errors raise storage.errors.CorruptRecordError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *CorruptRecordError = NULL;
static PyObject *crc32c_fn = NULL;
static uint64_t g_hash_mask = ~(uint64_t)0;

#define SLOT_INLINE 16
#define LOG_OVERHEAD 12
#define BATCH_OVERHEAD 61
#define MIN_BATCH_SIZE_FIELD (BATCH_OVERHEAD - LOG_OVERHEAD)
#define CRC_START 21
#define CRC_OFFSET 17
#define CODEC_MASK 0x07
#define LOG_APPEND_BIT 0x08
#define CONTROL_BIT 0x20
#define HORIZON_BIT 0x40

typedef struct {
    int64_t offset; /* -1: empty */
    uint32_t hash;
    uint32_t len;
    union {
        unsigned char key[SLOT_INLINE];
        uint64_t pos; /* chunk index << 32 | position in the chunk */
    } u;
} Slot;

typedef struct {
    PyObject_HEAD
    Slot *slots;
    size_t cap; /* slots (power of two), 0 = none allocated */
    size_t entries;
    unsigned char **chunks;
    size_t nchunks, chunks_cap;
    size_t chunk_size, chunk_used;
    Py_ssize_t limit;
    int64_t capacity;
    int64_t extra; /* bytes Python charges (its long keys, ...) */
    /* pass 1's bits, from offset `start`: dead (superseded) and eligible (a batch
       with its base offset here may be decided by the dead bits) */
    int64_t start;
    unsigned char *dead, *elig;
    size_t bits_len, bits_cap;
    int busy;
} KeyMap;

/* ---- helpers ------------------------------------------------------------------------ */

static inline uint64_t rd64(const unsigned char *p) {
    return ((uint64_t)p[0] << 56) | ((uint64_t)p[1] << 48) | ((uint64_t)p[2] << 40) | ((uint64_t)p[3] << 32) |
           ((uint64_t)p[4] << 24) | ((uint64_t)p[5] << 16) | ((uint64_t)p[6] << 8) | (uint64_t)p[7];
}
static inline uint32_t rd32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}
static inline uint16_t rd16(const unsigned char *p) { return (uint16_t)(((unsigned)p[0] << 8) | p[1]); }
static inline void wr64(unsigned char *p, uint64_t v) {
    for (int i = 7; i >= 0; i--) { p[i] = (unsigned char)v; v >>= 8; }
}
static inline void wr32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16); p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}
static inline int64_t s64(uint64_t v) { return v > (uint64_t)INT64_MAX ? -(int64_t)(~v) - 1 : (int64_t)v; }
static inline int32_t s32(uint32_t v) { return v > (uint32_t)INT32_MAX ? -(int32_t)(~v) - 1 : (int32_t)v; }
static inline int16_t s16(uint16_t v) { return v > 0x7FFF ? (int16_t)(-(int32_t)(uint16_t)(~v) - 1) : (int16_t)v; }
static inline int64_t add64(int64_t a, int64_t b) { return s64((uint64_t)a + (uint64_t)b); }

/* The zigzag varint at buf[*pos] (before end): 0, or -1 when cut short or too long. */
static inline int rd_varint(const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t end, int64_t *out) {
    Py_ssize_t p = *pos;
    if (p >= end) return -1;
    unsigned char b = buf[p++];
    uint64_t r;
    if (b < 0x80) {
        r = b;
    } else {
        r = b & 0x7F;
        int shift = 7;
        for (;;) {
            if (p >= end) return -1;
            b = buf[p++];
            r |= (uint64_t)(b & 0x7F) << shift;
            if (b < 0x80) break;
            shift += 7;
            if (shift > 63) return -1;
        }
    }
    *pos = p;
    *out = s64((r >> 1) ^ (~(r & 1) + 1));
    return 0;
}

static inline size_t wr_varint(unsigned char *out, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (v < 0 ? ~(uint64_t)0 : 0);
    size_t n = 0;
    while (z > 0x7F) { out[n++] = (unsigned char)(0x80 | (z & 0x7F)); z >>= 7; }
    out[n++] = (unsigned char)z;
    return n;
}

static inline size_t varint_size(int64_t v) {
    unsigned char tmp[10];
    return wr_varint(tmp, v);
}

/* One record of a v2 batch. */
typedef struct {
    Py_ssize_t start, rest, end, key;
    int64_t ts_delta, offset_delta, key_len;
    int attr, tombstone;
} Rec;

static inline const char *parse_record(const unsigned char *b, Py_ssize_t *pos, Py_ssize_t end, Rec *r) {
    Py_ssize_t p = *pos;
    int64_t len;
    r->start = p;
    if (rd_varint(b, &p, end, &len)) return "records are cut short";
    if (len <= 0 || len > end - p) return "a record's length overruns the batch";
    Py_ssize_t rend = p + (Py_ssize_t)len;
    r->attr = b[p++];
    if (rd_varint(b, &p, rend, &r->ts_delta)) return "a record's fields overrun it";
    r->rest = p;
    if (rd_varint(b, &p, rend, &r->offset_delta)) return "a record's fields overrun it";
    if (rd_varint(b, &p, rend, &r->key_len)) return "a record's fields overrun it";
    if (r->key_len < -1) return "a negative key length";
    if (r->key_len >= 0) {
        if (r->key_len >= rend - p) return "a record's fields overrun it";
        r->key = p;
        p += (Py_ssize_t)r->key_len;
    } else {
        r->key = -1;
    }
    if (p >= rend) return "a record's fields overrun it";
    r->tombstone = b[p] == 1;
    r->end = rend;
    *pos = rend;
    return NULL;
}

/* ---- the table ---------------------------------------------------------------------- */

static inline uint64_t key_hash(const unsigned char *key, Py_ssize_t len) {
    return (uint64_t)_Py_HashBytes(key, len) & g_hash_mask;
}

static inline const unsigned char *slot_key(const KeyMap *m, const Slot *s) {
    if (s->len <= SLOT_INLINE) return s->u.key;
    return m->chunks[s->u.pos >> 32] + (s->u.pos & 0xFFFFFFFFu);
}

static inline Slot *probe(KeyMap *m, const unsigned char *key, uint32_t len, uint64_t h) {
    uint32_t hh = (uint32_t)(h >> 32);
    size_t mask = m->cap - 1, i = (size_t)h & mask;
    for (;;) {
        Slot *s = &m->slots[i];
        if (s->offset < 0) return s;
        if (s->hash == hh && s->len == len && memcmp(slot_key(m, s), key, len) == 0) return s;
        i = (i + 1) & mask;
    }
}

static int64_t table_bytes(size_t cap) { return (int64_t)(cap * sizeof(Slot)); }

static int64_t used_bytes(const KeyMap *m) {
    return table_bytes(m->cap) + (int64_t)(m->nchunks * m->chunk_size) + (int64_t)(m->chunks_cap * sizeof(void *)) +
           (int64_t)(2 * m->bits_cap) + m->extra;
}

static int resize(KeyMap *m, size_t cap) {
    Slot *slots = (Slot *)malloc(cap * sizeof(Slot));
    if (!slots) return -1;
    memset(slots, 0xFF, cap * sizeof(Slot));
    size_t mask = cap - 1;
    for (size_t i = 0; i < m->cap; i++) {
        Slot *s = &m->slots[i];
        if (s->offset < 0) continue;
        /* the stored hash is the upper half; the index needs the lower one: rehash */
        uint64_t h = key_hash(slot_key(m, s), s->len);
        size_t j = (size_t)h & mask;
        while (slots[j].offset >= 0) j = (j + 1) & mask;
        slots[j] = *s;
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return 0;
}

static size_t grown_cap(size_t cap, size_t entries) {
    if (cap == 0) cap = 16;
    while (entries * 4 > cap * 3) cap <<= 1;
    return cap;
}

static int arena_store(KeyMap *m, const unsigned char *key, uint32_t len, uint64_t *pos) {
    if (m->nchunks == 0 || m->chunk_used + len > m->chunk_size) {
        if (m->nchunks == m->chunks_cap) {
            size_t ncap = m->chunks_cap ? m->chunks_cap * 2 : 16;
            unsigned char **c = (unsigned char **)realloc(m->chunks, ncap * sizeof(void *));
            if (!c) return -1;
            m->chunks = c;
            m->chunks_cap = ncap;
        }
        unsigned char *chunk = (unsigned char *)malloc(m->chunk_size);
        if (!chunk) return -1;
        m->chunks[m->nchunks++] = chunk;
        m->chunk_used = 0;
    }
    memcpy(m->chunks[m->nchunks - 1] + m->chunk_used, key, len);
    *pos = ((uint64_t)(m->nchunks - 1) << 32) | m->chunk_used;
    m->chunk_used += len;
    return 0;
}

/* Put key -> offset: 1 and *old when it supersedes, 0 when new, -1 out of memory. */
static int put(KeyMap *m, const unsigned char *key, uint32_t len, int64_t offset, int64_t *old) {
    if (m->cap == 0 || (m->entries + 1) * 4 > m->cap * 3) {
        if (resize(m, grown_cap(m->cap, m->entries + 1))) return -1;
    }
    uint64_t h = key_hash(key, len);
    Slot *s = probe(m, key, len, h);
    if (s->offset >= 0) {
        *old = s->offset;
        s->offset = offset;
        return 1;
    }
    if (len > SLOT_INLINE) {
        if (arena_store(m, key, len, &s->u.pos)) return -1;
    } else {
        memcpy(s->u.key, key, len);
    }
    s->hash = (uint32_t)(h >> 32);
    s->len = len;
    s->offset = offset;
    m->entries++;
    return 0;
}

static int64_t get(KeyMap *m, const unsigned char *key, Py_ssize_t len) {
    if (m->cap == 0 || len > m->limit) return -1;
    Slot *s = probe(m, key, (uint32_t)len, key_hash(key, len));
    return s->offset;
}

/* ---- bits --------------------------------------------------------------------------- */

static size_t bits_needed(const KeyMap *m, int64_t last) {
    if (m->start < 0 || last < m->start) return 0;
    return (size_t)(((uint64_t)last - (uint64_t)m->start) >> 3) + 1;
}

static size_t bits_new_cap(const KeyMap *m, size_t need) {
    if (need <= m->bits_cap) return m->bits_cap;
    size_t cap = m->bits_cap ? m->bits_cap * 2 : 64;
    return cap < need ? need : cap;
}

static int cover(KeyMap *m, int64_t last) {
    size_t need = bits_needed(m, last);
    if (need <= m->bits_len) return 0;
    if (need > m->bits_cap) {
        size_t cap = bits_new_cap(m, need);
        unsigned char *d = (unsigned char *)realloc(m->dead, cap);
        if (!d) return -1;
        m->dead = d;
        unsigned char *e = (unsigned char *)realloc(m->elig, cap);
        if (!e) return -1;
        m->elig = e;
        m->bits_cap = cap;
    }
    memset(m->dead + m->bits_len, 0, need - m->bits_len);
    memset(m->elig + m->bits_len, 0, need - m->bits_len);
    m->bits_len = need;
    return 0;
}

static inline int bit_index(const KeyMap *m, int64_t offset, size_t *i) {
    if (m->start < 0 || offset < m->start) return 0;
    uint64_t d = (uint64_t)offset - (uint64_t)m->start;
    if ((d >> 3) >= m->bits_len) return 0;
    *i = (size_t)d;
    return 1;
}

static inline void set_dead(KeyMap *m, int64_t offset) {
    size_t i;
    if (bit_index(m, offset, &i)) m->dead[i >> 3] |= (unsigned char)(1u << (i & 7));
}

static inline int is_eligible(const KeyMap *m, int64_t base) {
    size_t i;
    return bit_index(m, base, &i) && (m->elig[i >> 3] >> (i & 7)) & 1;
}

/* Whether `count` more keys (`arena` bytes of them longer than 16) and the bits up to
   `last` surely fit, with `extra_worst` more bytes that Python will charge. */
static int fits(const KeyMap *m, size_t count, int64_t arena, int64_t extra_worst, int64_t last) {
    int64_t peak = used_bytes(m) + extra_worst;
    size_t cap = grown_cap(m->cap, m->entries + count);
    if (cap != m->cap || m->cap == 0) peak += table_bytes(cap); /* old and new, for a moment */
    if (arena > 0) {
        int64_t per_chunk = (int64_t)m->chunk_size - m->limit;
        if (per_chunk < 1) per_chunk = 1;
        int64_t chunks = arena / per_chunk + 1;
        peak += chunks * (int64_t)(m->chunk_size + 2 * sizeof(void *));
    }
    size_t need = bits_needed(m, last);
    if (need > m->bits_cap) peak += 2 * (int64_t)bits_new_cap(m, need) + 2 * (int64_t)m->bits_cap;
    return peak <= m->capacity;
}

/* ---- the type ----------------------------------------------------------------------- */

static void km_free_all(KeyMap *m) {
    free(m->slots);
    m->slots = NULL;
    m->cap = 0;
    m->entries = 0;
    for (size_t i = 0; i < m->nchunks; i++) free(m->chunks[i]);
    free(m->chunks);
    m->chunks = NULL;
    m->nchunks = m->chunks_cap = m->chunk_used = 0;
    free(m->dead);
    free(m->elig);
    m->dead = m->elig = NULL;
    m->bits_len = m->bits_cap = 0;
    m->start = -1;
    m->extra = 0;
}

static int km_check(KeyMap *m) {
    if (m->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the key map is in use by another thread");
        return -1;
    }
    return 0;
}

static int km_init(KeyMap *m, PyObject *args, PyObject *kw) {
    static char *names[] = {"capacity_bytes", "inline_key_limit", NULL};
    long long capacity;
    Py_ssize_t limit = 128;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "L|n", names, &capacity, &limit)) return -1;
    if (limit < 0 || limit > (1 << 20)) {
        PyErr_SetString(PyExc_ValueError, "inline_key_limit must be in [0, 1048576]");
        return -1;
    }
    if (m->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the key map is in use");
        return -1;
    }
    km_free_all(m);
    m->capacity = capacity;
    m->limit = limit;
    /* chunks of capacity/16 bytes, a power of two in [4 KiB, 1 MiB], at least 2 keys */
    size_t cs = 4096;
    while (cs < (1u << 20) && (int64_t)cs * 32 <= capacity) cs <<= 1;
    while (cs < (size_t)limit * 2) cs <<= 1;
    m->chunk_size = cs;
    return 0;
}

static void km_dealloc(KeyMap *m) {
    km_free_all(m);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static PyObject *km_clear(KeyMap *m, PyObject *noargs) {
    if (km_check(m)) return NULL;
    km_free_all(m);
    Py_RETURN_NONE;
}

static PyObject *km_begin(KeyMap *m, PyObject *arg) {
    if (km_check(m)) return NULL;
    long long start = PyLong_AsLongLong(arg);
    if (start == -1 && PyErr_Occurred()) return NULL;
    free(m->dead);
    free(m->elig);
    m->dead = m->elig = NULL;
    m->bits_len = m->bits_cap = 0;
    m->start = start < 0 ? -1 : start;
    Py_RETURN_NONE;
}

static PyObject *km_put_keys(KeyMap *m, PyObject *args) {
    PyObject *keys, *offsets;
    if (!PyArg_ParseTuple(args, "OO", &keys, &offsets)) return NULL;
    if (km_check(m)) return NULL;
    PyObject *kf = PySequence_Fast(keys, "keys must be a sequence");
    if (!kf) return NULL;
    PyObject *of = PySequence_Fast(offsets, "offsets must be a sequence");
    if (!of) { Py_DECREF(kf); return NULL; }
    PyObject *out = PyList_New(0);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(kf);
    if (!out) goto fail;
    if (PySequence_Fast_GET_SIZE(of) != n) {
        PyErr_SetString(PyExc_ValueError, "keys and offsets differ in length");
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PySequence_Fast_GET_ITEM(kf, i);
        long long off = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(of, i));
        if (off == -1 && PyErr_Occurred()) goto fail;
        if (off < 0) { PyErr_SetString(PyExc_ValueError, "negative offset"); goto fail; }
        Py_buffer view;
        if (PyObject_GetBuffer(k, &view, PyBUF_SIMPLE)) goto fail;
        if (view.len > m->limit) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_ValueError, "key longer than the inline limit");
            goto fail;
        }
        int64_t old;
        int r = put(m, (const unsigned char *)view.buf, (uint32_t)view.len, off, &old);
        PyBuffer_Release(&view);
        if (r < 0) { PyErr_NoMemory(); goto fail; }
        if (r == 1) {
            PyObject *o = PyLong_FromLongLong(old);
            if (!o || PyList_Append(out, o)) { Py_XDECREF(o); goto fail; }
            Py_DECREF(o);
        }
    }
    Py_DECREF(kf);
    Py_DECREF(of);
    return out;
fail:
    Py_DECREF(kf);
    Py_DECREF(of);
    Py_XDECREF(out);
    return NULL;
}

static PyObject *km_get(KeyMap *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "get(key, default=-1)");
        return NULL;
    }
    if (km_check(m)) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE)) return NULL;
    int64_t r = get(m, (const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    if (r < 0) {
        if (nargs == 2) { Py_INCREF(args[1]); return args[1]; }
        return PyLong_FromLong(-1);
    }
    return PyLong_FromLongLong(r);
}

static PyObject *km_fits(KeyMap *m, PyObject *args) {
    Py_ssize_t count;
    long long arena, extra_worst, last;
    if (!PyArg_ParseTuple(args, "nLLL", &count, &arena, &extra_worst, &last)) return NULL;
    if (count < 0) count = 0;
    return PyBool_FromLong(fits(m, (size_t)count, arena, extra_worst, last));
}

static PyObject *km_cover(KeyMap *m, PyObject *arg) {
    if (km_check(m)) return NULL;
    long long last = PyLong_AsLongLong(arg);
    if (last == -1 && PyErr_Occurred()) return NULL;
    if (cover(m, last)) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *km_mark_batch(KeyMap *m, PyObject *args) {
    long long base;
    int eligible;
    if (!PyArg_ParseTuple(args, "Lp", &base, &eligible)) return NULL;
    if (km_check(m)) return NULL;
    size_t i;
    if (eligible && bit_index(m, base, &i)) m->elig[i >> 3] |= (unsigned char)(1u << (i & 7));
    Py_RETURN_NONE;
}

static PyObject *km_supersede(KeyMap *m, PyObject *offsets) {
    if (km_check(m)) return NULL;
    PyObject *f = PySequence_Fast(offsets, "offsets must be a sequence");
    if (!f) return NULL;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(f); i++) {
        long long off = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(f, i));
        if (off == -1 && PyErr_Occurred()) { Py_DECREF(f); return NULL; }
        set_dead(m, off);
    }
    Py_DECREF(f);
    Py_RETURN_NONE;
}

/* dead_mask(base, last): the dead bits of base..last as little-endian bytes (bit i:
   base + i), or None when that batch is not to be decided by them. */
static PyObject *km_dead_mask(KeyMap *m, PyObject *args) {
    long long base, last;
    if (!PyArg_ParseTuple(args, "LL", &base, &last)) return NULL;
    if (km_check(m)) return NULL;
    size_t i, j;
    if (last < base || !is_eligible(m, base) || !bit_index(m, last, &j)) Py_RETURN_NONE;
    bit_index(m, base, &i);
    size_t n = j - i + 1;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((n + 7) / 8));
    if (!out) return NULL;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    memset(o, 0, (n + 7) / 8);
    for (size_t k = 0; k < n; k++) {
        size_t b = i + k;
        if ((m->dead[b >> 3] >> (b & 7)) & 1) o[k >> 3] |= (unsigned char)(1u << (k & 7));
    }
    return out;
}

/* ---- pass 1 ------------------------------------------------------------------------- */

enum { DONE = 0, NEED_PYTHON = 1, FULL = 2 };

typedef struct {
    const char *error;
    int64_t error_at;
    int nomem;
    int64_t latest, first_put, records, bytes;
} Pass1;

/* map_entries(buf, pos, stop, python_entries, python_worst):
   maps the entries of buf[pos:stop] (whole entries) until one is left to Python
   or the map is full. -> (pos, status, latest, first_put, records, bytes) */
static PyObject *km_map_entries(KeyMap *m, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, stop, py_entries;
    long long py_worst;
    if (!PyArg_ParseTuple(args, "y*nnnL", &view, &pos, &stop, &py_entries, &py_worst)) return NULL;
    if (km_check(m)) { PyBuffer_Release(&view); return NULL; }
    if (pos < 0 || stop > view.len || pos > stop || m->start < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "bad span, or no begin()");
        return NULL;
    }
    const unsigned char *b = (const unsigned char *)view.buf;
    Pass1 r = {NULL, 0, 0, -1, -1, 0, 0};
    int status = DONE;
    int64_t start = m->start;
    m->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    while (pos < stop) {
        if (stop - pos < LOG_OVERHEAD) { status = NEED_PYTHON; break; }
        const unsigned char *h = b + pos;
        int32_t size = s32(rd32(h + 8));
        if (size < MIN_BATCH_SIZE_FIELD || size > stop - pos - LOG_OVERHEAD || h[16] != 2) {
            status = NEED_PYTHON;
            break;
        }
        Py_ssize_t end = pos + LOG_OVERHEAD + size;
        int64_t base = s64(rd64(h));
        int attrs = rd16(h + 21);
        int64_t last = add64(base, s32(rd32(h + 23)));
        int32_t count = s32(rd32(h + 57));
        if (last < start) { pos = end; continue; }
        int control = (attrs & CONTROL_BIT) != 0;
        if (!control && (attrs & CODEC_MASK)) { status = NEED_PYTHON; break; }
        /* walk 1: check the records, count the keys */
        size_t nkeys = 0;
        int64_t arena = 0, taken = 0, tomb = 0, keyless = 0;
        int too_long = 0;
        Rec rec;
        if (!control) {
            Py_ssize_t p = pos + BATCH_OVERHEAD;
            for (int32_t i = 0; i < count; i++) {
                const char *e = parse_record(b, &p, end, &rec);
                if (e) { r.error = e; r.error_at = base; break; }
                int64_t off = add64(base, rec.offset_delta);
                if (off < start) continue;
                taken++;
                tomb += rec.tombstone;
                if (rec.key_len < 0) { keyless++; continue; }
                if (rec.key_len > m->limit) too_long = 1;
                nkeys++;
                if (rec.key_len > SLOT_INLINE) arena += rec.key_len;
            }
            if (r.error) break;
            if (p != end) { r.error = "bytes left after the batch's records"; r.error_at = base; break; }
        }
        if (too_long) { status = NEED_PYTHON; break; }
        if ((m->entries + (size_t)py_entries) > 0 && !fits(m, nkeys, arena, py_worst, last)) {
            status = FULL;
            break;
        }
        if (cover(m, last)) { r.nomem = 1; break; }
        if (base >= start && !(tomb || keyless)) {
            size_t i;
            if (bit_index(m, base, &i)) m->elig[i >> 3] |= (unsigned char)(1u << (i & 7));
        }
        if (nkeys) {
            Py_ssize_t p = pos + BATCH_OVERHEAD;
            for (int32_t i = 0; i < count; i++) {
                parse_record(b, &p, end, &rec); /* checked above */
                int64_t off = add64(base, rec.offset_delta);
                if (off < start || rec.key_len < 0) continue;
                int64_t old;
                int x = put(m, b + rec.key, (uint32_t)rec.key_len, off, &old);
                if (x < 0) { r.nomem = 1; break; }
                if (x == 1) set_dead(m, old);
                if (r.first_put < 0) r.first_put = off;
            }
            if (r.nomem) break;
        }
        if (last > r.latest) r.latest = last;
        r.records += taken;
        r.bytes += LOG_OVERHEAD + size;
        pos = end;
    }
    Py_END_ALLOW_THREADS
    m->busy = 0;
    PyBuffer_Release(&view);
    if (r.nomem) return PyErr_NoMemory();
    if (r.error) {
        PyErr_Format(CorruptRecordError, "record batch at offset %lld: %s", (long long)r.error_at, r.error);
        return NULL;
    }
    return Py_BuildValue("niLLLL", pos, status, (long long)r.latest, (long long)r.first_put,
                         (long long)r.records, (long long)r.bytes);
}

/* ---- pass 2 ------------------------------------------------------------------------- */

typedef struct {
    unsigned char *out;
    size_t len, cap;
    /* per rebuilt entry, for the CRCs computed with the GIL: input span, its CRC,
       output span */
    Py_ssize_t *jobs;
    size_t njobs, jobs_cap;
    /* per written entry: output position, size, last offset, max timestamp */
    int64_t *infos;
    size_t ninfos, infos_cap;
    int64_t read, kept, copied, rebuilt, dropped;
    const char *error;
    int64_t error_at;
    int nomem;
} Pass2;

static int reserve(Pass2 *r, size_t more) {
    if (r->len + more <= r->cap) return 0;
    size_t cap = r->cap ? r->cap * 2 : 1 << 16;
    while (cap < r->len + more) cap *= 2;
    unsigned char *o = (unsigned char *)realloc(r->out, cap);
    if (!o) return -1;
    r->out = o;
    r->cap = cap;
    return 0;
}

static int add_info(Pass2 *r, int64_t at, int64_t size, int64_t last, int64_t max_ts) {
    if (r->ninfos + 4 > r->infos_cap) {
        size_t cap = r->infos_cap ? r->infos_cap * 2 : 1024;
        int64_t *i = (int64_t *)realloc(r->infos, cap * sizeof(int64_t));
        if (!i) return -1;
        r->infos = i;
        r->infos_cap = cap;
    }
    r->infos[r->ninfos++] = at;
    r->infos[r->ninfos++] = size;
    r->infos[r->ninfos++] = last;
    r->infos[r->ninfos++] = max_ts;
    return 0;
}

static int add_job(Pass2 *r, Py_ssize_t in_at, Py_ssize_t in_len, Py_ssize_t crc, Py_ssize_t out_at,
                   Py_ssize_t out_len) {
    if (r->njobs + 5 > r->jobs_cap) {
        size_t cap = r->jobs_cap ? r->jobs_cap * 2 : 1024;
        Py_ssize_t *j = (Py_ssize_t *)realloc(r->jobs, cap * sizeof(Py_ssize_t));
        if (!j) return -1;
        r->jobs = j;
        r->jobs_cap = cap;
    }
    r->jobs[r->njobs++] = in_at;
    r->jobs[r->njobs++] = in_len;
    r->jobs[r->njobs++] = crc;
    r->jobs[r->njobs++] = out_at;
    r->jobs[r->njobs++] = out_len;
    return 0;
}

static int ts_add(int64_t a, int64_t b, int64_t *out) {
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) return -1;
    *out = a + b;
    return 0;
}

static int ts_sub(int64_t a, int64_t b, int64_t *out) {
    if ((b < 0 && a > INT64_MAX + b) || (b > 0 && a < INT64_MIN + b)) return -1;
    *out = a - b;
    return 0;
}

/* One eligible batch (magic 2, uncompressed, records > 0, decided by the dead bits).
   0: done; 1: leave it to Python; -1: error (r->error / r->nomem). */
static int filter_batch(KeyMap *m, const unsigned char *b, Py_ssize_t pos, Py_ssize_t end, Pass2 *r) {
    const unsigned char *h = b + pos;
    int64_t base = s64(rd64(h));
    int32_t last_delta = s32(rd32(h + 23));
    int64_t last = add64(base, last_delta);
    int attrs = rd16(h + 21);
    int64_t base_ts = s64(rd64(h + 27)), max_ts = s64(rd64(h + 35));
    int32_t count = s32(rd32(h + 57));
    size_t i0;
    bit_index(m, base, &i0);
    const unsigned char *dead = m->dead;
    int log_append = (attrs & LOG_APPEND_BIT) != 0, has_horizon = (attrs & HORIZON_BIT) != 0;
#define DEAD(delta) ((dead[(i0 + (size_t)(delta)) >> 3] >> ((i0 + (size_t)(delta)) & 7)) & 1)
    int any = 0, all = 1;
    for (int64_t d = 0; d <= last_delta; d++) {
        if (DEAD(d)) any = 1; else all = 0;
    }
    size_t size = (size_t)(end - pos);
    size_t out_at = r->len;
    if (!any) {
        if (reserve(r, size) || add_info(r, (int64_t)out_at, (int64_t)size, last, max_ts)) return r->nomem = 1, -1;
        memcpy(r->out + r->len, h, size);
        r->len += size;
        r->read += count;
        r->kept += count;
        r->copied++;
        return 0;
    }
    int64_t nkept = 0, first_ts = 0, new_max = INT64_MIN;
    Py_ssize_t rec_bytes = 0;
    Rec rec;
    if (!(all && last_delta == count - 1)) {
        Py_ssize_t p = pos + BATCH_OVERHEAD;
        for (int32_t i = 0; i < count; i++) {
            const char *e = parse_record(b, &p, end, &rec);
            if (e) { r->error = e; r->error_at = base; return -1; }
            if (rec.offset_delta < 0 || rec.offset_delta > last_delta) {
                r->error = "a record's offset lies outside its batch";
                r->error_at = base;
                return -1;
            }
            if (DEAD(rec.offset_delta)) continue;
            int64_t ts;
            if (ts_add(base_ts, rec.ts_delta, &ts)) return 1;
            if (nkept == 0) first_ts = ts;
            if (ts > new_max) new_max = ts;
            nkept++;
            rec_bytes += rec.end - rec.start;
        }
        if (p != end) { r->error = "bytes left after the batch's records"; r->error_at = base; return -1; }
        if (nkept == count) {
            if (reserve(r, size) || add_info(r, (int64_t)out_at, (int64_t)size, last, max_ts)) return r->nomem = 1, -1;
            memcpy(r->out + r->len, h, size);
            r->len += size;
            r->read += count;
            r->kept += count;
            r->copied++;
            return 0;
        }
    }
    if (nkept == 0) {
        /* the CRC is checked before anything is dropped, as Python does */
        if (add_job(r, pos, (Py_ssize_t)size, (Py_ssize_t)rd32(h + CRC_OFFSET), -1, 0)) return r->nomem = 1, -1;
        r->read += count;
        r->dropped++;
        return 0;
    }
    int64_t new_base_ts = has_horizon ? base_ts : (log_append ? max_ts : first_ts);
    if (log_append) new_max = max_ts;
    int verbatim = !log_append && new_base_ts == base_ts;
    size_t bound = BATCH_OVERHEAD + (size_t)rec_bytes + (verbatim ? 0 : 20 * (size_t)nkept);
    if (reserve(r, bound)) return r->nomem = 1, -1;
    unsigned char *o = r->out + out_at;
    size_t w = BATCH_OVERHEAD;
    Py_ssize_t p = pos + BATCH_OVERHEAD;
    for (int32_t i = 0; i < count; i++) {
        parse_record(b, &p, end, &rec);
        if (DEAD(rec.offset_delta)) continue;
        if (verbatim) {
            memcpy(o + w, b + rec.start, (size_t)(rec.end - rec.start));
            w += (size_t)(rec.end - rec.start);
        } else {
            int64_t ts = 0, delta;
            if (log_append) ts = max_ts;
            else ts_add(base_ts, rec.ts_delta, &ts);
            if (ts_sub(ts, new_base_ts, &delta)) return 1; /* nothing committed yet */
            size_t body = 1 + varint_size(delta) + (size_t)(rec.end - rec.rest);
            w += wr_varint(o + w, (int64_t)body);
            o[w++] = (unsigned char)rec.attr;
            w += wr_varint(o + w, delta);
            memcpy(o + w, b + rec.rest, (size_t)(rec.end - rec.rest));
            w += (size_t)(rec.end - rec.rest);
        }
    }
#undef DEAD
    /* header: as the old one but length, CRC, base timestamp, max timestamp, count */
    memcpy(o, h, BATCH_OVERHEAD);
    wr32(o + 8, (uint32_t)(w - LOG_OVERHEAD));
    wr64(o + 27, (uint64_t)new_base_ts);
    wr64(o + 35, (uint64_t)new_max);
    wr32(o + 57, (uint32_t)nkept);
    if (add_job(r, pos, (Py_ssize_t)size, (Py_ssize_t)rd32(h + CRC_OFFSET), (Py_ssize_t)out_at, (Py_ssize_t)w) ||
        add_info(r, (int64_t)out_at, (int64_t)w, last, new_max))
        return r->nomem = 1, -1;
    r->len += w;
    r->read += count;
    r->kept += nkept;
    r->rebuilt++;
    return 0;
}

static PyObject *crc_of(const unsigned char *p, Py_ssize_t n) {
    PyObject *mv = PyMemoryView_FromMemory((char *)p, n, PyBUF_READ);
    if (!mv) return NULL;
    PyObject *c = PyObject_CallOneArg(crc32c_fn, mv);
    Py_DECREF(mv);
    return c;
}

/* filter_entries(buf, pos, stop, latest_offset): pass 2 over the whole entries of
   buf[pos:stop] until one is left to Python. -> (pos, status, data, infos, counts):
   infos a flat list (position in data, size, last offset, max timestamp) per entry
   written; counts (records read, kept, entries copied, rebuilt, dropped). */
static PyObject *km_filter_entries(KeyMap *m, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, stop;
    long long latest;
    if (!PyArg_ParseTuple(args, "y*nnL", &view, &pos, &stop, &latest)) return NULL;
    if (km_check(m)) { PyBuffer_Release(&view); return NULL; }
    if (pos < 0 || stop > view.len || pos > stop) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "bad span");
        return NULL;
    }
    const unsigned char *b = (const unsigned char *)view.buf;
    Pass2 r;
    memset(&r, 0, sizeof(r));
    int status = DONE;
    PyObject *data = NULL, *infos = NULL, *result = NULL;
    m->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    while (pos < stop) {
        if (stop - pos < LOG_OVERHEAD) { status = NEED_PYTHON; break; }
        const unsigned char *h = b + pos;
        int32_t size = s32(rd32(h + 8));
        if (size < MIN_BATCH_SIZE_FIELD || size > stop - pos - LOG_OVERHEAD || h[16] != 2) {
            status = NEED_PYTHON;
            break;
        }
        Py_ssize_t end = pos + LOG_OVERHEAD + size;
        int64_t base = s64(rd64(h));
        int64_t last = add64(base, s32(rd32(h + 23)));
        int attrs = rd16(h + 21);
        int32_t count = s32(rd32(h + 57));
        int64_t producer_id = s64(rd64(h + 43));
        size_t j;
        if (last > latest || last < base || count <= 0 || (attrs & (CONTROL_BIT | CODEC_MASK)) || producer_id >= 0 ||
            !is_eligible(m, base) || !bit_index(m, last, &j)) {
            status = NEED_PYTHON;
            break;
        }
        size_t out_len = r.len, ninfos = r.ninfos, njobs = r.njobs;
        int x = filter_batch(m, b, pos, end, &r);
        if (x < 0) break;
        if (x == 1) { /* undo, and leave it to Python */
            r.len = out_len;
            r.ninfos = ninfos;
            r.njobs = njobs;
            status = NEED_PYTHON;
            break;
        }
        pos = end;
    }
    Py_END_ALLOW_THREADS
    m->busy = 0;
    if (r.nomem) { PyErr_NoMemory(); goto done; }
    if (r.error) {
        PyErr_Format(CorruptRecordError, "record batch at offset %lld: %s", (long long)r.error_at, r.error);
        goto done;
    }
    for (size_t k = 0; k < r.njobs; k += 5) {
        Py_ssize_t in_at = r.jobs[k], in_len = r.jobs[k + 1], out_at = r.jobs[k + 3], out_len = r.jobs[k + 4];
        unsigned long want = (unsigned long)r.jobs[k + 2];
        PyObject *c = crc_of(b + in_at + CRC_START, in_len - CRC_START);
        if (!c) goto done;
        unsigned long got = PyLong_AsUnsignedLong(c);
        Py_DECREF(c);
        if (got == (unsigned long)-1 && PyErr_Occurred()) goto done;
        if (got != want) {
            PyErr_Format(CorruptRecordError, "batch at offset %lld fails its CRC32C; not cleaning it",
                         (long long)s64(rd64(b + in_at)));
            goto done;
        }
        if (out_at < 0) continue;
        c = crc_of(r.out + out_at + CRC_START, out_len - CRC_START);
        if (!c) goto done;
        got = PyLong_AsUnsignedLong(c);
        Py_DECREF(c);
        if (got == (unsigned long)-1 && PyErr_Occurred()) goto done;
        wr32(r.out + out_at + CRC_OFFSET, (uint32_t)got);
    }
    data = PyBytes_FromStringAndSize((const char *)r.out, (Py_ssize_t)r.len);
    if (!data) goto done;
    infos = PyList_New((Py_ssize_t)r.ninfos);
    if (!infos) goto done;
    for (size_t k = 0; k < r.ninfos; k++) {
        PyObject *v = PyLong_FromLongLong(r.infos[k]);
        if (!v) goto done;
        PyList_SET_ITEM(infos, (Py_ssize_t)k, v);
    }
    result = Py_BuildValue("niOO(LLLLL)", pos, status, data, infos, (long long)r.read, (long long)r.kept,
                           (long long)r.copied, (long long)r.rebuilt, (long long)r.dropped);
done:
    Py_XDECREF(data);
    Py_XDECREF(infos);
    free(r.out);
    free(r.jobs);
    free(r.infos);
    PyBuffer_Release(&view);
    return result;
}

/* ---- attributes, type, module ------------------------------------------------------- */

static PyObject *km_get_entries(KeyMap *m, void *c) { return PyLong_FromSize_t(m->entries); }
static PyObject *km_get_used(KeyMap *m, void *c) { return PyLong_FromLongLong(used_bytes(m)); }
static PyObject *km_get_capacity(KeyMap *m, void *c) { return PyLong_FromLongLong(m->capacity); }
static PyObject *km_get_limit(KeyMap *m, void *c) { return PyLong_FromSsize_t(m->limit); }
static PyObject *km_get_table_bytes(KeyMap *m, void *c) { return PyLong_FromLongLong(table_bytes(m->cap)); }
static PyObject *km_get_arena_bytes(KeyMap *m, void *c) {
    return PyLong_FromLongLong((long long)(m->nchunks * m->chunk_size));
}
static PyObject *km_get_chunk_size(KeyMap *m, void *c) { return PyLong_FromSize_t(m->chunk_size); }
static PyObject *km_get_bits_bytes(KeyMap *m, void *c) { return PyLong_FromSize_t(2 * m->bits_cap); }
static PyObject *km_get_start(KeyMap *m, void *c) { return PyLong_FromLongLong(m->start); }
static PyObject *km_get_extra(KeyMap *m, void *c) { return PyLong_FromLongLong(m->extra); }
static int km_set_extra(KeyMap *m, PyObject *v, void *c) {
    if (!v) { PyErr_SetString(PyExc_AttributeError, "cannot delete extra"); return -1; }
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred()) return -1;
    m->extra = x;
    return 0;
}

static PyGetSetDef km_getset[] = {
    {"entries", (getter)km_get_entries, NULL, "keys in the map", NULL},
    {"used_bytes", (getter)km_get_used, NULL, "every byte allocated, plus extra", NULL},
    {"capacity_bytes", (getter)km_get_capacity, NULL, NULL, NULL},
    {"inline_key_limit", (getter)km_get_limit, NULL, NULL, NULL},
    {"table_bytes", (getter)km_get_table_bytes, NULL, NULL, NULL},
    {"arena_bytes", (getter)km_get_arena_bytes, NULL, NULL, NULL},
    {"chunk_size", (getter)km_get_chunk_size, NULL, NULL, NULL},
    {"bits_bytes", (getter)km_get_bits_bytes, NULL, NULL, NULL},
    {"start", (getter)km_get_start, NULL, "the offset of the first bit (-1: none)", NULL},
    {"extra", (getter)km_get_extra, (setter)km_set_extra, "bytes charged by Python", NULL},
    {NULL}};

static PyMethodDef km_methods[] = {
    {"clear", (PyCFunction)km_clear, METH_NOARGS, "empty the map and its bits"},
    {"begin", (PyCFunction)km_begin, METH_O, "begin(start): empty bit tables from offset start"},
    {"put_keys", (PyCFunction)km_put_keys, METH_VARARGS, "put_keys(keys, offsets) -> superseded offsets"},
    {"get", (PyCFunction)(void (*)(void))km_get, METH_FASTCALL, "get(key, default=-1)"},
    {"fits", (PyCFunction)km_fits, METH_VARARGS, "fits(count, arena_bytes, extra_worst, last_offset)"},
    {"cover", (PyCFunction)km_cover, METH_O, "cover(last_offset): bits up to there"},
    {"mark_batch", (PyCFunction)km_mark_batch, METH_VARARGS, "mark_batch(base_offset, eligible)"},
    {"supersede", (PyCFunction)km_supersede, METH_O, "supersede(offsets): set their dead bits"},
    {"dead_mask", (PyCFunction)km_dead_mask, METH_VARARGS, "dead_mask(base, last) -> bytes or None"},
    {"map_entries", (PyCFunction)km_map_entries, METH_VARARGS, "pass 1 over whole entries"},
    {"filter_entries", (PyCFunction)km_filter_entries, METH_VARARGS, "pass 2 over whole entries"},
    {NULL}};

static PyTypeObject KeyMapType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "storage._ccleaner.KeyMap",
    .tp_basicsize = sizeof(KeyMap),
    .tp_dealloc = (destructor)km_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "exact key -> latest offset map for short keys, and pass 1's bits",
    .tp_methods = km_methods,
    .tp_getset = km_getset,
    .tp_init = (initproc)km_init,
    .tp_new = PyType_GenericNew,
};

static PyObject *set_hash_mask(PyObject *self, PyObject *arg) {
    unsigned long long mask = PyLong_AsUnsignedLongLongMask(arg);
    if (mask == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    g_hash_mask = (uint64_t)mask;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"set_hash_mask", set_hash_mask, METH_O,
     "set_hash_mask(mask): AND every key hash with mask (tests: 0 makes all keys collide; "
     "~0 restores). Affects maps filled afterwards; clear() the others."},
    {NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ccleaner", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit__ccleaner(void) {
    KeyMapType.tp_new = PyType_GenericNew;
    if (PyType_Ready(&KeyMapType) < 0) return NULL;
    PyObject *errors = PyImport_ImportModule("storage.errors");
    if (!errors) return NULL;
    CorruptRecordError = PyObject_GetAttrString(errors, "CorruptRecordError");
    Py_DECREF(errors);
    if (!CorruptRecordError) return NULL;
    PyObject *crc = PyImport_ImportModule("crc32c");
    if (!crc) return NULL;
    crc32c_fn = PyObject_GetAttrString(crc, "crc32c");
    Py_DECREF(crc);
    if (!crc32c_fn) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&KeyMapType);
    if (PyModule_AddObject(m, "KeyMap", (PyObject *)&KeyMapType) < 0) {
        Py_DECREF(&KeyMapType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "SLOT_BYTES", (long)sizeof(Slot));
    PyModule_AddIntConstant(m, "SLOT_INLINE_KEY", SLOT_INLINE);
    PyModule_AddIntConstant(m, "DONE", DONE);
    PyModule_AddIntConstant(m, "NEED_PYTHON", NEED_PYTHON);
    PyModule_AddIntConstant(m, "FULL", FULL);
    return m;
}
