/* lfmem_buffer.c - buffers: one pool allocation seen from Lua.
 *
 *   local b <close> = pool:alloc(n)   -- #b == n
 *   b:write(off, s); b:read(off, len); b:set_i32(off, v); b:get_f64(off)
 *   b:free()                         -- or __close, or the collector
 *
 * Offsets start at 0 (as in C). On a transport that can map (shm) the block
 * is mapped once and accessed directly; otherwise every access is an
 * fmem_read/fmem_write. Every access checks that the buffer is live and
 * the range inside it, so misuse raises a Lua error instead of touching
 * memory. */
#include <stdint.h>
#include <string.h>

#include "lfmem.h"

typedef struct lfmem_buffer {
    lfmem_pool *owner; /* NULL once freed */
    fmem_handle h;
    unsigned char *ptr; /* direct mapping, or NULL */
    size_t size;        /* bytes asked for: #buf */
} lfmem_buffer;

/* ---- life ------------------------------------------------------------------ */

static int probe_mapping(lfmem_pool *p, const fmem_handle *h, void **ptr)
{
    *ptr = NULL;
    if (p->mappable == 0)
        return 0;
    int rc = fmem_map(p->pool, h, ptr);
    if (p->mappable < 0 && (rc == 0 || rc == FMEM_ENOTSUP))
        p->mappable = rc == 0;
    return rc == FMEM_ENOTSUP ? 0 : rc;
}

int lfmem_buffer_new(lua_State *L, int pool_idx, lfmem_pool *p, lua_Integer size, int map)
{
    if (size == 0)
        return lfmem_error(L, "alloc", "size must be at least 1 byte");
#if SIZE_MAX < LUA_MAXINTEGER
    if ((unsigned long long)size > SIZE_MAX)
        return lfmem_error(L, "alloc", "size too large");
#endif
    pool_idx = lua_absindex(L, pool_idx);
    /* the userdata first: if Lua runs out of memory, no block leaks */
    lfmem_buffer *b = lua_newuserdatauv(L, sizeof *b, 1);
    memset(b, 0, sizeof *b);
    luaL_setmetatable(L, LFMEM_BUFFER);
    fmem_handle h;
    int rc = fmem_alloc(p->pool, (size_t)size, &h);
    if (rc)
        return lfmem_fail(L, "alloc", rc);
    void *ptr = NULL;
    if (map && (rc = probe_mapping(p, &h, &ptr)) != 0) {
        fmem_free(p->pool, &h);
        return lfmem_fail(L, "alloc", rc);
    }
    b->h = h;
    b->ptr = ptr;
    b->size = (size_t)size;
    b->owner = p;
    lfmem_pool_ref(p);
    lua_pushvalue(L, pool_idx); /* keep the pool object reachable */
    lua_setiuservalue(L, -2, 1);
    return 1;
}

static lfmem_buffer *check_any(lua_State *L, const char *op)
{
    return lfmem_check_udata(L, 1, LFMEM_BUFFER, op);
}

static lfmem_buffer *check_live(lua_State *L, const char *op)
{
    lfmem_buffer *b = check_any(L, op);
    if (!b->owner)
        lfmem_error(L, op, "buffer already freed");
    return b;
}

/* Give the block back; 0 or the fmem_free code. */
static int release(lua_State *L, lfmem_buffer *b)
{
    int rc = fmem_free(b->owner->pool, &b->h);
    lfmem_pool_unref(b->owner);
    b->owner = NULL;
    b->ptr = NULL;
    lua_pushnil(L); /* the pool object may go now */
    lua_setiuservalue(L, 1, 1);
    return rc;
}

static int buf_free(lua_State *L)
{
    lfmem_buffer *b = check_live(L, "free");
    int rc = release(L, b);
    return rc ? lfmem_fail(L, "free", rc) : 0;
}

/* __gc and __close: free if still live, never raise */
static int buf_finalize(lua_State *L)
{
    lfmem_buffer *b = check_any(L, "__gc");
    if (b->owner)
        release(L, b);
    return 0;
}

/* ---- bounds and byte access ------------------------------------------------ */

/* The offset at idx (default 0), with [off, off+len) inside the buffer. */
static size_t check_range(lua_State *L, lfmem_buffer *b, int idx, size_t len, const char *op)
{
    size_t off = lua_isnoneornil(L, idx) ? 0 : (size_t)lfmem_check_count(L, idx, op, "offset");
    if (off > b->size || len > b->size - off)
        lfmem_error(L, op, "range [%I, %I+%I) outside the buffer of %I bytes", (LUAI_UACINT)off,
                    (LUAI_UACINT)off, (LUAI_UACINT)len, (LUAI_UACINT)b->size);
    return off;
}

static void get_bytes(lua_State *L, lfmem_buffer *b, size_t off, void *dst, size_t len,
                      const char *op)
{
    if (b->ptr) {
        memcpy(dst, b->ptr + off, len);
        return;
    }
    int rc = fmem_read(b->owner->pool, &b->h, off, dst, len);
    if (rc)
        lfmem_fail(L, op, rc);
}

static void put_bytes(lua_State *L, lfmem_buffer *b, size_t off, const void *src, size_t len,
                      const char *op)
{
    if (b->ptr) {
        memcpy(b->ptr + off, src, len);
        return;
    }
    int rc = fmem_write(b->owner->pool, &b->h, off, src, len);
    if (rc)
        lfmem_fail(L, op, rc);
}

/* buf:read([offset [, len]]) -> string */
static int buf_read(lua_State *L)
{
    lfmem_buffer *b = check_live(L, "read");
    size_t off = lua_isnoneornil(L, 2) ? 0 : (size_t)lfmem_check_count(L, 2, "read", "offset");
    size_t len = lua_isnoneornil(L, 3) ? (off < b->size ? b->size - off : 0)
                                       : (size_t)lfmem_check_count(L, 3, "read", "length");
    check_range(L, b, 2, len, "read");
    if (b->ptr) {
        lua_pushlstring(L, (const char *)b->ptr + off, len);
        return 1;
    }
    luaL_Buffer lb;
    char *dst = luaL_buffinitsize(L, &lb, len);
    get_bytes(L, b, off, dst, len, "read");
    luaL_pushresultsize(&lb, len);
    return 1;
}

/* buf:write(offset, string) -> number of bytes written */
static int buf_write(lua_State *L)
{
    lfmem_buffer *b = check_live(L, "write");
    if (lua_type(L, 3) != LUA_TSTRING)
        return lfmem_error(L, "write", "bad argument #2 (string expected, got %s)",
                           luaL_typename(L, 3));
    size_t len;
    const char *s = lua_tolstring(L, 3, &len);
    size_t off = check_range(L, b, 2, len, "write");
    put_bytes(L, b, off, s, len, "write");
    lua_pushinteger(L, (lua_Integer)len);
    return 1;
}

/* buf:fill(byte [, offset [, len]]) */
static int buf_fill(lua_State *L)
{
    lfmem_buffer *b = check_live(L, "fill");
    lua_Integer v = lfmem_check_count(L, 2, "fill", "byte");
    if (v > 255)
        return lfmem_error(L, "fill", "byte must be in 0..255, got %I", (LUAI_UACINT)v);
    size_t off = lua_isnoneornil(L, 3) ? 0 : (size_t)lfmem_check_count(L, 3, "fill", "offset");
    size_t len = lua_isnoneornil(L, 4) ? (off < b->size ? b->size - off : 0)
                                       : (size_t)lfmem_check_count(L, 4, "fill", "length");
    check_range(L, b, 3, len, "fill");
    if (b->ptr) {
        memset(b->ptr + off, (int)v, len);
        return 0;
    }
    unsigned char chunk[4096];
    memset(chunk, (int)v, sizeof chunk);
    for (size_t done = 0; done < len;) {
        size_t n = len - done < sizeof chunk ? len - done : sizeof chunk;
        put_bytes(L, b, off + done, chunk, n, "fill");
        done += n;
    }
    return 0;
}

/* ---- typed accessors: one C function per direction, the type an upvalue --- */

enum kind { K_INT, K_UINT, K_FLOAT };
static const struct elem {
    const char *name;
    unsigned size;
    enum kind kind;
} elems[] = {
    {"i8", 1, K_INT},   {"u8", 1, K_UINT},   {"i16", 2, K_INT},   {"u16", 2, K_UINT},
    {"i32", 4, K_INT},  {"u32", 4, K_UINT},  {"i64", 8, K_INT},   {"f32", 4, K_FLOAT},
    {"f64", 8, K_FLOAT},
};

union scalar {
    int8_t i8; uint8_t u8; int16_t i16; uint16_t u16; int32_t i32; uint32_t u32;
    int64_t i64; float f32; double f64;
};

/* One get_T/set_T call: the element (upvalue 1), the call's name for errors
 * (upvalue 2), the live buffer and the checked offset (arguments 1 and 2). */
struct access {
    const struct elem *e;
    const char *op;
    lfmem_buffer *b;
    size_t off;
};

static struct access check_access(lua_State *L)
{
    struct access a;
    a.e = &elems[lua_tointeger(L, lua_upvalueindex(1))];
    a.op = lua_tostring(L, lua_upvalueindex(2));
    a.b = check_live(L, a.op);
    if (lua_isnoneornil(L, 2))
        lfmem_error(L, a.op, "offset expected");
    a.off = check_range(L, a.b, 2, a.e->size, a.op);
    return a;
}

static int buf_get(lua_State *L)
{
    struct access a = check_access(L);
    const struct elem *e = a.e;
    union scalar v;
    get_bytes(L, a.b, a.off, &v, e->size, a.op);
    switch (e->size * 4 + e->kind) {
    case 1 * 4 + K_INT: lua_pushinteger(L, v.i8); break;
    case 1 * 4 + K_UINT: lua_pushinteger(L, v.u8); break;
    case 2 * 4 + K_INT: lua_pushinteger(L, v.i16); break;
    case 2 * 4 + K_UINT: lua_pushinteger(L, v.u16); break;
    case 4 * 4 + K_INT: lua_pushinteger(L, v.i32); break;
    case 4 * 4 + K_UINT: lua_pushinteger(L, v.u32); break;
    case 8 * 4 + K_INT: lua_pushinteger(L, v.i64); break;
    case 4 * 4 + K_FLOAT: lua_pushnumber(L, v.f32); break;
    default: lua_pushnumber(L, v.f64); break;
    }
    return 1;
}

static lua_Integer check_int_value(lua_State *L, const struct elem *e, const char *op)
{
    int isint;
    lua_Integer v = lua_tointegerx(L, 3, &isint);
    if (lua_type(L, 3) != LUA_TNUMBER || !isint)
        lfmem_error(L, op, "value must be an integer, got %s",
                    lua_type(L, 3) == LUA_TNUMBER ? lua_tostring(L, 3) : luaL_typename(L, 3));
    if (e->size < 8) {
        unsigned bits = e->size * 8;
        lua_Integer lo = e->kind == K_INT ? -((lua_Integer)1 << (bits - 1)) : 0;
        lua_Integer hi = e->kind == K_INT ? ((lua_Integer)1 << (bits - 1)) - 1
                                          : ((lua_Integer)1 << bits) - 1;
        if (v < lo || v > hi)
            lfmem_error(L, op, "value %I out of range for %s (%I..%I)", (LUAI_UACINT)v, e->name,
                        (LUAI_UACINT)lo, (LUAI_UACINT)hi);
    }
    return v;
}

static int buf_set(lua_State *L)
{
    struct access a = check_access(L);
    const struct elem *e = a.e;
    union scalar v;
    if (e->kind == K_FLOAT) {
        if (lua_type(L, 3) != LUA_TNUMBER)
            return lfmem_error(L, a.op, "value must be a number, got %s", luaL_typename(L, 3));
        if (e->size == 4)
            v.f32 = (float)lua_tonumber(L, 3);
        else
            v.f64 = (double)lua_tonumber(L, 3);
    } else {
        lua_Integer i = check_int_value(L, e, a.op);
        switch (e->size) {
        case 1: v.u8 = (uint8_t)i; break;
        case 2: v.u16 = (uint16_t)i; break;
        case 4: v.u32 = (uint32_t)i; break;
        default: v.i64 = (int64_t)i; break;
        }
    }
    put_bytes(L, a.b, a.off, &v, e->size, a.op);
    return 0;
}

static void register_accessors(lua_State *L)
{
    for (size_t i = 0; i < sizeof elems / sizeof elems[0]; i++) {
        for (int set = 0; set < 2; set++) {
            lua_pushinteger(L, (lua_Integer)i);
            lua_pushfstring(L, "%s_%s", set ? "set" : "get", elems[i].name);
            lua_pushvalue(L, -1);
            lua_insert(L, -3); /* name, index, name */
            lua_pushcclosure(L, set ? buf_set : buf_get, 2);
            lua_settable(L, -3);
        }
    }
}

/* ---- introspection ----------------------------------------------------------- */

static int buf_len(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)check_live(L, "len")->size);
    return 1;
}

static int buf_freed(lua_State *L)
{
    lua_pushboolean(L, check_any(L, "freed")->owner == NULL);
    return 1;
}

static int buf_mapped(lua_State *L)
{
    lua_pushboolean(L, check_live(L, "mapped")->ptr != NULL);
    return 1;
}

/* buf:handle() -> {node=, addr=, length=, rkey=}: the block as the pool names it */
static int buf_handle(lua_State *L)
{
    lfmem_buffer *b = check_live(L, "handle");
    lua_createtable(L, 0, 4);
    lfmem_setint(L, "node", b->h.node);
    lfmem_setint(L, "addr", b->h.addr);
    lfmem_setint(L, "length", b->h.length);
    lfmem_setint(L, "rkey", b->h.rkey);
    return 1;
}

static int buf_tostring(lua_State *L)
{
    lfmem_buffer *b = check_any(L, "tostring");
    if (!b->owner)
        lua_pushliteral(L, "fmem.buffer (freed)");
    else
        lua_pushfstring(L, "fmem.buffer (%I bytes in a %I-byte block, %s)", (LUAI_UACINT)b->size,
                        (LUAI_UACINT)b->h.length, b->ptr ? "mapped" : "read/write");
    return 1;
}

void lfmem_buffer_open_class(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"read", buf_read},       {"write", buf_write},   {"fill", buf_fill},
        {"free", buf_free},       {"freed", buf_freed},   {"mapped", buf_mapped},
        {"handle", buf_handle},   {"size", buf_len},      {"__len", buf_len},
        {"__gc", buf_finalize},   {"__close", buf_finalize},
        {"__tostring", buf_tostring},
        {NULL, NULL},
    };
    lfmem_new_class(L, LFMEM_BUFFER, fns);
    luaL_getmetatable(L, LFMEM_BUFFER);
    register_accessors(L);
    lua_pop(L, 1);
}
