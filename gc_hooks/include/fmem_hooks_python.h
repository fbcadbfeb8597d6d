/* fmem_hooks_python.h - CPython and numpy allocator hooks on a binding
 * (libfmem_hooks_python; include after or instead of <Python.h>).
 *
 * Each installer wraps what is installed now: objects the binding's heap
 * owns go back to it, every other pointer to the allocator that was there
 * before, so memory allocated earlier stays valid and is freed the old
 * way. To stop placing new memory in the heap, use
 * fmem_hooks_set_active(b, 0) rather than putting the old allocator back:
 * heap objects may still be alive. The binding must then live as long as
 * the interpreter (or, for numpy, as the last array made through it).
 * docs/hooks.md has the rules of each hook.
 */
#ifndef FMEM_HOOKS_PYTHON_H
#define FMEM_HOOKS_PYTHON_H

#include <Python.h>

#include <fmem_hooks.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Wrap the allocator of PYMEM_DOMAIN_RAW, _MEM or _OBJ; `old` (may be
 * NULL) receives the allocator it wraps. RAW: before Py_Initialize() or
 * with the GIL; MEM and OBJ: with the GIL held. Replacing OBJ bypasses
 * pymalloc: every object becomes a heap object. FMEM_EINVAL for another
 * domain, FMEM_ENOMEM when the wrapper's state cannot be allocated. */
FMEM_API int fmem_hooks_python_domain(fmem_hooks *b, PyMemAllocatorDomain domain,
                                      PyMemAllocatorEx *old);

/* Wrap pymalloc's arena allocator (PyObject_SetArenaAllocator): new 1 MiB
 * arenas, and so the small objects inside them, come from the heap. With
 * the GIL held. */
FMEM_API int fmem_hooks_python_arena(fmem_hooks *b, PyObjectArenaAllocator *old);
/* With the GIL held: give back the memory of pymalloc's empty pools in
 * the arenas the last arena hook placed in far memory (all but the first
 * 4 KiB page of each 16 KiB pool, whose header pymalloc still reads;
 * MADV_REMOVE, so on shm:/file: pools on tmpfs). Returns the bytes given
 * back (>= 0; 0 without an arena hook or in a fork child), FMEM_ENOTSUP
 * on a CPython whose pymalloc layout was not checked (3.11 is), when the
 * pools do not look as expected (PYTHONMALLOC=malloc, a replaced object
 * allocator), or when the arenas' memory cannot be released that way. */
FMEM_API int64_t fmem_hooks_python_release_empty_pools(void);
/* With the GIL held: give back the 4 KiB pages (other than the header's)
 * of pymalloc's used pools in those arenas that hold no allocated block;
 * the free blocks on them leave the pool's free list (they come back when
 * the pool empties and is rebuilt). Same returns and conditions as
 * fmem_hooks_python_release_empty_pools(). */
FMEM_API int64_t fmem_hooks_python_release_free_pages(void);
/* With the GIL held, after those two: make pages of used pools whose live
 * bytes do not overlap share one physical page (CoRM-style: the live bytes
 * of one are copied into the other, which is then mapped at both
 * addresses; docs/far-memory.md). A pool with a shared page stays in use
 * (its count holds one more per such page) until
 * fmem_hooks_python_unshare_empty_pools() finds it without objects.
 * Returns the bytes given back; FMEM_ENOTSUP as above or when the arenas'
 * memory cannot be mapped twice (a mem: pool). */
FMEM_API int64_t fmem_hooks_python_share_pages(void);
/* With the GIL held: pools with shared pages that hold no object any more
 * get memory of their own for those pages again and are handed back to
 * pymalloc as empty (which may free their arena). Returns how many. */
FMEM_API int64_t fmem_hooks_python_unshare_empty_pools(void);
/* Pages of pools that now map another pool's page (with the GIL held). */
FMEM_API size_t fmem_hooks_python_shared_pages(void);

/* numpy's data memory handler (NEP 49, numpy >= 1.22): a new reference to
 * a "mem_handler" capsule whose functions allocate array data through b;
 * numpy keeps a reference to it in every array it allocates. With the GIL
 * held and numpy importable. FMEM_ENOTSUP when the library was built
 * without numpy's headers; FMEM_EINVAL with a Python error set otherwise. */
FMEM_API int fmem_hooks_numpy_handler(fmem_hooks *b, PyObject **capsule);
/* Make such a handler current (PyDataMem_SetHandler: for the current
 * context, so a `with` block can scope it); `old` (may be NULL) receives a
 * new reference to the previous handler, to reinstall it later. */
FMEM_API int fmem_hooks_numpy_install(fmem_hooks *b, PyObject **old);
/* Reinstall a handler saved by fmem_hooks_numpy_install; steals `old`. */
FMEM_API int fmem_hooks_numpy_restore(PyObject *old);

#ifdef __cplusplus
}
#endif
#endif /* FMEM_HOOKS_PYTHON_H */
