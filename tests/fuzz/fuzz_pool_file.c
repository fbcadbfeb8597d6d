/* fuzz_pool_file.c - libFuzzer target for pool files someone rewrote. A
 * small pool with live blocks is made once; each input replaces the first
 * bytes of its metadata file (header, user table, section and span
 * headers, keys, redo log: the rest stays as made), and the pool is opened
 * as any process would, used (allocations of every layer, writes, frees),
 * verified and recovered. Whatever the file says, nothing may crash, read
 * or write outside the pool, hang or leak. Built and run by
 * tests/fuzz/fuzz.sh. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fmem.h"
#include "fmem_admin.h"

static char meta_path[96], uri_make[160], uri_open[160];
static unsigned char *pristine;
static size_t meta_len;
static int meta_fd = -1;

static void remove_pool(void)
{
    fmem_unlink(uri_open);
}

/* The pool every input starts from: blocks of each layer held by user 1,
 * whose process is gone (its slot still names it), a few freed ones. */
static void make_pool(void)
{
    /* fuzz.sh gives a directory it removes even after a crash */
    const char *d = getenv("FMEM_FUZZ_DIR");
    snprintf(meta_path, sizeof meta_path, "%s/fmem-fuzz-pool-%d", d && *d ? d : "/dev/shm",
             (int)getpid());
    snprintf(uri_make, sizeof uri_make, "file:%s?size=8M", meta_path);
    snprintf(uri_open, sizeof uri_open, "file:%s?create=0", meta_path);
    remove_pool();
    fmem_pool *p;
    if (fmem_open(uri_make, &p)) {
        fprintf(stderr, "fuzz_pool_file: cannot make %s\n", meta_path);
        exit(1);
    }
    static const size_t sizes[] = {4096, 8192, 65536, 131072, 1 << 20, 4 << 20, 4096, 16384};
    fmem_handle h[8];
    for (int i = 0; i < 8; i++)
        if (fmem_alloc(p, sizes[i], &h[i]) == 0 && i % 3 == 0)
            fmem_free(p, &h[i]);
    fmem_close(p);
    meta_fd = open(meta_path, O_RDWR);
    /* user 1 keeps its slot, held by a process that is gone */
    uint32_t dead_pid = 0x7ffffff0;
    if (meta_fd < 0 || pwrite(meta_fd, &dead_pid, 4, 256 + 4 * 1) != 4)
        exit(1);
    off_t end = meta_fd >= 0 ? lseek(meta_fd, 0, SEEK_END) : -1;
    if (end <= 0 || !(pristine = malloc((size_t)end)) ||
        pread(meta_fd, pristine, (size_t)end, 0) != end) {
        fprintf(stderr, "fuzz_pool_file: cannot read %s\n", meta_path);
        exit(1);
    }
    meta_len = (size_t)end;
    atexit(remove_pool);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    make_pool();
    return 0;
}

static void use(fmem_pool *p, const uint8_t *data, size_t size)
{
    static const size_t sizes[] = {4096, 12288, 65536, 131072, 524288, 2 << 20, 4 << 20, 8 << 20};
    fmem_stats_t st;
    if (fmem_stats(p, &st))
        abort();
    fmem_handle h[12];
    int n = 0;
    for (int i = 0; i < 12; i++) {
        size_t sz = sizes[(size > (size_t)i ? data[i] : (unsigned)i) % 8];
        if (fmem_alloc(p, sz, &h[n]) == 0) {
            /* a corrupt pool may hand out a block it cannot log (and so
             * not let it be used), but never one outside the pool */
            if (h[n].length < sz || h[n].addr % h[n].length ||
                h[n].addr + h[n].length > st.capacity_bytes)
                abort();
            void *m;
            if (fmem_map(p, &h[n], &m) == 0)
                memset(m, 0x5A, h[n].length);
            char b[16] = "fuzzed pool";
            fmem_write(p, &h[n], h[n].length - sizeof b, b, sizeof b);
            fmem_read(p, &h[n], 0, b, sizeof b);
            n++;
        }
    }
    for (int i = 0; i < n; i += 2)
        fmem_free(p, &h[i]);
    fmem_verify_report r;
    fmem_verify(p, &r, NULL);
    for (int i = 1; i < n; i += 2)
        fmem_free(p, &h[i]);
    /* user 1 is gone: take back what it held (and some other id the input
     * names) */
    fmem_recover(p, 1, NULL);
    if (size > 12)
        fmem_recover(p, 2 + data[12] % 200, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static unsigned char *buf;
    if (!buf && !(buf = malloc(meta_len)))
        return 0;
    memcpy(buf, pristine, meta_len);
    memcpy(buf, data, size < meta_len ? size : meta_len);
    /* an all-zero magic means "a creator is formatting": openers wait 2 s
     * for it, which is not worth fuzzing */
    static const unsigned char zero[8];
    if (!memcmp(buf, zero, 8))
        memcpy(buf, pristine, 8);
    if (pwrite(meta_fd, buf, meta_len, 0) != (ssize_t)meta_len)
        abort();
    fmem_pool *p;
    if (fmem_open(uri_open, &p) == 0) {
        use(p, data, size);
        fmem_close(p);
    }
    return 0;
}
