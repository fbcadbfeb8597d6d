/* test_lua.c - a whole Lua 5.4 state allocated through fmem_hooks_lua_alloc:
 * every block of its heap comes from the binding's heap, and closing the
 * state gives every one back. */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include <sys/wait.h>
#include <unistd.h>

#include "hooks_fixture.h"

static const char script[] =
    "local t = {}\n"
    "for i = 1, 50000 do t[i] = {i, tostring(i) .. 'x'} end\n"
    "local s = {}\n"
    "for i = 1, 2000 do s[#s + 1] = string.rep('ab', i % 50) end\n"
    "local sum = 0\n"
    "for i = 1, #t do sum = sum + t[i][1] end\n"
    "t = nil; collectgarbage()\n"
    "return sum, #table.concat(s)\n";

Test(lua, whole_state_in_the_heap)
{
    fmem_pool *pool = fixture_pool("mem:?size=128M");
    fmem_hooks *b = fixture_binding(pool);
    lua_State *L = lua_newstate(fmem_hooks_lua_alloc, b);
    cr_assert_not_null(L);
    uintptr_t lo, hi;
    fixture_pool_range(pool, &lo, &hi);
    cr_assert((uintptr_t)L >= lo && (uintptr_t)L < hi, "the state itself lives in the pool");
    luaL_openlibs(L);
    int rc = luaL_loadstring(L, script);
    cr_assert_eq(rc, LUA_OK);
    rc = lua_pcall(L, 0, 2, 0);
    cr_assert_eq(rc, LUA_OK, "%s", lua_tostring(L, -1));
    cr_assert_eq(lua_tointeger(L, -2), 1250025000);
    cr_assert_eq(lua_tointeger(L, -1), 98000);
    fmem_heap_stats_t hs;
    fmem_heap_stats(fmem_hooks_heap(b), &hs);
    cr_assert_gt(hs.remote_peak, 1 << 20, "peak %llu", (unsigned long long)hs.remote_peak);
    lua_close(L);
    fmem_hooks_stats_t st = fixture_stats(b);
    cr_assert_gt(st.mallocs, 100000);
    cr_assert_eq(st.mallocs, st.frees);
    cr_assert_eq(st.foreign_frees + st.spills, 0);
    fmem_hooks_drop(b);
    fmem_close(pool);
}

/* fork() with the state's heap in far memory: the child runs Lua on the
 * state as it was at the fork (its own copy), the parent goes on with its
 * own; each checks its tables, collects, closes the state and finds every
 * block given back. A heap on a pool, and one inside a region. */
static const char build[] =
    "T = {}\n"
    "for i = 1, 40000 do T[i] = {i, tostring(i) .. 'x'} end\n"
    "for i = 1, 40000, 2 do T[i] = nil end\n" /* garbage in the snapshot */
    "collectgarbage()\n";

static const char side[] =
    "local who = ...\n"
    "local ok = true\n"
    "for i = 2, 40000, 2 do ok = ok and T[i][1] == i and T[i][2] == tostring(i) .. 'x' end\n"
    "for i = 1, 40000 do T[i] = {who, i} end\n"
    "local s = {}\n"
    "for i = 1, 3000 do s[#s + 1] = string.rep(who, i % 40) end\n"
    "collectgarbage()\n"
    "for i = 1, 40000 do ok = ok and T[i][1] == who and T[i][2] == i end\n"
    "return ok and #table.concat(s) == #who * 58500\n";

static int run_side(lua_State *L, const char *who)
{
    if (luaL_loadstring(L, side) != LUA_OK)
        return 0;
    lua_pushstring(L, who);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        fprintf(stderr, "%s: %s\n", who, lua_tostring(L, -1));
        return 0;
    }
    int ok = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return ok;
}

/* Everything the state had is back when it closes, in each process. */
static int close_clean(lua_State *L, fmem_hooks *b)
{
    lua_close(L);
    fmem_hooks_stats_t st;
    fmem_hooks_stats(b, &st);
    fmem_heap_stats_t hs;
    fmem_heap_collect(fmem_hooks_heap(b));
    fmem_heap_stats(fmem_hooks_heap(b), &hs);
    return st.mallocs == st.frees && hs.large == 0 && hs.slabs == 0;
}

static void fork_state(fmem_hooks *b)
{
    lua_State *L = lua_newstate(fmem_hooks_lua_alloc, b);
    cr_assert_not_null(L);
    luaL_openlibs(L);
    cr_assert_eq(luaL_dostring(L, build), LUA_OK, "%s", lua_tostring(L, -1));
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0)
        _exit(run_side(L, "child") && close_clean(L, b) ? 0 : 1);
    int parent_ok = run_side(L, "parent");
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child failed (%#x)", st);
    cr_assert(parent_ok, "the parent's tables changed");
    cr_assert(close_clean(L, b), "the parent's heap did not empty");
}

Test(lua, fork_with_the_state_on_a_pool)
{
    fmem_pool *pool = fixture_pool("mem:?size=128M");
    fmem_hooks *b = fixture_binding(pool);
    fork_state(b);
    fmem_hooks_drop(b);
    fmem_close(pool);
}

Test(lua, fork_with_the_state_in_a_region)
{
    fmem_pool *pool = fixture_pool("mem:?size=128M");
    fmem_region_config c = {.size = (size_t)64 << 20, .cache_bytes = (size_t)2 << 20};
    fmem_region *r;
    int rc = fmem_region_create(pool, &c, &r);
    if (rc == FMEM_EACCES || rc == FMEM_ENOTSUP)
        cr_skip_test("no userfaultfd here");
    cr_assert_eq(rc, 0);
    fmem_heap *h;
    cr_assert_eq(fmem_heap_new_region(r, &h), 0);
    fmem_hooks *b;
    cr_assert_eq(fmem_hooks_new(h, &b), 0);
    fork_state(b);
    fmem_hooks_drop(b);
    fmem_heap_destroy(h);
    cr_assert_eq(fmem_region_destroy(r), 0);
    fmem_close(pool);
}
