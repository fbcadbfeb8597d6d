/* test_alloc.c - allocation and free of every size class (embedded pool). */
#include <criterion/criterion.h>
#include <fmem.h>

Test(alloc, every_size_is_aligned_and_freed)
{
    fmem_pool *p;
    cr_assert_eq(fmem_open("mem:?size=64M", &p), 0);
    for (size_t sz = 4096; sz <= 32u << 20; sz <<= 1) {
        fmem_handle h;
        cr_assert_eq(fmem_alloc(p, sz, &h), 0, "size %zu", sz);
        cr_assert_eq(h.length, sz);
        cr_assert_eq(h.addr % sz, 0, "size %zu at %#llx", sz, (unsigned long long)h.addr);
        cr_assert_eq(fmem_free(p, &h), 0);
    }
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(p, &st), 0);
    cr_assert_eq(st.allocated_bytes, 0);
    fmem_close(p);
}
