/* lfmem_pool.c - the pool object: pool:alloc(n), pool:region(size, opts),
 * pool:stats(), pool:close(). The fmem_pool itself closes when the pool
 * object and everything made from it are gone. */
#include <string.h>
#include <stdlib.h>

#include "lfmem.h"

lfmem_pool *lfmem_pool_adopt(fmem_pool *pool)
{
    lfmem_pool *p = malloc(sizeof *p);
    if (p)
        *p = (lfmem_pool){.pool = pool, .refs = 1, .mappable = -1};
    return p;
}

void lfmem_pool_ref(lfmem_pool *p) { p->refs++; }

void lfmem_pool_unref(lfmem_pool *p)
{
    if (p && --p->refs == 0) {
        fmem_close(p->pool);
        free(p);
    }
}

void lfmem_pool_push(lua_State *L, lfmem_pool *p)
{
    lfmem_pool **box = lua_newuserdatauv(L, sizeof *box, 0);
    *box = p;
    luaL_setmetatable(L, LFMEM_POOL);
}

static lfmem_pool **pool_box(lua_State *L, int idx, const char *op)
{
    return lfmem_check_udata(L, idx, LFMEM_POOL, op);
}

lfmem_pool *lfmem_pool_check(lua_State *L, int idx, const char *op)
{
    lfmem_pool *p = *pool_box(L, idx, op);
    if (!p || p->closed)
        lfmem_error(L, op, "the pool is closed");
    return p;
}

static int pool_alloc(lua_State *L)
{
    lfmem_pool *p = lfmem_pool_check(L, 1, "alloc");
    if (lua_isnoneornil(L, 2))
        return lfmem_error(L, "alloc", "size expected");
    lua_Integer n = lfmem_check_count(L, 2, "alloc", "size");
    int map = 1; /* {map = false}: always go through fmem_read/fmem_write */
    if (!lua_isnoneornil(L, 3)) {
        if (!lua_istable(L, 3))
            return lfmem_error(L, "alloc", "options must be a table, got %s",
                               luaL_typename(L, 3));
        lua_getfield(L, 3, "map");
        map = lua_isnil(L, -1) || lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    return lfmem_buffer_new(L, 1, p, n, map);
}

static int pool_region(lua_State *L)
{
    lfmem_pool *p = lfmem_pool_check(L, 1, "region");
    return lfmem_region_lnew(L, 1, p, 2);
}

void lfmem_push_pool_stats(lua_State *L, fmem_pool *pool)
{
    fmem_stats_t st;
    int rc = fmem_stats(pool, &st);
    if (rc)
        lfmem_fail(L, "stats", rc);
    lua_createtable(L, 0, 16);
    lfmem_setint(L, "capacity_bytes", st.capacity_bytes);
    lfmem_setint(L, "allocated_bytes", st.allocated_bytes);
    lfmem_setint(L, "free_bytes", st.capacity_bytes - st.allocated_bytes);
    lfmem_setint(L, "metadata_bytes", st.metadata_bytes);
    lfmem_setint(L, "nodes", st.nodes);
    lfmem_setint(L, "user_id", st.user_id);
    lfmem_setint(L, "allocs", st.allocs);
    lfmem_setint(L, "frees", st.frees);
    lfmem_setint(L, "failed_allocs", st.failed_allocs);
    lfmem_setint(L, "cas_ops", st.cas_ops);
    lfmem_setint(L, "cas_failures", st.cas_failures);
    lfmem_setint(L, "reads", st.reads);
    lfmem_setint(L, "writes", st.writes);
    lfmem_setint(L, "round_trips", st.round_trips);
    lfmem_setint(L, "log_flushes", st.log_flushes);
    lfmem_setint(L, "max_retries", st.max_retries);
    /* size_classes[k + 1] = allocations of 4 KiB << k */
    lua_createtable(L, FMEM_SIZE_CLASSES, 0);
    for (int k = 0; k < FMEM_SIZE_CLASSES; k++) {
        lua_pushinteger(L, (lua_Integer)st.size_class_allocs[k]);
        lua_rawseti(L, -2, k + 1);
    }
    lua_setfield(L, -2, "size_classes");
}

static int pool_stats(lua_State *L)
{
    lfmem_pool *p = lfmem_pool_check(L, 1, "stats");
    lfmem_push_pool_stats(L, p->pool);
    return 1;
}

static void setnum(lua_State *L, const char *name, double v)
{
    lua_pushnumber(L, v);
    lua_setfield(L, -2, name);
}

static void setstr(lua_State *L, const char *name, const char *v, size_t max)
{
    lua_pushlstring(L, v, strnlen(v, max));
    lua_setfield(L, -2, name);
}

/* pool:node_stats(i): node i (0-based, as in fmem_node_stats) of an
 * embedded pool: its backend and this process's I/O on it. */
static int pool_node_stats(lua_State *L)
{
    lfmem_pool *p = lfmem_pool_check(L, 1, "node_stats");
    lua_Integer node = luaL_checkinteger(L, 2);
    if (node < 0 || node > (lua_Integer)UINT32_MAX)
        lfmem_fail(L, "node_stats", FMEM_EINVAL);
    fmem_node_stats_t st;
    int rc = fmem_node_stats(p->pool, (unsigned)node, &st);
    if (rc)
        lfmem_fail(L, "node_stats", rc);
    lua_createtable(L, 0, 18);
    setstr(L, "kind", st.kind, sizeof st.kind);
    setstr(L, "detail", st.detail, sizeof st.detail);
    lfmem_setint(L, "capacity_bytes", st.capacity_bytes);
    lfmem_setint(L, "held_bytes", st.held_bytes);
    lfmem_setint(L, "stored_bytes", st.stored_bytes);
    setnum(L, "compression_ratio", st.compression_ratio);
    lfmem_setint(L, "reads", st.reads);
    lfmem_setint(L, "writes", st.writes);
    lfmem_setint(L, "bytes_read", st.bytes_read);
    lfmem_setint(L, "bytes_written", st.bytes_written);
    lfmem_setint(L, "read_ns", st.read_ns);
    lfmem_setint(L, "write_ns", st.write_ns);
    setnum(L, "read_mb_s", st.read_mb_s);
    setnum(L, "write_mb_s", st.write_mb_s);
    setnum(L, "read_lat_us", st.read_lat_us);
    setnum(L, "write_lat_us", st.write_lat_us);
    lfmem_setint(L, "errors", st.errors);
    setstr(L, "last_error", st.last_error, sizeof st.last_error);
    return 1;
}

/* close(), __close and __gc: no new allocations; the pool itself closes
 * once its buffers, regions and states are gone too. */
static int pool_close(lua_State *L)
{
    lfmem_pool **box = pool_box(L, 1, "close");
    if (*box) {
        (*box)->closed = 1;
        lfmem_pool_unref(*box);
        *box = NULL;
    }
    return 0;
}

static int pool_closed(lua_State *L)
{
    lua_pushboolean(L, *pool_box(L, 1, "closed") == NULL);
    return 1;
}

static int pool_tostring(lua_State *L)
{
    lfmem_pool *p = *pool_box(L, 1, "tostring");
    if (!p) {
        lua_pushliteral(L, "fmem.pool (closed)");
        return 1;
    }
    fmem_stats_t st;
    if (fmem_stats(p->pool, &st) == 0)
        lua_pushfstring(L, "fmem.pool (%I of %I bytes allocated, %d node%s)",
                        (LUAI_UACINT)st.allocated_bytes, (LUAI_UACINT)st.capacity_bytes,
                        (int)st.nodes, st.nodes == 1 ? "" : "s");
    else
        lua_pushfstring(L, "fmem.pool (%p)", (void *)p);
    return 1;
}

void lfmem_pool_open_class(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"alloc", pool_alloc},
        {"region", pool_region},
        {"stats", pool_stats},
        {"node_stats", pool_node_stats},
        {"close", pool_close},
        {"closed", pool_closed},
        {"__close", pool_close},
        {"__gc", pool_close},
        {"__tostring", pool_tostring},
        {NULL, NULL},
    };
    lfmem_new_class(L, LFMEM_POOL, fns);
}
