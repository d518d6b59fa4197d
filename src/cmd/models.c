/* cmd/models: `gpupool models`, the pool's models over GET /v1/models: the
 * catalogue's entries with their aliases, the sha256 they pin and each
 * node's state (loaded, loadable, mismatch, missing, hashing, unverified),
 * and the models nodes serve outside the catalogue. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cmd/cmd.h"
#include "http/client.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: gpupool models [options]\n"
               "  --coordinator URL   the coordinator (default $GPUPOOL_COORDINATOR or http://127.0.0.1:8420)\n"
               "  --api-key KEY       an API key (default $GPUPOOL_API_KEY)\n"
               "  --json              print the coordinator's JSON\n");
}

static const char *str(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* "w1:loaded w2:mismatch", or the nodes it is served on for a model
 * outside the catalogue. */
static void node_states(json_t *m, char *out, size_t len)
{
    size_t o = 0, i;
    json_t *s;
    out[0] = 0;
    if (json_is_array(json_object_get(m, "status"))) {
        json_array_foreach(json_object_get(m, "status"), i, s) {
            int w = snprintf(out + o, o < len ? len - o : 0, "%s%s:%s", o ? " " : "", str(s, "name"), str(s, "state"));
            if (w > 0) o += (size_t)w;
        }
    } else {
        static const char *lists[] = {"nodes", "loadable_on"};
        static const char *states[] = {"loaded", "loadable"};
        for (int k = 0; k < 2; k++)
            json_array_foreach(json_object_get(m, lists[k]), i, s) {
                int w = snprintf(out + o, o < len ? len - o : 0, "%s%s:%s", o ? " " : "", json_string_value(s),
                                 states[k]);
                if (w > 0) o += (size_t)w;
            }
    }
    if (!out[0]) snprintf(out, len, "-");
}

static void print_table(json_t *data)
{
    printf("%-28s %-24s %-14s %s\n", "MODEL", "ALIASES", "SHA256", "NODES");
    size_t i;
    json_t *m;
    json_array_foreach(data, i, m) {
        char aliases[256] = "", states[2048];
        size_t o = 0, k;
        json_t *a;
        json_array_foreach(json_object_get(m, "aliases"), k, a) {
            int w = snprintf(aliases + o, o < sizeof aliases ? sizeof aliases - o : 0, "%s%s", o ? "," : "",
                             json_string_value(a));
            if (w > 0) o += (size_t)w;
        }
        const char *sha = str(m, "sha256");
        char shortsha[16];
        snprintf(shortsha, sizeof shortsha, "%.12s", *sha ? sha : "-");
        node_states(m, states, sizeof states);
        printf("%-28s %-24s %-14s %s\n", str(m, "id"), aliases[0] ? aliases : "-", shortsha, states);
    }
}

int cmd_models(int argc, char **argv)
{
    static const struct option longopts[] = {{"coordinator", 1, 0, 'c'}, {"api-key", 1, 0, 'k'}, {"json", 0, 0, 'j'},
                                             {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *coordinator = getenv("GPUPOOL_COORDINATOR"), *key = getenv("GPUPOOL_API_KEY");
    if (!coordinator || !*coordinator) coordinator = "http://127.0.0.1:8420";
    int json = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'c': coordinator = optarg; break;
        case 'k': key = optarg; break;
        case 'j': json = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) { fprintf(stderr, "gpupool models: takes no arguments\n"); return 2; }
    char url[1024];
    snprintf(url, sizeof url, "%s/v1/models", coordinator);
    http_call_opts co = {.method = "GET", .url = url, .bearer = key, .timeout_ms = 10000};
    http_result res;
    http_client_global_init();
    http_call(&co, &res);
    json_t *j = res.status ? json_loadb(res.body, res.body_len, 0, NULL) : NULL;
    int rc = 1;
    if (!res.status) {
        fprintf(stderr, "gpupool models: cannot reach the coordinator at %s: %s\n", coordinator, res.error);
    } else if (res.status != 200 || !j) {
        const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        fprintf(stderr, "gpupool models: the coordinator answered %ld: %s\n", res.status, m ? m : "not the model list");
    } else {
        if (json) {
            char *text = json_dumps(j, JSON_INDENT(2));
            if (text) puts(text);
            free(text);
        } else {
            print_table(json_object_get(j, "data"));
        }
        rc = 0;
    }
    json_decref(j);
    http_result_free(&res);
    http_client_global_cleanup();
    return rc;
}
