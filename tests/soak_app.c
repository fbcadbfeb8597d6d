/* soak_app.c - an application for the soak test: threads that allocate,
 * fill, check and free blocks through the service for a while.
 *   soak_app URI SECONDS THREADS SEED
 * Exit: 0 done, 1 data or API error, 3 the service went away. */
#include <fmem.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static fmem_pool *pool;
static double seconds;
static _Atomic int gone, bad;
static _Atomic unsigned long ops;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int failed(int rc, const char *what)
{
    if (rc == FMEM_EIO) {
        gone = 1;
        return 1;
    }
    if (rc && rc != FMEM_ENOMEM && rc != FMEM_EQUOTA) {
        fprintf(stderr, "soak_app: %s: %s\n", what, fmem_strerror(rc));
        bad = 1;
        return 1;
    }
    return 0;
}

static void *run(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    fmem_handle h[64];
    uint64_t tag[64];
    int n = 0;
    double end = now() + seconds;
    while (!gone && !bad && now() < end) {
        unsigned r = rand_r(&seed);
        if (n < 64 && (r % 5) < 3) {
            int rc = fmem_alloc(pool, 4096u << (r % 6), &h[n]);
            if (rc) {
                if (failed(rc, "alloc"))
                    break;
                continue;
            }
            tag[n] = ((uint64_t)r << 32) | (unsigned)n;
            if (failed(fmem_write(pool, &h[n], h[n].length - 8, &tag[n], 8), "write"))
                break;
            n++;
        } else if (n) {
            int k = (int)(r % (unsigned)n);
            uint64_t t = 0;
            if (failed(fmem_read(pool, &h[k], h[k].length - 8, &t, 8), "read"))
                break;
            if (t != tag[k]) {
                fprintf(stderr, "soak_app: block content changed under us\n");
                bad = 1;
                break;
            }
            if (failed(fmem_free(pool, &h[k]), "free"))
                break;
            h[k] = h[--n];
            tag[k] = tag[n];
        }
        ops++;
    }
    while (n && !gone && !bad)
        failed(fmem_free(pool, &h[--n]), "free");
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: soak_app URI SECONDS THREADS SEED\n");
        return 2;
    }
    seconds = atof(argv[2]);
    int threads = atoi(argv[3]);
    unsigned seed = (unsigned)atoi(argv[4]);
    int rc = fmem_open(argv[1], &pool);
    if (rc) {
        fprintf(stderr, "soak_app: open %s: %s\n", argv[1], fmem_strerror(rc));
        return rc == FMEM_EIO ? 3 : 1;
    }
    pthread_t t[64];
    if (threads < 1 || threads > 64)
        threads = 4;
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, run, (void *)(uintptr_t)(seed * 131u + (unsigned)i));
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    fmem_close(pool);
    printf("soak_app %u: %lu operations%s\n", seed, (unsigned long)ops, gone ? ", service gone" : "");
    return bad ? 1 : gone ? 3 : 0;
}
