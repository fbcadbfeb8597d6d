/* test_libs.c - real libraries on a binding: zlib through zalloc/zfree,
 * libxml2 (xmlMemSetup) through closures. Each test runs in its own
 * process, so libxml2's global hooks are installed before its first
 * allocation, as they must be. OpenSSL has its own program
 * (test_openssl.c): Criterion itself loads and uses libcrypto. */
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <string.h>
#include <zlib.h>

#include "hooks_fixture.h"

static fmem_pool *pool;
static fmem_hooks *b;

static void setup(void)
{
    pool = fixture_pool("mem:?size=64M");
    b = fixture_binding(pool);
}

/* libraries may keep global state in the heap until exit: leave them be */
TestSuite(libs, .init = setup);

Test(libs, zlib_stream_in_the_heap)
{
    enum { N = 1 << 20 };
    static unsigned char in[N], packed[N + 1024], out[N];
    for (int i = 0; i < N; i++)
        in[i] = (unsigned char)(i % 251 ^ i / 4096);
    z_stream s = {.zalloc = fmem_hooks_zalloc, .zfree = fmem_hooks_zfree, .opaque = b};
    cr_assert_eq(deflateInit(&s, 6), Z_OK);
    cr_assert(fmem_hooks_owns(b, s.state), "the deflate state is a heap object");
    s.next_in = in, s.avail_in = N, s.next_out = packed, s.avail_out = sizeof packed;
    cr_assert_eq(deflate(&s, Z_FINISH), Z_STREAM_END);
    uLong packed_len = s.total_out;
    cr_assert_eq(deflateEnd(&s), Z_OK);
    z_stream t = {.zalloc = fmem_hooks_zalloc, .zfree = fmem_hooks_zfree, .opaque = b};
    cr_assert_eq(inflateInit(&t), Z_OK);
    t.next_in = packed, t.avail_in = (uInt)packed_len, t.next_out = out, t.avail_out = N;
    cr_assert_eq(inflate(&t, Z_FINISH), Z_STREAM_END);
    cr_assert_eq(inflateEnd(&t), Z_OK);
    cr_assert(memcmp(in, out, N) == 0);
    fmem_hooks_stats_t st = fixture_stats(b);
    cr_assert_geq(st.mallocs, 5);
    cr_assert_eq(st.mallocs, st.frees);
}

Test(libs, libxml2_documents_in_the_heap)
{
    cr_assert_eq(xmlMemSetup((xmlFreeFunc)fmem_hooks_closure(b, FMEM_HOOKS_FREE),
                             (xmlMallocFunc)fmem_hooks_closure(b, FMEM_HOOKS_MALLOC),
                             (xmlReallocFunc)fmem_hooks_closure(b, FMEM_HOOKS_REALLOC),
                             (xmlStrdupFunc)fmem_hooks_closure(b, FMEM_HOOKS_STRDUP)),
                 0);
    xmlInitParser();
    static const char doc_text[] = "<pool><chunk size='4096'>far</chunk><chunk/></pool>";
    xmlDocPtr doc = xmlReadMemory(doc_text, sizeof doc_text - 1, "t.xml", NULL, 0);
    cr_assert_not_null(doc);
    cr_assert(fmem_hooks_owns(b, doc), "the document is a heap object");
    xmlNodePtr root = xmlDocGetRootElement(doc);
    cr_assert(fmem_hooks_owns(b, root));
    xmlChar *size = xmlGetProp(root->children, (const xmlChar *)"size");
    cr_assert_str_eq((const char *)size, "4096");
    xmlFree(size);
    uint64_t before = fixture_stats(b).frees;
    xmlFreeDoc(doc);
    cr_assert_gt(fixture_stats(b).frees, before + 3);
}
