/* python_share.h - the table of pymalloc pages shared between pools
 * (python_share.c makes them, python_unshare.c undoes them). With the GIL
 * held. */
#ifndef FMEM_GC_HOOKS_PYTHON_SHARE_H
#define FMEM_GC_HOOKS_PYTHON_SHARE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A page that other pages map (an owner), or a page that maps one (an
 * alias: its own pool-file page, punched, stays mapped at t so that it can
 * be mapped back), or an alias left with a private copy (owner SH_LOCAL)
 * when its owner's arena went. */
#define SH_OWNER ((uintptr_t)0)
#define SH_LOCAL ((uintptr_t)1)

struct share_ent {
    uintptr_t page;     /* 0: an empty slot */
    uintptr_t owner;    /* SH_OWNER, SH_LOCAL, or the owner page it maps */
    void *t;            /* an alias's own file page */
    unsigned naliases;  /* an owner's aliases */
    int fenced;         /* write-fenced while its owner hands over */
};

extern struct share_ent *share_tab; /* share_cap slots, open addressing */
extern size_t share_cap, share_n, share_aliases;
extern pid_t share_pid; /* the process that made the mappings */
/* The write fence of a merge or hand-over (libfmem/far/write_fence.h):
 * opened at the first pass of the process that shares; -1 where
 * userfaultfd is refused or handles user-mode faults only, with
 * FMEM_COMPACT_FENCE=0, and from the first page that cannot be
 * write-protected (a kernel without write-protect on shared memory).
 * Without it pages are remapped unfenced. */
extern int share_fence;
/* Write-fence page `page` (4 KiB): 1, or 0 when it stays unfenced. */
int share_fence_up(void *page);

struct share_ent *share_find(uintptr_t page);
/* A new entry for page (not in the table), or NULL without memory. */
struct share_ent *share_add(uintptr_t page);
void share_del(uintptr_t page);

#endif
