/* fmem_lua.h - the fmem-lua host: a Lua 5.4 interpreter whose main state's
 * heap is an fmem heap. */
#ifndef FMEM_LUA_H
#define FMEM_LUA_H

#include "lfmem.h"

enum host_kind { HOST_POOL, HOST_REGION, HOST_LIBC };

/* Where the main state's heap lives, from $FMEM_LUA_BACKING:
 *   shm (default)        a heap on directly mapped pool chunks
 *   region:CACHE[:SIZE]  a heap in a far-memory region of SIZE bytes
 *                        (default 256M) with a local cache of CACHE bytes
 *                        ("8M") or percent of SIZE ("50" or "50%")
 *   libc                 the C library's allocator (for comparisons)
 * The pool is $FMEM_URI, else an in-process 1 GiB mem: pool. */
struct host {
    enum host_kind kind;
    char spec[64];
    size_t region_size, cache_bytes;
    lfmem_pool *pool;
    lfmem_region *region;
    lfmem_backing back;
    unsigned long long pool_before; /* allocated bytes before the heap */
};

/* Parse the environment and build the heap; 0, or -1 with a message
 * printed. */
int host_setup(struct host *h);
/* The main state on the host's heap (NULL: out of memory). */
lua_State *host_newstate(struct host *h);
/* Close L, free the heap and the pool; with $FMEM_LUA_STATS set, print
 * one line of statistics to stderr. Returns -1 if the pool holds more than
 * before the heap was made. */
int host_teardown(struct host *h, lua_State *L);

/* fmem_lua_repl.c: read-eval-print on stdin */
void host_repl(lua_State *L);
/* fmem_lua.c: run the function on top with a traceback handler */
int host_docall(lua_State *L, int narg, int nres);
/* print the error on top of L, pop it; returns status */
int host_report(lua_State *L, int status);

#endif
