/* crashpoint.h - fault-injection points between the steps of the protocol.
 * Tests install a hook (internal symbol, never exported) that can kill the
 * process or pause the thread at a point; in normal runs the check is one
 * predictable branch on a NULL pointer. */
#ifndef FMEM_CRASHPOINT_H
#define FMEM_CRASHPOINT_H

enum crash_point {
    CP_CHUNK_COMMIT,        /* chunk allocation committed, log not flushed */
    CP_CHUNK_FREE_COMMIT,   /* chunk free committed, log not flushed */
    CP_CLAIM_RECORDED,      /* claim record in span header, section not yet 01 */
    CP_CLAIM_SECTION,       /* section says 01, span not yet attached */
    CP_RELEASE_DETACHED,    /* span detached, section not yet 00 */
    CP_RELEASE_SECTION,     /* section 00, claim record not yet cleared */
    CP_SPAN_COMMIT,         /* span-level allocation committed, not flushed */
    CP_SPAN_FREE_COMMIT,    /* span-level free committed, not flushed */
    CP_MULTI_PART,          /* one section of a multi-section block taken */
    CP_MULTI_FREE_PART,     /* one section of a multi-section block freed */
    CP_FREE_REVOKED,        /* key revoked, free not yet committed */
    CP_FLUSH_READ,          /* full log entry read, flush CAS not yet issued */
    CP_ALLOC_DONE,          /* committed and flushed, key not yet read */
    CP_FREE_QUARANTINED,    /* free committed (key revoked, block quarantined),
                             * block not yet freed in its layer */
    CP_QUARANTINE_PART,     /* finish of a quarantined whole-section block:
                             * a part after the first freed, the rest not */
    CP_OWN_FREE_HELD,       /* free of an own allocation: key revoked, its
                             * quarantine mark held (or posted unsignaled,
                             * maybe not executed), doorbell owed (verbs only) */
    CP_COUNT
};

extern void (*fmem_crash_hook)(enum crash_point cp);
extern const char *const crash_point_names[CP_COUNT];

#define CRASH_POINT(cp)                                                                 \
    do {                                                                                \
        if (__builtin_expect(fmem_crash_hook != 0, 0))                                  \
            fmem_crash_hook(cp);                                                        \
    } while (0)

#endif
