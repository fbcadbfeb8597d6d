/* lua.c - Lua's lua_Alloc on a binding:
 *   lua_State *L = lua_newstate(fmem_hooks_lua_alloc, binding);
 * Lua passes the old size and, for new blocks, a type tag in osize (not
 * needed here: the heap knows every object's size). */
#include "hooks_internal.h"

FMEM_API void *fmem_hooks_lua_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    fmem_hooks *b = ud;
    if (nsize == 0) {
        fmem_hooks_free(b, ptr);
        return NULL;
    }
    if (!ptr)
        return fmem_hooks_malloc(b, nsize);
    void *q = fmem_hooks_realloc(b, ptr, nsize);
    /* Lua may assume a block never fails to shrink: keep the old one */
    return q || nsize > osize ? q : ptr;
}
