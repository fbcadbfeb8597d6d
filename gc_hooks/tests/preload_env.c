/* preload_env.c - a program that rewrites its environment and argv in
 * place (as setproctitle does), then makes one large request:
 *   preload_env hold [BYTES]   exit holding the block (default 1 MiB)
 *   preload_env free [BYTES]   free it first
 *   preload_env -k ...         the same without touching the environment
 * Under libfmem-preload.so the block must still come from the pool named
 * by FMEM_PRELOAD_URI and the counters must reach FMEM_PRELOAD_STATS,
 * though both strings are overwritten before the first large request. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

int main(int argc, char **argv)
{
    int keep_env = argc > 1 && strcmp(argv[1], "-k") == 0;
    if (keep_env) {
        argv++;
        argc--;
    }
    if (argc < 2 || argc > 3 || (strcmp(argv[1], "hold") && strcmp(argv[1], "free"))) {
        fprintf(stderr, "usage: preload_env [-k] hold|free [BYTES]\n");
        return 2;
    }
    int hold = strcmp(argv[1], "hold") == 0;
    size_t size = argc == 3 ? strtoul(argv[2], NULL, 0) : 1 << 20;
    for (char **e = environ; !keep_env && *e; e++)
        memset(*e, 'x', strlen(*e));
    for (int i = 0; !keep_env && i < argc; i++)
        memset(argv[i], 'y', strlen(argv[i]));
    char *volatile p = malloc(size);
    if (!p)
        return 1;
    memset(p, 1, size);
    if (!hold)
        free(p);
    puts("done");
    return 0;
}
