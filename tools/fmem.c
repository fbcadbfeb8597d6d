/* fmem - command-line tool for fmem pools and services.
 *   fmem status [URI] [--json] [--map FILE.png] [--node N]
 *   fmem status --processes [--json]
 *                            pools, space, services, applications
 *   fmem verify URI          check headers against the redo log (exit 0 clean,
 *                            1 errors or leaks, 3 incomplete: busy sections)
 *   fmem recover URI UID [--force]
 *                            reclaim everything user UID owns: refused while
 *                            its process runs, unless --force
 *   fmem recover URI --leaked
 *                            reclaim the blocks of user ids without a slot
 *   fmem mnode ARGS...       run the memory node daemon in the foreground
 *   fmem daemon ARGS...      run the allocation service in the foreground */
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <fmem.h>
#include <fmem_admin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "uri.h"
#include "status_cmd.h"

static int usage(FILE *f)
{
    fprintf(f, "usage: fmem status [URI] [--json] [--map FILE.png] [--node N]\n"
               "       fmem status --processes [--json]\n"
               "       fmem verify URI\n"
               "       fmem recover URI UID [--force]\n"
               "       fmem recover URI --leaked\n"
               "       fmem mnode --pool URI --socket PATH [options]   (see fmem mnode --help)\n"
               "       fmem daemon --mnode PATH --socket PATH [options] (see fmem daemon --help)\n"
               "URI is a pool URI, e.g. shm:/NAME (see fmem_open in fmem.h), or a daemon's\n"
               "socket: unix:/PATH or fmem://[localhost]/PATH (status only). status without\n"
               "a URI asks $FMEM_URI, else the default service socket.\n"
               "fmem COMMAND --help (or fmem help COMMAND) describes one command;\n"
               "fmem --version prints the version.\n");
    return f == stderr ? 2 : 0;
}

/* Open an existing pool for administration: no user slot is claimed (the
 * user table may be full) and no pool is ever created. */
static fmem_pool *open_existing(const char *uri)
{
    if (strncmp(uri, "mem:", 4) == 0) {
        fprintf(stderr, "fmem: %s is a private in-process pool; name a shared one\n", uri);
        exit(2);
    }
    fmem_pool *p;
    errno = 0;
    int rc = fmem_open_admin(uri, &p);
    int saved = errno;
    if (rc == FMEM_EURI) { /* the library's parser says "invalid"; ours says why */
        struct node_uri *us = calloc(URI_MAX_NODES, sizeof *us);
        int n = us ? uri_parse(uri, us, URI_MAX_NODES) : 0;
        if (n < 0 && *uri_last_error()) {
            fprintf(stderr, "fmem: %s: %s\n", uri, uri_last_error());
            exit(2);
        }
        for (int i = 0; i < n; i++)
            if (us[i].kind == URI_SSD || us[i].kind == URI_ZMEM) {
                fprintf(stderr, "fmem: %s: ssd: and zmem: nodes are private to the process that "
                                "opens them; name a shared pool\n", uri);
                exit(2);
            }
        free(us);
    }
    if (rc) {
        fprintf(stderr, "fmem: %s: %s%s%s\n", uri, fmem_strerror(rc), rc == FMEM_EIO ? ": " : "",
                rc == FMEM_EIO ? strerror(saved) : "");
        exit(1);
    }
    return p;
}

static int cmd_verify(const char *uri)
{
    fmem_pool *p = open_existing(uri);
    fmem_verify_report r;
    int rc = fmem_verify(p, &r, stdout);
    fmem_close(p);
    if (rc) {
        fprintf(stderr, "fmem: verify: %s\n", fmem_strerror(rc));
        return 1;
    }
    printf("chunks allocated %llu, owned by log entries %llu\n",
           (unsigned long long)r.chunks_allocated, (unsigned long long)r.chunks_owned);
    printf("allocated without owner %llu, owner of free chunk %llu, owned twice %llu, "
           "state mismatch %llu, bad entries %llu, claims in progress %llu\n",
           (unsigned long long)r.alloc_without_owner, (unsigned long long)r.owner_of_free,
           (unsigned long long)r.owned_twice, (unsigned long long)r.state_mismatch,
           (unsigned long long)r.bad_entries, (unsigned long long)r.claims_in_progress);
    if (r.leaked_blocks)
        printf("leaked: %llu allocations, %llu bytes, of user ids that hold no user slot "
               "(fmem recover URI UID, or fmem recover URI --leaked, takes them back)\n",
               (unsigned long long)r.leaked_blocks, (unsigned long long)r.leaked_bytes);
    if (r.dead_owner_blocks || r.dead_slots)
        printf("awaiting recovery: %llu allocations, %llu bytes, of users whose process is gone "
               "(%llu such user slots)\n",
               (unsigned long long)r.dead_owner_blocks, (unsigned long long)r.dead_owner_bytes,
               (unsigned long long)r.dead_slots);
    if (r.busy_sections)
        printf("not checked: %llu sections changed during every snapshot (the pool is very "
               "busy); run verify again\n", (unsigned long long)r.busy_sections);
    const char *verdict = r.errors ? "dirty" : r.busy_sections ? "incomplete" : "clean";
    printf("verifier=%s\n", verdict);
    return r.errors ? 1 : r.busy_sections ? 3 : 0;
}

static void print_recovered(const char *who, const fmem_recovery_stats *st)
{
    printf("%s: freed %llu blocks (%llu bytes), flushed %llu logs, cleared %llu claims, "
           "scanned %llu entries in %.3f ms\n",
           who, (unsigned long long)st->blocks_freed, (unsigned long long)st->bytes_freed,
           (unsigned long long)st->logs_flushed, (unsigned long long)st->claims_cleared,
           (unsigned long long)st->entries_scanned, st->elapsed_ns / 1e6);
}

/* The command name of a local process, for messages. */
static const char *comm_of(uint32_t pid, char *buf, size_t cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%u/comm", pid);
    FILE *f = fopen(path, "r");
    if (!f || !fgets(buf, (int)cap, f))
        snprintf(buf, cap, "?");
    if (f)
        fclose(f);
    buf[strcspn(buf, "\n")] = 0;
    return buf;
}

/* Does the heartbeat word of a remote holder still change? It is written
 * every period (1 s by default; up to 3 periods are awaited). */
static bool heartbeat_moves(fmem_pool *p, unsigned node, unsigned uid, uint64_t first)
{
    for (int i = 0; i < 35; i++) {
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
        fmem_user_info_t again;
        if (fmem_user_info(p, node, uid, &again) == 0 && again.heartbeat != first)
            return true;
    }
    return false;
}

/* Why uid must not be recovered on that node, or NULL if it may be: its
 * holder runs (a local pid), or writes heartbeats, or cannot be judged. */
static const char *live_reason(fmem_pool *p, unsigned node, unsigned uid,
                               const fmem_user_info_t *u, char *msg, size_t cap)
{
    char comm[64];
    if (!u->pid)
        return NULL;
    if (!u->remote) {
        if (u->alive == 1 && kill((pid_t)u->pid, 0) != 0 && errno == ESRCH) {
            /* libfmem-preload: its fork children map its blocks */
            snprintf(msg, cap, "user %u's process %u is gone, but processes forked from it still "
                               "read its blocks", uid, u->pid);
            return msg;
        }
        if (u->alive == 1) {
            snprintf(msg, cap, "user %u is held by process %u (%s), which is running", uid, u->pid,
                     comm_of(u->pid, comm, sizeof comm));
            return msg;
        }
        if (!u->session)
            return NULL;
        /* a service whose session the memory node has not ended: its pid
         * may live in another pid namespace, or the memory node is about to
         * (or, being down, cannot) recover it */
        snprintf(msg, cap, "user %u is a service with a live session in the memory node's session "
                           "table, and its process %u is not visible here (another pid "
                           "namespace?); the memory node recovers a dead service itself",
                 uid, u->pid);
        return msg;
    }
    bool service = u->heartbeat != 0; /* an fmemd: it writes heartbeats */
    if (service && heartbeat_moves(p, node, uid, u->heartbeat)) {
        snprintf(msg, cap, "user %u is held by process %u on another machine, whose heartbeat "
                           "is still moving", uid, u->pid);
        return msg;
    }
    if (!service) {
        snprintf(msg, cap, "user %u is held by process %u on another machine, which writes no "
                           "heartbeat: fmem cannot tell whether it is alive", uid, u->pid);
        return msg;
    }
    return NULL; /* a remote service whose heartbeat stopped */
}

static int cmd_recover(const char *uri, const char *uid_s, bool force)
{
    char *end;
    errno = 0;
    unsigned long uid = strtoul(uid_s, &end, 10);
    if (errno || *end || uid == 0 || uid > 16383) {
        fprintf(stderr, "fmem: recover: bad user id '%s' (1..16383)\n", uid_s);
        return 2;
    }
    fmem_pool *p = open_existing(uri);
    fmem_stats_t ps;
    fmem_stats(p, &ps);
    uint64_t blocks = 0, held = 0;
    for (unsigned node = 0; node < ps.nodes; node++) {
        fmem_user_info_t u;
        int rc = fmem_user_info(p, node, (unsigned)uid, &u);
        if (rc) {
            fprintf(stderr, "fmem: recover: %s\n", fmem_strerror(rc));
            fmem_close(p);
            return 1;
        }
        char msg[256];
        const char *why = live_reason(p, node, (unsigned)uid, &u, msg, sizeof msg);
        if (why && !force) {
            fprintf(stderr, "fmem: recover: %s%s; not recovered (--force recovers it anyway, "
                            "freeing blocks that process may still use)\n",
                    why, ps.nodes > 1 ? " on one of the memory nodes" : "");
            fmem_close(p);
            return 1;
        }
        if (why)
            fprintf(stderr, "fmem: recover: --force: %s\n", why);
        blocks += u.blocks;
        held += u.pid != 0;
        if (!u.pid && u.blocks)
            printf("user %lu holds no user slot%s but owns %llu blocks (%llu bytes): leaked; "
                   "taking them back\n",
                   uid, u.in_table ? "" : " (it is beyond the user table)",
                   (unsigned long long)u.blocks, (unsigned long long)u.bytes);
    }
    if (!blocks && !held) {
        fprintf(stderr, "fmem: recover: user %lu is not in use: no process holds it and it "
                        "owns no blocks; nothing to recover\n", uid);
        fmem_close(p);
        return 1;
    }
    fmem_recovery_stats st;
    int rc = fmem_recover(p, (unsigned)uid, &st);
    fmem_close(p);
    if (rc) {
        fprintf(stderr, "fmem: recover: %s%s\n", fmem_strerror(rc),
                rc == FMEM_EBUSY ? " (the user id was claimed meanwhile: someone uses it)" : "");
        return 1;
    }
    char who[32];
    snprintf(who, sizeof who, "user %lu", uid);
    print_recovered(who, &st);
    return 0;
}

static int cmd_recover_leaked(const char *uri)
{
    fmem_pool *p = open_existing(uri);
    fmem_recovery_stats st;
    int rc = fmem_recover_leaked(p, &st);
    fmem_close(p);
    if (rc) {
        fprintf(stderr, "fmem: recover: %s\n", fmem_strerror(rc));
        return 1;
    }
    print_recovered("leaked blocks (user ids without a slot)", &st);
    return 0;
}

static int help_verify(void)
{
    printf("usage: fmem verify URI\n"
           "Check a shared pool's headers against its redo logs, read-only.\n"
           "Exit 0 clean, 1 errors or leaks, 3 incomplete (sections kept changing).\n");
    return 0;
}

static int help_recover(void)
{
    printf("usage: fmem recover URI UID [--force]\n"
           "       fmem recover URI --leaked\n"
           "Reclaim everything user UID (1..16383) owns; refused while its process runs\n"
           "unless --force. --leaked reclaims the blocks of user ids without a slot.\n");
    return 0;
}

static bool is_help(const char *a)
{
    return !strcmp(a, "-h") || !strcmp(a, "--help");
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return cli_error("fmem", "no command given");
    const char *cmd = argv[1];
    if (is_help(cmd))
        return usage(stdout);
    if (!strcmp(cmd, "-V") || !strcmp(cmd, "--version"))
        return cli_version("fmem");
    if (!strcmp(cmd, "help")) { /* fmem help [COMMAND] */
        if (argc < 3)
            return usage(stdout);
        cmd = argv[2];
        argc = 3;
        argv[1] = argv[2];
        argv[2] = "--help";
    }
    if (!strcmp(cmd, "status"))
        return cmd_status(argc - 2, argv + 2);
    if (!strcmp(cmd, "mnode"))
        return cmd_exec_daemon("fmem-mnode", argc - 1, argv + 1);
    if (!strcmp(cmd, "daemon"))
        return cmd_exec_daemon("fmemd", argc - 1, argv + 1);
    if (!strcmp(cmd, "verify")) {
        if (argc >= 3 && is_help(argv[2]))
            return help_verify();
        char what[160];
        snprintf(what, sizeof what, "unknown option '%.100s'", argc > 2 ? argv[2] : "");
        if (argc != 3 || argv[2][0] == '-')
            return cli_error("fmem verify", argc == 3 ? what : "expects one URI");
        return cmd_verify(argv[2]);
    }
    if (!strcmp(cmd, "recover")) {
        for (int i = 2; i < argc; i++)
            if (is_help(argv[i]))
                return help_recover();
        if (argc == 4 && !strcmp(argv[3], "--leaked"))
            return cmd_recover_leaked(argv[2]);
        /* a UID that starts with '-' is a bad id ("-1"), not an option */
        if (argc == 4 && argv[2][0] != '-' && (argv[3][0] != '-' || isdigit((unsigned char)argv[3][1])))
            return cmd_recover(argv[2], argv[3], false);
        if (argc == 5 && !strcmp(argv[4], "--force"))
            return cmd_recover(argv[2], argv[3], true);
        if (argc == 5 && !strcmp(argv[2], "--force"))
            return cmd_recover(argv[3], argv[4], true);
        return cli_error("fmem recover", "expects URI UID [--force] or URI --leaked");
    }
    char what[160];
    snprintf(what, sizeof what, "unknown %s '%.100s'", cmd[0] == '-' ? "option" : "command", cmd);
    return cli_error("fmem", what);
}
