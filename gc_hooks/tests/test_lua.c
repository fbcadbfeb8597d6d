/* test_lua.c - a whole Lua 5.4 state allocated through fmem_hooks_lua_alloc:
 * every block of its heap comes from the binding's heap, and closing the
 * state gives every one back. */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

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
