/* pngmap.c - the occupancy map of a pool as a PNG image: one square cell per
 * span (128 KiB), sections of 16 spans side by side, colored by state, with
 * a title and a legend drawn in a small built-in font. */
#include "pngmap.h"

#include <ctype.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "font5x7.h"
#include "service/occupancy.h"

struct rgb {
    uint8_t r, g, b;
};

static const struct rgb BG = {255, 255, 255}, INK = {20, 20, 20}, GRID = {200, 200, 200};
static const struct rgb C_FREE = {244, 244, 244}, C_BLOCK = {30, 100, 200},
                        C_CONT = {245, 140, 0}, C_MOVING = {220, 40, 40};

/* chunk layer: pale yellow when empty; from one 4 KiB chunk on a green
 * that stands out from free spans, darker as the span fills */
static struct rgb chunk_color(unsigned used)
{
    static const struct rgb empty = {240, 235, 190}, lo = {140, 210, 140}, hi = {15, 95, 35};
    if (used == 0)
        return empty;
    struct rgb c = {(uint8_t)(lo.r + (hi.r - lo.r) * (int)(used - 1) / 31),
                    (uint8_t)(lo.g + (hi.g - lo.g) * (int)(used - 1) / 31),
                    (uint8_t)(lo.b + (hi.b - lo.b) * (int)(used - 1) / 31)};
    return c;
}

static struct rgb state_color(uint8_t s)
{
    if (s == OCC_FREE)
        return C_FREE;
    if (s == OCC_MOVING)
        return C_MOVING;
    if (s == OCC_SPAN_BLOCK)
        return C_BLOCK;
    if (s & OCC_CONTENDED)
        return C_CONT;
    return chunk_color(occ_used_chunks(s));
}

struct img {
    unsigned w, h;
    uint8_t *px;
};

static void put(struct img *im, unsigned x, unsigned y, struct rgb c)
{
    if (x >= im->w || y >= im->h)
        return;
    uint8_t *p = im->px + 3 * ((size_t)y * im->w + x);
    p[0] = c.r;
    p[1] = c.g;
    p[2] = c.b;
}

static void rect(struct img *im, unsigned x, unsigned y, unsigned w, unsigned h, struct rgb c)
{
    for (unsigned j = 0; j < h; j++)
        for (unsigned i = 0; i < w; i++)
            put(im, x + i, y + j, c);
}

static const struct glyph *glyph_of(char c)
{
    /* the case as written; a letter the font lacks in that case in the other */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < sizeof font5x7 / sizeof font5x7[0]; i++)
            if (font5x7[i].c == c)
                return &font5x7[i];
        c = (char)(isupper((unsigned char)c) ? tolower((unsigned char)c)
                                              : toupper((unsigned char)c));
    }
    return &font5x7[0];
}

/* Draw text at (x, y) with pixels `sc` wide; returns the width used. */
static unsigned text(struct img *im, unsigned x, unsigned y, unsigned sc, const char *s)
{
    unsigned x0 = x;
    for (; *s; s++, x += 6 * sc) {
        const struct glyph *g = glyph_of(*s);
        for (unsigned r = 0; r < 7; r++)
            for (unsigned col = 0; col < 5; col++)
                if (g->rows[r][col] == '#')
                    rect(im, x + col * sc, y + r * sc, sc, sc, INK);
    }
    return x - x0;
}

/* "0", "8M", "1G", "1536M": a byte offset, exact */
static void offset_label(char *buf, size_t cap, uint64_t off)
{
    if (off && off % (UINT64_C(1) << 30) == 0)
        snprintf(buf, cap, "%lluG", (unsigned long long)(off >> 30));
    else if (off && off % (UINT64_C(1) << 20) == 0)
        snprintf(buf, cap, "%lluM", (unsigned long long)(off >> 20));
    else
        snprintf(buf, cap, "%llu", (unsigned long long)off);
}

#define MAX_ROWS 2048 /* per image: larger pools are drawn as several tiles */
#define SPAN_BYTES (UINT64_C(128) << 10)

static int write_png(const char *path, const struct img *im);

/* One image: spans first .. first + count - 1 of a pool of nspans. */
static int draw_tile(const char *path, const uint8_t *states, uint64_t first, uint64_t count,
                     unsigned cols, unsigned cell, const char *title, const char *subtitle)
{
    unsigned gap = cell >= 6 ? 1 : 0;
    uint64_t rows = (count + cols - 1) / cols;
    unsigned sc = 2, margin = 12, line = 9 * sc;
    unsigned axis_w = 8 * 6 * sc; /* "offset" and labels like "131071M" */
    unsigned grid_x = margin + axis_w + 6;
    unsigned grid_w = cols * cell + (cols / 16) * 2 * gap;
    unsigned w = grid_x + grid_w + margin;
    if (w < 640)
        w = 640;
    size_t longest = strlen(title) > strlen(subtitle) ? strlen(title) : strlen(subtitle);
    if (w < 2 * margin + longest * 6 * sc)
        w = 2 * margin + (unsigned)longest * 6 * sc;
    unsigned legend_rows = 4;
    unsigned grid_y = margin + 3 * line + 8;
    unsigned h = grid_y + (unsigned)rows * cell + 12 + legend_rows * (line + 6) + margin;
    struct img im = {w, h, malloc((size_t)w * h * 3)};
    if (!im.px)
        return -1;
    for (size_t i = 0; i < (size_t)w * h; i++)
        memcpy(im.px + 3 * i, &BG, 3);
    text(&im, margin, margin, sc, title);
    text(&im, margin, margin + line, sc, subtitle);
    text(&im, margin, grid_y - line - 2, sc, "offset");
    /* the address axis: the pool offset of a row's first span, every few
     * rows (at least a text line apart), with a tick */
    unsigned step = 1;
    while (step * cell < line + 2)
        step *= 2;
    for (uint64_t r = 0; r < rows; r += step) {
        char lab[24];
        offset_label(lab, sizeof lab, (first + r * cols) * SPAN_BYTES);
        unsigned y = grid_y + (unsigned)r * cell;
        unsigned lw = (unsigned)strlen(lab) * 6 * sc;
        text(&im, grid_x - 6 - lw, y, sc, lab);
        rect(&im, grid_x - 4, y, 3, 1, INK);
    }
    /* the grid: a thin border around every section of 16 spans */
    for (uint64_t k = 0; k < count; k++) {
        uint8_t st = states[first + k];
        unsigned col = (unsigned)(k % cols), row = (unsigned)(k / cols);
        unsigned x = grid_x + col * cell + (col / 16) * 2 * gap;
        unsigned y = grid_y + row * cell;
        rect(&im, x, y, cell, cell, gap ? GRID : state_color(st));
        if (gap)
            rect(&im, x + gap, y + gap, cell - 2 * gap, cell - 2 * gap, state_color(st));
    }
    /* legend */
    struct {
        struct rgb c;
        const char *what;
    } items[] = {
        {C_FREE, "free span"},
        {chunk_color(0), "4K-64K blocks: span empty"},
        {chunk_color(1), "one 4K chunk used"},
        {chunk_color(16), "span half used"},
        {chunk_color(32), "span full"},
        {C_CONT, "span contended"},
        {C_BLOCK, "part of a 128K+ block"},
        {C_MOVING, "span being moved"},
    };
    unsigned ly = grid_y + (unsigned)rows * cell + 12, lx = margin;
    unsigned box = 7 * sc;
    for (size_t i = 0; i < sizeof items / sizeof items[0]; i++) {
        unsigned need = box + 6 + (unsigned)strlen(items[i].what) * 6 * sc + 18;
        if (lx + need > w - margin) {
            lx = margin;
            ly += line + 6;
        }
        rect(&im, lx, ly, box, box, INK);
        rect(&im, lx + 1, ly + 1, box - 2, box - 2, items[i].c);
        lx += box + 6;
        lx += text(&im, lx, ly, sc, items[i].what) + 18;
    }
    unsigned used_h = ly + line + margin;
    if (used_h < im.h)
        im.h = used_h;

    int rc = write_png(path, &im);
    free(im.px);
    return rc;
}

int pngmap_write(const char *path, const uint8_t *states, uint64_t nspans, const char *title,
                 const char *subtitle)
{
    /* spans per row: whole sections; a cell is never under 3 pixels so a
     * span holding a single 4 KiB block stays visible; pools of more than
     * 512 x MAX_ROWS spans (128 GiB) go into several files: PATH, then
     * PATH with -2, -3, ... before ".png" */
    unsigned cols = 64;
    while (nspans / cols > MAX_ROWS && cols < 512)
        cols *= 2;
    unsigned cell = cols <= 64 ? 10 : cols <= 128 ? 6 : cols <= 256 ? 4 : 3;
    uint64_t per_tile = (uint64_t)cols * MAX_ROWS;
    uint64_t tiles = nspans ? (nspans + per_tile - 1) / per_tile : 1;
    size_t plen = strlen(path);
    const char *dot = plen >= 4 ? path + plen - 4 : path + plen;
    for (uint64_t t = 0; t < tiles; t++) {
        char name[4096], sub[512];
        if (t == 0)
            snprintf(name, sizeof name, "%s", path);
        else
            snprintf(name, sizeof name, "%.*s-%llu%s", (int)(dot - path), path,
                     (unsigned long long)t + 1, dot);
        uint64_t first = t * per_tile;
        uint64_t count = nspans - first < per_tile ? nspans - first : per_tile;
        if (tiles > 1)
            snprintf(sub, sizeof sub, "%s; tile %llu of %llu", subtitle,
                     (unsigned long long)t + 1, (unsigned long long)tiles);
        else
            snprintf(sub, sizeof sub, "%s", subtitle);
        if (draw_tile(name, states, first, count, cols, cell, title, sub))
            return -1;
    }
    return (int)tiles;
}

static int write_png(const char *path, const struct img *src)
{
    struct img im = *src;
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info || setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        fclose(f);
        return -1;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, im.w, im.h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (unsigned y = 0; y < im.h; y++)
        png_write_row(png, im.px + (size_t)y * im.w * 3);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return fclose(f) == 0 ? 0 : -1;
}
