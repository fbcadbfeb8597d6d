/* cli.h - conventions shared by the command-line programs: --version and
 * --help exit 0; a bad command line is named in one line on stderr (no
 * usage dump) and exits 2. Header-only: each program is one source file. */
#ifndef FMEM_TOOLS_CLI_H
#define FMEM_TOOLS_CLI_H

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#define CLI_EXIT_USAGE 2

static inline int cli_version(const char *prog)
{
    printf("%s (fmem) %s\n", prog, PACKAGE_VERSION);
    return 0;
}

/* One line about a command-line mistake; returns the usage exit status. */
static inline int cli_error(const char *prog, const char *what)
{
    fprintf(stderr, "%s: %s (see %s --help)\n", prog, what, prog);
    return CLI_EXIT_USAGE;
}

/* After getopt_long (with opterr = 0 and an optstring starting with ':')
 * returned '?' or ':': name the bad option. */
static inline int cli_bad_option(const char *prog, int o, char **argv)
{
    char what[256];
    const char *arg = argv[optind - 1];
    if (o == ':')
        snprintf(what, sizeof what, "option '%s' needs a value", arg);
    else if (optopt && strncmp(arg, "--", 2))
        snprintf(what, sizeof what, "unknown option '-%c'", optopt);
    else
        snprintf(what, sizeof what, "unknown option '%s'", arg);
    return cli_error(prog, what);
}

#endif
