/* lfmem_region.c - far-memory regions as Lua objects, so that a Lua state's
 * heap can live in one: fmem.newstate(fmem.region("64M", {cache = "50%"})).
 * A region holds at most one heap at a time; it is destroyed when the
 * region object and that heap are both gone. */
#include <stdlib.h>
#include <string.h>

#include "lfmem.h"

int lfmem_region_create(lfmem_pool *p, size_t size, size_t cache, lfmem_region **out)
{
    fmem_region_config cfg = {.size = size, .cache_bytes = cache};
    lfmem_region *r = malloc(sizeof *r);
    if (!r)
        return FMEM_ENOMEM;
    int rc = fmem_region_create(p->pool, &cfg, &r->region);
    if (rc) {
        free(r);
        return rc;
    }
    r->owner = p;
    r->refs = 1;
    r->busy = 0;
    r->closed = 0;
    lfmem_pool_ref(p);
    *out = r;
    return 0;
}

void lfmem_region_ref(lfmem_region *r) { r->refs++; }

void lfmem_region_unref(lfmem_region *r)
{
    if (r && --r->refs == 0) {
        fmem_region_destroy(r->region);
        lfmem_pool_unref(r->owner);
        free(r);
    }
}

static lfmem_region **region_box(lua_State *L, int idx, const char *op)
{
    return lfmem_check_udata(L, idx, LFMEM_REGION, op);
}

lfmem_region *lfmem_region_check(lua_State *L, int idx, const char *op)
{
    lfmem_region *r = *region_box(L, idx, op);
    if (!r)
        lfmem_error(L, op, "the region is closed");
    return r;
}

/* opts.cache: bytes, "32M", or "50%" of the region's size */
static size_t cache_option(lua_State *L, int opts, size_t size)
{
    if (lua_getfield(L, opts, "cache") == LUA_TNIL)
        return size; /* everything fits: no eviction */
    size_t cache;
    const char *s = lua_tostring(L, -1);
    size_t n = s && lua_type(L, -1) == LUA_TSTRING ? strlen(s) : 0;
    if (n > 1 && s[n - 1] == '%') {
        char *end;
        double pct = strtod(s, &end);
        if (end != s + n - 1 || !(pct > 0 && pct <= 100))
            lfmem_error(L, "region", "cache: bad percentage '%s' (want 0 < p <= 100)", s);
        cache = (size_t)((double)size * pct / 100.0);
    } else {
        cache = lfmem_check_size(L, -1, "region", "cache");
    }
    lua_pop(L, 1);
    return cache;
}

int lfmem_region_lnew(lua_State *L, int pool_idx, lfmem_pool *p, int size_idx)
{
    pool_idx = lua_absindex(L, pool_idx);
    if (lua_isnoneornil(L, size_idx))
        return lfmem_error(L, "region", "size expected");
    size_t size = lfmem_check_size(L, size_idx, "region", "size");
    if (size == 0)
        return lfmem_error(L, "region", "size must not be zero");
    int opts = size_idx + 1;
    size_t cache = size;
    if (!lua_isnoneornil(L, opts)) {
        if (!lua_istable(L, opts))
            return lfmem_error(L, "region", "options must be a table, got %s",
                               luaL_typename(L, opts));
        cache = cache_option(L, opts, size);
    }
    lfmem_region **box = lua_newuserdatauv(L, sizeof *box, 1);
    *box = NULL;
    luaL_setmetatable(L, LFMEM_REGION);
    int rc = lfmem_region_create(p, size, cache, box);
    if (rc == FMEM_EACCES)
        return lfmem_error(L, "region", "%s (userfaultfd is not allowed: run as root, or "
                           "set vm.unprivileged_userfaultfd=1)", fmem_strerror(rc));
    if (rc)
        return lfmem_fail(L, "region", rc);
    lua_pushvalue(L, pool_idx);
    lua_setiuservalue(L, -2, 1);
    return 1;
}

void lfmem_push_region_stats(lua_State *L, fmem_region *region)
{
    fmem_region_stats_t st;
    int rc = fmem_region_stats(region, &st);
    if (rc)
        lfmem_fail(L, "stats", rc);
    lua_createtable(L, 0, 32);
    lfmem_setint(L, "size", fmem_region_size(region));
    lfmem_setint(L, "unit", fmem_region_unit(region));
    lfmem_setint(L, "faults", st.faults);
    lfmem_setint(L, "missing_faults", st.missing_faults);
    lfmem_setint(L, "wp_faults", st.wp_faults);
    lfmem_setint(L, "hits", st.hits);
    lfmem_setint(L, "fetches", st.fetches);
    lfmem_setint(L, "prefetches", st.prefetches);
    lfmem_setint(L, "zero_fills", st.zero_fills);
    lfmem_setint(L, "evictions", st.evictions);
    lfmem_setint(L, "writebacks", st.writebacks);
    lfmem_setint(L, "bytes_fetched", st.bytes_fetched);
    lfmem_setint(L, "bytes_written", st.bytes_written);
    lfmem_setint(L, "remote_bytes", st.remote_bytes);
    lfmem_setint(L, "remote_peak", st.remote_peak);
    lfmem_setint(L, "cached_bytes", st.cached_bytes);
    lfmem_setint(L, "cache_bytes", st.cache_bytes);
    lfmem_setint(L, "releases", st.releases);
    lfmem_setint(L, "alloc_failures", st.alloc_failures);
    /* several memory nodes: the parameters in force, the policy's figures
     * and one table per path */
    lfmem_setint(L, "paths", st.paths);
    lfmem_setint(L, "stripe_width", st.stripe_width);
    lfmem_setint(L, "io_width", st.io_width);
    lfmem_setint(L, "prefetch_units", st.prefetch_units);
    lfmem_setint(L, "fault_rate", st.fault_rate);
    lfmem_setint(L, "seq_pct", st.seq_pct);
    lfmem_setint(L, "write_pct", st.write_pct);
    lfmem_setint(L, "refault_pct", st.refault_pct);
    lfmem_setint(L, "refault_dist", st.refault_dist);
    lfmem_setint(L, "fetch_units", st.fetch_units);
    lfmem_setint(L, "fetch_max", st.fetch_max);
    lfmem_setint(L, "tier_moves", st.tier_moves);
    lfmem_setint(L, "ahead_unused", st.ahead_unused);
    lfmem_setint(L, "ahead_window", st.ahead_window);
    fmem_region_path_t p[16];
    int n = fmem_region_paths(region, p, 16);
    if (n < 0)
        lfmem_fail(L, "stats", n);
    if (n > 16)
        n = 16;
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_createtable(L, 0, 8);
        lfmem_setint(L, "node", p[i].node);
        lfmem_setint(L, "placing", p[i].placing);
        lfmem_setint(L, "bytes_fetched", p[i].bytes_fetched);
        lfmem_setint(L, "bytes_written", p[i].bytes_written);
        lfmem_setint(L, "ops", p[i].ops);
        lfmem_setint(L, "busy_ns", p[i].busy_ns);
        lfmem_setint(L, "bandwidth", p[i].bandwidth);
        lfmem_setint(L, "chunks", p[i].chunks);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "path_stats");
}

static int region_stats(lua_State *L)
{
    lfmem_push_region_stats(L, lfmem_region_check(L, 1, "stats")->region);
    return 1;
}

static int region_flush(lua_State *L)
{
    int rc = fmem_region_flush(lfmem_region_check(L, 1, "flush")->region);
    return rc ? lfmem_fail(L, "flush", rc) : 0;
}

static int region_size(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)fmem_region_size(lfmem_region_check(L, 1, "size")->region));
    return 1;
}

static int region_busy(lua_State *L)
{
    lua_pushboolean(L, lfmem_region_check(L, 1, "busy")->busy);
    return 1;
}

/* close(), __close, __gc: the region goes once no state lives in it */
static int region_close(lua_State *L)
{
    lfmem_region **box = region_box(L, 1, "close");
    if (*box) {
        (*box)->closed = 1;
        lfmem_region_unref(*box);
        *box = NULL;
        lua_pushnil(L);
        lua_setiuservalue(L, 1, 1);
    }
    return 0;
}

static int region_tostring(lua_State *L)
{
    lfmem_region *r = *region_box(L, 1, "tostring");
    if (!r)
        lua_pushliteral(L, "fmem.region (closed)");
    else
        lua_pushfstring(L, "fmem.region (%I bytes%s)", (LUAI_UACINT)fmem_region_size(r->region),
                        r->busy ? ", holds a state" : "");
    return 1;
}

void lfmem_region_open_class(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"stats", region_stats}, {"flush", region_flush},     {"size", region_size},
        {"busy", region_busy},   {"close", region_close},     {"__close", region_close},
        {"__gc", region_close},  {"__tostring", region_tostring},
        {NULL, NULL},
    };
    lfmem_new_class(L, LFMEM_REGION, fns);
}
