/* allocators.c - the list of allocators fmem-bench knows. */
#include <string.h>

#include "bench.h"

const struct allocator *const bench_allocators[] = {
    &alloc_fmem, &alloc_fmem_nolog, &alloc_freearray, &alloc_rpc, &alloc_mmap, NULL,
};

const struct allocator *allocator_by_name(const char *name)
{
    for (unsigned i = 0; bench_allocators[i]; i++)
        if (!strcmp(bench_allocators[i]->name, name))
            return bench_allocators[i];
    return NULL;
}
