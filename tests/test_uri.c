/* test_uri.c - pool URI parsing: good URIs, every kind of bad one, and
 * fmem_open's handling of bad URIs. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fmem.h"
#include "transport.h" /* enum tp_rtt_mode */
#include "uri.h"

static struct node_uri us[URI_MAX_NODES + 1];

/* ---- sizes -------------------------------------------------------------- */

static uint64_t size_of(const char *s)
{
    uint64_t v = 0xDEADBEEF;
    cr_assert(uri_parse_size(s, &v), "\"%s\" rejected", s);
    return v;
}

Test(uri_size, plain_and_suffixed)
{
    cr_assert_eq(size_of("0"), 0);
    cr_assert_eq(size_of("1"), 1);
    cr_assert_eq(size_of("4096"), 4096);
    cr_assert_eq(size_of("64K"), UINT64_C(64) << 10);
    cr_assert_eq(size_of("64k"), UINT64_C(64) << 10);
    cr_assert_eq(size_of("2M"), UINT64_C(2) << 20);
    cr_assert_eq(size_of("2m"), UINT64_C(2) << 20);
    cr_assert_eq(size_of("3G"), UINT64_C(3) << 30);
    cr_assert_eq(size_of("3g"), UINT64_C(3) << 30);
    cr_assert_eq(size_of("5T"), UINT64_C(5) << 40);
    cr_assert_eq(size_of("5t"), UINT64_C(5) << 40);
    cr_assert_eq(size_of("64MiB"), UINT64_C(64) << 20);
    cr_assert_eq(size_of("64MB"), UINT64_C(64) << 20);
    cr_assert_eq(size_of("1GiB"), UINT64_C(1) << 30);
    cr_assert_eq(size_of("16KiB"), UINT64_C(16) << 10);
    cr_assert_eq(size_of("18446744073709551615"), UINT64_MAX);
    cr_assert_eq(size_of("16777215T"), UINT64_C(16777215) << 40); /* largest that fits */
}

static void size_rejected(const char *s)
{
    uint64_t v = 0;
    cr_assert(!uri_parse_size(s, &v), "\"%s\" accepted as %llu", s, (unsigned long long)v);
}

Test(uri_size, junk_and_overflow_rejected)
{
    size_rejected("");
    size_rejected("-1");
    size_rejected("+1");
    size_rejected("12Q");
    size_rejected("M");
    size_rejected("K12");
    size_rejected("1.5G");
    size_rejected("1 G");
    size_rejected("1G ");
    size_rejected("0x100");
    size_rejected("1P");
    size_rejected("99999999999T");
    size_rejected("16777216T");
    size_rejected("18446744073709551616"); /* 2^64 */
    size_rejected("99999999999999999999999999");
    size_rejected("17179869184G");
    /* leading white space or sign, and unit junk */
    size_rejected(" 1G");
    size_rejected("\t64M");
    size_rejected(" -1");
    size_rejected(" +1");
    size_rejected("64i");
    size_rejected("5iB");
    size_rejected("64KBB");
    size_rejected("64KiBB");
    size_rejected("7B");
    size_rejected("7iB");
    size_rejected("1Gi");
    cr_assert(!uri_parse_size(NULL, &(uint64_t){0}));
}

/* ---- good URIs ---------------------------------------------------------- */

static int parse(const char *s)
{
    memset(us, 0xA5, sizeof us);
    return uri_parse(s, us, URI_MAX_NODES);
}

Test(uri, bare_mem_has_defaults)
{
    cr_assert_eq(parse("mem:"), 1);
    cr_assert_eq(us[0].kind, URI_MEM);
    cr_assert_eq(us[0].size, 0);
    cr_assert_eq(us[0].nodes, 1);
    cr_assert_eq(us[0].rtt_ns, 0);
    cr_assert_eq(us[0].user, 0);
    cr_assert(us[0].create);
}

Test(uri, mem_with_query)
{
    cr_assert_eq(parse("mem:?size=64M&nodes=3&rtt_ns=2000"), 1);
    cr_assert_eq(us[0].kind, URI_MEM);
    cr_assert_eq(us[0].size, UINT64_C(64) << 20);
    cr_assert_eq(us[0].nodes, 3);
    cr_assert_eq(us[0].rtt_ns, 2000);
    cr_assert_eq(parse("mem:?"), 1, "empty query");
    cr_assert_eq(parse("mem:?size=1M&"), 1, "trailing '&'");
    cr_assert_eq(parse("mem:?nodes=64"), 1);
    cr_assert_eq(us[0].nodes, 64);
    cr_assert_eq(parse("mem:?rtt_ns=0"), 1);
    cr_assert_eq(parse("mem:?rtt_ns=1000000000"), 1);
    cr_assert_eq(us[0].rtt_ns, 1000000000u);
}

Test(uri, every_key)
{
    cr_assert_eq(parse("mem:?size=2G&nodes=2&rtt_ns=5&user=16383&create=0"), 1);
    cr_assert_eq(us[0].size, UINT64_C(2) << 30);
    cr_assert_eq(us[0].nodes, 2);
    cr_assert_eq(us[0].rtt_ns, 5);
    cr_assert_eq(us[0].user, 16383);
    cr_assert(!us[0].create);
    cr_assert_eq(parse("mem:?user=1&create=1"), 1);
    cr_assert_eq(us[0].user, 1);
    cr_assert(us[0].create);
}

Test(uri, rtt_mode)
{
    cr_assert_eq(parse("mem:"), 1);
    cr_assert_eq(us[0].rtt_mode, TP_RTT_SPIN, "spin is the default");
    cr_assert_eq(parse("mem:?rtt_ns=2000&rtt_mode=nic"), 1);
    cr_assert_eq(us[0].rtt_mode, TP_RTT_NIC);
    cr_assert_eq(us[0].rtt_ns, 2000);
    cr_assert_eq(parse("mem:?rtt_mode=spin&rtt_ns=5"), 1);
    cr_assert_eq(us[0].rtt_mode, TP_RTT_SPIN);
    cr_assert_eq(parse("mem:?rtt_mode=nic;mem:"), 2, "a key of one node only");
    cr_assert_eq(us[0].rtt_mode, TP_RTT_NIC);
    cr_assert_eq(us[1].rtt_mode, TP_RTT_SPIN);
    cr_assert_eq(parse("shm:/x?rtt_mode=nic"), 1);
    cr_assert_eq(us[0].rtt_mode, TP_RTT_NIC);
}

Test(uri, size_suffixes_in_uris)
{
    const struct {
        const char *uri;
        uint64_t size;
    } cases[] = {
        {"mem:?size=4096", 4096},
        {"mem:?size=512K", UINT64_C(512) << 10},
        {"mem:?size=64M", UINT64_C(64) << 20},
        {"mem:?size=64MiB", UINT64_C(64) << 20},
        {"mem:?size=3G", UINT64_C(3) << 30},
        {"mem:?size=2T", UINT64_C(2) << 40},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert_eq(parse(cases[i].uri), 1, "%s", cases[i].uri);
        cr_assert_eq(us[0].size, cases[i].size, "%s", cases[i].uri);
    }
}

Test(uri, shm_name)
{
    cr_assert_eq(parse("shm:/name?size=1G&create=0"), 1);
    cr_assert_eq(us[0].kind, URI_SHM);
    cr_assert_str_eq(us[0].path, "/dev/shm/name");
    cr_assert_eq(us[0].size, UINT64_C(1) << 30);
    cr_assert(!us[0].create);
    cr_assert_eq(parse("shm:pool-7"), 1, "name without a slash");
    cr_assert_str_eq(us[0].path, "/dev/shm/pool-7");
    cr_assert(us[0].create, "create defaults to 1");
    cr_assert_eq(us[0].size, 0);
}

Test(uri, file_path)
{
    cr_assert_eq(parse("file:/path"), 1);
    cr_assert_eq(us[0].kind, URI_FILE);
    cr_assert_str_eq(us[0].path, "/path");
    cr_assert_eq(parse("file:/mnt/huge/pool.bin?size=8G"), 1);
    cr_assert_str_eq(us[0].path, "/mnt/huge/pool.bin");
    cr_assert_eq(us[0].size, UINT64_C(8) << 30);
}

Test(uri, several_nodes_joined_by_semicolons)
{
    cr_assert_eq(parse("mem:?size=16M;shm:/a?size=32M;file:/tmp/b?create=0"), 3);
    cr_assert_eq(us[0].kind, URI_MEM);
    cr_assert_eq(us[0].size, UINT64_C(16) << 20);
    cr_assert_eq(us[1].kind, URI_SHM);
    cr_assert_str_eq(us[1].path, "/dev/shm/a");
    cr_assert_eq(us[1].size, UINT64_C(32) << 20);
    cr_assert_eq(us[2].kind, URI_FILE);
    cr_assert_str_eq(us[2].path, "/tmp/b");
    cr_assert(!us[2].create);
    /* each node gets its own defaults */
    cr_assert(us[0].create);
    cr_assert_eq(us[1].nodes, 1);
    cr_assert_eq(parse("mem:; mem:?rtt_ns=7"), 2, "space after ';'");
    cr_assert_eq(us[1].rtt_ns, 7);
    cr_assert_eq(us[0].rtt_ns, 0);
}

Test(uri, as_many_nodes_as_fit)
{
    char buf[8 * URI_MAX_NODES];
    buf[0] = 0;
    for (int i = 0; i < URI_MAX_NODES; i++)
        strcat(buf, i ? ";mem:" : "mem:");
    cr_assert_eq(parse(buf), URI_MAX_NODES);
}

/* ---- bad URIs ----------------------------------------------------------- */

static void rejected(const char *s)
{
    cr_assert_eq(parse(s), FMEM_EURI, "\"%s\" accepted", s);
}

Test(uri_bad, unknown_scheme)
{
    rejected("tcp://host:1234");
    rejected("MEM:");
    rejected("memory:");
    rejected("mem");
    rejected("shm");
    rejected("/dev/shm/x");
    rejected("mem:junk");
}

Test(uri_bad, malformed_query)
{
    rejected("mem:?sise=64M");
    rejected("mem:?size");
    rejected("mem:?size64M");
    rejected("mem:?=64M");
    rejected("mem:?size=");
    rejected("mem:?size=64M&bogus=1");
    rejected("mem:?SIZE=64M");
}

Test(uri_bad, bad_sizes)
{
    rejected("mem:?size=0");
    rejected("mem:?size=-1");
    rejected("mem:?size=12Q");
    rejected("mem:?size=99999999999T");
    rejected("mem:?size=1.5G");
}

Test(uri_bad, bad_numbers)
{
    rejected("mem:?nodes=0");
    rejected("mem:?nodes=65");
    rejected("mem:?nodes=-1");
    rejected("mem:?nodes=x");
    rejected("mem:?user=0");
    rejected("mem:?user=16384");
    rejected("mem:?user=-3");
    rejected("mem:?rtt_ns=1000000001");
    rejected("mem:?rtt_ns=-5");
    rejected("mem:?create=2");
    rejected("mem:?create=yes");
    rejected("mem:?create=");
    rejected("mem:?log=0"); /* the redo log cannot be turned off */
    rejected("mem:?log=2");
    rejected("mem:?log=true");
}

Test(uri_bad, bad_rtt_modes)
{
    rejected("mem:?rtt_mode=");
    rejected("mem:?rtt_mode");
    rejected("mem:?rtt_mode=NIC");
    rejected("mem:?rtt_mode=Spin");
    rejected("mem:?rtt_mode=nic2");
    rejected("mem:?rtt_mode=spinning");
    rejected("mem:?rtt_mode=1");
    rejected("mem:?rtt_mode=nic&rtt_mode=fast");
}

Test(uri_bad, bad_names_and_paths)
{
    rejected("shm:");
    rejected("shm:/");
    rejected("shm:///");
    rejected("shm:/a/b");
    rejected("shm:/?size=1M");
    rejected("file:");
    rejected("file:relative/path");
    rejected("file:pool.bin");
    rejected("file:./pool.bin");
    char longname[NAME_MAX + 16] = "shm:/";
    memset(longname + 5, 'n', NAME_MAX + 1);
    longname[5 + NAME_MAX + 1] = 0;
    rejected(longname);
}

Test(uri_bad, nodes_only_for_mem)
{
    rejected("shm:/x?nodes=2");
    rejected("file:/x?nodes=2");
    cr_assert_eq(parse("shm:/x?nodes=1"), 1);
}

Test(uri_bad, empty_and_separators_only)
{
    rejected("");
    rejected(";");
    rejected(";;;");
    cr_assert_eq(uri_parse(NULL, us, URI_MAX_NODES), FMEM_EURI);
}

Test(uri_bad, one_bad_part_spoils_the_list)
{
    rejected("mem:;tcp:");
    rejected("mem:?size=1M;shm:/a/b");
    rejected("shm:/ok;mem:?nodes=0");
}

Test(uri_bad, too_many_nodes)
{
    char buf[8 * (URI_MAX_NODES + 2)];
    buf[0] = 0;
    for (int i = 0; i < URI_MAX_NODES + 1; i++)
        strcat(buf, i ? ";mem:" : "mem:");
    rejected(buf);
    /* and the limit given by the caller */
    cr_assert_eq(uri_parse("mem:;mem:;mem:", us, 2), FMEM_EURI);
    cr_assert_eq(uri_parse("mem:;mem:", us, 2), 2);
}

Test(uri_bad, overlong_uri)
{
    size_t n = 16 * PATH_MAX + 16;
    char *s = malloc(n + 1);
    cr_assert_not_null(s);
    memcpy(s, "file:/", 6);
    memset(s + 6, 'p', n - 6);
    s[n] = 0;
    int rc = uri_parse(s, us, URI_MAX_NODES);
    free(s);
    cr_assert_eq(rc, FMEM_EURI);
}

/* ---- fmem_open with bad URIs -------------------------------------------- */

static void open_rejected(const char *uri, int want)
{
    fmem_pool *p = (fmem_pool *)&p; /* garbage: must be overwritten */
    int rc = fmem_open(uri, &p);
    cr_assert_eq(rc, want, "fmem_open(\"%s\") = %d (%s)", uri, rc, fmem_strerror(rc));
    cr_assert_null(p, "fmem_open(\"%s\") left *out set", uri);
}

Test(uri_open, bad_uris_fail_and_leave_no_pool)
{
    const char *bad[] = {
        "tcp://x",       "mem:?size=0",    "mem:?size=-1",      "mem:?size=12Q",
        "mem:?nodes=0",  "mem:?nodes=65",  "mem:?user=0",       "mem:?user=16384",
        "mem:?create=2", "shm:",           "shm:/a/b",          "file:rel",
        "mem:?x=1",      "mem:?size",      "mem:?size=99999999999T",
        ";",             "mem:;bogus:",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        open_rejected(bad[i], FMEM_EURI);
}

Test(uri_open, too_many_nodes_in_total)
{
    /* 64 nodes in one part plus one more: each part is fine, the pool is not */
    open_rejected("mem:?size=2M&nodes=64;mem:?size=2M", FMEM_EURI);
    open_rejected("mem:?size=2M&nodes=33;mem:?size=2M&nodes=32", FMEM_EURI);
}

Test(uri_open, size_beyond_any_node)
{
    open_rejected("mem:?size=65T", FMEM_ESIZE);
}

Test(uri_open, null_out_is_einval)
{
    cr_assert_eq(fmem_open("mem:?size=2M", NULL), FMEM_EINVAL);
}

Test(uri_open, absent_pool_without_create)
{
    char uri[128];
    snprintf(uri, sizeof uri, "shm:/fmem-test-absent-%d?create=0&size=2M", (int)getpid());
    fmem_pool *p = (fmem_pool *)&p;
    int rc = fmem_open(uri, &p);
    cr_assert_lt(rc, 0, "opened an absent pool with create=0");
    cr_assert_null(p);
    snprintf(uri, sizeof uri, "/dev/shm/fmem-test-absent-%d", (int)getpid());
    cr_assert_neq(access(uri, F_OK), 0, "create=0 created the file");
}

Test(uri_open, good_uris_open)
{
    const char *good[] = {"mem:?size=2M", "mem:?size=4M&nodes=3&rtt_ns=0", "mem:?size=2MiB;mem:?size=4M",
                          "mem:?size=2M&create=1", "mem:?size=2M&user=5"};
    const uint32_t nodes[] = {1, 3, 2, 1, 1};
    const uint64_t cap[] = {2u << 20, 12u << 20, 6u << 20, 2u << 20, 2u << 20};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        fmem_pool *p = NULL;
        cr_assert_eq(fmem_open(good[i], &p), 0, "%s", good[i]);
        cr_assert_not_null(p);
        fmem_stats_t st;
        cr_assert_eq(fmem_stats(p, &st), 0);
        cr_assert_eq(st.nodes, nodes[i], "%s", good[i]);
        cr_assert_eq(st.capacity_bytes, cap[i], "%s", good[i]);
        fmem_close(p);
    }
}

Test(uri_open, nic_mode_pool_works)
{
    /* two nodes share the process's NIC emulator; closing the pool stops it */
    for (int round = 0; round < 2; round++) {
        fmem_pool *p;
        cr_assert_eq(fmem_open("mem:?size=4M&nodes=2&rtt_ns=2000&rtt_mode=nic", &p), 0);
        fmem_handle h[8];
        for (int i = 0; i < 8; i++)
            cr_assert_eq(fmem_alloc(p, 4096, &h[i]), 0);
        for (int i = 0; i < 8; i++)
            cr_assert_eq(fmem_free(p, &h[i]), 0);
        fmem_stats_t st;
        cr_assert_eq(fmem_stats(p, &st), 0);
        cr_assert_eq(st.nodes, 2);
        cr_assert_gt(st.round_trips, 0);
        fmem_close(p);
    }
}

Test(uri_open, explicit_user_id)
{
    fmem_pool *p;
    cr_assert_eq(fmem_open("mem:?size=2M&user=42", &p), 0);
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(p, &st), 0);
    cr_assert_eq(st.user_id, 42);
    fmem_close(p);
    /* a 2 MiB pool has 64 user slots: 100 is a valid URI but no such user */
    p = (fmem_pool *)&p;
    cr_assert_eq(fmem_open("mem:?size=2M&user=100", &p), FMEM_EINVAL);
    cr_assert_null(p);
}

Test(uri_open, sizes_round_up_to_sections)
{
    fmem_pool *p;
    fmem_stats_t st;
    cr_assert_eq(fmem_open("mem:?size=1", &p), 0);
    cr_assert_eq(fmem_stats(p, &st), 0);
    cr_assert_eq(st.capacity_bytes, FMEM_SECTION_SIZE);
    fmem_close(p);
    cr_assert_eq(fmem_open("mem:?size=3M", &p), 0);
    cr_assert_eq(fmem_stats(p, &st), 0);
    cr_assert_eq(st.capacity_bytes, 2 * FMEM_SECTION_SIZE);
    fmem_close(p);
}

/* fmem_uri_error names what was wrong with the last URI of this thread */
Test(uri_error, names_the_bad_key_or_value)
{
    fmem_pool *p = NULL;
    cr_assert_eq(fmem_open("mem:?siz=1M", &p), FMEM_EURI);
    cr_assert_str_eq(fmem_uri_error(), "unknown parameter 'siz'");
    cr_assert_eq(fmem_open("mem:?size=12Q", &p), FMEM_EURI);
    cr_assert_str_eq(fmem_uri_error(), "bad value size='12Q'");
    cr_assert_eq(fmem_unlink("nfs:/x"), FMEM_EURI);
    cr_assert_not_null(strstr(fmem_uri_error(), "unknown scheme"));
    cr_assert_eq(fmem_open("mem:?size=8M", &p), 0);
    cr_assert_str_eq(fmem_uri_error(), "");
    fmem_close(p);
}
