/* fmem - command-line tool for fmem pools and services.
 *   fmem status [URI] [--map FILE.png] [--node N]
 *                            pools, space, services, applications
 *   fmem verify URI          check headers against the redo log
 *   fmem recover URI UID     reclaim everything user UID owns (UID is dead)
 *   fmem mnode ARGS...       run the memory node daemon in the foreground
 *   fmem daemon ARGS...      run the allocation service in the foreground */
#include <errno.h>
#include <fmem.h>
#include <fmem_admin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/status_cmd.h"

static int usage(FILE *f)
{
    fprintf(f, "usage: fmem status [URI] [--map FILE.png] [--node N]\n"
               "       fmem verify URI\n"
               "       fmem recover URI UID\n"
               "       fmem mnode --pool URI --socket PATH [options]   (see fmem mnode --help)\n"
               "       fmem daemon --mnode PATH --socket PATH [options] (see fmem daemon --help)\n"
               "URI is a pool URI, e.g. shm:/NAME (see fmem_open in fmem.h), or a daemon's\n"
               "socket: unix:/PATH or fmem://[localhost]/PATH (status only). status without\n"
               "a URI asks $FMEM_URI, else the default service socket.\n");
    return f == stderr ? 2 : 0;
}

/* Open an existing pool: never create one by accident. */
static fmem_pool *open_existing(const char *uri)
{
    char buf[4096];
    const char *sep = strchr(uri, '?') ? "&" : "?";
    if (strncmp(uri, "mem:", 4) == 0) {
        fprintf(stderr, "fmem: %s is a private in-process pool; name a shared one\n", uri);
        exit(2);
    }
    if ((size_t)snprintf(buf, sizeof buf, "%s%screate=0", uri, sep) >= sizeof buf) {
        fprintf(stderr, "fmem: URI too long\n");
        exit(2);
    }
    fmem_pool *p;
    int rc = fmem_open(buf, &p);
    if (rc) {
        fprintf(stderr, "fmem: %s: %s%s%s\n", uri, fmem_strerror(rc), rc == FMEM_EIO ? ": " : "",
                rc == FMEM_EIO ? strerror(errno) : "");
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

static int cmd_recover(const char *uri, const char *uid_s)
{
    char *end;
    errno = 0;
    unsigned long uid = strtoul(uid_s, &end, 10);
    if (errno || *end || uid == 0 || uid > 16383) {
        fprintf(stderr, "fmem: recover: bad user id '%s' (1..16383)\n", uid_s);
        return 2;
    }
    fmem_pool *p = open_existing(uri);
    fmem_recovery_stats st;
    int rc = fmem_recover(p, (unsigned)uid, &st);
    fmem_close(p);
    if (rc) {
        fprintf(stderr, "fmem: recover: %s\n", fmem_strerror(rc));
        return 1;
    }
    printf("user %lu: freed %llu blocks (%llu bytes), flushed %llu logs, cleared %llu claims, "
           "scanned %llu entries in %.3f ms\n",
           uid, (unsigned long long)st.blocks_freed, (unsigned long long)st.bytes_freed,
           (unsigned long long)st.logs_flushed, (unsigned long long)st.claims_cleared,
           (unsigned long long)st.entries_scanned, st.elapsed_ns / 1e6);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage(stderr);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help"))
        return usage(stdout);
    if (!strcmp(argv[1], "status"))
        return cmd_status(argc - 2, argv + 2);
    if (!strcmp(argv[1], "mnode"))
        return cmd_exec_daemon("fmem-mnode", argc - 1, argv + 1);
    if (!strcmp(argv[1], "daemon"))
        return cmd_exec_daemon("fmemd", argc - 1, argv + 1);
    if (!strcmp(argv[1], "verify") && argc == 3)
        return cmd_verify(argv[2]);
    if (!strcmp(argv[1], "recover") && argc == 4)
        return cmd_recover(argv[2], argv[3]);
    return usage(stderr);
}
