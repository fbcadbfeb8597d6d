/* class5-leaks.test - blocks nobody can free: a client that closes a pool
 * with blocks, user=N, a process killed again and again inside fmem_open,
 * its allocations and fmem_close, a user slot wiped behind the library's
 * back and a bit flipped in a log entry's user id. `fmem verify` must see
 * every leak (count and bytes) and `fmem recover` take it back, and a
 * killed user must be told apart from a leak. */
#include <stdint.h>

#include "pool_hostile.h"

static char out[16384];

static int verify(const char *uri)
{
    return ph_fmem(out, sizeof out, "verify '%s'", uri);
}

static void close_and_user_n(void)
{
    struct ph_pool pool;
    ph_pool_init(&pool, "leak1", "8M");
    fmem_pool *p;
    fmem_handle h;
    PH_CHECK(fmem_open(pool.uri, &p) == 0, "open");
    for (int i = 0; i < 7; i++)
        PH_CHECK(fmem_alloc(p, (size_t)4096 << i, &h) == 0, "alloc");
    fmem_close(p);
    int rc = verify(pool.bare);
    PH_CHECK(rc == 0 && strstr(out, "chunks allocated 0,"),
             "a closed client left blocks: exit %d: %s", rc, out);

    char u7[200];
    snprintf(u7, sizeof u7, "%s&user=7", pool.uri);
    fmem_pool *q = NULL, *twin = NULL;
    PH_CHECK(fmem_open(u7, &q) == 0, "user=7");
    PH_CHECK(fmem_open(u7, &twin) == FMEM_EBUSY, "a second client as user 7 was let in");
    PH_CHECK(q && fmem_alloc(q, 65536, &h) == 0, "alloc as user 7");
    rc = ph_fmem(out, sizeof out, "recover '%s' 7", pool.bare);
    PH_CHECK(rc == 1 && strstr(out, "running"), "user 7 is live: exit %d: %s", rc, out);
    fmem_close(q);
    rc = verify(pool.bare);
    PH_CHECK(rc == 0 && strstr(out, "chunks allocated 0,"), "user=7 left blocks: %s", out);
    fmem_unlink(pool.uri);
}

/* Kill processes at random moments while they open, allocate, free and
 * close, over and over. Whatever they leave is either a dead user (its
 * slot records it) or nothing: never a leak. */
static void killed_anywhere(void)
{
    struct ph_pool pool;
    ph_pool_init(&pool, "leak2", "16M");
    fmem_pool *keep;
    PH_CHECK(fmem_open(pool.uri, &keep) == 0, "open");
    unsigned seed = (unsigned)getpid();
    for (int round = 0; round < 60; round++) {
        pid_t pid = fork();
        if (pid == 0) {
            for (;;) {
                fmem_pool *p;
                fmem_handle h[4];
                if (fmem_open(pool.uri, &p))
                    continue;
                for (int i = 0; i < 4; i++)
                    fmem_alloc(p, (size_t)4096 << i, &h[i]);
                fmem_free(p, &h[1]);
                fmem_close(p);
            }
        }
        seed = seed * 1103515245u + 12345u;
        ph_nap_ms(1 + (seed >> 16) % 15);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    int rc = verify(pool.bare);
    long long leaked = ph_number_after(out, "leaked: ");
    PH_CHECK(rc == 0 && leaked < 0 && strstr(out, "verifier=clean"),
             "killed processes left leaks or errors: exit %d: %s", rc, out);
    /* recover the dead users the table records */
    struct pool_hdr hdr;
    PH_CHECK(ph_header(pool.path, &hdr), "header");
    int recovered = 0;
    for (unsigned u = 1; u < hdr.nusers; u++) {
        uint32_t pid = 0;
        ph_poke(pool.path, hdr.users_off + 4 * (uint64_t)u, &pid, 4, false);
        if (!pid || pid == (uint32_t)getpid())
            continue;
        rc = ph_fmem(out, sizeof out, "recover '%s' %u", pool.bare, u);
        PH_CHECK(rc == 0, "recovering dead user %u: exit %d: %s", u, rc, out);
        recovered++;
    }
    PH_NOTE("%d dead users recovered", recovered);
    rc = verify(pool.bare);
    PH_CHECK(rc == 0 && strstr(out, "chunks allocated 0,") && !strstr(out, "awaiting"),
             "after recovering the dead: exit %d: %s", rc, out);
    fmem_close(keep);
    fmem_unlink(pool.uri);
}

/* Damage behind the library's back: a slot wiped under its live blocks
 * (what a close or user=N used to leave), and a log entry whose user id
 * has a bit flipped. */
static void wiped_slot_and_flipped_bit(void)
{
    struct ph_pool pool;
    ph_pool_init(&pool, "leak3", "8M");
    struct ph_holder h = {0};
    PH_CHECK(ph_hold(&h, pool.uri, 16384, 3), "holder");
    struct pool_hdr hdr;
    PH_CHECK(ph_header(pool.path, &hdr), "header");
    uint32_t zero = 0;
    PH_CHECK(ph_poke(pool.path, hdr.users_off + 4 * (uint64_t)h.uid, &zero, 4, true), "wipe");
    ph_kill(&h);
    int rc = verify(pool.bare);
    PH_CHECK(rc == 1 && ph_number_after(out, "leaked: ") == 3 &&
                 strstr(out, "49152 bytes") && strstr(out, "verifier=dirty"),
             "3 blocks of a user without a slot: exit %d: %s", rc, out);
    rc = ph_fmem(out, sizeof out, "recover '%s' %u", pool.bare, h.uid);
    PH_CHECK(rc == 0 && strstr(out, "leaked") && strstr(out, "freed 3 blocks"),
             "recovering the unclaimed id: exit %d: %s", rc, out);
    rc = verify(pool.bare);
    PH_CHECK(rc == 0 && strstr(out, "chunks allocated 0,"), "after: exit %d: %s", rc, out);

    /* a flipped user-id bit: a live user's block now says user 8000+ */
    fmem_pool *p;
    fmem_handle big, small;
    PH_CHECK(fmem_open(pool.uri, &p) == 0, "open");
    PH_CHECK(fmem_alloc(p, 65536, &big) == 0 && fmem_alloc(p, 4096, &small) == 0, "alloc");
    PH_CHECK(big.addr / FMEM_SPAN_SIZE == small.addr / FMEM_SPAN_SIZE, "one span");
    uint64_t off = hdr.log_off + 8 * (big.addr >> 12), e = 0;
    PH_CHECK(ph_poke(pool.path, off, &e, 8, false), "read entry");
    e ^= UINT64_C(1) << (17 + 13);
    PH_CHECK(ph_poke(pool.path, off, &e, 8, true), "flip");
    rc = verify(pool.bare);
    PH_CHECK(rc == 1 && ph_number_after(out, "leaked: ") == 1 && strstr(out, "beyond the user table"),
             "flipped user id: exit %d: %s", rc, out);
    rc = ph_fmem(out, sizeof out, "recover '%s' --leaked", pool.bare);
    PH_CHECK(rc == 0 && strstr(out, "freed 1 blocks (65536 bytes)"), "--leaked: exit %d: %s", rc,
             out);
    rc = verify(pool.bare);
    PH_CHECK(rc == 0 && strstr(out, "chunks allocated 1,"), "only the small block: %s", out);
    fmem_close(p);
    fmem_unlink(pool.uri);
}

int main(void)
{
    close_and_user_n();
    killed_anywhere();
    wiped_slot_and_flipped_bit();
    return ph_result("class5-leaks");
}
