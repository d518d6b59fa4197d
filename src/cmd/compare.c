/* cmd/compare: `gpupool compare`, one input set through two models (say
 * F16 and Q4_K_M) over the coordinator, and a verdict: the share of answers
 * that parse as JSON, the field-by-field agreement of those answers, the
 * latency of each model and the difference, and pass or fail against a
 * threshold of agreement.  The arithmetic is policy/compare's; this file
 * reads the input, makes the calls and prints. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cmd/cmd.h"
#include "http/client.h"
#include "policy/compare.h"
#include "util/clock.h"
#include "util/opts.h"

#define MAX_FIELDS 64

typedef struct compare_opts {
    const char *coordinator, *api_key, *model[2], *fields, *input;
    long concurrency, timeout_ms;
    double threshold;
    int json;
} compare_opts;

typedef struct item {
    char *body[2];          /* the request for each model */
    int is_chat;
    char *text[2];          /* the answer's text; NULL when the call failed */
    double ms[2];
    long status[2];
} item;

typedef struct run {
    const compare_opts *o;
    item *items;
    size_t n, next;
    pthread_mutex_t mu;
    char first_error[300];
} run;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gpupool compare --model-a MODEL --model-b MODEL [options] INPUT.jsonl\n"
            "Runs every line of INPUT (- for stdin; each a chat body {\"messages\":[...]} or a\n"
            "completion body {\"prompt\":...}) through both models and compares their answers as JSON.\n"
            "Exits 0 when the field agreement reaches the threshold, 1 when it does not, 2 on a usage\n"
            "error or when no call could be made.\n"
            "  --model-a MODEL       the reference model (e.g. the F16 one)\n"
            "  --model-b MODEL       the model on trial (e.g. its Q4_K_M)\n"
            "  --coordinator URL     the coordinator (default $GPUPOOL_COORDINATOR or http://127.0.0.1:8420)\n"
            "  --api-key KEY         an API key (default $GPUPOOL_API_KEY)\n"
            "  --concurrency N       inputs in flight at once (default 4)\n"
            "  --threshold F         the field agreement that passes, 0..1 (default 0.95)\n"
            "  --fields A,B          the top-level fields compared (default every field of either answer)\n"
            "  --timeout-ms N        longest wait for one answer (default 120000)\n"
            "  --json                print the report as JSON\n");
}

static int parse(int argc, char **argv, compare_opts *o)
{
    static const struct option longopts[] = {
        {"model-a", 1, 0, 'a'}, {"model-b", 1, 0, 'b'}, {"coordinator", 1, 0, 'c'}, {"api-key", 1, 0, 'k'},
        {"concurrency", 1, 0, 'n'}, {"threshold", 1, 0, 't'}, {"fields", 1, 0, 'f'}, {"timeout-ms", 1, 0, 'T'},
        {"json", 0, 0, 'j'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    char *end;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'a': o->model[0] = optarg; break;
        case 'b': o->model[1] = optarg; break;
        case 'c': o->coordinator = optarg; break;
        case 'k': o->api_key = optarg; break;
        case 'f': o->fields = optarg; break;
        case 'j': o->json = 1; break;
        case 'n':
            if (opts_parse_int(optarg, 1, 256, &o->concurrency)) {
                fprintf(stderr, "gpupool compare: --concurrency wants a number from 1 to 256\n");
                return -1;
            }
            break;
        case 'T':
            if (opts_parse_int(optarg, 100, 86400000, &o->timeout_ms)) {
                fprintf(stderr, "gpupool compare: --timeout-ms wants a number from 100 to 86400000\n");
                return -1;
            }
            break;
        case 't':
            o->threshold = strtod(optarg, &end);
            if (end == optarg || *end || !(o->threshold >= 0 && o->threshold <= 1)) {
                fprintf(stderr, "gpupool compare: --threshold wants a number from 0 to 1, like 0.95\n");
                return -1;
            }
            break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
    }
    if (!o->model[0] || !o->model[1]) {
        fprintf(stderr, "gpupool compare: --model-a and --model-b are required\n");
        return -1;
    }
    if (argc - optind != 1) {
        fprintf(stderr, "gpupool compare: name one input file (JSONL, or - for stdin)\n");
        return -1;
    }
    o->input = argv[optind];
    return 0;
}

/* The input's lines as requests for both models; returns how many, or -1
 * after saying which line is wrong. */
static long read_input(const compare_opts *o, item **out)
{
    FILE *f = strcmp(o->input, "-") ? fopen(o->input, "r") : stdin;
    if (!f) {
        fprintf(stderr, "gpupool compare: cannot read %s: %s\n", o->input, strerror(errno));
        return -1;
    }
    item *items = NULL;
    size_t n = 0, cap = 0, linecap = 0;
    char *line = NULL;
    long lineno = 0, rc = 0;
    while (getline(&line, &linecap, f) >= 0) {
        lineno++;
        if (line[strspn(line, " \t\r\n")] == 0) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            item *grown = realloc(items, cap * sizeof *items);
            if (!grown) { rc = -1; break; }
            items = grown;
        }
        item *it = &items[n];
        memset(it, 0, sizeof *it);
        char err[200];
        for (int side = 0; side < 2; side++) {
            json_t *body = cmp_request(line, o->model[side], &it->is_chat, err, sizeof err);
            if (!body) {
                fprintf(stderr, "gpupool compare: %s:%ld: %s\n", o->input, lineno, err);
                free(it->body[0]);
                rc = -1;
                break;
            }
            it->body[side] = json_dumps(body, JSON_COMPACT);
            json_decref(body);
        }
        if (rc) break;
        n++;
    }
    free(line);
    if (f != stdin) fclose(f);
    if (!rc && n == 0) {
        fprintf(stderr, "gpupool compare: %s has no inputs\n", o->input);
        rc = -1;
    }
    if (rc) {
        for (size_t i = 0; i < n; i++) free(items[i].body[0]), free(items[i].body[1]);
        free(items);
        return -1;
    }
    *out = items;
    return (long)n;
}

static void call_one(run *r, item *it, int side)
{
    const compare_opts *o = r->o;
    char url[1024];
    snprintf(url, sizeof url, "%s%s", o->coordinator, it->is_chat ? "/v1/chat/completions" : "/v1/completions");
    http_call_opts co = {.method = "POST", .url = url, .bearer = o->api_key, .timeout_ms = o->timeout_ms,
                         .body = it->body[side], .body_len = strlen(it->body[side])};
    http_result res;
    int64_t t0 = mono_us();
    http_call(&co, &res);
    it->ms[side] = (double)(mono_us() - t0) / 1000.0;
    it->status[side] = res.status;
    json_t *j = res.status == 200 ? json_loadb(res.body, res.body_len, 0, NULL) : NULL;
    const char *text = cmp_answer_text(j);
    if (text) it->text[side] = strdup(text);
    if (!text) {
        pthread_mutex_lock(&r->mu);
        if (!r->first_error[0]) {
            json_t *e = res.status ? json_loadb(res.body, res.body_len, 0, NULL) : NULL;
            const char *m = json_string_value(json_object_get(json_object_get(e, "error"), "message"));
            snprintf(r->first_error, sizeof r->first_error, "%s: %s", o->model[side],
                     !res.status ? res.error : m ? m : res.status == 200 ? "an answer without text" : "an error");
            json_decref(e);
        }
        pthread_mutex_unlock(&r->mu);
    }
    json_decref(j);
    http_result_free(&res);
}

static void *worker(void *arg)
{
    run *r = arg;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        size_t i = r->next++;
        pthread_mutex_unlock(&r->mu);
        if (i >= r->n) return NULL;
        /* Alternate who goes first, so a warm cache or a queue favours
         * neither model. */
        int first = (int)(i % 2);
        call_one(r, &r->items[i], first);
        call_one(r, &r->items[i], !first);
    }
}

static void print_text(const compare_opts *o, const cmp_report *rep, json_t *j)
{
    json_t *m = json_object_get(j, "models");
    json_t *a = json_object_get(m, "a"), *b = json_object_get(m, "b");
    printf("compare: %d inputs, a = %s, b = %s\n", rep->items, o->model[0], o->model[1]);
    char cell[2][32];
    printf("  %-16s %14s %14s\n", "", "a", "b");
    for (int s = 0; s < 2; s++) snprintf(cell[s], sizeof cell[s], "%d/%d", rep->answered[s], rep->items);
    printf("  %-16s %14s %14s\n", "answered", cell[0], cell[1]);
    for (int s = 0; s < 2; s++)
        snprintf(cell[s], sizeof cell[s], "%.1f%%", 100 * json_number_value(json_object_get(s ? b : a, "parse_rate")));
    printf("  %-16s %14s %14s\n", "parse as JSON", cell[0], cell[1]);
    static const char *const q[] = {"p50", "p95"};
    for (int i = 0; i < 2; i++) {
        char key[16], label[32];
        snprintf(key, sizeof key, "%s_ms", q[i]);
        snprintf(label, sizeof label, "latency %s", q[i]);
        for (int s = 0; s < 2; s++)
            snprintf(cell[s], sizeof cell[s], "%.0f ms", json_number_value(json_object_get(s ? b : a, key)));
        printf("  %-16s %14s %14s   (b - a: %+.0f ms)\n", label, cell[0], cell[1],
               json_number_value(json_object_get(json_object_get(j, "latency_diff_ms"), q[i])));
    }
    printf("field agreement:\n");
    for (int i = 0; i < rep->nfields; i++) {
        const cmp_field *f = &rep->fields[i];
        printf("  %-24s %6d/%-6d %6.1f%%\n", f->name, f->agree, f->total, f->total ? 100.0 * f->agree / f->total : 100.0);
    }
    printf("overall: %d/%d fields agree = %.2f%% (threshold %.2f%%), %d of %d inputs identical: %s\n", rep->agree,
           rep->total, 100 * cmp_agreement(rep), 100 * o->threshold, rep->items_identical, rep->items,
           json_is_true(json_object_get(j, "pass")) ? "PASS" : "FAIL");
}

int cmd_compare(int argc, char **argv)
{
    compare_opts o = {.coordinator = getenv("GPUPOOL_COORDINATOR"), .api_key = getenv("GPUPOOL_API_KEY"),
                      .concurrency = 4, .timeout_ms = 120000, .threshold = 0.95};
    if (!o.coordinator || !*o.coordinator) o.coordinator = "http://127.0.0.1:8420";
    if (parse(argc, argv, &o)) return 2;
    char *fields_copy = o.fields ? strdup(o.fields) : NULL, *save = NULL;
    const char *fields[MAX_FIELDS];
    int nfields = 0;
    for (char *f = fields_copy ? strtok_r(fields_copy, ",", &save) : NULL; f; f = strtok_r(NULL, ",", &save)) {
        if (nfields == MAX_FIELDS) {
            fprintf(stderr, "gpupool compare: --fields names at most %d fields\n", MAX_FIELDS);
            free(fields_copy);
            return 2;
        }
        fields[nfields++] = f;
    }
    if (o.fields && !nfields) {
        fprintf(stderr, "gpupool compare: --fields wants names like id,total\n");
        free(fields_copy);
        return 2;
    }
    item *items = NULL;
    long n = read_input(&o, &items);
    if (n < 0) {
        free(fields_copy);
        return 2;
    }
    http_client_global_init();
    run r = {.o = &o, .items = items, .n = (size_t)n};
    pthread_mutex_init(&r.mu, NULL);
    long nthreads = o.concurrency < n ? o.concurrency : n;
    pthread_t *threads = calloc((size_t)nthreads, sizeof *threads);
    long started = 0;
    while (threads && started < nthreads && !pthread_create(&threads[started], NULL, worker, &r)) started++;
    if (started == 0) worker(&r); /* no thread to be had: one at a time here */
    for (long i = 0; i < started; i++) pthread_join(threads[i], NULL);
    free(threads);
    pthread_mutex_destroy(&r.mu);

    cmp_report rep;
    cmp_init(&rep, fields, nfields);
    int reached = 0;
    for (long i = 0; i < n; i++) {
        cmp_add(&rep, items[i].text[0], items[i].text[1]);
        for (int s = 0; s < 2; s++) {
            cmp_add_latency(&rep, s, items[i].ms[s]);
            reached |= items[i].status[s] != 0;
        }
    }
    int rc;
    if (!reached) {
        fprintf(stderr, "gpupool compare: no call reached the coordinator at %s: %s\n", o.coordinator, r.first_error);
        rc = 2;
    } else {
        if (r.first_error[0])
            fprintf(stderr, "gpupool compare: %d of %ld calls got no answer text; the first: %s\n",
                    (int)(2 * n) - rep.answered[0] - rep.answered[1], 2 * n, r.first_error);
        json_t *j = cmp_report_json(&rep, o.model[0], o.model[1], o.threshold);
        if (o.json) {
            char *s = json_dumps(j, JSON_INDENT(2));
            printf("%s\n", s);
            free(s);
        } else {
            print_text(&o, &rep, j);
        }
        rc = json_is_true(json_object_get(j, "pass")) ? 0 : 1;
        json_decref(j);
    }
    cmp_free(&rep);
    for (long i = 0; i < n; i++)
        for (int s = 0; s < 2; s++) free(items[i].body[s]), free(items[i].text[s]);
    free(items);
    free(fields_copy);
    http_client_global_cleanup();
    return rc;
}
