/* fmem_lua_repl.c - fmem-lua's interactive loop, with lua(1)'s rules: the
 * prompts are tostring(_PROMPT) and tostring(_PROMPT2) when set ("> " and
 * ">> " otherwise); a first line "=expr" means "return expr"; a line is
 * tried as "return LINE;" first, then as a statement, and a statement that
 * is incomplete only because the input ended reads continuation lines;
 * results are printed with the global print; errors are printed without
 * the program name. */
#include <stdio.h>
#include <string.h>

#include "fmem_lua.h"

#define EOF_MARK "<eof>"

/* The prompt for the first or a continuation line; pushes tostring() of
 * the global, or nil for the default. */
static const char *push_prompt(lua_State *L, int first)
{
    if (lua_getglobal(L, first ? "_PROMPT" : "_PROMPT2") == LUA_TNIL)
        return first ? "> " : ">> ";
    const char *p = luaL_tolstring(L, -1, NULL);
    lua_remove(L, -2);
    return p;
}

/* Read a line and push it (the prompt is popped); on end of input, push
 * nothing more and leave the prompt (or nil) on the stack (returns 0). */
static int push_line(lua_State *L, int first)
{
    if (!host_readline(L, push_prompt(L, first)))
        return 0;
    lua_remove(L, -2); /* the prompt */
    const char *line = lua_tostring(L, -1);
    if (first && line[0] == '=') {
        lua_pushfstring(L, "return %s", line + 1);
        lua_remove(L, -2);
    }
    return 1;
}

/* The chunk failed to compile only because it ended too early: pop the
 * message and say so. */
static int incomplete(lua_State *L, int status)
{
    size_t len, mark = sizeof EOF_MARK - 1;
    if (status != LUA_ERRSYNTAX)
        return 0;
    const char *msg = lua_tolstring(L, -1, &len);
    if (len < mark || strcmp(msg + len - mark, EOF_MARK))
        return 0;
    lua_pop(L, 1);
    return 1;
}

/* The line at 1 as an expression: the compiled function on top, or
 * nothing pushed and an error status. */
static int load_as_expression(lua_State *L)
{
    const char *line = lua_tostring(L, 1);
    const char *code = lua_pushfstring(L, "return %s;", line);
    int status = luaL_loadbuffer(L, code, strlen(code), "=stdin");
    if (status == LUA_OK) {
        lua_remove(L, -2);
        if (line[0])
            host_saveline(line);
    } else {
        lua_pop(L, 2);
    }
    return status;
}

/* The line at 1 as a statement, joined with more lines while incomplete. */
static int load_as_statement(lua_State *L)
{
    for (;;) {
        size_t len;
        const char *code = lua_tolstring(L, 1, &len);
        int status = luaL_loadbuffer(L, code, len, "=stdin");
        if (!incomplete(L, status) || !push_line(L, 0)) {
            /* at the end of input inside a statement lua(1) reports the
             * continuation prompt left on the stack ("(null)" for the
             * default one): so does this */
            host_saveline(code);
            return status;
        }
        lua_pushliteral(L, "\n");
        lua_insert(L, -2);
        lua_concat(L, 3);
    }
}

/* Leaves one value (function or error) and returns the status, or -1 at
 * the end of input. */
static int load_line(lua_State *L)
{
    lua_settop(L, 0);
    if (!push_line(L, 1))
        return -1;
    int status = load_as_expression(L);
    if (status != LUA_OK)
        status = load_as_statement(L);
    lua_remove(L, 1);
    return status;
}

static void print_results(lua_State *L)
{
    int n = lua_gettop(L);
    if (n == 0)
        return;
    luaL_checkstack(L, LUA_MINSTACK, "too many results to print");
    lua_getglobal(L, "print");
    lua_insert(L, 1);
    if (lua_pcall(L, n, 0, 0) != LUA_OK)
        host_message(host_progname,
                     lua_pushfstring(L, "error calling 'print' (%s)", lua_tostring(L, -1)));
}

void host_repl(lua_State *L)
{
    const char *saved = host_progname;
    host_progname = NULL;
    int status;
    while ((status = load_line(L)) != -1) {
        if (status == LUA_OK)
            status = host_docall(L, 0, LUA_MULTRET);
        if (status == LUA_OK)
            print_results(L);
        else
            host_report(L, status);
    }
    lua_settop(L, 0);
    fputc('\n', stdout);
    fflush(stdout);
    host_progname = saved;
}
