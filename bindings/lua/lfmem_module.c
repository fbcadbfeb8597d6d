/* lfmem_module.c - require "fmem": the module table.
 *
 *   fmem.open([uri])            a pool (embedded mem:, shm:, file:, ...)
 *   fmem.connect([uri])         a pool served by fmemd (unix:/PATH, fmem://)
 *   fmem.region(size [, opts])  a far-memory region (opts.pool, opts.cache)
 *   fmem.newstate(pool|region)  a Lua state whose heap lives there
 *   fmem.compact(state [, budget])  merge sparse slabs of its heap
 *   fmem.host()                 under fmem-lua: the main state's heap
 *   fmem.strerror(code), fmem.size_round(n), constants,
 *   fmem._VERSION ("fmem 0.1") and fmem.version ("0.1")
 */
#include <errno.h>
#include <string.h>

#include "lfmem.h"

#define DEFAULT_POOL_KEY "fmem.default_pool"

static int push_opened(lua_State *L, const char *uri, const char *op)
{
    fmem_pool *pool;
    errno = 0;
    int rc = fmem_open(uri, &pool);
    if (rc == FMEM_EURI)
        return lfmem_error(L, op, "cannot parse the pool URI '%s'%s%s", uri ? uri : "",
                           *fmem_uri_error() ? ": " : "", fmem_uri_error());
    if (rc == FMEM_EIO && errno)
        return lfmem_error(L, op, "%s: %s (%s)", uri && *uri ? uri : "(default pool)",
                           fmem_strerror(rc), strerror(errno));
    if (rc)
        return lfmem_error(L, op, "%s: %s", uri && *uri ? uri : "(default pool)",
                           fmem_strerror(rc));
    lfmem_pool *p = lfmem_pool_adopt(pool);
    if (!p) {
        fmem_close(pool);
        return lfmem_error(L, op, "out of memory");
    }
    lfmem_pool_push(L, p);
    return 1;
}

static const char *opt_uri(lua_State *L, const char *op)
{
    if (lua_isnoneornil(L, 1))
        return NULL;
    if (lua_type(L, 1) != LUA_TSTRING)
        lfmem_error(L, op, "bad argument #1 (URI string expected, got %s)", luaL_typename(L, 1));
    return lua_tostring(L, 1);
}

/* fmem.open([uri]): nil or "" opens $FMEM_URI, else a 1 GiB mem: pool */
static int m_open(lua_State *L)
{
    return push_opened(L, opt_uri(L, "open"), "open");
}

/* fmem.connect([uri]): an allocation service; default fmem:// (its
 * default socket) */
static int m_connect(lua_State *L)
{
    const char *uri = opt_uri(L, "connect");
    if (!uri)
        uri = "fmem://";
    if (strncmp(uri, "unix:", 5) && strncmp(uri, "fmem://", 7))
        return lfmem_error(L, "connect", "'%s' is not a service URI "
                                         "(unix:/PATH or fmem://[localhost]/PATH)", uri);
    return push_opened(L, uri, "connect");
}

/* The pool fmem.region uses when opts.pool is absent: opened on first use,
 * kept in the registry. */
static void push_default_pool(lua_State *L)
{
    if (lua_getfield(L, LUA_REGISTRYINDEX, DEFAULT_POOL_KEY) != LUA_TNIL)
        return;
    lua_pop(L, 1);
    push_opened(L, NULL, "region");
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, DEFAULT_POOL_KEY);
}

/* fmem.region(size [, {cache=, pool=}]) */
static int m_region(lua_State *L)
{
    if (lua_istable(L, 2) && lua_getfield(L, 2, "pool") != LUA_TNIL) {
        lfmem_pool **box = luaL_testudata(L, -1, LFMEM_POOL);
        if (!box)
            return lfmem_error(L, "region", "option pool must be an fmem.pool, got %s",
                               lfmem_typename(L, -1));
        if (!*box || (*box)->closed)
            return lfmem_error(L, "region", "the pool is closed");
        return lfmem_region_lnew(L, -1, *box, 1);
    }
    lua_settop(L, 2);
    push_default_pool(L);
    lfmem_pool *p = lfmem_pool_check(L, -1, "region");
    return lfmem_region_lnew(L, -1, p, 1);
}

/* fmem.host(): the fmem-lua host's heap statistics, nil elsewhere */
static int m_host(lua_State *L)
{
    lua_getfield(L, LUA_REGISTRYINDEX, LFMEM_HOST_KEY);
    lfmem_backing *b = lua_touserdata(L, -1);
    if (!b)
        return 1; /* nil */
    lfmem_push_backing_stats(L, b);
    return 1;
}

static int m_strerror(lua_State *L)
{
    lua_pushstring(L, fmem_strerror((int)luaL_checkinteger(L, 1)));
    return 1;
}

static int m_size_round(lua_State *L)
{
    size_t n = lfmem_check_size(L, 1, "size_round", "size");
    lua_pushinteger(L, (lua_Integer)fmem_size_round(n));
    return 1;
}

LFMEM_EXPORT int luaopen_fmem(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"open", m_open},         {"connect", m_connect},   {"region", m_region},
        {"newstate", lfmem_state_lnew},                     {"host", m_host},
        {"compact", lfmem_state_lcompact},
        {"strerror", m_strerror}, {"size_round", m_size_round},
        {NULL, NULL},
    };
    lfmem_pool_open_class(L);
    lfmem_buffer_open_class(L);
    lfmem_region_open_class(L);
    lfmem_state_open_class(L);
    luaL_newlib(L, fns);
    lua_pushfstring(L, "%d.%d", FMEM_VERSION_MAJOR, FMEM_VERSION_MINOR);
    lua_setfield(L, -2, "version");
    lua_pushfstring(L, "fmem %d.%d", FMEM_VERSION_MAJOR, FMEM_VERSION_MINOR);
    lua_setfield(L, -2, "_VERSION"); /* as lua-cjson, lpeg, luasocket ... */
    lfmem_setint(L, "CHUNK_SIZE", FMEM_CHUNK_SIZE);
    lfmem_setint(L, "SPAN_SIZE", FMEM_SPAN_SIZE);
    lfmem_setint(L, "SECTION_SIZE", FMEM_SECTION_SIZE);
    return 1;
}
