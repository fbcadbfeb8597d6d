/* fmem_lua_host.c - the heap under fmem-lua's main state: chosen with
 * $FMEM_LUA_BACKING, reported with $FMEM_LUA_STATS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lualib.h>

#include "fmem_lua.h"

#define DEFAULT_REGION_SIZE ((size_t)256 << 20)

static const char *backing_name = "shm";

const char *host_backing_name(void)
{
    return backing_name;
}

static int bad_spec(const char *spec)
{
    fprintf(stderr, "fmem-lua: FMEM_LUA_BACKING='%s': want shm, region:CACHE[:SIZE] "
                    "(e.g. region:50, region:50%%:64M or region:8M:64M) or libc\n", spec);
    return -1;
}

/* "region:CACHE[:SIZE]": CACHE is a percentage of SIZE ("50", "50%") or a
 * size ("12M") */
static int parse_region(struct host *h, const char *spec)
{
    const char *p = spec + strlen("region");
    if (*p++ != ':')
        return bad_spec(spec);
    char cache[32];
    size_t n = strcspn(p, ":");
    if (n == 0 || n >= sizeof cache)
        return bad_spec(spec);
    memcpy(cache, p, n);
    cache[n] = '\0';
    h->region_size = DEFAULT_REGION_SIZE;
    if (p[n] == ':' && (lfmem_parse_size(p + n + 1, &h->region_size) || h->region_size == 0))
        return bad_spec(spec);
    char *end;
    double pct = strtod(cache, &end);
    if (end != cache && (!*end || !strcmp(end, "%"))) {
        if (!(pct > 0 && pct <= 100))
            return bad_spec(spec);
        h->cache_bytes = (size_t)((double)h->region_size * pct / 100.0);
    } else if (lfmem_parse_size(cache, &h->cache_bytes) || h->cache_bytes == 0) {
        return bad_spec(spec);
    }
    h->kind = HOST_REGION;
    return 0;
}

static int parse_backing(struct host *h)
{
    const char *spec = getenv("FMEM_LUA_BACKING");
    if (!spec || !*spec)
        spec = "shm";
    snprintf(h->spec, sizeof h->spec, "%s", spec);
    backing_name = h->spec;
    if (!strcmp(spec, "shm") || !strcmp(spec, "pool")) {
        h->kind = HOST_POOL;
        return 0;
    }
    if (!strcmp(spec, "libc")) {
        h->kind = HOST_LIBC;
        return 0;
    }
    if (!strncmp(spec, "region", 6))
        return parse_region(h, spec);
    return bad_spec(spec);
}

int host_setup(struct host *h)
{
    memset(h, 0, sizeof *h);
    if (parse_backing(h))
        return -1;
    if (h->kind == HOST_LIBC)
        return 0;
    fmem_pool *pool;
    const char *uri = getenv("FMEM_URI");
    int rc = fmem_open(NULL, &pool);
    if (rc) {
        fprintf(stderr, "fmem-lua: cannot open the pool %s: %s\n", uri && *uri ? uri : "mem:",
                fmem_strerror(rc));
        return -1;
    }
    if (!(h->pool = lfmem_pool_adopt(pool))) {
        fmem_close(pool);
        return -1;
    }
    fmem_stats_t st;
    if (fmem_stats(pool, &st) == 0)
        h->pool_before = st.allocated_bytes;
    if (h->kind == HOST_POOL) {
        rc = lfmem_backing_on_pool(&h->back, h->pool);
    } else if ((rc = lfmem_region_create(h->pool, h->region_size, h->cache_bytes,
                                         &h->region)) == 0) {
        rc = lfmem_backing_on_region(&h->back, h->region);
    }
    if (rc) {
        fprintf(stderr, "fmem-lua: cannot make a heap (%s): %s%s\n", h->spec, fmem_strerror(rc),
                rc == FMEM_EACCES ? " (regions need userfaultfd: root, or "
                                    "vm.unprivileged_userfaultfd=1)" : "");
        lfmem_region_unref(h->region);
        lfmem_pool_unref(h->pool);
        return -1;
    }
    return 0;
}

lua_State *host_newstate(struct host *h)
{
    if (h->kind == HOST_LIBC)
        return luaL_newstate();
    lua_State *L = lfmem_backing_newstate(&h->back);
    if (L) { /* fmem.host() reports on this heap */
        lua_pushlightuserdata(L, &h->back);
        lua_setfield(L, LUA_REGISTRYINDEX, LFMEM_HOST_KEY);
    }
    return L;
}

int host_teardown(struct host *h, lua_State *L)
{
    const char *want = getenv("FMEM_LUA_STATS");
    int report = want && *want && strcmp(want, "0");
    if (L)
        lua_close(L);
    if (h->kind == HOST_LIBC) {
        if (report)
            fprintf(stderr, "fmem-lua: backing=libc\n");
        return 0;
    }
    fmem_heap_stats_t hs;
    fmem_hooks_stats_t ks;
    fmem_region_stats_t rs = {0};
    fmem_heap_collect(h->back.heap);
    fmem_heap_stats(h->back.heap, &hs);
    fmem_hooks_stats(h->back.hooks, &ks);
    if (h->region)
        fmem_region_stats(h->region->region, &rs);
    lfmem_backing_release(&h->back);
    lfmem_region_unref(h->region); /* our own reference: destroys it */
    fmem_stats_t ps;
    fmem_stats(h->pool->pool, &ps);
    int leaked = ps.allocated_bytes > h->pool_before;
    if (report) {
        fprintf(stderr,
                "fmem-lua: backing=%s heap_peak=%llu heap_after_close=%llu mallocs=%llu "
                "frees=%llu spills=%llu pool_before=%llu pool_after=%llu",
                h->spec, (unsigned long long)hs.remote_peak,
                (unsigned long long)hs.remote_bytes, (unsigned long long)ks.mallocs,
                (unsigned long long)ks.frees, (unsigned long long)ks.spills, h->pool_before,
                (unsigned long long)ps.allocated_bytes);
        if (h->region)
            fprintf(stderr,
                    " region_size=%zu cache_bytes=%llu faults=%llu fetches=%llu "
                    "prefetches=%llu evictions=%llu writebacks=%llu remote_peak=%llu",
                    h->region_size, (unsigned long long)rs.cache_bytes,
                    (unsigned long long)rs.faults, (unsigned long long)rs.fetches,
                    (unsigned long long)rs.prefetches, (unsigned long long)rs.evictions,
                    (unsigned long long)rs.writebacks, (unsigned long long)rs.remote_peak);
        fputc('\n', stderr);
    }
    if (leaked && report) /* others may share the pool: only a hint */
        fprintf(stderr, "fmem-lua: %llu bytes of the pool still allocated after close\n",
                (unsigned long long)(ps.allocated_bytes - h->pool_before));
    lfmem_pool_unref(h->pool);
    return leaked ? -1 : 0;
}
