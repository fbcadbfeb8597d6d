/* fmem_lua_repl.c - fmem-lua's interactive loop: a line is tried as an
 * expression first ("return LINE"), then as a statement; an incomplete
 * statement asks for more lines. No line editing. */
#include <stdio.h>
#include <string.h>

#include "fmem_lua.h"

#define LINE_MAX_BYTES 4096

static int read_line(lua_State *L, int first)
{
    char buf[LINE_MAX_BYTES];
    fputs(first ? "> " : ">> ", stdout);
    fflush(stdout);
    if (!fgets(buf, sizeof buf, stdin))
        return 0;
    size_t n = strlen(buf);
    if (n > 0 && buf[n - 1] == '\n')
        buf[--n] = '\0';
    lua_pushlstring(L, buf, n);
    return 1;
}

/* The chunk failed to compile only because it ended too early. */
static int incomplete(lua_State *L, int status)
{
    static const char eof_mark[] = "<eof>";
    size_t len;
    const char *msg = lua_tolstring(L, -1, &len);
    if (status == LUA_ERRSYNTAX && len >= sizeof eof_mark - 1 &&
        !strcmp(msg + len - (sizeof eof_mark - 1), eof_mark)) {
        lua_pop(L, 1);
        return 1;
    }
    return 0;
}

/* Compile the line on top (as an expression if possible, else as a
 * statement, reading more lines while it is incomplete). Leaves the
 * compiled function (or an error) on top and returns the status. */
static int load_line(lua_State *L)
{
    const char *line = lua_tostring(L, -1);
    const char *expr = lua_pushfstring(L, "return %s", line);
    if (luaL_loadbuffer(L, expr, strlen(expr), "=stdin") == LUA_OK) {
        lua_remove(L, -2); /* the "return" string */
        lua_remove(L, -2); /* the line */
        return LUA_OK;
    }
    lua_pop(L, 2);
    for (;;) {
        size_t len;
        const char *code = lua_tolstring(L, -1, &len);
        int status = luaL_loadbuffer(L, code, len, "=stdin");
        if (!incomplete(L, status)) {
            lua_remove(L, -2);
            return status;
        }
        if (!read_line(L, 0)) { /* end of input inside a statement */
            lua_pop(L, 1);
            lua_pushliteral(L, "unexpected end of input");
            return LUA_ERRSYNTAX;
        }
        lua_pushliteral(L, "\n");
        lua_insert(L, -2);
        lua_concat(L, 3);
    }
}

static void print_results(lua_State *L, int n)
{
    if (n == 0)
        return;
    luaL_checkstack(L, LUA_MINSTACK, "too many results to print");
    lua_getglobal(L, "print");
    lua_insert(L, -(n + 1));
    if (lua_pcall(L, n, 0, 0) != LUA_OK)
        host_report(L, LUA_ERRRUN);
}

void host_repl(lua_State *L)
{
    while (read_line(L, 1)) {
        int base = lua_gettop(L) - 1;
        int status = load_line(L);
        if (status == LUA_OK)
            status = host_docall(L, 0, LUA_MULTRET);
        if (status == LUA_OK)
            print_results(L, lua_gettop(L) - base);
        else
            host_report(L, status);
        lua_settop(L, base);
    }
    fputc('\n', stdout);
}
