/* pool_status.c - print the bytes allocated in an existing named pool, or
 * remove it:
 *   pool_status URI      ->  "allocated=N capacity=N"
 *   pool_status -u URI   remove the pool's files
 *   pool_status -c URI   claim user ids until the table is full, print
 *                        "claimed N", hold them until stdin closes */
#include <fmem.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "-u") == 0)
        return fmem_unlink(argv[2]) != 0;
    if (argc == 3 && strcmp(argv[1], "-c") == 0) {
        fmem_pool *q;
        int n = 0;
        while (n < 20000 && fmem_open(argv[2], &q) == 0)
            n++;
        printf("claimed %d\n", n);
        fflush(stdout);
        while (getchar() != EOF)
            ;
        return 0;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: pool_status [-u] URI\n");
        return 2;
    }
    char uri[1024];
    snprintf(uri, sizeof uri, "%s%screate=0", argv[1], strchr(argv[1], '?') ? "&" : "?");
    fmem_pool *p;
    fmem_stats_t st;
    int rc = fmem_open(uri, &p);
    if (rc == 0)
        rc = fmem_stats(p, &st);
    if (rc) {
        fprintf(stderr, "pool_status: %s: %s\n", argv[1], fmem_strerror(rc));
        return 1;
    }
    printf("allocated=%llu capacity=%llu\n", (unsigned long long)st.allocated_bytes,
           (unsigned long long)st.capacity_bytes);
    fmem_close(p);
    return 0;
}
