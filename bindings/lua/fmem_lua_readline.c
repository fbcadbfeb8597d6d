/* fmem_lua_readline.c - the REPL's line input. Debian's lua5.4 reads lines
 * with GNU readline (editing, history; with a non-terminal stdin it echoes
 * prompt and line to stdout). fmem-lua loads the same library at run time
 * when it is installed, so that it behaves the same without linking it;
 * else it prints the prompt and reads with fgets, as lua(1) built without
 * readline does (lines of at most 511 bytes). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmem_lua.h"

#define PLAIN_LINE_MAX 512 /* lua(1)'s LUA_MAXINPUT */

static const char *const readline_libs[] = {"libreadline.so.8", "libreadline.so"};

static struct {
    int tried;
    char *(*readline)(const char *prompt);
    void (*add_history)(const char *line);
} rl;

static void load_readline(void)
{
    rl.tried = 1;
    const char *off = getenv("FMEM_LUA_READLINE");
    if (off && !strcmp(off, "0"))
        return;
    for (size_t i = 0; i < sizeof readline_libs / sizeof *readline_libs; i++) {
        void *lib = dlopen(readline_libs[i], RTLD_NOW | RTLD_LOCAL);
        if (!lib)
            continue;
        *(void **)&rl.readline = dlsym(lib, "readline");
        *(void **)&rl.add_history = dlsym(lib, "add_history");
        const char **name = dlsym(lib, "rl_readline_name");
        if (rl.readline && rl.add_history) {
            if (name)
                *name = "lua"; /* for $if lua in ~/.inputrc, as lua(1) */
            return;
        }
        rl.readline = NULL;
        dlclose(lib);
    }
}

int host_readline(lua_State *L, const char *prompt)
{
    if (!rl.tried)
        load_readline();
    if (rl.readline) {
        char *line = rl.readline(prompt);
        if (!line)
            return 0;
        lua_pushstring(L, line);
        free(line);
        return 1;
    }
    char buf[PLAIN_LINE_MAX];
    fputs(prompt, stdout);
    fflush(stdout);
    if (!fgets(buf, sizeof buf, stdin))
        return 0;
    size_t n = strlen(buf);
    if (n > 0 && buf[n - 1] == '\n')
        n--;
    lua_pushlstring(L, buf, n);
    return 1;
}

void host_saveline(const char *line)
{
    if (rl.readline)
        rl.add_history(line);
}
