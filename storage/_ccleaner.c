/* storage._ccleaner: the log cleaner's hot loops in C (see storage/offset_map.py
 * and storage/cleaner.py, which keep the pure-Python twins as the reference).
 *
 * KeyMap: an exact key -> latest offset map for keys of at most `inline_key_limit`
 * bytes, plus pass 1's per-offset bit tables (superseded records, and the batches
 * pass 2 may decide by those bits alone).
 *
 * Layout. An open-addressing table (linear probing, power-of-two size, at most 3/4
 * full) of 32-byte slots: offset + 1 (0 = empty, so a new table is calloc's
 * zeroes), the lower 32 bits of the key's hash, the key length, and either the
 * key itself (up to 16 bytes, zero-padded) or the position of its bytes in an
 * arena of fixed-size chunks (longer keys). A probe compares hash, length and
 * then the key bytes, so two different keys are never merged, whatever their
 * hashes (set_hash_mask(0) makes every hash equal, for the tests). Hash: a
 * multiply-xorshift mix of the key's words under a per-process secret seed
 * drawn from CPython's randomized bytes hash.
 *
 * Memory. Every byte the map allocates is counted in `used_bytes` (table + arena
 * chunks + chunk directory + bit tables, plus `extra`, bytes a caller charges),
 * and `fits()` says whether a batch of keys surely fits, counting the moment a
 * table resize holds the old and the new table. Per key: the table is at least
 * 3/8 full after a resize, so at most 32 * 8/3 = 86 bytes a key (128 at the
 * moment of a resize), plus the key bytes when longer than 16 (keys never
 * straddle chunks: a chunk wastes less than one key). Not charged: the walks'
 * scratch (512 records, 32 KiB) and pass 2's output, about one read's worth.
 *
 * Pass 1 (map_entries) and pass 2 (filter_entries) walk whole entries of one
 * read with the GIL released (a busy flag refuses any other use of the map
 * meanwhile) and stop at the first entry they leave to Python (classic
 * messages, compressed or control batches, keys longer than the limit, batches
 * with tombstones or keyless records, active producers' batches, the group's
 * last entry). Pass 1 loads the home slots of up to 64 keys at once before
 * putting them, so that their cache misses overlap. Every length and varint
 * read is bounds-checked; structure errors raise
 * kafka_format.errors.CorruptRecordError and leave the damaged batch unmapped. The
 * CRC32Cs of rebuilt batches (the old one checked first, as Python does) come
 * from kafka_format.accel's crc32c (the one every other caller uses),
 * called with the GIL once the walk is done.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "format.h" /* kafka_format/format.h: the entry layouts */

static PyObject *CorruptRecordError = NULL;
static PyTypeObject *EntryInfo = NULL; /* kafka_format.entries.EntryInfo, a tuple subclass */
static PyObject *crc32c_fn = NULL;
static uint64_t g_hash_mask = ~(uint64_t)0;

#define SLOT_INLINE 16

typedef struct {
    uint64_t off1; /* offset + 1; 0: empty (so a fresh table is calloc's zeroes) */
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
    void *scratch; /* the walks' record arrays (STASH each), allocated on first use */
    int64_t native_entries[2]; /* entries done by map_entries / filter_entries since clear() */
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
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
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

/* The header fields both passes need, of the magic-2 entry at b[pos] if it is
 * whole before `stop`; 0 when it is not (something for the Python code). */
typedef struct {
    Py_ssize_t end;
    int64_t base, last, producer_id;
    int attrs;
    int32_t count;
} BatchHead;

static inline int batch_head(const unsigned char *b, Py_ssize_t pos, Py_ssize_t stop, BatchHead *head) {
    if (stop - pos < LOG_OVERHEAD)
        return 0;
    const unsigned char *h = b + pos;
    int32_t size = s32(rd32(h + SIZE_OFFSET));
    if (size < MIN_BATCH_LENGTH || size > stop - pos - LOG_OVERHEAD || h[MAGIC_OFFSET] != MAGIC_V2)
        return 0;
    head->end = pos + LOG_OVERHEAD + size;
    head->base = s64(rd64(h));
    head->attrs = rd16(h + BATCH_ATTRIBUTES_OFFSET);
    head->last = add64(head->base, s32(rd32(h + BATCH_LAST_DELTA_OFFSET)));
    head->count = s32(rd32(h + BATCH_RECORD_COUNT_OFFSET));
    head->producer_id = s64(rd64(h + BATCH_PRODUCER_ID_OFFSET));
    return 1;
}

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

/* The key hash: a multiply-xorshift mix (MurmurHash3's finalizer) of the key's
   8-byte words under a per-process secret seed, taken from CPython's own
   randomized bytes hash at import (PYTHONHASHSEED rules apply). Colliding keys
   only cost probes: the table compares their bytes. */
static uint64_t seed0 = 0x9E3779B97F4A7C15ULL, seed1 = 0xC2B2AE3D27D4EB4FULL;

static inline uint64_t fmix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xFF51AFD7ED558CCDULL;
    k ^= k >> 33;
    k *= 0xC4CEB9FE1A85EC53ULL;
    k ^= k >> 33;
    return k;
}

static inline uint64_t load64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint64_t hash_words(uint64_t h, uint64_t a, uint64_t b) {
    h ^= (a ^ seed0) * 0x87C37B91114253D5ULL;
    h = (h << 31) | (h >> 33);
    h ^= (b ^ seed1) * 0x4CF5AD432745937FULL;
    return h;
}

/* A key of at most SLOT_INLINE bytes, given zero-padded to SLOT_INLINE. */
static inline uint64_t padded_hash(const unsigned char *padded, uint32_t len) {
    uint64_t h = hash_words((uint64_t)len * 0x9E3779B97F4A7C15ULL, load64(padded), load64(padded + 8));
    return fmix64(h) & g_hash_mask;
}

static inline uint64_t key_hash(const unsigned char *key, Py_ssize_t len) {
    if (len <= SLOT_INLINE) {
        unsigned char padded[SLOT_INLINE];
        memset(padded, 0, SLOT_INLINE);
        memcpy(padded, key, (size_t)len);
        return padded_hash(padded, (uint32_t)len);
    }
    uint64_t h = (uint64_t)len * 0x9E3779B97F4A7C15ULL;
    Py_ssize_t i = 0;
    for (; i + 16 <= len; i += 16) h = hash_words(h, load64(key + i), load64(key + i + 8));
    unsigned char tail[16];
    memset(tail, 0, 16);
    memcpy(tail, key + i, (size_t)(len - i));
    h = hash_words(h, load64(tail), load64(tail + 8));
    return fmix64(h) & g_hash_mask;
}

static inline const unsigned char *slot_key(const KeyMap *m, const Slot *s) {
    if (s->len <= SLOT_INLINE) return s->u.key;
    return m->chunks[s->u.pos >> 32] + (s->u.pos & 0xFFFFFFFFu);
}

static inline Slot *probe(KeyMap *m, const unsigned char *key, uint32_t len, uint64_t h) {
    uint32_t hh = (uint32_t)h;
    size_t mask = m->cap - 1, i = (size_t)h & mask;
    if (len <= SLOT_INLINE) {
        /* inline keys are stored zero-padded: one fixed-size compare */
        unsigned char padded[SLOT_INLINE];
        memset(padded, 0, SLOT_INLINE);
        memcpy(padded, key, len);
        for (;;) {
            Slot *s = &m->slots[i];
            if (!s->off1) return s;
            if (s->hash == hh && s->len == len && memcmp(s->u.key, padded, SLOT_INLINE) == 0) return s;
            i = (i + 1) & mask;
        }
    }
    for (;;) {
        Slot *s = &m->slots[i];
        if (!s->off1) return s;
        if (s->hash == hh && s->len == len && memcmp(slot_key(m, s), key, len) == 0) return s;
        i = (i + 1) & mask;
    }
}

static int64_t table_bytes(size_t cap) { return (int64_t)(cap * sizeof(Slot)); }

static int64_t used_bytes(const KeyMap *m) {
    return table_bytes(m->cap) + (int64_t)(m->nchunks * m->chunk_size) + (int64_t)(m->chunks_cap * sizeof(void *)) +
           (int64_t)(2 * m->bits_cap) + m->extra;
}

/* Grow the table to `cap` slots in place: realloc (which moves a large block's
   pages rather than copying them), zero the new part, then move each entry to
   its home under the larger mask. Entries not yet moved are flagged; a moving
   entry skips moved ones and takes the first slot that is empty or holds an
   unmoved entry (which it then carries on), so a moved entry's probe run never
   spans an unmoved one, and the slot an unmoved entry leaves never breaks a
   run: the table ends as if every key had been put afresh. Only the new part
   is fresh memory (a table that doubles touches each page once). */
#define UNMOVED 0x80000000u

static int resize(KeyMap *m, size_t cap) {
    size_t old = m->cap;
    Slot *slots = old ? (Slot *)realloc(m->slots, cap * sizeof(Slot)) : (Slot *)calloc(cap, sizeof(Slot));
    if (!slots) return -1; /* the old table is intact */
    if (old) memset(slots + old, 0, (cap - old) * sizeof(Slot));
    m->slots = slots;
    m->cap = cap;
    size_t mask = cap - 1;
    for (size_t i = 0; i < old; i++)
        if (slots[i].off1) slots[i].len |= UNMOVED;
    for (size_t i = 0; i < old; i++) {
        if (!slots[i].off1 || !(slots[i].len & UNMOVED)) continue;
        Slot x = slots[i];
        memset(&slots[i], 0, sizeof(Slot));
        for (;;) {
            x.len &= ~UNMOVED;
            /* the stored hash is the lower half: the home slot, up to 2^32 slots */
            size_t j = ((uint64_t)mask >> 32 ? (size_t)key_hash(slot_key(m, &x), x.len) : (size_t)x.hash) & mask;
            while (slots[j].off1 && !(slots[j].len & UNMOVED)) j = (j + 1) & mask;
            Slot y = slots[j];
            slots[j] = x;
            if (!y.off1) break;
            x = y; /* an unmoved entry: carry it on */
        }
    }
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

static inline int reserve_entries(KeyMap *m, size_t more) {
    if (m->cap == 0 || (m->entries + more) * 4 > m->cap * 3) return resize(m, grown_cap(m->cap, m->entries + more));
    return 0;
}

/* Put key -> offset (h: its hash): 1 and *old when it supersedes, 0 when new, -1 out
   of memory. */
static int put_hashed(KeyMap *m, const unsigned char *key, uint32_t len, uint64_t h, int64_t offset,
                      int64_t *old) {
    if (reserve_entries(m, 1)) return -1;
    Slot *s = probe(m, key, len, h);
    if (s->off1) {
        *old = (int64_t)(s->off1 - 1);
        s->off1 = (uint64_t)offset + 1;
        return 1;
    }
    if (len > SLOT_INLINE) {
        if (arena_store(m, key, len, &s->u.pos)) return -1;
    } else {
        memset(s->u.key, 0, SLOT_INLINE);
        memcpy(s->u.key, key, len);
    }
    s->hash = (uint32_t)h;
    s->len = len;
    s->off1 = (uint64_t)offset + 1;
    m->entries++;
    return 0;
}

static int put(KeyMap *m, const unsigned char *key, uint32_t len, int64_t offset, int64_t *old) {
    return put_hashed(m, key, len, key_hash(key, len), offset, old);
}

/* Keys put GROUP at a time: their home slots are loaded first, all at once
   (independent loads the CPU overlaps; plain C, no prefetch intrinsic), so that
   the puts that follow find them in cache instead of waiting for each in turn. */
#define GROUP 64
#define STASH 512 /* a batch of at most this many records is parsed once */

typedef struct {
    int64_t offset;
    const unsigned char *key;
    uint64_t hash;
    uint32_t len;
} KeyRec;

#define SCRATCH_BYTES (STASH * (sizeof(KeyRec) > sizeof(Rec) ? sizeof(KeyRec) : sizeof(Rec)))

static inline void set_dead(KeyMap *m, int64_t offset);

/* -1: out of memory; else 0. Superseded offsets get their dead bits. */
static int put_keyrecs(KeyMap *m, const KeyRec *k, size_t n, int64_t *first_put) {
    for (size_t i0 = 0; i0 < n; i0 += GROUP) {
        size_t e = i0 + GROUP < n ? i0 + GROUP : n;
        if (reserve_entries(m, e - i0)) return -1;
        size_t mask = m->cap - 1;
        uint64_t acc = 0;
        for (size_t i = i0; i < e; i++) acc += m->slots[(size_t)k[i].hash & mask].off1;
        volatile uint64_t sink = acc; /* the loads must happen */
        (void)sink;
        for (size_t i = i0; i < e; i++) {
            int64_t old;
            int x = put_hashed(m, k[i].key, k[i].len, k[i].hash, k[i].offset, &old);
            if (x < 0) return -1;
            if (x == 1) set_dead(m, old);
        }
    }
    if (n && *first_put < 0) *first_put = k[0].offset;
    return 0;
}

static int64_t get(KeyMap *m, const unsigned char *key, Py_ssize_t len) {
    if (m->cap == 0 || len > m->limit) return -1;
    Slot *s = probe(m, key, (uint32_t)len, key_hash(key, len));
    return (int64_t)s->off1 - 1;
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
        peak += chunks * (int64_t)m->chunk_size;
        size_t dir = m->chunks_cap ? m->chunks_cap : 16;
        while (dir < m->nchunks + (size_t)chunks) dir *= 2;
        if (dir != m->chunks_cap) peak += (int64_t)(dir * sizeof(void *)); /* realloc: old and new */
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
    m->native_entries[0] = m->native_entries[1] = 0;
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
    /* chunks of about capacity/32 bytes, a power of two in [4 KiB, 1 MiB], at least 2 keys */
    size_t cs = 4096;
    while (cs < (1u << 20) && (int64_t)cs * 32 <= capacity) cs <<= 1;
    while (cs < (size_t)limit * 2) cs <<= 1;
    m->chunk_size = cs;
    return 0;
}

static void km_dealloc(KeyMap *m) {
    km_free_all(m);
    free(m->scratch);
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
    if (!m->scratch && !(m->scratch = malloc(SCRATCH_BYTES))) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    KeyRec *stash = (KeyRec *)m->scratch; /* the keys of the batch at hand */
    int status = DONE;
    int64_t start = m->start;
    m->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    while (pos < stop) {
        BatchHead head;
        if (!batch_head(b, pos, stop, &head)) { status = NEED_PYTHON; break; }
        Py_ssize_t end = head.end;
        int64_t base = head.base, last = head.last;
        int attrs = head.attrs;
        int32_t count = head.count;
        if (last < start) { pos = end; continue; }
        int control = (attrs & CONTROL_BIT) != 0;
        if (!control && (attrs & CODEC_MASK)) { status = NEED_PYTHON; break; }
        /* walk 1: check the records, count the keys */
        size_t nkeys = 0;
        int64_t arena = 0, taken = 0, tomb = 0, keyless = 0;
        int too_long = 0;
        Rec rec;
        int stashed = count <= STASH;
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
                if (rec.key_len > m->limit) { too_long = 1; stashed = 0; }
                if (stashed) {
                    KeyRec *k = &stash[nkeys];
                    k->offset = off;
                    k->key = b + rec.key;
                    k->len = (uint32_t)rec.key_len;
                    k->hash = key_hash(b + rec.key, (Py_ssize_t)rec.key_len);
                }
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
        if (nkeys && stashed) {
            if (put_keyrecs(m, stash, nkeys, &r.first_put)) { r.nomem = 1; break; }
        } else if (nkeys) { /* a batch of many records: parsed again, GROUP keys at a time */
            Py_ssize_t p = pos + BATCH_OVERHEAD;
            size_t n = 0;
            for (int32_t i = 0; i < count; i++) {
                parse_record(b, &p, end, &rec); /* checked above */
                int64_t off = add64(base, rec.offset_delta);
                if (off < start || rec.key_len < 0) continue;
                KeyRec *k = &stash[n++];
                k->offset = off;
                k->key = b + rec.key;
                k->len = (uint32_t)rec.key_len;
                k->hash = key_hash(b + rec.key, (Py_ssize_t)rec.key_len);
                if (n == GROUP) {
                    if (put_keyrecs(m, stash, n, &r.first_put)) { r.nomem = 1; break; }
                    n = 0;
                }
            }
            if (r.nomem || put_keyrecs(m, stash, n, &r.first_put)) { r.nomem = 1; break; }
        }
        if (last > r.latest) r.latest = last;
        m->native_entries[0]++;
        r.records += taken;
        r.bytes += end - pos;
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
    int64_t read, kept, copied, rebuilt, dropped, keyless, tombstones;
    int64_t latest, now, retention; /* the round's map end, clock and delete.retention.ms */
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

/* Python's RecordFilter._keep for a record of a batch decided by key: 1 keep, 0 drop
   (*why: 1 a keyless record, 2 a tombstone past its horizon). */
static inline int keep_by_key(KeyMap *m, const unsigned char *b, const Rec *rec, int64_t offset, int64_t latest,
                              int retain_deletes, int *why) {
    *why = 0;
    if (offset > latest) return 1;
    if (rec->key < 0) {
        *why = 1;
        return 0;
    }
    if (offset < get(m, b + rec->key, (Py_ssize_t)rec->key_len)) return 0;
    if (rec->tombstone && !retain_deletes) {
        *why = 2;
        return 0;
    }
    return 1;
}

/* One batch (magic 2, uncompressed, records > 0, not a control batch), as Python's
   RecordFilter._filter_batch: decided by pass 1's dead bits (`by_bits`: the batch
   is eligible) or else by looking its keys up. 0: done; 1: leave it to Python
   (nothing written); -1: error (r->error / r->nomem). */
static int filter_batch(KeyMap *m, const unsigned char *b, Py_ssize_t pos, Py_ssize_t end, Pass2 *r, int by_bits) {
    const unsigned char *h = b + pos;
    int64_t base = s64(rd64(h));
    int32_t last_delta = s32(rd32(h + BATCH_LAST_DELTA_OFFSET));
    int64_t last = add64(base, last_delta);
    int attrs = rd16(h + BATCH_ATTRIBUTES_OFFSET);
    int64_t base_ts = s64(rd64(h + BATCH_BASE_TIMESTAMP_OFFSET)), max_ts = s64(rd64(h + BATCH_MAX_TIMESTAMP_OFFSET));
    int32_t count = s32(rd32(h + BATCH_RECORD_COUNT_OFFSET));
    int64_t latest = r->latest;
    size_t i0 = 0;
    const unsigned char *dead = m->dead;
    int log_append = (attrs & TIMESTAMP_TYPE_BIT) != 0, has_horizon = (attrs & DELETE_HORIZON_BIT) != 0;
    int retain_deletes = !has_horizon || r->now < base_ts;
    size_t size = (size_t)(end - pos);
    size_t out_at = r->len;
#define DEAD(delta) ((dead[(i0 + (size_t)(delta)) >> 3] >> ((i0 + (size_t)(delta)) & 7)) & 1)
#define COPY_ALL()                                                                                  \
    do {                                                                                            \
        if (reserve(r, size) || add_info(r, (int64_t)out_at, (int64_t)size, last, max_ts))         \
            return r->nomem = 1, -1;                                                                \
        memcpy(r->out + r->len, h, size);                                                           \
        r->len += size;                                                                             \
        r->read += count;                                                                           \
        r->kept += count;                                                                           \
        r->copied++;                                                                                \
        return 0;                                                                                   \
    } while (0)
    int all = 0;
    if (by_bits) {
        bit_index(m, base, &i0);
        int any = 0;
        all = 1;
        for (int64_t d = 0; d <= last_delta; d++) {
            if (DEAD(d)) any = 1; else all = 0;
        }
        if (!any) COPY_ALL();
    } else if (has_horizon && base > latest) {
        COPY_ALL();
    }
    int64_t nkept = 0, first_ts = 0, new_max = INT64_MIN, keyless = 0, tombs = 0;
    int kept_tombstone = 0;
    Py_ssize_t rec_bytes = 0;
    Rec rec;
    Rec *kept = (Rec *)m->scratch; /* the kept records, when the batch has at most STASH */
    int stashed = count <= STASH;
    if (!(by_bits && all && last_delta == count - 1)) {
        Py_ssize_t p = pos + BATCH_OVERHEAD;
        for (int32_t i = 0; i < count; i++) {
            const char *e = parse_record(b, &p, end, &rec);
            if (e) { r->error = e; r->error_at = base; return -1; }
            int keep;
            if (by_bits) {
                if (rec.offset_delta < 0 || rec.offset_delta > last_delta) {
                    r->error = "a record's offset lies outside its batch";
                    r->error_at = base;
                    return -1;
                }
                keep = !DEAD(rec.offset_delta);
            } else {
                if (rec.key_len > m->limit) return 1; /* a long key: Python's map */
                int why;
                keep = keep_by_key(m, b, &rec, add64(base, rec.offset_delta), latest, retain_deletes, &why);
                keyless += why == 1;
                tombs += why == 2;
            }
            if (!keep) continue;
            int64_t ts;
            if (ts_add(base_ts, rec.ts_delta, &ts)) return 1;
            if (nkept == 0) first_ts = ts;
            if (ts > new_max) new_max = ts;
            kept_tombstone |= rec.tombstone;
            if (stashed) kept[nkept] = rec;
            nkept++;
            rec_bytes += rec.end - rec.start;
        }
        if (p != end) { r->error = "bytes left after the batch's records"; r->error_at = base; return -1; }
        if (nkept == count && !(kept_tombstone && !has_horizon)) COPY_ALL();
    }
#undef COPY_ALL
    if (nkept == 0) {
        /* the CRC is checked before anything is dropped, as Python does */
        if (add_job(r, pos, (Py_ssize_t)size, (Py_ssize_t)rd32(h + BATCH_CRC_OFFSET), -1, 0)) return r->nomem = 1, -1;
        r->read += count;
        r->dropped++;
        r->keyless += keyless;
        r->tombstones += tombs;
        return 0;
    }
    /* Kafka's buildRetainedRecordsInto: baseTimestamp the delete horizon when there
       is one (a new one when a tombstone stays in a batch without), else the first
       kept record's */
    int new_attrs = attrs, have_horizon = has_horizon;
    int64_t horizon = base_ts;
    if (kept_tombstone && !has_horizon) {
        if (ts_add(r->now, r->retention, &horizon)) return 1;
        have_horizon = 1;
        new_attrs |= DELETE_HORIZON_BIT;
    }
    int64_t new_base_ts = have_horizon ? horizon : (log_append ? max_ts : first_ts);
    if (log_append) new_max = max_ts;
    int verbatim = !log_append && new_base_ts == base_ts;
    size_t bound = BATCH_OVERHEAD + (size_t)rec_bytes + (verbatim ? 0 : 20 * (size_t)nkept);
    if (reserve(r, bound)) return r->nomem = 1, -1;
    unsigned char *o = r->out + out_at;
    size_t w = BATCH_OVERHEAD;
    Py_ssize_t p = pos + BATCH_OVERHEAD;
    int32_t n = stashed ? (int32_t)nkept : count;
    for (int32_t i = 0; i < n; i++) {
        if (stashed) {
            rec = kept[i];
        } else {
            parse_record(b, &p, end, &rec);
            if (by_bits) {
                if (DEAD(rec.offset_delta)) continue;
            } else {
                int why;
                if (!keep_by_key(m, b, &rec, add64(base, rec.offset_delta), latest, retain_deletes, &why)) continue;
            }
        }
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
    /* header: as the old one but length, CRC, attributes, base timestamp, max
       timestamp, count */
    memcpy(o, h, BATCH_OVERHEAD);
    wr32(o + BATCH_LENGTH_OFFSET, (uint32_t)(w - LOG_OVERHEAD));
    o[BATCH_ATTRIBUTES_OFFSET] = (unsigned char)(new_attrs >> 8);
    o[BATCH_ATTRIBUTES_OFFSET + 1] = (unsigned char)new_attrs;
    wr64(o + BATCH_BASE_TIMESTAMP_OFFSET, (uint64_t)new_base_ts);
    wr64(o + BATCH_MAX_TIMESTAMP_OFFSET, (uint64_t)new_max);
    wr32(o + BATCH_RECORD_COUNT_OFFSET, (uint32_t)nkept);
    if (add_job(r, pos, (Py_ssize_t)size, (Py_ssize_t)rd32(h + BATCH_CRC_OFFSET), (Py_ssize_t)out_at, (Py_ssize_t)w) ||
        add_info(r, (int64_t)out_at, (int64_t)w, last, new_max))
        return r->nomem = 1, -1;
    r->len += w;
    r->read += count;
    r->kept += nkept;
    r->rebuilt++;
    r->keyless += keyless;
    r->tombstones += tombs;
    return 0;
}

static PyObject *crc_of(const unsigned char *p, Py_ssize_t n) {
    PyObject *mv = PyMemoryView_FromMemory((char *)p, n, PyBUF_READ);
    if (!mv) return NULL;
    PyObject *c = PyObject_CallOneArg(crc32c_fn, mv);
    Py_DECREF(mv);
    return c;
}

/* filter_entries(buf, pos, stop, latest_offset, keep_end, out_position, now_ms,
   delete_retention_ms): pass 2 over the whole entries of buf[pos:stop] until one
   is left to Python (the entry ending at keep_end among them: the group's last,
   which stays if only empty), or one is cut by stop. -> (pos, status, data,
   entries, max_timestamp, counts): entries an EntryInfo per entry written,
   positions from out_position; counts (records read, kept, entries copied,
   rebuilt, dropped, keyless records dropped, tombstones dropped). */
static PyObject *km_filter_entries(KeyMap *m, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, stop, keep_end, out_position;
    long long latest, now, retention;
    if (!PyArg_ParseTuple(args, "y*nnLnnLL", &view, &pos, &stop, &latest, &keep_end, &out_position, &now,
                          &retention))
        return NULL;
    if (km_check(m)) { PyBuffer_Release(&view); return NULL; }
    if (pos < 0 || stop > view.len || pos > stop) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "bad span");
        return NULL;
    }
    if (!m->scratch && !(m->scratch = malloc(SCRATCH_BYTES))) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    const unsigned char *b = (const unsigned char *)view.buf;
    Pass2 r;
    memset(&r, 0, sizeof(r));
    r.latest = latest;
    r.now = now;
    r.retention = retention;
    int status = DONE;
    PyObject *data = NULL, *infos = NULL, *result = NULL;
    m->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    while (pos < stop) {
        BatchHead head;
        if (!batch_head(b, pos, stop, &head)) { status = NEED_PYTHON; break; }
        Py_ssize_t end = head.end;
        int64_t base = head.base, last = head.last, producer_id = head.producer_id;
        int attrs = head.attrs;
        int32_t count = head.count;
        size_t j;
        if (end == keep_end || last < base || count <= 0 || (attrs & (CONTROL_BIT | CODEC_MASK)) || producer_id >= 0) {
            status = NEED_PYTHON;
            break;
        }
        int by_bits = last <= latest && is_eligible(m, base) && bit_index(m, last, &j);
        size_t out_len = r.len, ninfos = r.ninfos, njobs = r.njobs;
        int x = filter_batch(m, b, pos, end, &r, by_bits);
        if (x < 0) break;
        if (x == 1) { /* undo, and leave it to Python */
            r.len = out_len;
            r.ninfos = ninfos;
            r.njobs = njobs;
            status = NEED_PYTHON;
            break;
        }
        m->native_entries[1]++;
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
        PyObject *c = crc_of(b + in_at + BATCH_CRC_START, in_len - BATCH_CRC_START);
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
        c = crc_of(r.out + out_at + BATCH_CRC_START, out_len - BATCH_CRC_START);
        if (!c) goto done;
        got = PyLong_AsUnsignedLong(c);
        Py_DECREF(c);
        if (got == (unsigned long)-1 && PyErr_Occurred()) goto done;
        wr32(r.out + out_at + BATCH_CRC_OFFSET, (uint32_t)got);
    }
    data = PyBytes_FromStringAndSize((const char *)r.out, (Py_ssize_t)r.len);
    if (!data) goto done;
    infos = PyList_New((Py_ssize_t)(r.ninfos / 4));
    if (!infos) goto done;
    int64_t max_ts = -1;
    for (size_t k = 0; k < r.ninfos; k += 4) {
        /* EntryInfo(position, size, magic 2, last offset, max timestamp, codec 0) */
        PyObject *e = EntryInfo->tp_alloc(EntryInfo, 6); /* a tuple subclass: as tuple.__new__ */
        if (!e) goto done;
        PyList_SET_ITEM(infos, (Py_ssize_t)(k / 4), e);
        long long fields[6] = {(long long)(r.infos[k] + out_position), (long long)r.infos[k + 1], 2,
                               (long long)r.infos[k + 2], (long long)r.infos[k + 3], 0};
        for (int f = 0; f < 6; f++) {
            PyObject *v = PyLong_FromLongLong(fields[f]);
            if (!v) goto done;
            PyTuple_SET_ITEM(e, f, v);
        }
        if (r.infos[k + 3] > max_ts) max_ts = r.infos[k + 3];
    }
    result = Py_BuildValue("niOOL(LLLLLLL)", pos, status, data, infos, (long long)max_ts, (long long)r.read,
                           (long long)r.kept, (long long)r.copied, (long long)r.rebuilt, (long long)r.dropped,
                           (long long)r.keyless, (long long)r.tombstones);
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
static PyObject *km_get_native_entries(KeyMap *m, void *c) {
    return Py_BuildValue("LL", (long long)m->native_entries[0], (long long)m->native_entries[1]);
}
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
    {"native_entries", (getter)km_get_native_entries, NULL,
     "(entries mapped by map_entries, entries written by filter_entries) since clear()", NULL},
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
    PyObject *errors = PyImport_ImportModule("kafka_format.errors");
    if (!errors) return NULL;
    CorruptRecordError = PyObject_GetAttrString(errors, "CorruptRecordError");
    Py_DECREF(errors);
    if (!CorruptRecordError) return NULL;
    PyObject *crc = PyImport_ImportModule("kafka_format.accel");
    if (!crc) return NULL;
    crc32c_fn = PyObject_GetAttrString(crc, "crc32c");
    Py_DECREF(crc);
    if (!crc32c_fn) return NULL;
    PyObject *entries = PyImport_ImportModule("kafka_format.entries");
    if (!entries) return NULL;
    EntryInfo = (PyTypeObject *)PyObject_GetAttrString(entries, "EntryInfo");
    Py_DECREF(entries);
    if (!EntryInfo) return NULL;
    if (!PyType_Check(EntryInfo) || !PyType_IsSubtype(EntryInfo, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "EntryInfo must be a tuple type");
        return NULL;
    }
    seed0 = (uint64_t)_Py_HashBytes("strata: _ccleaner seed 0", 24) ^ 0x9E3779B97F4A7C15ULL;
    seed1 = (uint64_t)_Py_HashBytes("strata: _ccleaner seed 1", 24) ^ 0xC2B2AE3D27D4EB4FULL;
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
