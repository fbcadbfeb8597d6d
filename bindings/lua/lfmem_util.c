/* lfmem_util.c - error messages and argument checks shared by every object
 * of the binding. Every error the binding raises reads "fmem: OP: ...". */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>

#include "lfmem.h"
#include "size_parse.h"

int lfmem_error(lua_State *L, const char *op, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    lua_pushfstring(L, "fmem: %s: ", op);
    lua_pushvfstring(L, fmt, ap);
    va_end(ap);
    lua_concat(L, 2);
    return lua_error(L);
}

int lfmem_fail(lua_State *L, const char *op, int rc)
{
    return lfmem_error(L, op, "%s", fmem_strerror(rc));
}

const char *lfmem_typename(lua_State *L, int idx)
{
    if (lua_type(L, idx) == LUA_TUSERDATA && luaL_getmetafield(L, idx, "__name") == LUA_TSTRING)
        return lua_tostring(L, -1); /* stays on the stack: only for messages */
    return luaL_typename(L, idx);
}

void *lfmem_check_udata(lua_State *L, int idx, const char *tname, const char *op)
{
    void *u = luaL_testudata(L, idx, tname);
    if (!u)
        lfmem_error(L, op, "bad argument #%d (%s expected, got %s)", idx, tname,
                    lfmem_typename(L, idx));
    return u;
}

lua_Integer lfmem_check_count(lua_State *L, int idx, const char *op, const char *what)
{
    int isint;
    lua_Integer v = lua_tointegerx(L, idx, &isint);
    if (!isint || lua_type(L, idx) != LUA_TNUMBER) {
        if (lua_type(L, idx) == LUA_TNUMBER)
            lfmem_error(L, op, "%s must be a whole number, got %s", what, lua_tostring(L, idx));
        lfmem_error(L, op, "%s must be an integer, got %s", what, luaL_typename(L, idx));
    }
    if (v < 0)
        lfmem_error(L, op, "%s must not be negative, got %I", what, (LUAI_UACINT)v);
    return v;
}

int lfmem_parse_size(const char *s, size_t *out)
{
    uint64_t v; /* the one size parser: size_parse.h */
    if (!size_parse(s, &v) || v > SIZE_MAX)
        return -1;
    *out = (size_t)v;
    return 0;
}

size_t lfmem_check_size(lua_State *L, int idx, const char *op, const char *what)
{
    if (lua_type(L, idx) == LUA_TSTRING) {
        size_t v;
        if (lfmem_parse_size(lua_tostring(L, idx), &v))
            lfmem_error(L, op, "%s: bad size '%s' (a number of bytes, or like 64K, 2M, 1G)",
                        what, lua_tostring(L, idx));
        return v;
    }
    return (size_t)lfmem_check_count(L, idx, op, what);
}

void lfmem_setint(lua_State *L, const char *name, unsigned long long v)
{
    /* counters beyond 2^63 would wrap: give those as floats */
    if (v <= (unsigned long long)LUA_MAXINTEGER)
        lua_pushinteger(L, (lua_Integer)v);
    else
        lua_pushnumber(L, (lua_Number)v);
    lua_setfield(L, -2, name);
}

void lfmem_new_class(lua_State *L, const char *tname, const luaL_Reg *fns)
{
    luaL_newmetatable(L, tname);
    luaL_setfuncs(L, fns, 0);
    lua_pushvalue(L, -1);
    lua_setfield(L, -2, "__index");
    lua_pushliteral(L, "fmem: the metatable is protected");
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 1);
}
