/* alloc_mmap.c - local mmap + munmap of the same size: the cost of getting
 * fresh pages from the kernel, to compare with fmem at zero delay. The
 * pages are not touched (neither are fmem's). */
#include <stdint.h>
#include <sys/mman.h>

#include "bench.h"

static int open_mmap(const struct alloc_params *p, void **self)
{
    (void)p;
    *self = NULL;
    return 0;
}

static void close_mmap(void *self) { (void)self; }

static int alloc_block(void *self, size_t size, fmem_handle *out, struct op_cost *c)
{
    (void)self;
    *c = (struct op_cost){0};
    size_t len = fmem_size_round(size);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return FMEM_ENOMEM;
    *out = (fmem_handle){.addr = (uint64_t)(uintptr_t)p, .length = len};
    return 0;
}

static int free_block(void *self, const fmem_handle *h, struct op_cost *c)
{
    (void)self;
    *c = (struct op_cost){0};
    return munmap((void *)(uintptr_t)h->addr, h->length) ? FMEM_EIO : 0;
}

static void set_rtt(void *self, uint64_t rtt_ns)
{
    (void)self;
    (void)rtt_ns;
}

const struct allocator alloc_mmap = {
    .name = "mmap",
    .what = "local mmap+munmap (no delay; for --rtt-ns 0)",
    .open = open_mmap,
    .close = close_mmap,
    .alloc = alloc_block,
    .free = free_block,
    .set_rtt = set_rtt,
};
