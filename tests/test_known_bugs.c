/* test_known_bugs.c - tests that fail on the current libfmem, one group per
 * bug, each naming the bug and its cause. They are not in tests/local.am,
 * so that make check stays green; build and run this file by hand (after
 * make, against the static core library):
 *
 *   gcc -std=c11 -D_GNU_SOURCE -Ilibfmem/include -Ilibfmem -Itests \
 *       tests/test_known_bugs.c .libs/libfmem_core.a \
 *       $(pkg-config --cflags --libs criterion) -lpthread -o /tmp/test_known_bugs
 *
 * When a bug is fixed, move its tests into the file they belong to (and
 * list that file in tests/local.am if it is new). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>

#include "crashpoint.h"
#include "fmem.h"
#include "pool_internal.h"
#include "protocol.h"
#include "shadow.h"
#include "stress.h"

static fmem_pool *open_pool(const char *uri)
{
    fmem_pool *p = NULL;
    int rc = fmem_open(uri, &p);
    cr_assert_eq(rc, 0, "fmem_open(%s): %s", uri, fmem_strerror(rc));
    return p;
}

static fmem_handle must_alloc(fmem_pool *p, size_t size)
{
    fmem_handle h;
    int rc = fmem_alloc(p, size, &h);
    cr_assert_eq(rc, 0, "fmem_alloc(%zu): %s", size, fmem_strerror(rc));
    return h;
}

/* A live block must be usable through every call. */
static void expect_usable(fmem_pool *p, const fmem_handle *h, const char *what)
{
    char buf[8] = "fmem";
    void *m;
    int rc = fmem_map(p, h, &m);
    cr_assert_eq(rc, 0, "%s: fmem_map of a live block: %s", what, fmem_strerror(rc));
    rc = fmem_write(p, h, 0, buf, sizeof buf);
    cr_assert_eq(rc, 0, "%s: fmem_write of a live block: %s", what, fmem_strerror(rc));
    rc = fmem_read(p, h, 0, buf, sizeof buf);
    cr_assert_eq(rc, 0, "%s: fmem_read of a live block: %s", what, fmem_strerror(rc));
    rc = fmem_free(p, h);
    cr_assert_eq(rc, 0, "%s: fmem_free of a live block: %s", what, fmem_strerror(rc));
}

/* ==== BUG 8: log=0: a late entry of a free makes the next block unusable ==
 * Since log=0 pools check block sizes too (check() always reads the full
 * log entry), log_commit_span/log_commit_section write the committing
 * client's entry with a plain WRITE after the header CAS. Nothing orders
 * that write against the next operation on the same block: when a free of
 * block B commits and, before its entry is written, another thread or
 * client allocates a block at the same chunk and writes ALLOC, the late
 * FREE entry lands on top. The new owner's live block then fails every
 * call with FMEM_EBADHANDLE (it can be neither used nor freed). The stress
 * test at log=0 (8 threads in one section) hits this within seconds; with
 * log=1 the guarded flush discards the late entry because the header no
 * longer holds its log. A fix: commit the own entry with the same guarded
 * flush at log=0 too (log=0 then only skips helping other clients' logs),
 * or CAS the entry from the value read before the header commit.
 *
 * Deterministic form: the crash-point hook runs between the free's header
 * commit and its entry write, and allocates the same chunk there. */

static fmem_pool *hook_pool;
static enum crash_point hook_at;
static size_t hook_size;
static fmem_handle hook_block;
static int hook_rc = 1;

static void alloc_in_between(enum crash_point cp)
{
    if (cp != hook_at)
        return;
    fmem_crash_hook = NULL; /* once, and not inside the nested call */
    hook_rc = fmem_alloc(hook_pool, hook_size, &hook_block);
}

static void late_free_entry(const char *uri, size_t size, enum crash_point at)
{
    fmem_pool *p = open_pool(uri);
    fmem_handle old = must_alloc(p, size);
    hook_pool = p;
    hook_at = at;
    hook_size = size;
    hook_rc = 1;
    fmem_crash_hook = alloc_in_between;
    int rc = fmem_free(p, &old);
    fmem_crash_hook = NULL;
    cr_assert_eq(rc, 0, "free: %s", fmem_strerror(rc));
    cr_assert_eq(hook_rc, 0, "allocation in between: %d", hook_rc);
    cr_assert_eq(hook_block.addr, old.addr, "the block in between went elsewhere");
    expect_usable(p, &hook_block, uri);
    fmem_close(p);
}

Test(bug8_log0_late_entry, chunk_block_allocated_before_the_free_is_logged)
{
    late_free_entry("mem:?size=2M&log=0", 4096, CP_CHUNK_FREE_COMMIT);
}

Test(bug8_log0_late_entry, span_block_allocated_before_the_free_is_logged)
{
    late_free_entry("mem:?size=2M&log=0", 128 << 10, CP_SPAN_FREE_COMMIT);
}

Test(bug8_log0_late_entry, threads_churning_one_section, .timeout = 60)
{
    static struct stress_shared s;
    memset(&s, 0, sizeof s);
    s.max_live = 8;
    s.small_only = true;
    fmem_pool *p = open_pool("mem:?size=2M&log=0");
    cr_assert(shadow_init(&s.sh, 1, 2u << 20));
    s.deadline = now_seconds() + 3;
    s.hard_deadline = s.deadline + 20;
    s.min_allocs = 2000;
    pthread_t t[8];
    struct stress_worker w[8];
    for (int i = 0; i < 8; i++) {
        w[i] = (struct stress_worker){.s = &s, .p = p, .owner = (uint32_t)i + 1};
        cr_assert_eq(pthread_create(&t[i], NULL, stress_worker_run, &w[i]), 0);
    }
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    cr_assert_eq(atomic_load(&s.fail.count), 0, "%s", s.fail.msg);
    shadow_destroy(&s.sh);
    fmem_close(p);
}
