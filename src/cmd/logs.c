/* cmd/logs: `gpupool logs`, the audit log over the coordinator's HTTP API
 * (GET /v1/audit): one line a call, and with --request or --task each
 * call's route record and its redacted bodies. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "cmd/cmd.h"
#include "http/client.h"
#include "util/buf.h"

typedef struct logs_opts {
    const char *coordinator, *api_key, *request, *task, *since, *limit;
    int json;
} logs_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gpupool logs [options]\n"
            "  --coordinator URL   the coordinator (default $GPUPOOL_COORDINATOR or http://127.0.0.1:8420)\n"
            "  --api-key KEY       an admin API key when the pool uses keys (default $GPUPOOL_API_KEY)\n"
            "  --request ID        the call with this request id (X-Request-Id)\n"
            "  --task ID           the calls that created or read this task\n"
            "  --since AGE|MS      calls since an age (90s, 15m, 2h, 7d) or unix milliseconds\n"
            "  --limit N           at most N calls, newest first (default 100)\n"
            "  --json              print the coordinator's JSON\n");
}

static int parse(int argc, char **argv, logs_opts *o)
{
    static const struct option longopts[] = {
        {"coordinator", 1, 0, 'c'}, {"api-key", 1, 0, 'k'}, {"request", 1, 0, 'r'}, {"task", 1, 0, 't'},
        {"since", 1, 0, 's'}, {"limit", 1, 0, 'n'}, {"json", 0, 0, 'j'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    o->coordinator = getenv("GPUPOOL_COORDINATOR");
    if (!o->coordinator || !*o->coordinator) o->coordinator = "http://127.0.0.1:8420";
    o->api_key = getenv("GPUPOOL_API_KEY");
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'c': o->coordinator = optarg; break;
        case 'k': o->api_key = optarg; break;
        case 'r': o->request = optarg; break;
        case 't': o->task = optarg; break;
        case 's': o->since = optarg; break;
        case 'n': o->limit = optarg; break;
        case 'j': o->json = 1; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
    }
    if (optind < argc) { fprintf(stderr, "gpupool logs: unexpected argument '%s'\n", argv[optind]); return -1; }
    if (o->request && o->task) { fprintf(stderr, "gpupool logs: give --request or --task, not both\n"); return -1; }
    return 0;
}

static void add_param(buf *b, const char *name, const char *value)
{
    if (!value) return;
    buf_printf(b, "%c%s=", strchr(b->data, '?') ? '&' : '?', name);
    for (const unsigned char *p = (const unsigned char *)value; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("-._~", *p))
            buf_printf(b, "%c", *p);
        else
            buf_printf(b, "%%%02X", *p);
    }
}

static const char *str(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static void print_body(const char *label, json_t *body)
{
    if (json_is_null(body) || !body) return;
    char *s = json_is_string(body) ? NULL : json_dumps(body, JSON_COMPACT);
    printf("  %s: %s\n", label, s ? s : json_string_value(body));
    free(s);
}

static void print_records(json_t *rows, int detail)
{
    if (!detail) printf("%-19s %-28s %-6s %-32s %-6s %9s %s\n", "TIME", "REQUEST", "METHOD", "PATH", "STATUS", "MS", "NODES");
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r) {
        time_t t = (time_t)(json_integer_value(json_object_get(r, "created_ms")) / 1000);
        struct tm tm;
        char when[32];
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime_r(&t, &tm));
        json_t *route = json_object_get(r, "route");
        buf nodes = {0};
        size_t k;
        json_t *n;
        json_array_foreach(json_object_get(route, "nodes"), k, n) buf_printf(&nodes, "%s%s", k ? "," : "", json_string_value(n));
        printf("%-19s %-28s %-6s %-32s %-6lld %9.1f %s\n", when, str(r, "request_id"), str(r, "method"), str(r, "path"),
               (long long)json_integer_value(json_object_get(r, "status")),
               json_number_value(json_object_get(r, "duration_ms")), nodes.data ? nodes.data : "-");
        buf_free(&nodes);
        if (!detail) continue;
        if (*str(r, "task_id")) printf("  task: %s\n", str(r, "task_id"));
        if (json_is_object(route)) {
            if (*str(route, "rule")) printf("  route: %s (%s)\n", str(route, "sensitivity"), str(route, "rule"));
            else printf("  route: %s\n", str(route, "sensitivity"));
            json_array_foreach(json_object_get(route, "attempts"), k, n)
                printf("  attempt %zu: %s (%s) status %lld: %s\n", k + 1, str(n, "node"), str(n, "backend"),
                       (long long)json_integer_value(json_object_get(n, "status")), str(n, "outcome"));
        }
        print_body("request", json_object_get(r, "request_body"));
        print_body("response", json_object_get(r, "response_body"));
        if (json_is_true(json_object_get(r, "truncated"))) printf("  (bodies cut at the size cap)\n");
    }
}

int cmd_logs(int argc, char **argv)
{
    logs_opts o = {0};
    if (parse(argc, argv, &o)) return 2;
    buf url = {0};
    buf_printf(&url, "%s/v1/audit", o.coordinator);
    add_param(&url, "request_id", o.request);
    add_param(&url, "task_id", o.task);
    add_param(&url, "since", o.since);
    add_param(&url, "limit", o.limit);
    http_client_global_init();
    http_call_opts co = {.method = "GET", .url = url.data, .bearer = o.api_key, .timeout_ms = 10000};
    http_result res;
    http_call(&co, &res);
    json_t *j = res.status ? json_loadb(res.body, res.body_len, 0, NULL) : NULL;
    int rc = 1;
    if (!res.status) {
        fprintf(stderr, "gpupool logs: cannot reach the coordinator at %s: %s\n", o.coordinator, res.error);
    } else if (res.status < 200 || res.status > 299) {
        const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        fprintf(stderr, "gpupool logs: the coordinator answered %ld: %s\n", res.status, m ? m : "no message");
    } else if (!json_is_array(json_object_get(j, "data"))) {
        fprintf(stderr, "gpupool logs: the coordinator's answer is not an audit list\n");
    } else {
        if (o.json) {
            char *s = json_dumps(j, JSON_INDENT(2));
            printf("%s\n", s);
            free(s);
        } else {
            print_records(json_object_get(j, "data"), o.request || o.task);
        }
        rc = 0;
    }
    json_decref(j);
    http_result_free(&res);
    buf_free(&url);
    http_client_global_cleanup();
    return rc;
}
