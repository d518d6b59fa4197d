/* cmd/nodes: `gpupool nodes`, `gpupool drain NODE`, `gpupool undrain NODE`
 * and `gpupool forget NODE`: the administrator's view of the pool's nodes,
 * over the coordinator's HTTP API.  NODE is a node's id or its name. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cmd/cmd.h"
#include "http/client.h"

typedef struct admin_opts {
    const char *coordinator, *api_key;
    int json, force;
} admin_opts;

static void usage(FILE *f, const char *cmd)
{
    fprintf(f,
            "usage: gpupool %s%s [options]\n"
            "  --coordinator URL   the coordinator (default $GPUPOOL_COORDINATOR or http://127.0.0.1:8420)\n"
            "  --api-key KEY       an API key (default $GPUPOOL_API_KEY); drain, undrain and forget\n"
            "                      need an admin key when the pool uses keys\n"
            "%s",
            cmd, strcmp(cmd, "nodes") ? " NODE" : "",
            !strcmp(cmd, "nodes") ? "  --json              print the coordinator's JSON\n"
            : !strcmp(cmd, "forget") ? "  --force             forget a node that is not offline\n" : "");
}

static int parse(int argc, char **argv, admin_opts *o, const char **node)
{
    static const struct option longopts[] = {{"coordinator", 1, 0, 'c'}, {"api-key", 1, 0, 'k'}, {"json", 0, 0, 'j'},
                                             {"force", 0, 0, 'f'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    o->coordinator = getenv("GPUPOOL_COORDINATOR");
    if (!o->coordinator || !*o->coordinator) o->coordinator = "http://127.0.0.1:8420";
    o->api_key = getenv("GPUPOOL_API_KEY");
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'c': o->coordinator = optarg; break;
        case 'k': o->api_key = optarg; break;
        case 'j': o->json = 1; break;
        case 'f': o->force = 1; break;
        case 'h': usage(stdout, argv[0]); exit(0);
        default: usage(stderr, argv[0]); return -1;
        }
    }
    int want = node != NULL;
    if (argc - optind != want) {
        fprintf(stderr, "gpupool %s: %s\n", argv[0], want ? "name one node (its id or name)" : "takes no arguments");
        return -1;
    }
    if (node) *node = argv[optind];
    return 0;
}

/* One call; prints a one-line error and returns NULL unless it got JSON
 * with a 2xx status. */
static json_t *call(const admin_opts *o, const char *cmd, const char *method, const char *path)
{
    char url[1024];
    snprintf(url, sizeof url, "%s%s", o->coordinator, path);
    http_call_opts co = {.method = method, .url = url, .bearer = o->api_key, .timeout_ms = 10000,
                         .body = strcmp(method, "POST") ? NULL : "{}", .body_len = strcmp(method, "POST") ? 0 : 2};
    http_result res;
    http_call(&co, &res);
    json_t *j = res.status ? json_loadb(res.body, res.body_len, 0, NULL) : NULL;
    if (!res.status) {
        fprintf(stderr, "gpupool %s: cannot reach the coordinator at %s: %s\n", cmd, o->coordinator, res.error);
    } else if (res.status < 200 || res.status > 299) {
        const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        fprintf(stderr, "gpupool %s: the coordinator answered %ld: %s\n", cmd, res.status, m ? m : "no message");
        json_decref(j);
        j = NULL;
    } else if (!j) {
        fprintf(stderr, "gpupool %s: the coordinator's answer is not JSON\n", cmd);
    }
    http_result_free(&res);
    return j;
}

static const char *str(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static void print_table(json_t *nodes)
{
    printf("%-18s %-16s %-9s %-7s %-9s %-11s %s\n", "ID", "NAME", "STATE", "BEAT", "INFLIGHT", "FREE/TOTAL", "REASON");
    size_t i;
    json_t *n;
    json_array_foreach(nodes, i, n) {
        char vram[32];
        snprintf(vram, sizeof vram, "%.1f/%.1fG", json_integer_value(json_object_get(n, "free_vram_bytes")) / 1073741824.0,
                 json_integer_value(json_object_get(n, "total_vram_bytes")) / 1073741824.0);
        char beat[16], inflight[16];
        snprintf(beat, sizeof beat, "%.1fs", json_integer_value(json_object_get(n, "heartbeat_age_ms")) / 1000.0);
        snprintf(inflight, sizeof inflight, "%lld/%lld", (long long)json_integer_value(json_object_get(n, "inflight")),
                 (long long)json_integer_value(json_object_get(n, "slots")));
        printf("%-18s %-16.16s %-9s %-7s %-9s %-11s %s\n", str(n, "id"), str(n, "name"), str(n, "state"), beat,
               inflight, vram, str(n, "state_reason"));
    }
}

static int cmd_list(int argc, char **argv)
{
    admin_opts o = {0};
    if (parse(argc, argv, &o, NULL)) return 2;
    http_client_global_init();
    json_t *j = call(&o, argv[0], "GET", "/v1/nodes");
    int rc = 1;
    if (j) {
        if (o.json) {
            char *s = json_dumps(j, JSON_INDENT(2));
            printf("%s\n", s);
            free(s);
        } else {
            print_table(json_object_get(j, "data"));
        }
        rc = 0;
    }
    json_decref(j);
    http_client_global_cleanup();
    return rc;
}

/* A node's id from its id or name; a name must be unique. */
static int resolve(const admin_opts *o, const char *cmd, const char *node, char *id, size_t idlen)
{
    json_t *j = call(o, cmd, "GET", "/v1/nodes");
    if (!j) return -1;
    int found = 0;
    size_t i;
    json_t *n;
    json_array_foreach(json_object_get(j, "data"), i, n) {
        if (!strcmp(str(n, "id"), node)) { snprintf(id, idlen, "%s", node); found = 1; break; }
        if (!strcmp(str(n, "name"), node)) {
            found++;
            snprintf(id, idlen, "%s", str(n, "id"));
        }
    }
    json_decref(j);
    if (found == 1) return 0;
    fprintf(stderr, "gpupool %s: %s '%s' (see gpupool nodes)\n", cmd, found ? "more than one node is named" : "no node is",
            node);
    return -1;
}

static int admin_verb(int argc, char **argv, const char *method, const char *suffix)
{
    admin_opts o = {0};
    const char *node;
    if (parse(argc, argv, &o, &node)) return 2;
    http_client_global_init();
    int rc = 1;
    char id[64], path[256];
    if (!resolve(&o, argv[0], node, id, sizeof id)) {
        snprintf(path, sizeof path, "/v1/nodes/%s%s%s", id, suffix, o.force ? "?force=1" : "");
        json_t *j = call(&o, argv[0], method, path);
        if (j) {
            printf("%s: %s\n", id, !strcmp(argv[0], "forget") ? "forgotten"
                                   : !strcmp(argv[0], "drain") ? "draining (takes no new work)" : "undrained");
            rc = 0;
        }
        json_decref(j);
    }
    http_client_global_cleanup();
    return rc;
}

int cmd_nodes(int argc, char **argv) { return cmd_list(argc, argv); }
int cmd_drain(int argc, char **argv) { return admin_verb(argc, argv, "POST", "/drain"); }
int cmd_undrain(int argc, char **argv) { return admin_verb(argc, argv, "POST", "/undrain"); }
int cmd_forget(int argc, char **argv) { return admin_verb(argc, argv, "DELETE", ""); }
