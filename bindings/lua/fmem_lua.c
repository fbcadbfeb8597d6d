/* fmem_lua.c - fmem-lua: the Lua 5.4 interpreter with its main state's
 * heap in far memory (see fmem_lua.h for $FMEM_LUA_BACKING).
 *
 * The command line, messages and exit codes are those of lua5.4(1):
 *
 *   fmem-lua [options] [script [args]]
 *     -e stat   run the string stat        -l mod    require mod into global mod
 *     -i        interactive after script   -l g=mod  require mod into global g
 *     -v        print the version          -E        ignore LUA_INIT*, LUA_PATH, LUA_CPATH
 *     -W        turn warnings on           --        stop handling options
 *     -         run stdin and stop handling options
 *
 * The script gets the positive entries of the global `arg` as `...`.
 * -v prints Lua's version line, then fmem's. require "fmem" works without
 * installing the module: the binding is linked in. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lualib.h>

#include "fmem_lua.h"

enum { HAS_ERROR = 1, HAS_I = 2, HAS_V = 4, HAS_E = 8, HAS_LOWER_E = 16 };

static void print_usage(const char *badoption)
{
    fprintf(stderr, "%s: ", host_progname);
    if (badoption[1] == 'e' || badoption[1] == 'l')
        fprintf(stderr, "'%s' needs argument\n", badoption);
    else
        fprintf(stderr, "unrecognized option '%s'\n", badoption);
    fprintf(stderr,
            "usage: %s [options] [script [args]]\n"
            "Available options are:\n"
            "  -e stat   execute string 'stat'\n"
            "  -i        enter interactive mode after executing 'script'\n"
            "  -l mod    require library 'mod' into global 'mod'\n"
            "  -l g=mod  require library 'mod' into global 'g'\n"
            "  -v        show version information\n"
            "  -E        ignore environment variables\n"
            "  -W        turn warnings on\n"
            "  --        stop handling options\n"
            "  -         stop handling options and execute stdin\n",
            host_progname);
    fflush(stderr);
}

static void print_version(void)
{
    printf("%s\n", LUA_COPYRIGHT);
    printf("fmem %d.%d (heap: %s)\n", FMEM_VERSION_MAJOR, FMEM_VERSION_MINOR,
           host_backing_name());
    fflush(stdout);
}

/* Scan the options. Returns the HAS_* flags; *script is the index of the
 * script (argc if none) or, with HAS_ERROR, of the bad option. An option
 * letter with extra characters is bad, except -e and -l, which take the
 * rest or the next argument (that must not start with '-'). */
static int scan_args(int argc, char **argv, int *script)
{
    int flags = 0, i;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        *script = i;
        if (a[0] != '-')
            return flags;
        switch (a[1]) {
        case '-':
            if (a[2])
                return HAS_ERROR;
            *script = i + 1;
            return flags;
        case '\0':
            return flags; /* the script is "-": stdin */
        case 'i':
        case 'v':
        case 'E':
        case 'W':
            if (a[2])
                return HAS_ERROR;
            flags |= a[1] == 'i' ? HAS_I | HAS_V : a[1] == 'v' ? HAS_V : a[1] == 'E' ? HAS_E : 0;
            break;
        case 'e':
        case 'l':
            if (a[1] == 'e')
                flags |= HAS_LOWER_E;
            if (!a[2] && (++i >= argc || argv[i][0] == '-'))
                return HAS_ERROR;
            break;
        default:
            return HAS_ERROR;
        }
    }
    *script = i;
    return flags;
}

/* arg = { [-n..-1] = interpreter and options, [0] = script, [1..] = args } */
static void create_arg_table(lua_State *L, int argc, char **argv, int script)
{
    if (script == argc)
        script = 0;
    lua_createtable(L, argc - (script + 1), script + 1);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - script);
    }
    lua_setglobal(L, "arg");
}

/* -l mod or -l g=mod: g = require "mod" */
static int dolibrary(lua_State *L, const char *spec)
{
    const char *eq = strchr(spec, '=');
    lua_getglobal(L, "require");
    lua_pushstring(L, eq ? eq + 1 : spec);
    int status = host_docall(L, 1, 1);
    if (status == LUA_OK) {
        if (eq)
            lua_pushlstring(L, spec, (size_t)(eq - spec));
        else
            lua_pushstring(L, spec);
        lua_insert(L, -2);
        lua_setglobal(L, lua_tostring(L, -2));
        lua_pop(L, 1);
    }
    return host_report(L, status);
}

/* -e, -l and -W before the script, in order; 0 if one failed */
static int run_options(lua_State *L, char **argv, int n)
{
    for (int i = 1; i < n; i++) {
        const char *a = argv[i];
        if (a[1] == 'W') {
            lua_warning(L, "@on", 0);
        } else if (a[1] == 'e' || a[1] == 'l') {
            const char *extra = a[2] ? a + 2 : argv[++i];
            int status = a[1] == 'e' ? host_dostring(L, extra, "=(command line)")
                                     : dolibrary(L, extra);
            if (status != LUA_OK)
                return 0;
        }
    }
    return 1;
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
        return host_dofile(L, init + 1);
    return host_dostring(L, init, name);
}

/* The script's arguments are arg[1..#arg], read when it starts (LUA_INIT
 * and -e may have changed them). */
static int push_script_args(lua_State *L)
{
    if (lua_getglobal(L, "arg") != LUA_TTABLE)
        luaL_error(L, "'arg' is not a table");
    int n = (int)luaL_len(L, -1);
    luaL_checkstack(L, n + 3, "too many arguments to script");
    for (int i = 1; i <= n; i++)
        lua_rawgeti(L, -i, i);
    lua_remove(L, -n - 1);
    return n;
}

static int run_script(lua_State *L, char **argv, int script)
{
    const char *fname = argv[script];
    if (!strcmp(fname, "-") && strcmp(argv[script - 1], "--"))
        fname = NULL; /* stdin */
    int status = luaL_loadfile(L, fname);
    if (status == LUA_OK)
        status = host_docall(L, push_script_args(L), LUA_MULTRET);
    return host_report(L, status);
}

/* Everything that touches L, protected so that a memory error is caught. */
static int pmain(lua_State *L)
{
    int argc = (int)lua_tointeger(L, 1);
    char **argv = lua_touserdata(L, 2);
    int script = argc;
    int flags = scan_args(argc, argv, &script);
    luaL_checkversion(L);
    if (flags == HAS_ERROR) {
        print_usage(argv[script]);
        return 0;
    }
    if (flags & HAS_V)
        print_version();
    if (flags & HAS_E) { /* the package library then ignores LUA_PATH and LUA_CPATH */
        lua_pushboolean(L, 1);
        lua_setfield(L, LUA_REGISTRYINDEX, "LUA_NOENV");
    }
    luaL_openlibs(L);
    /* require "fmem" finds the linked-in binding first */
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
    lua_pushcfunction(L, luaopen_fmem);
    lua_setfield(L, -2, "fmem");
    lua_pop(L, 1);
    create_arg_table(L, argc, argv, script);
    lua_gc(L, LUA_GCRESTART);
    lua_gc(L, LUA_GCGEN, 0, 0);
    if (!(flags & HAS_E) && run_init(L) != LUA_OK)
        return 0;
    if (!run_options(L, argv, script))
        return 0;
    if (script < argc && run_script(L, argv, script) != LUA_OK)
        return 0;
    if (flags & HAS_I) {
        host_repl(L);
    } else if (script == argc && !(flags & (HAS_LOWER_E | HAS_V))) {
        if (isatty(STDIN_FILENO)) {
            print_version();
            host_repl(L);
        } else {
            host_dofile(L, NULL); /* lua(1) exits 0 even if this fails */
        }
    }
    lua_pushboolean(L, 1);
    return 1;
}

int main(int argc, char **argv)
{
    if (argv[0] && argv[0][0])
        host_progname = argv[0];
    struct host h;
    if (host_setup(&h))
        return EXIT_FAILURE;
    lua_State *L = host_newstate(&h);
    if (!L) {
        host_message(host_progname, "cannot create state: not enough memory");
        host_teardown(&h, NULL);
        return EXIT_FAILURE;
    }
    lua_gc(L, LUA_GCSTOP); /* while building the state, as lua(1) does */
    lua_pushcfunction(L, pmain);
    lua_pushinteger(L, argc);
    lua_pushlightuserdata(L, argv);
    int status = lua_pcall(L, 2, 1, 0);
    int ok = status == LUA_OK && lua_toboolean(L, -1);
    host_report(L, status);
    host_teardown(&h, L);
    return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}
