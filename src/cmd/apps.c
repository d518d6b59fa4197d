/* cmd/apps: `gpupool apps`, the prompt apps and pipelines a coordinator
 * serves (GET /v1/apps and /v1/pipelines): name, model(s), what the output
 * must be, and the description. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cmd/cmd.h"
#include "http/client.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: gpupool apps [options]\n"
               "  --coordinator URL   the coordinator (default $GPUPOOL_COORDINATOR or http://127.0.0.1:8420)\n"
               "  --api-key KEY       an API key (default $GPUPOOL_API_KEY)\n"
               "  --json              print the coordinator's JSON ({\"apps\": [...], \"pipelines\": [...]})\n");
}

static json_t *list(const char *coordinator, const char *key, const char *path)
{
    char url[1024];
    snprintf(url, sizeof url, "%s%s", coordinator, path);
    http_call_opts co = {.method = "GET", .url = url, .bearer = key, .timeout_ms = 10000};
    http_result res;
    http_call(&co, &res);
    json_t *j = res.status ? json_loadb(res.body, res.body_len, 0, NULL) : NULL;
    json_t *data = json_object_get(j, "data");
    if (!res.status) {
        fprintf(stderr, "gpupool apps: cannot reach the coordinator at %s: %s\n", coordinator, res.error);
    } else if (res.status != 200 || !json_is_array(data)) {
        const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        fprintf(stderr, "gpupool apps: the coordinator answered %ld to %s: %s\n", res.status, path,
                m ? m : "no list");
        data = NULL;
    }
    json_incref(data);
    json_decref(j);
    http_result_free(&res);
    return data;
}

static const char *str(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static void print(const json_t *apps, const json_t *pipes)
{
    size_t i;
    const json_t *a;
    printf("%-10s %-24s %-40s %-8s %s\n", "KIND", "NAME", "MODEL(S)", "OUTPUT", "DESCRIPTION");
    json_array_foreach(apps, i, a)
        printf("%-10s %-24s %-40s %-8s %s\n", "app", str(a, "name"), str(a, "model"),
               json_is_object(json_object_get(a, "output_schema")) ? "json" : "text", str(a, "description"));
    json_array_foreach(pipes, i, a) {
        char models[256] = "";
        size_t j, n = 0;
        const json_t *s;
        json_array_foreach(json_object_get(a, "stages"), j, s)
            n += (size_t)snprintf(models + n, n < sizeof models ? sizeof models - n : 0, "%s%s:%s", j ? " > " : "",
                                  str(s, "name"), str(s, "model"));
        printf("%-10s %-24s %-40s %-8s %s\n", "pipeline", str(a, "name"), models, "-", str(a, "description"));
    }
}

int cmd_apps(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"coordinator", 1, 0, 'c'}, {"api-key", 1, 0, 'k'}, {"json", 0, 0, 'j'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
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
    if (optind < argc) {
        fprintf(stderr, "gpupool apps: takes no arguments\n");
        return 2;
    }
    json_t *apps = list(coordinator, key, "/v1/apps");
    json_t *pipes = apps ? list(coordinator, key, "/v1/pipelines") : NULL;
    if (!apps || !pipes) {
        json_decref(apps);
        return 1;
    }
    if (json) {
        json_t *j = json_pack("{s:o,s:o}", "apps", apps, "pipelines", pipes);
        json_dumpf(j, stdout, JSON_INDENT(2));
        putchar('\n');
        json_decref(j);
    } else {
        print(apps, pipes);
        json_decref(apps);
        json_decref(pipes);
    }
    return 0;
}
