/* node/files: the registry's part in sharing model files in the LAN.  Each
 * heartbeat lists the files the node offers its peers (sha256, bytes) and
 * its own downloads with their progress; this keeps both on the node and
 * answers which live peers hold a file.  The bytes never pass through the
 * coordinator: peers fetch from each other. */
#include <stdio.h>
#include <string.h>

#include "node/registry_int.h"
#include "util/ids.h"
#include "util/log.h"

#define FILES_KEPT 64

/* At most FILES_KEPT entries of the shape given; anything else is dropped. */
static json_t *kept(json_t *in, int transfers)
{
    json_t *out = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(in, i, e) {
        if (json_array_size(out) >= FILES_KEPT) break;
        const char *sha = json_string_value(json_object_get(e, "sha256"));
        if (!json_is_object(e) || !sha || strlen(sha) != 64) continue;
        if (!transfers && !json_is_integer(json_object_get(e, "bytes"))) continue;
        json_array_append_new(out, json_deep_copy(e));
    }
    return out;
}

void reg_absorb_files(node *nd, json_t *report)
{
    json_decref(nd->files);
    json_decref(nd->transfers);
    nd->files = kept(json_object_get(report, "files"), 0);
    nd->transfers = kept(json_object_get(report, "transfers"), 1);
}

static json_int_t held_bytes(const node *nd, const char *sha)
{
    size_t i;
    json_t *e;
    json_array_foreach(nd->files, i, e)
        if (!strcmp(json_string_value(json_object_get(e, "sha256")), sha))
            return json_integer_value(json_object_get(e, "bytes"));
    return -1;
}

/* The node whose current or previous token this is, NULL if none. */
static node *by_token(registry *r, const char *bearer, int64_t now)
{
    for (int i = 0; i < r->n; i++) {
        node *nd = r->nodes[i];
        if (nd->external) continue;
        if ((nd->token[0] && secret_equal(bearer, nd->token) && now < nd->token_expires) ||
            (nd->prev_token[0] && secret_equal(bearer, nd->prev_token) && now < nd->prev_expires))
            return nd;
    }
    return NULL;
}

int registry_file_sources(registry *r, const char *bearer, const char *sha256, const char *peer, int64_t now,
                          json_t **resp, char *why, size_t whylen)
{
    *resp = NULL;
    if (!bearer) {
        snprintf(why, whylen, "a node token is required");
        log_warn("refused a file sources lookup from %s: no node token", peer ? peer : "?");
        return 401;
    }
    pthread_mutex_lock(&r->mu);
    node *asker = by_token(r, bearer, now);
    int status = 0;
    if (!asker) {
        snprintf(why, whylen, "invalid or expired node token");
        status = 401;
    } else if (strcmp(peer ? peer : "", asker->peer)) {
        snprintf(why, whylen, "token of node %s presented from another address", asker->id);
        status = 403;
    }
    if (status) {
        pthread_mutex_unlock(&r->mu);
        log_warn("refused a file sources lookup from %s: %s", peer ? peer : "?", why);
        return status;
    }
    json_t *ready = json_array(), *others = json_array();
    json_int_t bytes = -1;
    for (int i = 0; i < r->n; i++) {
        node *nd = r->nodes[i];
        if (nd == asker || nd->external || nd->state == NODE_OFFLINE) continue;
        json_int_t b = held_bytes(nd, sha256);
        if (b < 0) continue;
        bytes = b;
        char url[400];
        snprintf(url, sizeof url, "%s/internal/v1/files/%s", nd->address, sha256);
        json_array_append_new(nd->state == NODE_READY ? ready : others,
                              json_pack("{s:s, s:s, s:s, s:s}", "node_id", nd->id, "name", nd->name, "url", url,
                                        "state", node_state_name(nd->state)));
    }
    pthread_mutex_unlock(&r->mu);
    json_array_extend(ready, others);
    json_decref(others);
    *resp = json_pack("{s:s, s:o, s:o}", "sha256", sha256, "bytes", bytes >= 0 ? json_integer(bytes) : json_null(),
                      "sources", ready);
    return 200;
}
