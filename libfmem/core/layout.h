/* layout.h - pool geometry, metadata regions and the bit encodings of the
 * 64-bit section header, span header and redo-log entry.
 *
 * Pool file:
 *   [ pool header + user table | section headers | span headers
 *     | capability table | full redo log | (pad to 4 KiB) | data ]
 * The capability table and the redo log hold one 8-byte entry per chunk; a
 * span- or section-level block uses the entries of its first chunk (as in
 * FineMem: this is what keeps metadata at 16 B per 4 KiB chunk). */
#ifndef FMEM_LAYOUT_H
#define FMEM_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#define CHUNK_SHIFT 12
#define CHUNKS_PER_SPAN 32
#define SPANS_PER_SECTION 16
#define CHUNKS_PER_SECTION (CHUNKS_PER_SPAN * SPANS_PER_SECTION)
#define SPAN_SHIFT (CHUNK_SHIFT + 5)
#define SECTION_SHIFT (SPAN_SHIFT + 4)

/* log2 of the chunks in the smallest block (4 KiB x 2^k) holding `bytes`;
 * stops at the largest representable block. */
static inline unsigned chunks_log2(uint64_t bytes)
{
    unsigned k = 0;
    while (k < 63 - CHUNK_SHIFT && (UINT64_C(1) << (CHUNK_SHIFT + k)) < bytes)
        k++;
    return k;
}

/* ---- header high half: retry level + temporary redo log ---------------- */
/* bits 32-33 retry level, 34-38 offset, 39-41 log2 size, 42-48 timestamp,
 * 49-62 user id, 63: span header only, "detached" (the span belongs to the
 * section layer: no chunk-level allocation may be made in it). */
#define H_RETRY_SHIFT 32
#define H_OFF_SHIFT 34
#define H_SIZE_SHIFT 39
#define H_TS_SHIFT 42
#define H_UID_SHIFT 49
#define H_DETACHED (UINT64_C(1) << 63)
#define TS_MASK 0x7Fu
#define UID_MASK 0x3FFFu
#define MAX_UID UID_MASK

static inline uint32_t h_lo(uint64_t h) { return (uint32_t)h; }
static inline unsigned h_retry(uint64_t h) { return (h >> H_RETRY_SHIFT) & 3; }
static inline unsigned h_off(uint64_t h) { return (h >> H_OFF_SHIFT) & 31; }
static inline unsigned h_size(uint64_t h) { return (h >> H_SIZE_SHIFT) & 7; }
static inline unsigned h_ts(uint64_t h) { return (h >> H_TS_SHIFT) & TS_MASK; }
static inline unsigned h_uid(uint64_t h) { return (h >> H_UID_SHIFT) & UID_MASK; }
static inline bool h_detached(uint64_t h) { return (h & H_DETACHED) != 0; }

/* Replace the low 32 bits, keeping retry level and log. */
static inline uint64_t h_with_lo(uint64_t h, uint32_t lo)
{
    return (h & ~UINT64_C(0xFFFFFFFF)) | lo;
}
static inline uint64_t h_with_retry(uint64_t h, unsigned r)
{
    return (h & ~(UINT64_C(3) << H_RETRY_SHIFT)) | ((uint64_t)(r & 3) << H_RETRY_SHIFT);
}
/* Replace the temporary redo log. */
static inline uint64_t h_with_log(uint64_t h, unsigned off, unsigned size,
                                  unsigned ts, unsigned uid)
{
    const uint64_t mask = ((UINT64_C(1) << 29) - 1) << H_OFF_SHIFT;
    return (h & ~mask) | ((uint64_t)(off & 31) << H_OFF_SHIFT) |
           ((uint64_t)(size & 7) << H_SIZE_SHIFT) |
           ((uint64_t)(ts & TS_MASK) << H_TS_SHIFT) |
           ((uint64_t)(uid & UID_MASK) << H_UID_SHIFT);
}

/* ---- section header low half: 16 span states x 2 bits ------------------ */
enum span_state {
    SPAN_FREE = 0,      /* 00: section layer, unallocated */
    SPAN_INUSE = 1,     /* 01: chunk layer, partly allocated */
    SPAN_CONTENDED = 2, /* 10: chunk layer, many CAS failures: avoid */
    SPAN_FULL = 3,      /* 11: allocated as a span block, or all chunks used */
};
static inline unsigned sec_state(uint64_t h, unsigned span)
{
    return (h >> (2 * span)) & 3;
}
static inline uint64_t sec_with_state(uint64_t h, unsigned span, unsigned st)
{
    return (h & ~(UINT64_C(3) << (2 * span))) | ((uint64_t)st << (2 * span));
}
/* Mask of the state bits of spans [first, first+n). */
static inline uint32_t sec_states_mask(unsigned first, unsigned n)
{
    uint64_t bits = (n >= 16) ? UINT64_C(0xFFFFFFFF) : ((UINT64_C(1) << (2 * n)) - 1);
    return (uint32_t)(bits << (2 * first));
}

/* Section-header log size code 5: this section is one part of a block that
 * spans several whole sections (logged in its own first chunk's entry). */
#define SEC_LOG_MULTI 5

/* ---- full redo log entry ------------------------------------------------
 * bit 0 valid, bit 1 op (1 alloc, 0 free), bits 2-3 layer, bits 4-9 log2 of
 * the block size in chunks, bits 10-16 timestamp, bits 17-30 user id. */
enum log_layer { LAYER_CHUNK = 0, LAYER_SPAN = 1, LAYER_SECTION = 2 };
static inline uint64_t log_make(bool alloc, unsigned layer, unsigned log2_chunks,
                                unsigned ts, unsigned uid)
{
    return 1u | ((uint64_t)alloc << 1) | ((uint64_t)(layer & 3) << 2) |
           ((uint64_t)(log2_chunks & 63) << 4) | ((uint64_t)(ts & TS_MASK) << 10) |
           ((uint64_t)(uid & UID_MASK) << 17);
}
/* Bit 31 of an allocation entry: the block is quarantined. Its owner freed
 * it (the free is committed) but its old key may still work: the block
 * stays allocated in its layer's header, where allocators skip it, until
 * whoever kills the key (the memory node's regenerator over verbs) frees
 * it in the layer. Only chunk- and span-layer blocks are quarantined. */
#define LOG_QUARANTINE (UINT64_C(1) << 31)
static inline bool log_quarantined(uint64_t e) { return (e & 3) == 3 && (e & LOG_QUARANTINE); }
/* The entry as the operation wrote it, without the quarantine mark. */
static inline uint64_t log_op(uint64_t e) { return e & ~LOG_QUARANTINE; }
static inline bool log_valid(uint64_t e) { return e & 1; }
static inline bool log_alloc(uint64_t e) { return (e >> 1) & 1; }
static inline unsigned log_layer(uint64_t e) { return (e >> 2) & 3; }
static inline unsigned log_log2(uint64_t e) { return (e >> 4) & 63; }
static inline unsigned log_ts(uint64_t e) { return (e >> 10) & TS_MASK; }
static inline unsigned log_uid(uint64_t e) { return (e >> 17) & UID_MASK; }
/* Chunk-layer entries come from span headers; span- and section-layer ones
 * from section headers. Timestamps compare only within one domain. */
static inline bool log_same_domain(unsigned a, unsigned b)
{
    return (a == LAYER_CHUNK) == (b == LAYER_CHUNK);
}

/* a is newer than b on the 7-bit circle; valid while they are < 64 apart. */
static inline bool ts_newer(unsigned a, unsigned b)
{
    unsigned d = (a - b) & TS_MASK;
    return d != 0 && d < 64;
}

/* ---- capability entry: main rkey (low 32) | backup rkey (high 32) ------- */
static inline uint32_t cap_main(uint64_t c) { return (uint32_t)c; }
static inline uint32_t cap_backup(uint64_t c) { return (uint32_t)(c >> 32); }
static inline uint64_t cap_make(uint32_t main_key, uint32_t backup)
{
    return (uint64_t)main_key | ((uint64_t)backup << 32);
}

/* ---- pool header -------------------------------------------------------- */
#define POOL_MAGIC "FMEMPOOL"
#define POOL_VERSION 1
#define POOL_HDR_SIZE 256

struct pool_hdr {
    char magic[8];
    uint32_t version;
    uint32_t hdr_size;
    uint64_t nsections;
    uint64_t nusers;     /* user table slots; user id u uses slot u */
    uint64_t users_off;  /* uint32_t per slot: pid of the holder, 0 free */
    uint64_t sect_off;
    uint64_t span_off;
    uint64_t cap_off;
    uint64_t log_off;
    uint64_t data_off;
    uint64_t total_size;
    uint64_t checksum; /* over the fields above */
};

/* Byte offsets and counts of every region of a pool of `nsections`. */
struct geometry {
    uint64_t nsections, nspans, nchunks, nusers;
    uint64_t users_off, sect_off, span_off, cap_off, log_off, data_off;
    uint64_t total_size, data_size, metadata_bytes;
};

/* The most sections a pool header may name (32 TiB of data): pools are
 * created no larger, and a header asking more is corrupt. */
#define LAYOUT_MAX_SECTIONS (UINT64_C(1) << 24)

void layout_geometry(uint64_t nsections, uint64_t align, struct geometry *g);
void layout_write_hdr(struct pool_hdr *h, const struct geometry *g);
/* 0 if `h` describes a valid pool of `file_size` bytes, else FMEM_ECORRUPT. */
int layout_check_hdr(const struct pool_hdr *h, uint64_t file_size, struct geometry *g);

#endif
