/* fmem_lua.c - fmem-lua: the Lua 5.4 interpreter with its main state's
 * heap in far memory (see fmem_lua.h for $FMEM_LUA_BACKING).
 *
 *   fmem-lua [options] [script [args]]
 *     -e stat   run the string stat        -l mod   require mod into global mod
 *     -i        interactive after script   -v       print the version
 *     -E        ignore LUA_INIT            -W       turn warnings on
 *     --        stop handling options      -        run stdin
 *
 * As with lua(1), the script's arguments are in the global `arg` and in
 * `...`. require "fmem" works without installing the module: the binding
 * is linked in. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lualib.h>

#include "fmem_lua.h"

static const char *progname = "fmem-lua";

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
    int status = lua_pcall(L, narg, nres, base);
    lua_remove(L, base);
    return status;
}

int host_report(lua_State *L, int status)
{
    if (status != LUA_OK) {
        fprintf(stderr, "%s: %s\n", progname, lua_tostring(L, -1));
        fflush(stderr);
        lua_pop(L, 1);
    }
    return status;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: %s [options] [script [args]]\n"
            "  -e stat  run the string 'stat'\n"
            "  -i       interactive mode after the script\n"
            "  -l mod   require 'mod' into global 'mod'\n"
            "  -v       show version information\n"
            "  -E       ignore environment variables (LUA_INIT)\n"
            "  -W       turn warnings on\n"
            "  --       stop handling options\n"
            "  -        run stdin and stop handling options\n"
            "environment: FMEM_LUA_BACKING=shm|region:CACHE[:SIZE]|libc, FMEM_URI=pool,\n"
            "             FMEM_LUA_STATS=1 (statistics on stderr at exit)\n",
            progname);
}

struct opts {
    int first_arg; /* argv index of the script, or argc */
    int interactive, version, no_env, has_exec;
};

/* Check the options; -1 on a bad one. */
static int scan_args(int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof *o);
    int i;
    for (i = 1; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!strcmp(a, "-"))
            break;
        if (!strcmp(a, "-i")) {
            o->interactive = o->version = 1;
        } else if (!strcmp(a, "-v")) {
            o->version = 1;
        } else if (!strcmp(a, "-E")) {
            o->no_env = 1;
        } else if (!strcmp(a, "-W")) {
        } else if (!strncmp(a, "-e", 2) || !strncmp(a, "-l", 2)) {
            if (a[1] == 'e')
                o->has_exec = 1;
            if (!a[2] && ++i >= argc)
                return -1;
        } else {
            return -1;
        }
    }
    o->first_arg = i;
    return 0;
}

/* arg = { [-n..-1] = interpreter and options, [0] = script, [1..] = args } */
static void create_arg_table(lua_State *L, int argc, char **argv, int script)
{
    if (script == argc)
        script = 0;
    lua_createtable(L, argc - script - 1 > 0 ? argc - script - 1 : 0, script + 1);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - script);
    }
    lua_setglobal(L, "arg");
}

static int dochunk(lua_State *L, int status)
{
    if (status == LUA_OK)
        status = host_docall(L, 0, 0);
    return host_report(L, status);
}

static int dolibrary(lua_State *L, const char *name)
{
    lua_getglobal(L, "require");
    lua_pushstring(L, name);
    int status = host_docall(L, 1, 1);
    if (status == LUA_OK)
        lua_setglobal(L, name);
    return host_report(L, status);
}

/* -e, -l and -W, in order */
static int run_options(lua_State *L, char **argv, int n)
{
    for (int i = 1; i < n; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || (a[1] != 'e' && a[1] != 'l' && a[1] != 'W'))
            continue;
        if (a[1] == 'W') {
            lua_warning(L, "@on", 0);
            continue;
        }
        const char *extra = a[2] ? a + 2 : argv[++i];
        int status = a[1] == 'e' ? dochunk(L, luaL_loadbuffer(L, extra, strlen(extra), "=(command line)"))
                                 : dolibrary(L, extra);
        if (status != LUA_OK)
            return status;
    }
    return LUA_OK;
}

static int run_init(lua_State *L)
{
    const char *name = "=LUA_INIT_5_4";
    const char *init = getenv(name + 1);
    if (!init) {
        name = "=LUA_INIT";
        init = getenv(name + 1);
    }
    if (!init)
        return LUA_OK;
    if (init[0] == '@')
        return dochunk(L, luaL_loadfile(L, init + 1));
    return dochunk(L, luaL_loadbuffer(L, init, strlen(init), name));
}

static int run_script(lua_State *L, int argc, char **argv, int script)
{
    const char *fname = argv[script];
    if (!strcmp(fname, "-") && strcmp(argv[script - 1], "--"))
        fname = NULL; /* stdin */
    int status = luaL_loadfile(L, fname);
    if (status == LUA_OK) {
        int n = argc - script - 1;
        luaL_checkstack(L, n + 3, "too many arguments to script");
        for (int i = 1; i <= n; i++)
            lua_pushstring(L, argv[script + i]);
        status = host_docall(L, n, LUA_MULTRET);
    }
    return host_report(L, status);
}

/* Everything that touches L, protected so that a memory error is caught. */
static int pmain(lua_State *L)
{
    int argc = (int)lua_tointeger(L, 1);
    char **argv = lua_touserdata(L, 2);
    struct opts *o = lua_touserdata(L, 3);
    luaL_checkversion(L);
    luaL_openlibs(L);
    /* require "fmem" finds the linked-in binding first */
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
    lua_pushcfunction(L, luaopen_fmem);
    lua_setfield(L, -2, "fmem");
    lua_pop(L, 1);
    create_arg_table(L, argc, argv, o->first_arg);
    lua_gc(L, LUA_GCRESTART);
    lua_gc(L, LUA_GCGEN, 0, 0);
    if (o->version)
        printf("%s (fmem %d.%d, heap: %s)\n", LUA_COPYRIGHT, FMEM_VERSION_MAJOR,
               FMEM_VERSION_MINOR, getenv("FMEM_LUA_BACKING") ? getenv("FMEM_LUA_BACKING") : "shm");
    if (!o->no_env && run_init(L) != LUA_OK)
        return 0;
    if (run_options(L, argv, o->first_arg) != LUA_OK)
        return 0;
    if (o->first_arg < argc && run_script(L, argc, argv, o->first_arg) != LUA_OK)
        return 0;
    if (o->interactive) {
        host_repl(L);
    } else if (o->first_arg == argc && !o->has_exec && !o->version) {
        if (isatty(STDIN_FILENO))
            host_repl(L);
        else if (dochunk(L, luaL_loadfile(L, NULL)) != LUA_OK)
            return 0;
    }
    lua_pushboolean(L, 1);
    return 1;
}

int main(int argc, char **argv)
{
    if (argv[0] && argv[0][0])
        progname = argv[0];
    struct opts o;
    if (scan_args(argc, argv, &o)) {
        usage();
        return 1;
    }
    struct host h;
    if (host_setup(&h))
        return 1;
    lua_State *L = host_newstate(&h);
    if (!L) {
        fprintf(stderr, "%s: cannot create state: not enough memory\n", progname);
        return 1;
    }
    lua_gc(L, LUA_GCSTOP); /* while building the state, as lua(1) does */
    lua_pushcfunction(L, pmain);
    lua_pushinteger(L, argc);
    lua_pushlightuserdata(L, argv);
    lua_pushlightuserdata(L, &o);
    int status = lua_pcall(L, 3, 1, 0);
    int ok = status == LUA_OK && lua_toboolean(L, -1);
    host_report(L, status);
    host_teardown(&h, L);
    return ok ? 0 : 1;
}
