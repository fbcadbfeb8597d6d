/* test_openssl.c - OpenSSL 3 allocating through closures of a binding
 * (CRYPTO_set_mem_functions, which only works before OpenSSL's first
 * allocation: hence a plain program rather than a Criterion test, whose
 * runner loads libcrypto itself). Exit status 0 when every check holds. */
#include <fmem_hooks.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

static int failed;
#define CHECK(c) ((c) ? (void)0 : (void)(failed++, fprintf(stderr, "check failed: %s\n", #c)))

typedef void *(*m_fn)(size_t, const char *, int);
typedef void *(*r_fn)(void *, size_t, const char *, int);
typedef void (*f_fn)(void *, const char *, int);

int main(void)
{
    fmem_pool *pool;
    fmem_hooks *b;
    if (fmem_open("mem:?size=64M", &pool) || fmem_hooks_new_pool(pool, &b)) {
        fprintf(stderr, "test_openssl: no pool\n");
        return 1;
    }
    CHECK(CRYPTO_set_mem_functions((m_fn)fmem_hooks_closure(b, FMEM_HOOKS_FILELINE_MALLOC),
                                   (r_fn)fmem_hooks_closure(b, FMEM_HOOKS_FILELINE_REALLOC),
                                   (f_fn)fmem_hooks_closure(b, FMEM_HOOKS_FILELINE_FREE)) == 1);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    CHECK(fmem_hooks_owns(b, ctx)); /* the digest context is a heap object */
    unsigned char md[32];
    unsigned len = 0;
    CHECK(EVP_DigestInit_ex(ctx, EVP_sha256(), NULL));
    CHECK(EVP_DigestUpdate(ctx, "abc", 3));
    CHECK(EVP_DigestFinal_ex(ctx, md, &len));
    EVP_MD_CTX_free(ctx);
    static const unsigned char want[4] = {0xba, 0x78, 0x16, 0xbf}; /* SHA-256("abc") */
    CHECK(len == 32 && memcmp(md, want, 4) == 0);
    void *p = OPENSSL_malloc(100);
    CHECK(fmem_hooks_owns(b, p));
    p = OPENSSL_realloc(p, 100000);
    CHECK(fmem_hooks_owns(b, p));
    OPENSSL_free(p);
    fmem_hooks_stats_t st;
    fmem_hooks_stats(b, &st);
    CHECK(st.mallocs > 2 && st.frees > 1);
    printf("test_openssl: %llu heap objects allocated, %llu freed; %s\n",
           (unsigned long long)st.mallocs, (unsigned long long)st.frees, failed ? "FAILED" : "ok");
    /* OpenSSL frees its globals at exit, through the closures: keep the
     * binding and pool alive until then */
    return failed != 0;
}
