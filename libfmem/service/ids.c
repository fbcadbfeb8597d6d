/* ids.c - user and group names or numbers (ids.h). */
#include "service/ids.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>

/* A decimal id below 2^32 - 1 ((uid_t)-1 means "none"). */
static bool number(const char *s, unsigned long *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || *s == '-' || v >= 0xFFFFFFFFul)
        return false;
    *out = v;
    return true;
}

bool svc_parse_uid(const char *s, uid_t *out)
{
    unsigned long v;
    if (number(s, &v)) {
        *out = (uid_t)v;
        return true;
    }
    struct passwd *pw = *s ? getpwnam(s) : NULL;
    if (!pw)
        return false;
    *out = pw->pw_uid;
    return true;
}

bool svc_parse_gid(const char *s, gid_t *out)
{
    unsigned long v;
    if (number(s, &v)) {
        *out = (gid_t)v;
        return true;
    }
    struct group *gr = *s ? getgrnam(s) : NULL;
    if (!gr)
        return false;
    *out = gr->gr_gid;
    return true;
}
