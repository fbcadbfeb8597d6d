/* demo.c - the main demo: open the default pool ($FMEM_URI, else the
 * embedded in-process pool: no daemons, no special hardware), allocate
 * blocks of several sizes, use them through a direct mapping where the
 * transport has one and through fmem_read/fmem_write, free them, and show
 * the pool's statistics. It names the transport it found, not the one it
 * expects. */
#include <fmem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(int rc, const char *what)
{
    if (rc) {
        fprintf(stderr, "demo: %s: %s\n", what, fmem_strerror(rc));
        exit(1);
    }
}

static void show(fmem_pool *pool, const char *when)
{
    fmem_stats_t st;
    check(fmem_stats(pool, &st), "fmem_stats");
    printf("%-14s allocated %8.2f MiB of %7.1f MiB  (metadata %.3f%%)  "
           "cas %llu (failed %llu)  round trips %llu\n",
           when, st.allocated_bytes / 1048576.0, st.capacity_bytes / 1048576.0,
           100.0 * st.metadata_bytes / st.capacity_bytes, (unsigned long long)st.cas_ops,
           (unsigned long long)st.cas_failures, (unsigned long long)st.round_trips);
}

int main(void)
{
    fmem_pool *pool;
    check(fmem_open(NULL, &pool), "fmem_open");
    const char *uri = getenv("FMEM_URI");
    printf("fmem demo: pool %s\n\n",
           uri && *uri ? uri : "mem: (the default: embedded, in-process)");
    show(pool, "start");

    static const size_t sizes[] = {100, 4096, 10000, 65536, 128 * 1024, 1 << 20, 2 << 20, 8 << 20};
    enum { N = sizeof sizes / sizeof sizes[0] };
    fmem_handle h[N];
    printf("\n%10s  %10s  %12s  %10s\n", "asked", "got", "address", "rkey");
    for (int i = 0; i < N; i++) {
        check(fmem_alloc(pool, sizes[i], &h[i]), "fmem_alloc");
        printf("%10zu  %10llu  %#12llx  %#010x\n", sizes[i], (unsigned long long)h[i].length,
               (unsigned long long)h[i].addr, h[i].rkey);
    }
    show(pool, "\nallocated");

    /* direct access where the transport maps blocks (shared memory), else
     * one-sided read/write only: which one is what the library says */
    char *p;
    uint64_t remote;
    char buf[32] = {0};
    if (fmem_map(pool, &h[2], (void **)&p) == 0) {
        printf("\ntransport: shared memory (blocks are mapped: loads and stores reach them)\n");
        strcpy(p, "hello, far memory");
        check(fmem_read(pool, &h[2], 0, buf, sizeof buf - 1), "fmem_read");
        printf("wrote through the mapping, read back with fmem_read: \"%s\"\n", buf);
    } else {
        printf("\ntransport: %s\n", fmem_remote(pool, &h[2], &remote) == 0
                                         ? "RDMA verbs (one-sided READ, WRITE and CAS)"
                                         : "no direct mapping (fmem_read and fmem_write only)");
        check(fmem_write(pool, &h[2], 0, "hello, far memory", 18), "fmem_write");
        check(fmem_read(pool, &h[2], 0, buf, sizeof buf - 1), "fmem_read");
        printf("wrote with fmem_write, read back with fmem_read: \"%s\"\n", buf);
    }
    check(fmem_write(pool, &h[7], h[7].length - 6, "tail!", 6), "fmem_write");
    check(fmem_read(pool, &h[7], h[7].length - 6, buf, 6), "fmem_read");
    printf("last bytes of the 8 MiB block: \"%s\"\n", buf);

    /* a freed block's key stops working at once */
    fmem_handle old = h[0];
    check(fmem_free(pool, &h[0]), "fmem_free");
    int rc = fmem_read(pool, &old, 0, buf, 1);
    printf("read through a freed handle: %s\n", fmem_strerror(rc));
    rc = fmem_free(pool, &old);
    printf("free it again: %s\n", fmem_strerror(rc));

    for (int i = 1; i < N; i++)
        check(fmem_free(pool, &h[i]), "fmem_free");
    show(pool, "\nfreed");
    fmem_close(pool);
    return 0;
}
