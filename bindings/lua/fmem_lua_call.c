/* fmem_lua_call.c - how fmem-lua runs code and reports errors, as lua(1)
 * does: a traceback on errors, "PROG: message" on stderr (no program name
 * in the REPL), and Ctrl-C turned into the error "interrupted!" while Lua
 * code runs (a second Ctrl-C, or one outside Lua code, kills the process
 * as usual). */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "fmem_lua.h"

const char *host_progname = "fmem-lua";

/* the state that SIGINT interrupts: set only around a protected call */
static lua_State *volatile interrupted_state;

static void set_sigint(void (*handler)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

/* A hook that raises the error at the next instruction, call or return. */
static void stop_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    lua_sethook(L, NULL, 0, 0);
    luaL_error(L, "interrupted!");
}

/* SIGINT while Lua code runs: lua_sethook is safe in a signal handler. */
static void on_sigint(int sig)
{
    set_sigint(SIG_DFL); /* a second Ctrl-C ends the process */
    lua_sethook(interrupted_state, stop_hook,
                LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT, 1);
    (void)sig;
}

/* The error object as a string with a traceback appended. */
static int msghandler(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (!msg) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
            return 1;
        msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

int host_docall(lua_State *L, int narg, int nres)
{
    int base = lua_gettop(L) - narg;
    lua_pushcfunction(L, msghandler);
    lua_insert(L, base);
    interrupted_state = L;
    set_sigint(on_sigint);
    int status = lua_pcall(L, narg, nres, base);
    set_sigint(SIG_DFL);
    lua_remove(L, base);
    return status;
}

void host_message(const char *prog, const char *msg)
{
    if (prog)
        fprintf(stderr, "%s: ", prog);
    fprintf(stderr, "%s\n", msg ? msg : "(null)"); /* what lua(1) prints via glibc */
    fflush(stderr);
}

int host_report(lua_State *L, int status)
{
    if (status != LUA_OK) {
        host_message(host_progname, lua_tostring(L, -1));
        lua_pop(L, 1);
    }
    return status;
}

int host_dochunk(lua_State *L, int status)
{
    if (status == LUA_OK)
        status = host_docall(L, 0, 0);
    return host_report(L, status);
}

int host_dostring(lua_State *L, const char *s, const char *name)
{
    return host_dochunk(L, luaL_loadbuffer(L, s, strlen(s), name));
}

int host_dofile(lua_State *L, const char *name)
{
    return host_dochunk(L, luaL_loadfile(L, name));
}
