/* class6-verify-busy.test - `fmem verify` while other processes allocate
 * and free as fast as they can must never cry wolf: each run says clean,
 * or incomplete for sections that never held still, never dirty. And the
 * administrator's commands work on a pool whose user table is full. */
#include <stdatomic.h>
#include <sys/mman.h>

#include "pool_hostile.h"

static char out[16384];

static void churn(const char *uri, atomic_int *stop, unsigned seed)
{
    fmem_pool *p;
    if (fmem_open(uri, &p))
        _exit(2);
    fmem_handle live[32];
    int n = 0;
    while (!atomic_load(stop)) {
        seed = seed * 1103515245u + 12345u;
        unsigned r = seed >> 8;
        if (n && (n == 32 || r % 3 == 0)) {
            int i = (int)(r / 3 % (unsigned)n);
            if (fmem_free(p, &live[i]))
                _exit(3);
            live[i] = live[--n];
        } else {
            unsigned k = r % 100 < 70 ? r / 100 % 5 : r % 100 < 97 ? 5 + r / 100 % 5 : 10;
            if (fmem_alloc(p, (size_t)4096 << k, &live[n]) == 0)
                n++;
        }
    }
    fmem_close(p);
    _exit(0);
}

static void busy_pool(void)
{
    struct ph_pool pool;
    ph_pool_init(&pool, "busy", "256M");
    atomic_int *stop = mmap(NULL, sizeof *stop, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                            -1, 0);
    fmem_pool *keep;
    PH_CHECK(stop != MAP_FAILED && fmem_open(pool.uri, &keep) == 0, "setup");
    pid_t kids[3];
    for (int i = 0; i < 3; i++) {
        pid_t parent = getpid();
        kids[i] = fork();
        if (kids[i] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(1);
            alarm(120);
            churn(pool.uri, stop, 31u * (unsigned)(i + 1));
        }
    }
    ph_nap_ms(200);
    int clean = 0, incomplete = 0, dirty = 0;
    for (int run = 0; run < 25; run++) {
        int rc = ph_fmem(out, sizeof out, "verify '%s'", pool.bare);
        if (rc == 0 && strstr(out, "verifier=clean"))
            clean++;
        else if (rc == 3 && strstr(out, "verifier=incomplete") && strstr(out, "not checked"))
            incomplete++;
        else {
            dirty++;
            PH_CHECK(false, "verify of a busy pool: exit %d: %.2000s", rc, out);
        }
    }
    atomic_store(stop, 1);
    for (int i = 0; i < 3; i++) {
        int st;
        waitpid(kids[i], &st, 0);
        PH_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "churner %d: status %#x", i, st);
    }
    PH_NOTE("25 verifications under churn: %d clean, %d incomplete, %d dirty", clean, incomplete,
            dirty);
    PH_CHECK(clean >= 20, "the verifier gave up too often (%d clean of 25)", clean);
    int rc = ph_fmem(out, sizeof out, "verify '%s'", pool.bare);
    PH_CHECK(rc == 0 && strstr(out, "chunks allocated 0,"), "at rest: exit %d: %s", rc, out);
    fmem_close(keep);
    fmem_unlink(pool.uri);
}

static void full_user_table(void)
{
    struct ph_pool pool;
    ph_pool_init(&pool, "full", "8M");
    struct ph_holder dead = {0};
    PH_CHECK(ph_hold(&dead, pool.uri, 4096, 2), "a user to kill");
    fmem_pool *ps[64];
    int n = 0;
    while (n < 64 && fmem_open(pool.uri, &ps[n]) == 0)
        n++;
    PH_CHECK(n == 62, "%d more clients fit (64 slots, slot 0 unused, one held)", n);
    ph_kill(&dead);
    int rc = ph_fmem(out, sizeof out, "verify '%s'", pool.bare);
    PH_CHECK(rc == 0 && strstr(out, "chunks allocated 2,") && strstr(out, "awaiting recovery"),
             "verify with a full user table: exit %d: %s", rc, out);
    rc = ph_fmem(out, sizeof out, "recover '%s' %u", pool.bare, dead.uid);
    PH_CHECK(rc == 0 && strstr(out, "freed 2 blocks"), "recover with a full user table: exit %d: %s",
             rc, out);
    rc = ph_fmem(out, sizeof out, "status '%s'", pool.bare);
    PH_CHECK(rc == 0, "status with a full user table: exit %d: %s", rc, out);
    while (n > 0)
        fmem_close(ps[--n]);
    fmem_unlink(pool.uri);
}

int main(void)
{
    busy_pool();
    full_user_table();
    return ph_result("class6-verify-busy");
}
