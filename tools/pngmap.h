/* pngmap.h - the occupancy map as a PNG image (libpng). */
#ifndef FMEM_SVC_PNGMAP_H
#define FMEM_SVC_PNGMAP_H

#include <stdint.h>

/* states: one occupancy.h byte per span. The number of files written (1, or
 * several tiles for pools over 128 GiB: PATH, PATH-2.png, ...) or -1 (errno). */
int pngmap_write(const char *path, const uint8_t *states, uint64_t nspans, const char *title,
                 const char *subtitle);

#endif
