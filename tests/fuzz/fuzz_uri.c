/* fuzz_uri.c - libFuzzer target for the pool URI parser (uri.c): any string
 * an application, an environment variable or a command line may hold.
 * Nothing may crash or read out of bounds, and what the parser accepts
 * must be a pool it can describe. Built and run by tests/fuzz/fuzz.sh. */
#include <stdlib.h>
#include <string.h>

#include "fmem.h"
#include "transport.h" /* enum tp_rtt_mode */
#include "uri.h"

static struct node_uri us[URI_MAX_NODES];

static void check_node(const struct node_uri *u)
{
    if (strnlen(u->path, sizeof u->path) == sizeof u->path ||
        strnlen(u->port, sizeof u->port) == sizeof u->port ||
        strnlen(u->src, sizeof u->src) == sizeof u->src ||
        strnlen(u->token, sizeof u->token) == sizeof u->token)
        abort(); /* an unterminated field */
    if (u->nodes == 0 || u->nodes > URI_MAX_NODES || (u->kind != URI_MEM && u->nodes != 1))
        abort();
    if (u->user > 16383 || u->rtt_ns > 1000000000u ||
        (u->rtt_mode != TP_RTT_SPIN && u->rtt_mode != TP_RTT_NIC))
        abort();
    switch (u->kind) {
    case URI_MEM:
        break;
    case URI_SHM: /* one name under /dev/shm, never a path elsewhere */
        if (strncmp(u->path, "/dev/shm/", 9) || !u->path[9] || strchr(u->path + 9, '/'))
            abort();
        break;
    case URI_FILE:
        if (u->path[0] != '/')
            abort();
        break;
    case URI_RDMA:
        if (!u->path[0] || !u->port[0] || u->port[strspn(u->port, "0123456789")])
            abort();
        break;
    case URI_SSD: /* an absolute path to a file or device */
        if (u->path[0] != '/' || !u->path[1] || u->path[strlen(u->path) - 1] == '/' || u->io > 1 ||
            u->direct < -1 || u->direct > 1)
            abort();
        break;
    case URI_ZMEM:
        if ((strcmp(u->codec, "lz4") && strcmp(u->codec, "zstd")) || u->level < 0 ||
            u->level > 19 || (u->block && (u->block < 4096 || u->block > (1u << 20) ||
                                           (u->block & (u->block - 1)))))
            abort();
        break;
    default:
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = 0;
    int max = size ? 1 + data[0] % URI_MAX_NODES : URI_MAX_NODES;
    int n = uri_parse(s, us, max);
    if (n == 0 || n > max || (n < 0 && n != FMEM_EURI && n != FMEM_ENOMEM))
        abort();
    for (int i = 0; i < n; i++)
        check_node(&us[i]);
    uint64_t v;
    if (uri_parse_size(s, &v) && (s[0] < '0' || s[0] > '9'))
        abort();
    char host[16], port[8];
    if (uri_split_host_port(s, host, sizeof host, port, sizeof port) &&
        (!host[0] || !port[0] || strlen(host) >= sizeof host || strlen(port) >= sizeof port))
        abort();
    free(s);
    return 0;
}
