/* size_parse.h - the one parser of byte sizes, for every place that takes
 * one: pool URIs (size=), daemon and benchmark flags, FMEM_LUA_BACKING,
 * FMEM_PRELOAD_THRESHOLD, the Lua binding's size strings.
 *
 * Accepted: decimal digits, then nothing or one unit: K, M, G or T (either
 * case), optionally followed by "B" or "iB" (either case). Every unit is a
 * power of 1024: 4K = 4KB = 4KiB = 4096. Nothing else may follow (no
 * spaces, no fractions, no sign). Header-only so that the preload library,
 * the Lua module built by luarocks and the tools share it without linking
 * anything. */
#ifndef FMEM_SIZE_PARSE_H
#define FMEM_SIZE_PARSE_H

#include <stdbool.h>
#include <stdint.h>

/* Parse s into *out; false (and *out unchanged) on junk or overflow. */
static inline bool size_parse(const char *s, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return false;
    uint64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    unsigned shift = 0;
    switch (*s) {
    case 'K': case 'k': shift = 10; break;
    case 'M': case 'm': shift = 20; break;
    case 'G': case 'g': shift = 30; break;
    case 'T': case 't': shift = 40; break;
    case 0: break;
    default: return false;
    }
    if (shift) {
        s++;
        if ((s[0] == 'i' || s[0] == 'I') && (s[1] == 'B' || s[1] == 'b'))
            s += 2;
        else if (s[0] == 'B' || s[0] == 'b')
            s += 1;
    }
    if (*s || (shift && v > (UINT64_MAX >> shift)))
        return false;
    *out = v << shift;
    return true;
}

#endif
