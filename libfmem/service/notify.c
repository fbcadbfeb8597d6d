/* notify.c - the service manager's notification socket (notify.h). */
#include "service/notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int svc_notify(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path)
        return 0;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t len = strlen(path);
    /* a file system path, or "@name" in the abstract namespace */
    if ((path[0] != '/' && path[0] != '@') || len >= sizeof a.sun_path) {
        errno = EINVAL;
        return -1;
    }
    memcpy(a.sun_path, path, len);
    if (path[0] == '@')
        a.sun_path[0] = 0;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
    ssize_t n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&a, alen);
    int e = errno;
    close(fd);
    errno = e;
    return n == (ssize_t)strlen(state) ? 1 : -1;
}
