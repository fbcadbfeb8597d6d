/* status_app.c - a process with a live far-memory region over two memory
 * nodes and a zmem: node (and an ssd: node when argv[2] names a file), for
 * tests/status-processes.sh: it fills the region past its cache, writes
 * "ready" into the directory argv[1], and holds everything until a file
 * "done" appears there (or 60 s pass). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fmem.h"
#include "fmem_far.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: status_app DIR [SSD-FILE]\n");
        return 2;
    }
    char uri[1024], path[1024];
    snprintf(uri, sizeof uri, "mem:?size=64M&bw=400M;mem:?size=64M&bw=200M;zmem:?size=32M%s%s%s",
             argc > 2 ? ";ssd:" : "", argc > 2 ? argv[2] : "", argc > 2 ? "?size=32M" : "");
    fmem_pool *pool;
    int rc = fmem_open(uri, &pool);
    if (rc) {
        fprintf(stderr, "%s: %s (%s)\n", uri, fmem_strerror(rc), fmem_uri_error());
        return 1;
    }
    fmem_region_config c = {.size = 8 << 20, .cache_bytes = 1 << 20, .fetch_unit = 16 << 10};
    fmem_region *r;
    if ((rc = fmem_region_create(pool, &c, &r)) != 0) {
        fprintf(stderr, "region: %s\n", fmem_strerror(rc));
        return 1;
    }
    char *base = fmem_region_base(r);
    for (size_t off = 0; off < c.size; off += 4096)
        memset(base + off, (int)(off >> 12), 64);
    unsigned long sum = 0;
    for (size_t off = 0; off < c.size; off += 4096)
        sum += (unsigned char)base[off];
    fmem_region_flush(r);
    /* the zmem:/ssd: nodes hold data too */
    fmem_handle h;
    char buf[65536];
    memset(buf, 7, sizeof buf);
    for (int i = 0; i < 8; i++)
        if (fmem_alloc(pool, sizeof buf, &h) == 0)
            fmem_write(pool, &h, 0, buf, sizeof buf);
    snprintf(path, sizeof path, "%s/ready", argv[1]);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%d %lu\n", (int)getpid(), sum);
        fclose(f);
    }
    snprintf(path, sizeof path, "%s/done", argv[1]);
    for (int i = 0; i < 1200 && access(path, F_OK); i++)
        usleep(50000);
    fmem_region_destroy(r);
    fmem_close(pool);
    return 0;
}
