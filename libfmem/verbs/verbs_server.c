/* verbs_server.c - the memory node's RDMA side: the pool (metadata and data,
 * mapped back to back) is registered once as a single memory region, and
 * every accepted connection gets a queue pair on it. After that the memory
 * node's CPU takes no part in allocation: clients use one-sided READ, WRITE
 * and CAS. Connection setup goes through librdmacm. */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmem.h"
#include "verbs/transport_verbs.h"
#include "verbs/verbs_proto.h"

struct verbs_server {
    struct transport *pool;
    struct rdma_event_channel *ec;
    struct rdma_cm_id *listen_id;
    struct ibv_pd *pd;
    struct ibv_mr *mr;
    struct ibv_cq *cq; /* shared by all connections: nothing is ever polled */
};

static int setup_region(struct verbs_server *s, struct ibv_context *ctx)
{
    if (s->pd)
        return 0;
    s->pd = ibv_alloc_pd(ctx);
    s->cq = s->pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
    if (!s->cq)
        return FMEM_EIO;
    s->mr = ibv_reg_mr(s->pd, s->pool->base, s->pool->size,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC |
                           IBV_ACCESS_MW_BIND);
    return s->mr ? 0 : FMEM_EIO;
}

static void accept_conn(struct verbs_server *s, struct rdma_cm_event *ev)
{
    struct rdma_cm_id *id = ev->id;
    const struct verbs_hello *h = ev->param.conn.private_data;
    if (!h || ev->param.conn.private_data_len < sizeof *h || h->magic != VERBS_MAGIC ||
        h->version != VERBS_VERSION || setup_region(s, id->verbs)) {
        rdma_reject(id, NULL, 0);
        return;
    }
    struct ibv_qp_init_attr qa = {
        .send_cq = s->cq,
        .recv_cq = s->cq,
        .qp_type = IBV_QPT_RC,
        .cap = {.max_send_wr = 16, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
    };
    if (rdma_create_qp(id, s->pd, &qa)) {
        rdma_reject(id, NULL, 0);
        return;
    }
    struct verbs_welcome w = {
        .magic = VERBS_MAGIC,
        .version = VERBS_VERSION,
        .rkey = s->mr->rkey,
        .base = (uintptr_t)s->pool->base,
        .size = s->pool->size,
        .meta_size = s->pool->meta_size,
    };
    struct rdma_conn_param cp = {
        .private_data = &w,
        .private_data_len = sizeof w,
        .initiator_depth = 16,
        .responder_resources = 16,
    };
    if (rdma_accept(id, &cp)) {
        rdma_destroy_qp(id);
        rdma_destroy_id(id);
    }
}

int verbs_server_start(struct transport *pool, const char *addr, const char *port,
                       struct verbs_server **out)
{
    if (!pool->base)
        return FMEM_EINVAL;
    struct verbs_server *s = calloc(1, sizeof *s);
    if (!s)
        return FMEM_ENOMEM;
    s->pool = pool;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_flags = AI_PASSIVE}, *ai = NULL;
    int rc = FMEM_EIO;
    if (getaddrinfo(addr, port, &hints, &ai))
        rc = FMEM_EURI;
    else if ((s->ec = rdma_create_event_channel()) &&
             !rdma_create_id(s->ec, &s->listen_id, NULL, RDMA_PS_TCP) &&
             !rdma_bind_addr(s->listen_id, ai->ai_addr) && !rdma_listen(s->listen_id, 64))
        rc = s->listen_id->verbs ? setup_region(s, s->listen_id->verbs) : 0;
    if (ai)
        freeaddrinfo(ai);
    if (rc) {
        verbs_server_stop(s);
        return rc;
    }
    *out = s;
    return 0;
}

int verbs_server_run(struct verbs_server *s, atomic_int *stop)
{
    struct pollfd pfd = {.fd = s->ec->fd, .events = POLLIN};
    while (!atomic_load(stop)) {
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        struct rdma_cm_event *ev;
        if (rdma_get_cm_event(s->ec, &ev))
            return FMEM_EIO;
        struct rdma_cm_id *id = ev->id;
        enum rdma_cm_event_type type = ev->event;
        if (type == RDMA_CM_EVENT_CONNECT_REQUEST)
            accept_conn(s, ev);
        rdma_ack_cm_event(ev);
        if (type == RDMA_CM_EVENT_DISCONNECTED) {
            rdma_disconnect(id);
            rdma_destroy_qp(id);
            rdma_destroy_id(id);
        }
    }
    return 0;
}

void verbs_server_stop(struct verbs_server *s)
{
    if (!s)
        return;
    if (s->mr)
        ibv_dereg_mr(s->mr);
    if (s->cq)
        ibv_destroy_cq(s->cq);
    if (s->pd)
        ibv_dealloc_pd(s->pd);
    if (s->listen_id)
        rdma_destroy_id(s->listen_id);
    if (s->ec)
        rdma_destroy_event_channel(s->ec);
    free(s);
}
