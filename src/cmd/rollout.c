/* cmd/rollout: `gpupool rollout start|advance|pause|resume|abort|status`,
 * the operator's hand on rollouts, over the coordinator's HTTP API
 * (/v1/rollouts; api/rollouts.c). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cmd/cmd.h"
#include "http/client.h"
#include "util/opts.h"

typedef struct rollout_opts {
    const char *coordinator, *api_key;
    const char *stable, *canary, *steps;
    const char *max_error_rate, *max_p95_ms, *window, *window_s, *min_samples, *auto_advance_s;
    int json;
} rollout_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gpupool rollout start NAME --stable MODEL --canary MODEL [options]\n"
            "       gpupool rollout advance|pause|resume|abort NAME\n"
            "       gpupool rollout status [NAME] [--json]\n"
            "  --coordinator URL     the coordinator (default $GPUPOOL_COORDINATOR or http://127.0.0.1:8420)\n"
            "  --api-key KEY         an API key (default $GPUPOOL_API_KEY); every change needs an admin key\n"
            "                        when the pool uses keys\n"
            "  --stable MODEL        the model serving the traffic now\n"
            "  --canary MODEL        the model being rolled out\n"
            "  --steps LIST          the canary's share per step, percent (default 5,25,50,100)\n"
            "  --max-error-rate F    roll back above this error rate of the canary, 0..1 (default 0.05)\n"
            "  --max-p95-ms N        roll back above this p95 latency of the canary (default 0: not judged)\n"
            "  --window N            outcomes judged per version (default 100)\n"
            "  --window-s S          of those, only the ones this recent (default 0: any age)\n"
            "  --min-samples N       outcomes needed before any verdict (default 20)\n"
            "  --auto-advance-s S    advance a healthy step after S seconds (default 0: by hand)\n"
            "  --json                print the coordinator's JSON\n");
}

/* One call; prints a one-line error and returns NULL unless it got JSON
 * with a 2xx status. */
static json_t *call(const rollout_opts *o, const char *method, const char *path, const char *body)
{
    char url[1024];
    snprintf(url, sizeof url, "%s%s", o->coordinator, path);
    if (!body && !strcmp(method, "POST")) body = "{}";
    http_call_opts co = {.method = method, .url = url, .bearer = o->api_key, .timeout_ms = 10000, .body = body,
                         .body_len = body ? strlen(body) : 0};
    http_result res;
    http_call(&co, &res);
    json_t *j = res.status ? json_loadb(res.body, res.body_len, 0, NULL) : NULL;
    if (!res.status) {
        fprintf(stderr, "gpupool rollout: cannot reach the coordinator at %s: %s\n", o->coordinator, res.error);
    } else if (res.status < 200 || res.status > 299) {
        const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        fprintf(stderr, "gpupool rollout: the coordinator answered %ld: %s\n", res.status, m ? m : "no message");
        json_decref(j);
        j = NULL;
    } else if (!j) {
        fprintf(stderr, "gpupool rollout: the coordinator's answer is not JSON\n");
    }
    http_result_free(&res);
    return j;
}

static void print_one(json_t *r)
{
    json_t *v = json_object_get(r, "versions");
    printf("%s: %s at %lld %% (step %lld of %zu), %s -> %s\n  %s\n", json_string_value(json_object_get(r, "name")),
           json_string_value(json_object_get(r, "state")), (long long)json_integer_value(json_object_get(r, "share")),
           (long long)json_integer_value(json_object_get(r, "step")) + 1,
           json_array_size(json_object_get(r, "steps")), json_string_value(json_object_get(r, "stable")),
           json_string_value(json_object_get(r, "canary")), json_string_value(json_object_get(r, "reason")));
    static const char *const roles[] = {"stable", "canary"};
    for (int i = 0; i < 2; i++) {
        json_t *one = json_object_get(v, roles[i]), *w = json_object_get(one, "window");
        printf("  %-6s %-24s requests %-7lld errors %-5lld window: %lld, error rate %.3f, p95 %.0f ms\n", roles[i],
               json_string_value(json_object_get(one, "model")),
               (long long)json_integer_value(json_object_get(one, "requests")),
               (long long)json_integer_value(json_object_get(one, "errors")),
               (long long)json_integer_value(json_object_get(w, "requests")),
               json_number_value(json_object_get(w, "error_rate")), json_number_value(json_object_get(w, "p95_ms")));
    }
}

static void print(const rollout_opts *o, json_t *j)
{
    if (o->json) {
        char *s = json_dumps(j, JSON_INDENT(2));
        printf("%s\n", s);
        free(s);
        return;
    }
    json_t *data = json_object_get(j, "data");
    if (!data) { print_one(j); return; }
    if (!json_array_size(data)) printf("no rollouts\n");
    size_t i;
    json_t *r;
    json_array_foreach(data, i, r) print_one(r);
}

/* A number option into the body; returns -1 after saying why. */
static int put_number(json_t *body, const char *key, const char *opt, const char *text, int integer)
{
    if (!text) return 0;
    char *end;
    double d = strtod(text, &end);
    if (end == text || *end) {
        fprintf(stderr, "gpupool rollout: %s wants a number, not '%s'\n", opt, text);
        return -1;
    }
    json_object_set_new(body, key, integer && d == (double)(json_int_t)d ? json_integer((json_int_t)d) : json_real(d));
    return 0;
}

static json_t *start_body(const rollout_opts *o, const char *name)
{
    if (!o->stable || !o->canary) {
        fprintf(stderr, "gpupool rollout start: --stable and --canary are required\n");
        return NULL;
    }
    json_t *b = json_pack("{s:s, s:s, s:s}", "name", name, "stable", o->stable, "canary", o->canary);
    if (o->steps) {
        json_t *steps = json_array();
        json_object_set_new(b, "steps", steps);
        char *copy = strdup(o->steps), *save = NULL;
        for (char *s = strtok_r(copy, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
            long v;
            if (opts_parse_int(s, 1, 100, &v)) {
                fprintf(stderr, "gpupool rollout start: --steps wants percentages like 5,25,50,100, not '%s'\n", o->steps);
                free(copy);
                json_decref(b);
                return NULL;
            }
            json_array_append_new(steps, json_integer(v));
        }
        free(copy);
    }
    if (put_number(b, "max_error_rate", "--max-error-rate", o->max_error_rate, 0) ||
        put_number(b, "max_p95_ms", "--max-p95-ms", o->max_p95_ms, 0) ||
        put_number(b, "window", "--window", o->window, 1) ||
        put_number(b, "window_s", "--window-s", o->window_s, 0) ||
        put_number(b, "min_samples", "--min-samples", o->min_samples, 1) ||
        put_number(b, "auto_advance_s", "--auto-advance-s", o->auto_advance_s, 0)) {
        json_decref(b);
        return NULL;
    }
    return b;
}

int cmd_rollout(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"coordinator", 1, 0, 'c'}, {"api-key", 1, 0, 'k'}, {"stable", 1, 0, 's'}, {"canary", 1, 0, 'n'},
        {"steps", 1, 0, 'S'}, {"max-error-rate", 1, 0, 'e'}, {"max-p95-ms", 1, 0, 'p'}, {"window", 1, 0, 'w'},
        {"window-s", 1, 0, 'W'}, {"min-samples", 1, 0, 'm'}, {"auto-advance-s", 1, 0, 'a'}, {"json", 0, 0, 'j'},
        {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    rollout_opts o = {.coordinator = getenv("GPUPOOL_COORDINATOR"), .api_key = getenv("GPUPOOL_API_KEY")};
    if (!o.coordinator || !*o.coordinator) o.coordinator = "http://127.0.0.1:8420";
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'c': o.coordinator = optarg; break;
        case 'k': o.api_key = optarg; break;
        case 's': o.stable = optarg; break;
        case 'n': o.canary = optarg; break;
        case 'S': o.steps = optarg; break;
        case 'e': o.max_error_rate = optarg; break;
        case 'p': o.max_p95_ms = optarg; break;
        case 'w': o.window = optarg; break;
        case 'W': o.window_s = optarg; break;
        case 'm': o.min_samples = optarg; break;
        case 'a': o.auto_advance_s = optarg; break;
        case 'j': o.json = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    const char *verb = optind < argc ? argv[optind] : NULL;
    const char *name = optind + 1 < argc ? argv[optind + 1] : NULL;
    int nargs = argc - optind;
    static const char *const moves[] = {"advance", "pause", "resume", "abort"};
    int is_move = 0;
    for (int i = 0; verb && i < 4; i++) is_move |= !strcmp(verb, moves[i]);
    if (!verb || (strcmp(verb, "start") && strcmp(verb, "status") && !is_move)) {
        fprintf(stderr, "gpupool rollout: say start, advance, pause, resume, abort or status (see --help)\n");
        return 2;
    }
    if ((strcmp(verb, "status") && nargs != 2) || (!strcmp(verb, "status") && nargs > 2)) {
        fprintf(stderr, "gpupool rollout %s: %s\n", verb, nargs > 2 ? "too many arguments" : "name one rollout");
        return 2;
    }
    if (name && (!*name || strchr(name, '/') || strchr(name, '?'))) {
        fprintf(stderr, "gpupool rollout: '%s' is not a rollout name\n", name);
        return 2;
    }
    json_t *body = NULL;
    if (!strcmp(verb, "start") && !(body = start_body(&o, name))) return 2;
    http_client_global_init();
    char path[512];
    json_t *j;
    if (body) {
        char *text = json_dumps(body, JSON_COMPACT);
        j = call(&o, "POST", "/v1/rollouts", text);
        free(text);
        json_decref(body);
    } else if (is_move) {
        snprintf(path, sizeof path, "/v1/rollouts/%s/%s", name, verb);
        j = call(&o, "POST", path, NULL);
    } else {
        snprintf(path, sizeof path, "/v1/rollouts%s%s", name ? "/" : "", name ? name : "");
        j = call(&o, "GET", path, NULL);
    }
    if (j) print(&o, j);
    int rc = j ? 0 : 1;
    json_decref(j);
    http_client_global_cleanup();
    return rc;
}
