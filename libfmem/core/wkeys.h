/* wkeys.h - the window-key table of a memory node served over RDMA verbs.
 *
 * On shm a block's key lives in the capability entry of its first chunk.
 * Over verbs the key is the rkey of a memory window that the NIC checks, and
 * a window covers exactly one block, so the memory node keeps one entry per
 * aligned block (chunk c, 2^k chunks): level k holds nchunks >> k entries,
 * each like a capability entry (main rkey | backup rkey << 32), both keys
 * of windows pre-bound over that block. A free moves main <- backup and
 * leaves the backup 0; the memory node's regenerator then destroys the old
 * main window (its key dies in the NIC), binds a fresh one and stores it as
 * the backup. The table follows a WK_HDR-byte header whose first word is a
 * doorbell: a freeing client writes a new value there, naming its entry,
 * to wake the regenerator. Clients address the table through the transport at offsets
 * from `transport.wkeys_off`. */
#ifndef FMEM_WKEYS_H
#define FMEM_WKEYS_H

#include <stdint.h>

#define WK_HDR 64u
#define WK_MAX_LEVELS 48u
#define WK_BELL_SHIFT 40 /* doorbell: nonce << 40 | (entry + 1) */

/* First entry of level k. */
static inline uint64_t wk_level_start(uint64_t nchunks, unsigned k)
{
    uint64_t start = 0;
    for (unsigned j = 0; j < k; j++)
        start += nchunks >> j;
    return start;
}

/* Entries in all levels. */
static inline uint64_t wk_entries(uint64_t nchunks)
{
    uint64_t n = 0;
    for (unsigned k = 0; k < WK_MAX_LEVELS && (nchunks >> k); k++)
        n += nchunks >> k;
    return n;
}

/* Entry of the block at chunk c (aligned to 2^k, inside the pool). */
static inline uint64_t wk_entry(uint64_t nchunks, uint64_t c, unsigned k)
{
    return wk_level_start(nchunks, k) + (c >> k);
}

/* After the entries: two words per user id. A service over RDMA writes
 * both every period: its heartbeat (its user slot's pid << 32 | a counter)
 * and the session id its connections presented to the memory node. The
 * memory node recovers a remote service whose heartbeat stops changing,
 * after fencing that session (its queue pairs are shut and it may not
 * connect again). */
#define WK_HB_SLOTS 16384u /* user ids are 14 bits */
static inline uint64_t wk_hb_off(uint64_t nchunks) { return WK_HDR + 8 * wk_entries(nchunks); }

/* Offset of user uid's {heartbeat, session} pair in the table. */
static inline uint64_t wk_hb_pair(uint64_t nchunks, unsigned uid)
{
    return wk_hb_off(nchunks) + 16 * (uint64_t)uid;
}

static inline uint64_t wk_bytes(uint64_t nchunks) { return wk_hb_off(nchunks) + 16 * WK_HB_SLOTS; }

#endif
