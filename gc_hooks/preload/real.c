/* real.c - the system allocator behind the interposer.
 *
 * dlsym() itself may allocate (glibc's dlerror state uses calloc), and our
 * malloc is what it would call: while this thread is looking the functions
 * up, allocations come from a small static buffer instead. Blocks from the
 * buffer are never reused; free() ignores them. */
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "preload.h"

struct real_fns fp_real;

static _Thread_local int resolving __attribute__((tls_model("initial-exec")));
static _Atomic int ready;

#define BOOT_SIZE (64 * 1024)
#define BOOT_HDR 16 /* size of the block, kept in front of it */
static _Alignas(64) unsigned char boot[BOOT_SIZE];
static _Atomic size_t boot_used;

void *fp_boot_alloc(size_t size, size_t align)
{
    if (align < BOOT_HDR)
        align = BOOT_HDR;
    if (size > BOOT_SIZE || align > 4096)
        return NULL;
    size_t old = atomic_load(&boot_used), start, end;
    do {
        start = (old + BOOT_HDR + align - 1) & ~(align - 1);
        end = start + ((size + 15) & ~(size_t)15);
        if (end > BOOT_SIZE)
            return NULL;
    } while (!atomic_compare_exchange_weak(&boot_used, &old, end));
    memcpy(boot + start - BOOT_HDR, &size, sizeof size);
    return boot + start; /* static storage: already zero */
}

int fp_boot_owns(const void *p)
{
    return (const unsigned char *)p >= boot && (const unsigned char *)p < boot + BOOT_SIZE;
}

size_t fp_boot_size(const void *p)
{
    size_t size;
    memcpy(&size, (const unsigned char *)p - BOOT_HDR, sizeof size);
    return size;
}

/* A function pointer from dlsym (POSIX guarantees the conversion). */
#define LOOKUP(name)                                                        \
    do {                                                                    \
        void *sym = dlsym(RTLD_NEXT, #name);                                \
        memcpy(&fp_real.name, &sym, sizeof sym);                            \
    } while (0)

int fp_real_init(void)
{
    if (atomic_load_explicit(&ready, memory_order_acquire))
        return 0;
    if (resolving)
        return -1;
    resolving = 1;
    LOOKUP(malloc);
    LOOKUP(free);
    LOOKUP(calloc);
    LOOKUP(realloc);
    LOOKUP(posix_memalign);
    LOOKUP(aligned_alloc);
    LOOKUP(memalign);
    LOOKUP(valloc);
    LOOKUP(pvalloc);
    LOOKUP(malloc_usable_size);
    resolving = 0;
    if (!fp_real.malloc || !fp_real.free || !fp_real.calloc || !fp_real.realloc ||
        !fp_real.posix_memalign || !fp_real.malloc_usable_size) {
        fp_say("cannot find the system allocator (dlsym RTLD_NEXT)");
        return -1;
    }
    atomic_store_explicit(&ready, 1, memory_order_release);
    return 0;
}
