/* lfmem_state.c - fmem.newstate(pool_or_region): a separate Lua state
 * whose whole heap is an fmem heap (on directly mapped pool chunks, or
 * inside a far-memory region).
 *
 *   local st = fmem.newstate(pool)
 *   st:dostring("function f(a, b) return a + b end")
 *   st:call("f", 1, 2)            --> 3
 *   st:close()                    -- every byte goes back to the pool
 *
 * Values cross between the states by copy (lfmem_copy.c). Both
 * directions run protected: an error in the child comes back as a Lua
 * error in the caller, and a memory error while copying results leaves
 * the child usable. A state is "busy" while it runs so that a finalizer of
 * the caller cannot re-enter or close it half-way. */
#include <stdio.h>
#include <string.h>

#include <lualib.h>

#include "lfmem.h"

typedef struct lfmem_state {
    lua_State *L; /* the child; NULL once closed */
    lfmem_backing back;
    int busy;
} lfmem_state;

static lfmem_state *check_any(lua_State *L, const char *op)
{
    return lfmem_check_udata(L, 1, LFMEM_STATE, op);
}

static lfmem_state *check_open(lua_State *L, const char *op)
{
    lfmem_state *s = check_any(L, op);
    if (!s->L)
        lfmem_error(L, op, "the state is closed");
    if (s->busy)
        lfmem_error(L, op, "the state is running (re-entered from a finalizer?)");
    return s;
}

static int open_libs(lua_State *C)
{
    luaL_openlibs(C);
    return 0;
}

int lfmem_state_lnew(lua_State *L)
{
    lfmem_pool **pbox = luaL_testudata(L, 1, LFMEM_POOL);
    lfmem_region *region = NULL;
    if (!pbox && !luaL_testudata(L, 1, LFMEM_REGION))
        return lfmem_error(L, "newstate", "bad argument #1 (fmem.pool or fmem.region expected, "
                                          "got %s)", lfmem_typename(L, 1));
    if (!pbox)
        region = lfmem_region_check(L, 1, "newstate");
    else if (!*pbox || (*pbox)->closed)
        return lfmem_error(L, "newstate", "the pool is closed");
    lfmem_state *s = lua_newuserdatauv(L, sizeof *s, 1);
    memset(s, 0, sizeof *s);
    luaL_setmetatable(L, LFMEM_STATE);
    int rc = region ? lfmem_backing_on_region(&s->back, region)
                    : lfmem_backing_on_pool(&s->back, *pbox);
    if (rc == FMEM_EBUSY)
        return lfmem_error(L, "newstate", "the region already holds a state");
    if (rc == FMEM_ENOTSUP)
        return lfmem_error(L, "newstate", "this pool's transport cannot map memory: "
                                          "use a region (fmem.region) instead");
    if (rc)
        return lfmem_fail(L, "newstate", rc);
    lua_pushvalue(L, 1); /* keep the pool or region object reachable */
    lua_setiuservalue(L, -2, 1);
    s->L = lfmem_backing_newstate(&s->back);
    if (!s->L) {
        lfmem_backing_release(&s->back);
        return lfmem_error(L, "newstate", "not enough memory for a Lua state");
    }
    lua_pushcfunction(s->L, open_libs);
    if (lua_pcall(s->L, 0, 0, 0) != LUA_OK)
        return lfmem_error(L, "newstate", "cannot open the standard libraries: %s",
                           lua_tostring(s->L, -1));
    return 1;
}

/* ---- running code in the child ------------------------------------------ */

/* The child's error object as text in buf (converting a non-string could
 * itself fail in the child, so numbers are formatted here). */
static const char *child_message(lua_State *C, char *buf, size_t cap)
{
    if (lua_type(C, -1) == LUA_TSTRING)
        return lua_tostring(C, -1);
    if (lua_isinteger(C, -1))
        snprintf(buf, cap, LUA_INTEGER_FMT, (LUAI_UACINT)lua_tointeger(C, -1));
    else if (lua_type(C, -1) == LUA_TNUMBER)
        snprintf(buf, cap, LUA_NUMBER_FMT, (LUAI_UACNUMBER)lua_tonumber(C, -1));
    else
        snprintf(buf, cap, "(error object is a %s value)", luaL_typename(C, -1));
    return buf;
}

struct outcome {
    lfmem_state *s;
    const char *op;
    int status; /* the child's */
};

/* Parent side, protected: push the child's results, or its error message
 * (then return -1 results: the caller raises it). */
static int copy_out(lua_State *L)
{
    struct outcome *o = lua_touserdata(L, 1);
    lua_pop(L, 1);
    lua_State *C = o->s->L;
    if (o->status != LUA_OK) {
        char buf[64];
        lua_pushfstring(L, "fmem: %s: %s", o->op, child_message(C, buf, sizeof buf));
        return 1;
    }
    int n = lua_gettop(C);
    luaL_checkstack(L, n, "fmem: too many results");
    for (int i = 1; i <= n; i++) {
        const char *err = lfmem_copy(C, i, L);
        if (err)
            return luaL_error(L, "fmem: %s: result #%d: %s", o->op, i, err);
    }
    return n;
}

/* Bring the child's outcome over, leave the child empty and idle. */
static int finish(lua_State *L, lfmem_state *s, int status, const char *op)
{
    struct outcome o = {.s = s, .op = op, .status = status};
    int base = lua_gettop(L);
    lua_pushcfunction(L, copy_out);
    lua_pushlightuserdata(L, &o);
    int rc = lua_pcall(L, 1, LUA_MULTRET, 0);
    lua_settop(s->L, 0);
    s->busy = 0;
    if (rc != LUA_OK || status != LUA_OK)
        return lua_error(L);
    return lua_gettop(L) - base;
}

/* st:dostring(code [, chunkname]) -> the chunk's results */
static int state_dostring(lua_State *L)
{
    lfmem_state *s = check_open(L, "dostring");
    if (lua_type(L, 2) != LUA_TSTRING)
        return lfmem_error(L, "dostring", "bad argument #1 (string expected, got %s)",
                           luaL_typename(L, 2));
    size_t len;
    const char *code = lua_tolstring(L, 2, &len);
    const char *name = luaL_optstring(L, 3, "=(fmem state)");
    s->busy = 1;
    lua_settop(s->L, 0);
    int status = luaL_loadbufferx(s->L, code, len, name, "t");
    if (status == LUA_OK)
        status = lua_pcall(s->L, 0, LUA_MULTRET, 0);
    return finish(L, s, status, "dostring");
}

struct call_args {
    lua_State *parent;
    const char *name;
    int first, nargs; /* the arguments on the parent's stack */
};

/* Child side, protected: look the function up, copy the arguments, call. */
static int call_entry(lua_State *C)
{
    struct call_args *a = lua_touserdata(C, 1);
    lua_pop(C, 1);
    if (lua_getglobal(C, a->name) != LUA_TFUNCTION)
        return luaL_error(C, "global '%s' is not a function (a %s value)", a->name,
                          luaL_typename(C, -1));
    luaL_checkstack(C, a->nargs, "too many arguments");
    for (int i = 0; i < a->nargs; i++) {
        const char *err = lfmem_copy(a->parent, a->first + i, C);
        if (err)
            return luaL_error(C, "argument #%d: %s", i + 2, err);
    }
    lua_call(C, a->nargs, LUA_MULTRET);
    return lua_gettop(C);
}

/* st:call(name, ...) -> the results of the global function `name` */
static int state_call(lua_State *L)
{
    lfmem_state *s = check_open(L, "call");
    if (lua_type(L, 2) != LUA_TSTRING)
        return lfmem_error(L, "call", "bad argument #1 (function name expected, got %s)",
                           luaL_typename(L, 2));
    struct call_args a = {
        .parent = L, .name = lua_tostring(L, 2), .first = 3, .nargs = lua_gettop(L) - 2,
    };
    s->busy = 1;
    lua_settop(s->L, 0);
    /* an empty stack always has LUA_MINSTACK free slots: these cannot fail */
    lua_pushcfunction(s->L, call_entry);
    lua_pushlightuserdata(s->L, &a);
    int status = lua_pcall(s->L, 1, LUA_MULTRET, 0);
    return finish(L, s, status, "call");
}

/* ---- life and statistics ------------------------------------------------- */

static void close_state(lua_State *L, lfmem_state *s)
{
    lua_close(s->L);
    s->L = NULL;
    lfmem_backing_release(&s->back);
    lua_pushnil(L);
    lua_setiuservalue(L, 1, 1);
}

static int state_close(lua_State *L)
{
    lfmem_state *s = check_any(L, "close");
    if (s->L) {
        if (s->busy)
            return lfmem_error(L, "close", "the state is running");
        close_state(L, s);
    }
    return 0;
}

static int state_gc(lua_State *L)
{
    lfmem_state *s = check_any(L, "__gc");
    if (s->L && !s->busy)
        close_state(L, s);
    return 0;
}

static int state_closed(lua_State *L)
{
    lua_pushboolean(L, check_any(L, "closed")->L == NULL);
    return 1;
}

/* st:memory() -> bytes the child's collector counts as in use */
static int state_memory(lua_State *L)
{
    lfmem_state *s = check_open(L, "memory");
    lua_Integer kb = lua_gc(s->L, LUA_GCCOUNT), rest = lua_gc(s->L, LUA_GCCOUNTB);
    lua_pushinteger(L, kb * 1024 + rest);
    return 1;
}

/* st:collect(): a full collection in the child */
static int state_collect(lua_State *L)
{
    lfmem_state *s = check_open(L, "collect");
    s->busy = 1; /* the child's finalizers run now */
    lua_gc(s->L, LUA_GCCOLLECT);
    s->busy = 0;
    return 0;
}

/* fmem.compact(state [, budget]) or st:compact([budget]) -> pool bytes
 * given back: merges sparse slabs of the state's heap (fmem_heap_compact;
 * the state is not running, so nothing writes into its objects meanwhile).
 * A heap in a region, or on a private mem: pool, cannot be compacted. */
int lfmem_state_lcompact(lua_State *L)
{
    lfmem_state *s = check_open(L, "compact");
    lua_Integer budget = luaL_optinteger(L, 2, 0);
    if (budget < 0)
        return lfmem_error(L, "compact", "budget must be >= 0");
    int64_t got = fmem_heap_compact(s->back.heap, (size_t)budget);
    if (got < 0)
        return lfmem_fail(L, "compact", (int)got);
    lua_pushinteger(L, (lua_Integer)got);
    return 1;
}

static int state_stats(lua_State *L)
{
    lfmem_state *s = check_open(L, "stats");
    lfmem_push_backing_stats(L, &s->back);
    lua_Integer kb = lua_gc(s->L, LUA_GCCOUNT), rest = lua_gc(s->L, LUA_GCCOUNTB);
    lfmem_setint(L, "lua_bytes", (unsigned long long)(kb * 1024 + rest));
    return 1;
}

static int state_tostring(lua_State *L)
{
    lfmem_state *s = check_any(L, "tostring");
    if (!s->L)
        lua_pushliteral(L, "fmem.state (closed)");
    else
        lua_pushfstring(L, "fmem.state (%s heap, %I KiB in use)",
                        s->back.region ? "region" : "pool",
                        (LUAI_UACINT)lua_gc(s->L, LUA_GCCOUNT));
    return 1;
}

void lfmem_state_open_class(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"dostring", state_dostring}, {"call", state_call},       {"close", state_close},
        {"closed", state_closed},     {"memory", state_memory},   {"collect", state_collect},
        {"stats", state_stats},       {"__close", state_close},   {"__gc", state_gc},
        {"compact", lfmem_state_lcompact},
        {"__tostring", state_tostring},
        {NULL, NULL},
    };
    lfmem_new_class(L, LFMEM_STATE, fns);
}
