/* lfmem_copy.c - copy plain values from one Lua state to another (each
 * state has its own heap, so nothing can be shared): nil, booleans,
 * numbers (integers stay integers), strings, and tables of those, read raw
 * (no metamethods). Reading the source uses only calls that never raise,
 * so the copy may run inside a protected call of the destination. */
#include "lfmem.h"

static const char *copy_value(lua_State *from, int idx, lua_State *to, int depth);

static const char *copy_table(lua_State *from, int idx, lua_State *to, int depth)
{
    if (depth >= LFMEM_COPY_DEPTH)
        return "tables nested too deeply (or cyclic)";
    if (!lua_checkstack(from, 3) || !lua_checkstack(to, 4))
        return "stack overflow";
    lua_newtable(to);
    lua_pushnil(from);
    while (lua_next(from, idx)) {
        const char *err = copy_value(from, -2, to, depth + 1);
        if (!err && (err = copy_value(from, -1, to, depth + 1)) != NULL)
            lua_pop(to, 1);
        if (err) {
            lua_pop(from, 2);
            lua_pop(to, 1);
            return err;
        }
        lua_rawset(to, -3);
        lua_pop(from, 1);
    }
    return NULL;
}

static const char *copy_value(lua_State *from, int idx, lua_State *to, int depth)
{
    idx = lua_absindex(from, idx);
    switch (lua_type(from, idx)) {
    case LUA_TNIL:
        lua_pushnil(to);
        return NULL;
    case LUA_TBOOLEAN:
        lua_pushboolean(to, lua_toboolean(from, idx));
        return NULL;
    case LUA_TNUMBER:
        if (lua_isinteger(from, idx))
            lua_pushinteger(to, lua_tointeger(from, idx));
        else
            lua_pushnumber(to, lua_tonumber(from, idx));
        return NULL;
    case LUA_TSTRING: {
        size_t len;
        const char *s = lua_tolstring(from, idx, &len); /* a string: no conversion */
        lua_pushlstring(to, s, len);
        return NULL;
    }
    case LUA_TTABLE:
        return copy_table(from, idx, to, depth);
    case LUA_TFUNCTION:
        return "a function cannot cross states (only nil, booleans, numbers, strings "
               "and tables of them)";
    case LUA_TUSERDATA:
    case LUA_TLIGHTUSERDATA:
        return "a userdata cannot cross states (only nil, booleans, numbers, strings "
               "and tables of them)";
    case LUA_TTHREAD:
        return "a coroutine cannot cross states (only nil, booleans, numbers, strings "
               "and tables of them)";
    default:
        return "this value cannot cross states";
    }
}

const char *lfmem_copy(lua_State *from, int idx, lua_State *to)
{
    if (!lua_checkstack(to, 2))
        return "stack overflow";
    return copy_value(from, idx, to, 0);
}
