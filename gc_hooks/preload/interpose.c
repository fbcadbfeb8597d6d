/* interpose.c - the allocation functions a program linked with the system
 * allocator calls, sending requests of at least FMEM_PRELOAD_THRESHOLD
 * bytes to the pool and everything else to the next allocator in line.
 * Every pointer is routed back by address: inside a pool range it is a
 * block, inside the bootstrap buffer it is never freed, otherwise it
 * belongs to the system allocator. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "preload.h"

#define API __attribute__((visibility("default")))

static int is_large(size_t n)
{
    return !fp_in_pool && fp_config_init() == 0 && fp_cfg.enabled && n >= fp_cfg.threshold;
}

static int pow2(size_t a) { return a && !(a & (a - 1)); }

API void *malloc(size_t n)
{
    if (fp_real_init())
        return fp_boot_alloc(n, 0);
    if (is_large(n)) {
        void *p = fp_block_alloc(n, 0, 0);
        if (p)
            return p;
    }
    return fp_real.malloc(n);
}

API void free(void *p)
{
    if (!p || fp_boot_owns(p))
        return;
    if (fp_block_owns(p))
        fp_block_free(p);
    else if (fp_real_init() == 0)
        fp_real.free(p);
}

API void *calloc(size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    if (fp_real_init())
        return fp_boot_alloc(total, 0);
    if (is_large(total)) {
        void *p = fp_block_alloc(total, 0, 1);
        if (p)
            return p;
    }
    return fp_real.calloc(n, size);
}

static void *move(void *p, size_t old, size_t n)
{
    void *q = malloc(n);
    if (q)
        memcpy(q, p, old < n ? old : n);
    return q;
}

API void *realloc(void *p, size_t n)
{
    if (!p)
        return malloc(n);
    if (fp_boot_owns(p))
        return n ? move(p, fp_boot_size(p), n) : NULL;
    if (fp_block_owns(p)) {
        if (n == 0) { /* as glibc: free, return NULL */
            fp_block_free(p);
            return NULL;
        }
        /* in place: shrinking (unless the block would be mostly empty)
         * or growing within the block's slot */
        if (is_large(n) && fp_block_resize(p, n) == 0)
            return p;
        void *q = move(p, fp_block_size(p), n);
        if (q)
            fp_block_free(p);
        return q;
    }
    if (fp_real_init())
        return NULL;
    if (is_large(n)) {
        size_t old = fp_real.malloc_usable_size(p);
        if (n > old) {
            void *q = fp_block_alloc(n, 0, 0);
            if (q) {
                memcpy(q, p, old);
                fp_real.free(p);
                return q;
            }
        }
    }
    return fp_real.realloc(p, n);
}

API void *reallocarray(void *p, size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(p, total);
}

API int posix_memalign(void **out, size_t align, size_t n)
{
    if (!pow2(align) || align % sizeof(void *))
        return EINVAL;
    void *p;
    if (fp_real_init()) {
        p = fp_boot_alloc(n, align);
        if (!p)
            return ENOMEM;
        *out = p;
        return 0;
    }
    if (is_large(n) && (p = fp_block_alloc(n, align, 0)) != NULL) {
        *out = p;
        return 0;
    }
    return fp_real.posix_memalign(out, align, n);
}

/* memalign, aligned_alloc, valloc, pvalloc: the same after their own
 * argument rules. */
static void *aligned(size_t align, size_t n)
{
    if (fp_real_init())
        return fp_boot_alloc(n, align);
    if (is_large(n) && pow2(align)) {
        void *p = fp_block_alloc(n, align, 0);
        if (p)
            return p;
    }
    return fp_real.memalign(align, n);
}

API void *memalign(size_t align, size_t n) { return aligned(align, n); }

API void *aligned_alloc(size_t align, size_t n)
{
    if (!pow2(align)) {
        errno = EINVAL;
        return NULL;
    }
    return aligned(align, n);
}

API void *valloc(size_t n) { return aligned((size_t)sysconf(_SC_PAGESIZE), n); }

API void *pvalloc(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t rounded = n ? (n + page - 1) & ~(page - 1) : page;
    if (rounded < n) {
        errno = ENOMEM;
        return NULL;
    }
    return aligned(page, rounded);
}

API size_t malloc_usable_size(void *p)
{
    if (!p)
        return 0;
    if (fp_boot_owns(p))
        return fp_boot_size(p);
    if (fp_block_owns(p))
        return fp_block_size(p);
    return fp_real_init() ? 0 : fp_real.malloc_usable_size(p);
}

__attribute__((constructor)) static void preload_init(void)
{
    fp_real_init();
    fp_config_init();
    fp_fork_register();
}
