/* notify.h - tell the service manager (systemd, Type=notify) how a daemon
 * is doing: "READY=1" once it serves, "STOPPING=1" as it leaves. One
 * datagram to $NOTIFY_SOCKET; nothing at all without one. */
#ifndef FMEM_SVC_NOTIFY_H
#define FMEM_SVC_NOTIFY_H

/* Send `state` (newline-separated KEY=VALUE lines). 1: sent; 0: no
 * service manager asked for it; -1: it could not be sent (errno). */
int svc_notify(const char *state);

#endif
