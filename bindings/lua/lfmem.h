/* lfmem.h - the Lua 5.4 binding's shared declarations: pools, buffers,
 * regions, heaps that hold a whole Lua state, and value copying between
 * states.
 *
 * Lifetimes. A pool, region or state object is a Lua userdata boxing a
 * pointer to a C record that is reference counted, because Lua runs
 * finalizers of objects that die together in no order we may rely on (a
 * buffer collected in the same cycle as its pool must still free its block
 * before the pool closes). Each buffer, region and heap holds one reference
 * on its pool; each heap one on its region. The Lua side also keeps the
 * owner reachable (user value), so the owner is not collected early.
 * All of this is single-threaded: one Lua universe per OS thread.
 */
#ifndef LFMEM_H
#define LFMEM_H

#include <stddef.h>

#include <lauxlib.h>
#include <lua.h>

#include <fmem.h>
#include <fmem_far.h>
#include <fmem_hooks.h>

#define LFMEM_EXPORT __attribute__((visibility("default")))

/* metatable names */
#define LFMEM_POOL "fmem.pool"
#define LFMEM_BUFFER "fmem.buffer"
#define LFMEM_REGION "fmem.region"
#define LFMEM_STATE "fmem.state"

/* ---- errors and arguments (lfmem_util.c) ---------------------------------- */

/* Raise "fmem: <op>: <formatted message>". */
int lfmem_error(lua_State *L, const char *op, const char *fmt, ...);
/* Raise "fmem: <op>: <fmem_strerror(rc)>" */
int lfmem_fail(lua_State *L, const char *op, int rc);
/* The type of the value at idx for messages: "fmem.buffer" for ours. */
const char *lfmem_typename(lua_State *L, int idx);
/* The userdata at idx of metatable `tname`, or raise a clear type error. */
void *lfmem_check_udata(lua_State *L, int idx, const char *tname, const char *op);
/* A whole number >= 0 at idx (floats with an exact integer value pass). */
lua_Integer lfmem_check_count(lua_State *L, int idx, const char *op, const char *what);
/* A size: a non-negative integer, or a string "64K", "2M", "1G". */
size_t lfmem_check_size(lua_State *L, int idx, const char *op, const char *what);
/* Parse "64K" style sizes; 0 on success. */
int lfmem_parse_size(const char *s, size_t *out);
/* t[name] = v for the table on top of the stack */
void lfmem_setint(lua_State *L, const char *name, unsigned long long v);
/* Register `fns` in a new metatable `tname` whose __index is itself. */
void lfmem_new_class(lua_State *L, const char *tname, const luaL_Reg *fns);

/* ---- pools (lfmem_pool.c) ------------------------------------------------- */

typedef struct lfmem_pool {
    fmem_pool *pool;
    int refs;      /* the Lua object + every buffer, region and heap on it */
    int closed;    /* close() or collected: no new allocations */
    int mappable;  /* -1 not probed yet, else whether fmem_map works */
} lfmem_pool;

/* Adopt an open pool (one reference, the caller's). */
lfmem_pool *lfmem_pool_adopt(fmem_pool *p);
void lfmem_pool_ref(lfmem_pool *p);
/* Drop one reference; the last one closes the pool. */
void lfmem_pool_unref(lfmem_pool *p);
/* Push a new pool object that owns the caller's reference. */
void lfmem_pool_push(lua_State *L, lfmem_pool *p);
/* The live pool at idx, or raise. */
lfmem_pool *lfmem_pool_check(lua_State *L, int idx, const char *op);
void lfmem_pool_open_class(lua_State *L);
void lfmem_push_pool_stats(lua_State *L, fmem_pool *pool);

/* ---- buffers (lfmem_buffer.c) --------------------------------------------- */

/* Allocate a buffer of `size` bytes on the pool object at pool_idx, push
 * it; map = 0 keeps it off the direct mapping even where one exists. */
int lfmem_buffer_new(lua_State *L, int pool_idx, lfmem_pool *p, lua_Integer size, int map);
void lfmem_buffer_open_class(lua_State *L);

/* ---- regions (lfmem_region.c) --------------------------------------------- */

typedef struct lfmem_region {
    fmem_region *region;
    lfmem_pool *owner;
    int refs;   /* the Lua object + the heap inside it, if any */
    int busy;   /* a heap lives in the region now */
    int closed;
} lfmem_region;

/* A region of `size` bytes, cache `cache` bytes, on p (takes a pool ref). */
int lfmem_region_create(lfmem_pool *p, size_t size, size_t cache, lfmem_region **out);
void lfmem_region_ref(lfmem_region *r);
void lfmem_region_unref(lfmem_region *r);
/* fmem.region(size [, opts]) and pool:region(size [, opts]) */
int lfmem_region_lnew(lua_State *L, int pool_idx, lfmem_pool *p, int size_idx);
lfmem_region *lfmem_region_check(lua_State *L, int idx, const char *op);
void lfmem_region_open_class(lua_State *L);
void lfmem_push_region_stats(lua_State *L, fmem_region *r);

/* ---- heaps that hold a Lua state (lfmem_backing.c) ------------------------ */

typedef struct lfmem_backing {
    fmem_heap *heap;
    fmem_hooks *hooks;
    lfmem_pool *pool;     /* the pool the heap is on (reference held) */
    lfmem_region *region; /* or the region it lives in (reference held) */
} lfmem_backing;

/* A heap on directly mapped pool allocations; 0 or an FMEM_E* code. */
int lfmem_backing_on_pool(lfmem_backing *b, lfmem_pool *p);
/* A heap inside a region (FMEM_EBUSY if another heap uses it). */
int lfmem_backing_on_region(lfmem_backing *b, lfmem_region *r);
/* A Lua state whose allocator is the backing's heap; NULL if out of memory. */
lua_State *lfmem_backing_newstate(lfmem_backing *b);
/* Free the heap (every state on it must be closed) and drop the refs. */
void lfmem_backing_release(lfmem_backing *b);
/* Push {backing=, heap={...}, hooks={...}, pool={...}, region={...}}. */
void lfmem_push_backing_stats(lua_State *L, lfmem_backing *b);

/* ---- states (lfmem_state.c, lfmem_copy.c) --------------------------------- */

/* fmem.newstate(pool_or_region) */
int lfmem_state_lnew(lua_State *L);
/* fmem.compact(state [, budget]) */
int lfmem_state_lcompact(lua_State *L);
void lfmem_state_open_class(lua_State *L);

#define LFMEM_COPY_DEPTH 64
/* Push onto `to` a copy of the value at `idx` of `from`: nil, booleans,
 * numbers, strings and tables of those. Reading `from` never raises; only
 * pushing onto `to` may (memory). Returns NULL, or why the value cannot be
 * copied (nothing pushed then). */
const char *lfmem_copy(lua_State *from, int idx, lua_State *to);

/* ---- the module (lfmem_module.c) ------------------------------------------ */

LFMEM_EXPORT int luaopen_fmem(lua_State *L);
/* Registry key under which fmem-lua leaves its own backing (light userdata)
 * so that fmem.host() can report on it. */
#define LFMEM_HOST_KEY "fmem.host"

#endif
