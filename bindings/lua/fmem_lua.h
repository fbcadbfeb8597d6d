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
/* Close L (unless NULL), free the heap and the pool; with $FMEM_LUA_STATS
 * set, print one line of statistics to stderr. Returns -1 if the pool
 * holds more than before the heap was made. */
int host_teardown(struct host *h, lua_State *L);
/* "shm", "region:50:64M" or "libc": the heap host_setup made */
const char *host_backing_name(void);

/* fmem_lua_call.c: running code and reporting errors as lua(1) does */
extern const char *host_progname; /* argv[0]; NULL in the REPL */
/* run the function under narg arguments with a traceback handler; Ctrl-C
 * meanwhile raises "interrupted!" */
int host_docall(lua_State *L, int narg, int nres);
/* "PROG: MSG" (or "MSG" when prog is NULL) on stderr */
void host_message(const char *prog, const char *msg);
/* print the error on top of L and pop it (if status is not LUA_OK) */
int host_report(lua_State *L, int status);
/* call the chunk that status says was loaded, report errors */
int host_dochunk(lua_State *L, int status);
int host_dostring(lua_State *L, const char *s, const char *name);
int host_dofile(lua_State *L, const char *name); /* NULL: stdin */

/* fmem_lua_repl.c: the read-eval-print loop on stdin */
void host_repl(lua_State *L);
/* fmem_lua_readline.c: push the next line of input after showing prompt
 * (0 at the end of input); keep a line in the history */
int host_readline(lua_State *L, const char *prompt);
void host_saveline(const char *line);

#endif
