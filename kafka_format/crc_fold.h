/* CRC32 (zlib, IEEE polynomial) and CRC32C (Castagnoli) by carry-less multiply
 * folding, included by _crecords.c. No Python objects here: plain functions on
 * byte ranges.
 *
 * Why here and not a library: the validator checks one CRC per classic message
 * (a thousand per MiB of 1 KiB messages), so a call through Python costs more
 * than the CRC; and the packages at hand stop short of what the CPU's AVX-512
 * carry-less multiply reaches on whole 1 MiB batches (bench/records_micro.py
 * compares them with the crc32c package).
 *
 * How: both CRCs are bit-reflected, so one algorithm serves both with its own
 * constants (Intel's "Fast CRC Computation Using PCLMULQDQ", 2009):
 *   - the data is folded 128 bits at a time: a lane (hi:lo) moved D bits ahead
 *     is clmul(lo, k(D+32)) ^ clmul(hi, k(D-32)), k(n) = reflect32(x^n mod P) << 1;
 *   - the AVX-512 path folds four 512-bit registers (256 bytes) per step
 *     (D = 2048), then joins them in one step (D = 1536, 1024, 512 at once),
 *     and a register's four lanes likewise (D = 384, 256, 128);
 *   - the SSE path folds four 128-bit registers (64 bytes) per step (D = 512),
 *     then joins them in one step (D = 384, 256, 128);
 *   - joining in one step rather than one register after another shortens the
 *     chain of dependent multiplies a short range waits on, which counts most
 *     for short classic messages;
 *   - both end in one 128-bit lane; the last 1-15 bytes join it as one more
 *     fold (the lane and the tail are 16 + r bytes: zero-padded in front to 32,
 *     the first 16 fold onto the second, so no byte loop is needed), then it
 *     is folded to 64 and 32 bits and reduced by Barrett
 *     (mu = reflect(x^64 / P), P' = reflect(P)).
 * The constants below were computed from the polynomials (the IEEE set equals
 * the one published with the Linux kernel's crc32-pclmul). A byte table covers
 * ranges too short to fold (under 64 bytes). Callers pick the path (crc_path):
 * tests run every path on every length and alignment against ISA-L and the
 * crc32c package.
 */
#ifndef STRATA_CRC_FOLD_H
#define STRATA_CRC_FOLD_H

#include <stdint.h>
#include <stddef.h>

typedef struct {
    uint32_t reflected_poly; /* for the byte table */
    uint64_t fold_2048_lo, fold_2048_hi;
    uint64_t fold_512_lo, fold_512_hi;
    uint64_t fold_128_lo, fold_128_hi;
    uint64_t k64, mu, poly;
    /* For the joins in one step: fold_1536 and fold_1024 move a 64-byte
     * register 192 and 128 bytes ahead, fold_384 and fold_256 a 16-byte lane
     * 48 and 32 bytes. */
    uint64_t fold_1536_lo, fold_1536_hi, fold_1024_lo, fold_1024_hi;
    uint64_t fold_384_lo, fold_384_hi, fold_256_lo, fold_256_hi;
    uint32_t table[256];
} crc_params;

static crc_params crc32_ieee = {0xEDB88320u, 0x11542778aULL, 0x1322d1430ULL, 0x154442bd4ULL, 0x1c6e41596ULL,
                                0x1751997d0ULL, 0x0ccaa009eULL, 0x163cd6124ULL, 0x1f7011641ULL,
                                0x1db710641ULL, 0x1821d8bc0ULL, 0x12e958ac4ULL, 0x1e88ef372ULL,
                                0x14a7fe880ULL, 0x03db1ecdcULL, 0x174359406ULL, 0x0f1da05aaULL,
                                0x15a546366ULL, {0}};
static crc_params crc32_castagnoli = {0x82F63B78u, 0x0dcb17aa4ULL, 0x0b9e02b86ULL, 0x0740eef02ULL,
                                      0x09e4addf8ULL, 0x0f20c0dfeULL, 0x14cd00bd6ULL, 0x0dd45aab8ULL,
                                      0x0dea713f1ULL, 0x105ec76f1ULL, 0x0a87ab8a8ULL, 0x0ab7aff2aULL,
                                      0x06992cea2ULL, 0x00d3b6092ULL, 0x01c291d04ULL, 0x1d82c63daULL,
                                      0x1384aa63aULL, 0x0ba4fc28eULL, {0}};

enum crc_path { CRC_TABLE = 0, CRC_SSE = 1, CRC_AVX512 = 2 };

/* The fastest path this CPU runs (set by crc_init). */
static int crc_best_path = CRC_TABLE;

static void crc_init_table(crc_params *params) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? params->reflected_poly ^ (c >> 1) : c >> 1;
        params->table[n] = c;
    }
}

/* The register form: state = ~crc before and after, as inside zlib's loop. */
static uint32_t crc_bytes(const crc_params *params, uint32_t state, const unsigned char *p, size_t n) {
    while (n-- > 0)
        state = params->table[(state ^ *p++) & 0xFF] ^ (state >> 8);
    return state;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CRC_HAVE_CLMUL 1

#define CRC_FOLD128(x, k, next)                                                                              \
    _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next)

/* pshufb masks: loadu(crc_shift_masks + 16 - k) moves a lane's bytes k places up
 * (to higher addresses), loadu(crc_shift_masks + 16 + k) k places down; 0x80
 * makes a zero byte. loadu(crc_tail_masks + r) keeps a lane's last r bytes. */
static const unsigned char crc_shift_masks[48] = {
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80};
static const unsigned char crc_tail_masks[32] = {
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

/* One 128-bit lane (the fold of everything before p) plus p[0:n] down to the
 * 32-bit register state. At least 16 bytes precede p in the same buffer (the
 * tail is read as the last 16 bytes). */
__attribute__((target("pclmul,ssse3,sse4.1"))) static uint32_t crc_finish_lane(const crc_params *params,
                                                                                  __m128i a, const unsigned char *p,
                                                                                  size_t n) {
    const __m128i fold_128 = _mm_set_epi64x((long long)params->fold_128_hi, (long long)params->fold_128_lo);
    const __m128i k64 = _mm_set_epi64x(0, (long long)params->k64);
    const __m128i barrett = _mm_set_epi64x((long long)params->mu, (long long)params->poly);
    const __m128i low32 = _mm_setr_epi32(-1, 0, -1, 0);
    for (; n >= 16; p += 16, n -= 16)
        a = CRC_FOLD128(a, fold_128, _mm_loadu_si128((const __m128i *)p));
    if (n > 0) {
        /* [16 - n zeros | a's first n bytes] folds onto [a's last 16 - n bytes | the n tail bytes]. */
        __m128i head = _mm_shuffle_epi8(a, _mm_loadu_si128((const __m128i *)(crc_shift_masks + n)));
        __m128i rest = _mm_shuffle_epi8(a, _mm_loadu_si128((const __m128i *)(crc_shift_masks + 16 + n)));
        __m128i last16 = _mm_loadu_si128((const __m128i *)(p + n - 16));
        rest = _mm_xor_si128(rest, _mm_and_si128(last16, _mm_loadu_si128((const __m128i *)(crc_tail_masks + n))));
        a = CRC_FOLD128(head, fold_128, rest);
    }
    /* 128 -> 64 bits, then the 32-bit step. */
    a = _mm_xor_si128(_mm_srli_si128(a, 8), _mm_clmulepi64_si128(a, fold_128, 0x10));
    a = _mm_xor_si128(_mm_srli_si128(a, 4), _mm_clmulepi64_si128(_mm_and_si128(a, low32), k64, 0x00));
    /* Barrett reduction to 32 bits. */
    __m128i t = _mm_clmulepi64_si128(_mm_and_si128(a, low32), barrett, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, low32), barrett, 0x00);
    return (uint32_t)_mm_extract_epi32(_mm_xor_si128(a, t), 1);
}

/* `n` is at least 64. */
__attribute__((target("pclmul,ssse3,sse4.1"))) static uint32_t crc_fold_sse(const crc_params *params, uint32_t state,
                                                                         const unsigned char *p, size_t n) {
    const __m128i fold_512 = _mm_set_epi64x((long long)params->fold_512_hi, (long long)params->fold_512_lo);
    const __m128i fold_128 = _mm_set_epi64x((long long)params->fold_128_hi, (long long)params->fold_128_lo);
    __m128i a = _mm_loadu_si128((const __m128i *)(p + 0));
    __m128i b = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(p + 48));
    a = _mm_xor_si128(a, _mm_cvtsi32_si128((int)state));
    for (p += 64, n -= 64; n >= 64; p += 64, n -= 64) {
        a = CRC_FOLD128(a, fold_512, _mm_loadu_si128((const __m128i *)(p + 0)));
        b = CRC_FOLD128(b, fold_512, _mm_loadu_si128((const __m128i *)(p + 16)));
        c = CRC_FOLD128(c, fold_512, _mm_loadu_si128((const __m128i *)(p + 32)));
        d = CRC_FOLD128(d, fold_512, _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    /* a, b, c onto d in one step (48, 32 and 16 bytes ahead), as on the AVX-512 path. */
    const __m128i fold_384 = _mm_set_epi64x((long long)params->fold_384_hi, (long long)params->fold_384_lo);
    const __m128i fold_256 = _mm_set_epi64x((long long)params->fold_256_hi, (long long)params->fold_256_lo);
    __m128i c_moved = CRC_FOLD128(c, fold_128, _mm_setzero_si128());
    a = _mm_xor_si128(CRC_FOLD128(a, fold_384, d), CRC_FOLD128(b, fold_256, c_moved));
    return crc_finish_lane(params, a, p, n);
}

/* Four 128-bit lanes folded at once: lane.lo * k.lo ^ lane.hi * k.hi ^ next. */
#define CRC_FOLD512(x, k, next)                                                                              \
    _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00), _mm512_clmulepi64_epi128(x, k, 0x11), next, \
                              0x96)

/* `n` is at least 256. */
__attribute__((target("pclmul,ssse3,sse4.1,avx2,avx512f,vpclmulqdq"))) static uint32_t
crc_fold_avx512(const crc_params *params, uint32_t state, const unsigned char *p, size_t n) {
    const __m512i fold_2048 = _mm512_broadcast_i32x4(
        _mm_set_epi64x((long long)params->fold_2048_hi, (long long)params->fold_2048_lo));
    const __m512i fold_512 = _mm512_broadcast_i32x4(
        _mm_set_epi64x((long long)params->fold_512_hi, (long long)params->fold_512_lo));
    __m512i a = _mm512_loadu_si512((const void *)(p + 0));
    __m512i b = _mm512_loadu_si512((const void *)(p + 64));
    __m512i c = _mm512_loadu_si512((const void *)(p + 128));
    __m512i d = _mm512_loadu_si512((const void *)(p + 192));
    a = _mm512_xor_si512(a, _mm512_inserti32x4(_mm512_setzero_si512(), _mm_cvtsi32_si128((int)state), 0));
    for (p += 256, n -= 256; n >= 256; p += 256, n -= 256) {
        a = CRC_FOLD512(a, fold_2048, _mm512_loadu_si512((const void *)(p + 0)));
        b = CRC_FOLD512(b, fold_2048, _mm512_loadu_si512((const void *)(p + 64)));
        c = CRC_FOLD512(c, fold_2048, _mm512_loadu_si512((const void *)(p + 128)));
        d = CRC_FOLD512(d, fold_2048, _mm512_loadu_si512((const void *)(p + 192)));
    }
    /* a, b, c onto d in one step (a 192 bytes ahead, b 128, c 64), not one
     * after the other: the chain of dependent multiplies is what a 1 KiB
     * message waits on. */
    const __m512i fold_1536 = _mm512_broadcast_i32x4(
        _mm_set_epi64x((long long)params->fold_1536_hi, (long long)params->fold_1536_lo));
    const __m512i fold_1024 = _mm512_broadcast_i32x4(
        _mm_set_epi64x((long long)params->fold_1024_hi, (long long)params->fold_1024_lo));
    __m512i ad = CRC_FOLD512(a, fold_1536, d);
    __m512i bc = CRC_FOLD512(b, fold_1024, _mm512_clmulepi64_epi128(c, fold_512, 0x00));
    a = _mm512_ternarylogic_epi64(ad, bc, _mm512_clmulepi64_epi128(c, fold_512, 0x11), 0x96);
    for (; n >= 64; p += 64, n -= 64)
        a = CRC_FOLD512(a, fold_512, _mm512_loadu_si512((const void *)p));
    /* The four lanes of `a` to one, also in one step: lanes 0, 1 and 2 move
     * 48, 32 and 16 bytes ahead onto lane 3; then the 16-byte rest. */
    const __m512i lanes = _mm512_set_epi64(0, 0, (long long)params->fold_128_hi, (long long)params->fold_128_lo,
                                           (long long)params->fold_256_hi, (long long)params->fold_256_lo,
                                           (long long)params->fold_384_hi, (long long)params->fold_384_lo);
    __m512i moved = _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(a, lanes, 0x00),
                                              _mm512_clmulepi64_epi128(a, lanes, 0x11),
                                              _mm512_maskz_mov_epi64(0xC0, a), 0x96);
    __m256i half = _mm256_xor_si256(_mm512_castsi512_si256(moved), _mm512_extracti64x4_epi64(moved, 1));
    __m128i lane = _mm_xor_si128(_mm256_castsi256_si128(half), _mm256_extracti128_si256(half, 1));
    return crc_finish_lane(params, lane, p, n);
}
#undef CRC_FOLD128
#undef CRC_FOLD512
#endif

static void crc_init(void) {
    crc_init_table(&crc32_ieee);
    crc_init_table(&crc32_castagnoli);
#ifdef CRC_HAVE_CLMUL
    __builtin_cpu_init();
    if (__builtin_cpu_supports("pclmul") && __builtin_cpu_supports("ssse3") && __builtin_cpu_supports("sse4.1")) {
        crc_best_path = CRC_SSE;
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512f") &&
            __builtin_cpu_supports("vpclmulqdq"))
            crc_best_path = CRC_AVX512;
    }
#endif
}

/* The CRC of p[0:n] by `path` (at most crc_best_path; the table if lower). */
static uint32_t crc_compute(const crc_params *params, int path, const unsigned char *p, size_t n) {
    uint32_t state = 0xFFFFFFFFu;
#ifdef CRC_HAVE_CLMUL
    if (path >= CRC_AVX512 && n >= 256)
        return ~crc_fold_avx512(params, state, p, n);
    if (path >= CRC_SSE && n >= 64)
        return ~crc_fold_sse(params, state, p, n);
#endif
    return ~crc_bytes(params, state, p, n);
}

#endif
