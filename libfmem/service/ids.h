/* ids.h - user and group arguments of the daemons (--allow-uid,
 * --allow-gid): a number or a name from the user and group databases. */
#ifndef FMEM_SVC_IDS_H
#define FMEM_SVC_IDS_H

#include <stdbool.h>
#include <sys/types.h>

/* false: neither a valid id nor a known name. */
bool svc_parse_uid(const char *s, uid_t *out);
bool svc_parse_gid(const char *s, gid_t *out);

#endif
