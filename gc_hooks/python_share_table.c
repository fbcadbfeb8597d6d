/* python_share_table.c - the table of shared pages (python_share.h): a
 * hash table of page addresses, linear probing, deletion by shifting. */
#include "fmem_hooks_python.h"
#include "python_pools.h"
#include "python_share.h"

#include <stdlib.h>

struct share_ent *share_tab;
size_t share_cap, share_n, share_aliases;
pid_t share_pid;
int share_fence = -1;

static size_t home(uintptr_t page)
{
    return (size_t)((page >> 12) * 0x9E3779B97F4A7C15ull) & (share_cap - 1);
}

static size_t slot(uintptr_t page)
{
    size_t i = home(page);
    while (share_tab[i].page && share_tab[i].page != page)
        i = (i + 1) & (share_cap - 1);
    return i;
}

struct share_ent *share_find(uintptr_t page)
{
    if (!share_n)
        return NULL;
    size_t i = slot(page);
    return share_tab[i].page ? &share_tab[i] : NULL;
}

struct share_ent *share_add(uintptr_t page)
{
    if (2 * (share_n + 1) > share_cap) {
        size_t cap = share_cap ? 2 * share_cap : 1024, oldcap = share_cap;
        struct share_ent *old = share_tab, *t = calloc(cap, sizeof *t);
        if (!t)
            return NULL;
        share_tab = t;
        share_cap = cap;
        for (size_t i = 0; i < oldcap; i++)
            if (old[i].page)
                share_tab[slot(old[i].page)] = old[i];
        free(old);
    }
    size_t i = slot(page);
    share_n++;
    share_tab[i] = (struct share_ent){.page = page};
    return &share_tab[i];
}

void share_del(uintptr_t page)
{
    if (!share_n)
        return;
    size_t i = slot(page), mask = share_cap - 1;
    if (!share_tab[i].page)
        return;
    for (size_t j = i;;) { /* shift later entries of the run back */
        j = (j + 1) & mask;
        if (!share_tab[j].page)
            break;
        size_t k = home(share_tab[j].page);
        if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
            continue;
        share_tab[i] = share_tab[j];
        i = j;
    }
    share_tab[i].page = 0;
    share_n--;
}

unsigned pm_shared_pages(const struct pm_pool_header *h)
{
    unsigned bits = 0;
    if (!share_n)
        return 0;
    for (size_t p = 0; p < PM_PAGES; p++)
        if (share_find((uintptr_t)h + p * PM_HEAD_PAGE))
            bits |= 1u << p;
    return bits;
}

FMEM_API size_t fmem_hooks_python_shared_pages(void)
{
    return share_aliases;
}
