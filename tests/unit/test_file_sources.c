/* Unit tests of node/files: the files nodes offer, taken from heartbeats,
 * and the sources lookup (who may ask, who is listed), on an injected clock. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "node/registry.h"

#define SHA "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define FP_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define FP_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

typedef struct peer {
    char id[40], token[72];
    const char *fp, *addr;
} peer;

static json_t *report(const peer *p, int with_file)
{
    json_t *j = json_pack("{s:s, s:s, s:s, s:[], s:[{s:s, s:b, s:[s], s:i}], s:b}", "name", p->fp, "fingerprint", p->fp,
                          "address", p->addr, "gpus", "engines", "kind", "sim", "healthy", 1, "models", "m", "slots",
                          1, "ready", 1);
    json_t *files = json_array();
    if (with_file) json_array_append_new(files, json_pack("{s:s, s:I}", "sha256", SHA, "bytes", (json_int_t)1234));
    json_array_append_new(files, json_pack("{s:s, s:I}", "sha256", "short", "bytes", (json_int_t)1)); /* dropped */
    json_array_append_new(files, json_string("junk"));                                                /* dropped */
    json_object_set_new(j, "files", files);
    json_object_set_new(j, "transfers", json_pack("[{s:s, s:s, s:I}]", "sha256", SHA, "state", "fetching",
                                                  "bytes_done", (json_int_t)7));
    return j;
}

static void join(registry *r, peer *p, int with_file, int64_t now)
{
    json_t *req = report(p, with_file), *resp = NULL;
    char why[200];
    assert_int_equal(registry_register(r, "join", req, "127.0.0.1", now, &resp, why, sizeof why), 200);
    snprintf(p->id, sizeof p->id, "%s", json_string_value(json_object_get(resp, "node_id")));
    snprintf(p->token, sizeof p->token, "%s", json_string_value(json_object_get(resp, "node_token")));
    json_decref(resp);
    json_object_set_new(req, "node_id", json_string(p->id));
    json_object_set_new(req, "seq", json_integer(1));
    assert_int_equal(registry_heartbeat(r, p->token, req, "127.0.0.1", now, &resp, why, sizeof why), 200);
    json_decref(resp);
    json_decref(req);
}

static int lookup(registry *r, const char *token, const char *peer_addr, int64_t now, json_t **resp)
{
    char why[200];
    return registry_file_sources(r, token, SHA, peer_addr, now, resp, why, sizeof why);
}

static void sources_list_the_other_holders(void **state)
{
    (void)state;
    registry_cfg cfg = {.join_token = "join", .heartbeat_ms = 1000, .missed_beats = 3, .token_ttl_ms = 60000};
    registry *r = registry_new(&cfg);
    peer a = {.fp = FP_A, .addr = "http://10.0.0.1:8421"}, b = {.fp = FP_B, .addr = "http://10.0.0.2:8421"};
    join(r, &a, 1, 0);
    join(r, &b, 0, 0);
    json_t *resp = NULL;
    assert_int_equal(lookup(r, b.token, "127.0.0.1", 10, &resp), 200);
    json_t *src = json_object_get(resp, "sources");
    assert_int_equal(json_array_size(src), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(src, 0), "url")),
                        "http://10.0.0.1:8421/internal/v1/files/" SHA);
    assert_string_equal(json_string_value(json_object_get(json_array_get(src, 0), "node_id")), a.id);
    assert_int_equal(json_integer_value(json_object_get(resp, "bytes")), 1234);
    json_decref(resp);
    /* The holder itself is not its own source. */
    assert_int_equal(lookup(r, a.token, "127.0.0.1", 10, &resp), 200);
    assert_int_equal(json_array_size(json_object_get(resp, "sources")), 0);
    assert_true(json_is_null(json_object_get(resp, "bytes")));
    json_decref(resp);
    /* The node list shows what each node offers (well-formed entries only) and its downloads. */
    json_t *nodes = registry_nodes_json(r, 10);
    size_t i;
    json_t *n;
    json_array_foreach(nodes, i, n) {
        if (strcmp(json_string_value(json_object_get(n, "id")), a.id)) continue;
        assert_int_equal(json_array_size(json_object_get(n, "files")), 1);
        assert_int_equal(json_integer_value(json_object_get(json_array_get(json_object_get(n, "transfers"), 0),
                                                            "bytes_done")), 7);
    }
    json_decref(nodes);
    /* Offline nodes are no source. */
    char gone[4][40];
    registry_sweep(r, 10000, gone, 4);
    assert_int_equal(lookup(r, b.token, "127.0.0.1", 10000, &resp), 200);
    assert_int_equal(json_array_size(json_object_get(resp, "sources")), 0);
    json_decref(resp);
    registry_free(r);
}

static void only_nodes_may_ask(void **state)
{
    (void)state;
    registry_cfg cfg = {.join_token = "join", .heartbeat_ms = 1000, .missed_beats = 3, .token_ttl_ms = 5000};
    registry *r = registry_new(&cfg);
    peer a = {.fp = FP_A, .addr = "http://10.0.0.1:8421"};
    join(r, &a, 1, 0);
    json_t *resp = NULL;
    assert_int_equal(lookup(r, NULL, "127.0.0.1", 1, &resp), 401);
    assert_null(resp);
    assert_int_equal(lookup(r, "join", "127.0.0.1", 1, &resp), 401);     /* the join token is not a node token */
    assert_int_equal(lookup(r, "0123456789", "127.0.0.1", 1, &resp), 401);
    assert_int_equal(lookup(r, a.token, "10.9.9.9", 1, &resp), 403);     /* from another address */
    assert_int_equal(lookup(r, a.token, "127.0.0.1", 6000, &resp), 401); /* expired */
    assert_null(resp);
    registry_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sources_list_the_other_holders),
        cmocka_unit_test(only_nodes_may_ask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
