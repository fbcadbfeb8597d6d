/* lfmem_backing.c - an fmem heap that holds a whole Lua state, through the
 * lua_Alloc of gc_hooks (fmem_hooks_lua_alloc over a binding). Used by
 * fmem.newstate and by the fmem-lua host. */
#include <stdio.h>
#include <string.h>

#include "lfmem.h"

static int bind(lfmem_backing *b)
{
    int rc = fmem_hooks_new(b->heap, &b->hooks);
    if (rc) {
        fmem_heap_destroy(b->heap);
        b->heap = NULL;
    }
    return rc;
}

int lfmem_backing_on_pool(lfmem_backing *b, lfmem_pool *p)
{
    memset(b, 0, sizeof *b);
    /* compactable where the pool maps a chunk twice (shm:, file:) */
    int rc = fmem_heap_new_compactable(p->pool, NULL, &b->heap);
    if (rc == FMEM_ENOTSUP)
        rc = fmem_heap_new(p->pool, &b->heap);
    if (rc == 0 && (rc = bind(b)) == 0) {
        b->pool = p;
        lfmem_pool_ref(p);
    }
    return rc;
}

int lfmem_backing_on_region(lfmem_backing *b, lfmem_region *r)
{
    memset(b, 0, sizeof *b);
    if (r->busy)
        return FMEM_EBUSY;
    int rc = fmem_heap_new_region(r->region, &b->heap);
    if (rc == 0 && (rc = bind(b)) == 0) {
        b->region = r;
        r->busy = 1;
        lfmem_region_ref(r);
    }
    return rc;
}

static int panic(lua_State *L)
{
    const char *msg = lua_tostring(L, -1);
    fprintf(stderr, "fmem: unprotected error in a Lua state: %s\n", msg ? msg : "(not a string)");
    fflush(stderr);
    return 0; /* Lua aborts */
}

/* warn(): off until "@on", as in the stand-alone interpreter */
static void warn_on(void *ud, const char *msg, int tocont);

static void warn_off(void *ud, const char *msg, int tocont);

/* "@on" / "@off"; 1 if msg was one of those control messages */
static int warn_control(lua_State *L, const char *msg, int tocont)
{
    if (tocont || msg[0] != '@')
        return 0;
    if (!strcmp(msg + 1, "off"))
        lua_setwarnf(L, warn_off, L);
    else if (!strcmp(msg + 1, "on"))
        lua_setwarnf(L, warn_on, L);
    return 1;
}

static void warn_off(void *ud, const char *msg, int tocont)
{
    warn_control(ud, msg, tocont);
}

static void warn_cont(void *ud, const char *msg, int tocont)
{
    fputs(msg, stderr);
    if (tocont) {
        lua_setwarnf(ud, warn_cont, ud);
    } else {
        fputc('\n', stderr);
        lua_setwarnf(ud, warn_on, ud);
    }
}

static void warn_on(void *ud, const char *msg, int tocont)
{
    if (warn_control(ud, msg, tocont))
        return;
    fputs("Lua warning: ", stderr);
    warn_cont(ud, msg, tocont);
}

lua_State *lfmem_backing_newstate(lfmem_backing *b)
{
    lua_State *L = lua_newstate(fmem_hooks_lua_alloc, b->hooks);
    if (L) {
        lua_atpanic(L, panic);
        lua_setwarnf(L, warn_off, L);
    }
    return L;
}

void lfmem_backing_release(lfmem_backing *b)
{
    fmem_hooks_drop(b->hooks);
    fmem_heap_destroy(b->heap);
    if (b->region) {
        b->region->busy = 0;
        lfmem_region_unref(b->region);
    }
    lfmem_pool_unref(b->pool);
    memset(b, 0, sizeof *b);
}

void lfmem_push_backing_stats(lua_State *L, lfmem_backing *b)
{
    fmem_heap_stats_t hs;
    fmem_hooks_stats_t ks;
    fmem_heap_stats(b->heap, &hs);
    fmem_hooks_stats(b->hooks, &ks);
    lua_createtable(L, 0, 5);
    lua_pushstring(L, b->region ? "region" : "pool");
    lua_setfield(L, -2, "backing");

    lua_createtable(L, 0, 10);
    lfmem_setint(L, "mallocs", hs.mallocs);
    lfmem_setint(L, "frees", hs.frees);
    lfmem_setint(L, "slabs", hs.slabs);
    lfmem_setint(L, "large", hs.large);
    lfmem_setint(L, "remote_bytes", hs.remote_bytes);
    lfmem_setint(L, "remote_peak", hs.remote_peak);
    lfmem_setint(L, "slab_allocs", hs.slab_allocs);
    lfmem_setint(L, "slab_frees", hs.slab_frees);
    lfmem_setint(L, "double_frees", hs.double_frees);
    lfmem_setint(L, "bad_frees", hs.bad_frees);
    lfmem_setint(L, "merges", hs.merges);
    lfmem_setint(L, "reclaimed_bytes", hs.compact_bytes);
    lua_setfield(L, -2, "heap");

    lua_createtable(L, 0, 6);
    lfmem_setint(L, "mallocs", ks.mallocs);
    lfmem_setint(L, "frees", ks.frees);
    lfmem_setint(L, "reallocs", ks.reallocs);
    lfmem_setint(L, "foreign_frees", ks.foreign_frees);
    lfmem_setint(L, "fallback_allocs", ks.fallback_allocs);
    lfmem_setint(L, "spills", ks.spills);
    lua_setfield(L, -2, "hooks");

    fmem_pool *pool = b->region ? b->region->owner->pool : b->pool->pool;
    lfmem_push_pool_stats(L, pool);
    lua_setfield(L, -2, "pool");
    if (b->region) {
        lfmem_push_region_stats(L, b->region->region);
        lua_setfield(L, -2, "region");
    }
}
