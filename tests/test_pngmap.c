/* test_pngmap.c - the occupancy map: a PNG per tile, one file up to 128 GiB
 * (a 64 GiB pool with a single 4 KiB block draws that span as a cell of at
 * least 3x3 pixels in the chunk-layer colour), several tiles beyond. */
#include <criterion/criterion.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "service/occupancy.h"
#include "pngmap.h"

static char dir[] = "/tmp/fmem-packaging-pngmap-XXXXXX";

static void setup(void)
{
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

/* count pixels of exactly colour (r, g, b) in a PNG */
static long count_color(const char *path, int r, int g, int b, unsigned *w, unsigned *h)
{
    png_image im = {.version = PNG_IMAGE_VERSION};
    cr_assert(png_image_begin_read_from_file(&im, path), "%s: not a PNG", path);
    im.format = PNG_FORMAT_RGB;
    unsigned char *px = malloc(PNG_IMAGE_SIZE(im));
    cr_assert(png_image_finish_read(&im, NULL, px, 0, NULL));
    long n = 0;
    for (size_t i = 0; i < (size_t)im.width * im.height; i++)
        n += px[3 * i] == r && px[3 * i + 1] == g && px[3 * i + 2] == b;
    *w = im.width;
    *h = im.height;
    free(px);
    return n;
}

Test(pngmap, one_4k_block_visible_in_64_gib, .init = setup, .fini = teardown)
{
    uint64_t nspans = (UINT64_C(64) << 30) / (128 << 10);
    uint8_t *st = calloc(nspans, 1);
    st[nspans / 2] = OCC_CHUNK_BASE + 1; /* one chunk of one span in use */
    char path[128];
    snprintf(path, sizeof path, "%s/map.png", dir);
    cr_assert_eq(pngmap_write(path, st, nspans, "fmem pool", "64 GiB"), 1);
    unsigned w, h;
    /* the colour of a span with one chunk used (chunk_color(1)) */
    long n = count_color(path, 140, 210, 140, &w, &h);
    cr_assert_geq(n, 9 + 9, "the span with one block covers %ld pixels (legend box too)", n);
    cr_assert_lt(w, 4000);
    cr_assert_lt(h, 10000);
    free(st);
}

Test(pngmap, large_pools_are_tiled, .init = setup, .fini = teardown)
{
    uint64_t nspans = (UINT64_C(200) << 30) / (128 << 10); /* 200 GiB */
    uint8_t *st = calloc(nspans, 1);
    char path[128], second[128], third[128];
    snprintf(path, sizeof path, "%s/map.png", dir);
    snprintf(second, sizeof second, "%s/map-2.png", dir);
    snprintf(third, sizeof third, "%s/map-3.png", dir);
    cr_assert_eq(pngmap_write(path, st, nspans, "fmem pool", "200 GiB"), 2);
    cr_assert_eq(access(path, R_OK), 0);
    cr_assert_eq(access(second, R_OK), 0);
    cr_assert_neq(access(third, R_OK), 0);
    free(st);
}
