/* detect_bench: what sensitive-data detection costs per request.  Scans a
 * ~4 KB chat body (parsed once, as the gateway will hold it) with
 * detect_request, and for scale runs memchr over the same bytes in the same
 * process: the cheapest possible pass over the data.  Prints MB/s for both
 * and their ratio.  With --grep DIR it writes the same mixed text as lines
 * (DIR/text, about 8 MB) and the rules' patterns (DIR/patterns, one a line:
 * the built-ins, then the keywords as one alternation, then the regex),
 * scans the text line by line with detect_text and prints its MB/s, so
 * bench/detect.sh can time grep -c -P with those patterns over that file.
 * Run by bench/detect.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "policy/detect.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Mixed English/Chinese prose with the usual numbers (dates, prices,
 * versions, order ids) and a couple of real hits, like an office chat. */
static json_t *make_body(void)
{
    static const char *en = "Please summarise the attached meeting notes from 2024-11-29. The budget is "
                            "USD 12,500.00 for Q1, version 2.4.1 ships on 2025-01-15, order 202411290001 "
                            "is delayed. ";
    static const char *zh = "请帮我总结一下会议纪要：下周三下午三点在三楼会议室讨论新版本的发布计划，"
                            "预算约一万二千元，订单号二〇二四年十一月的那批需要跟进。";
    json_t *msgs = json_array();
    json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content",
                                          "You are a careful assistant for an office team. Answer briefly."));
    char text[1200];
    for (int turn = 0; turn < 4; turn++) {
        snprintf(text, sizeof text, "%s%s%s%s", en, zh, en, turn == 1 ? "联系人邮箱 wang.wu@corp.example.cn。" : zh);
        json_array_append_new(msgs, json_pack("{s:s,s:[{s:s,s:s}]}", "role", "user", "content", "type", "text",
                                              "text", text));
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "assistant", "content", zh));
    }
    return json_pack("{s:s,s:o,s:f}", "model", "qwen2.5-7b", "messages", msgs, "temperature", 0.2);
}

static const char *const KW[] = {"机密", "绝密", "Project Falcon", "internal only", NULL};
static const char *const RE[] = {"EMP-[0-9]{6}", NULL};

/* The text and patterns files for grep, and detect_text's speed over the same lines. */
static int grep_mode(const detect_rules *r, const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/patterns", dir);
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    for (size_t i = 0; detect_builtin_pattern(i); i++) fprintf(f, "%s\n", detect_builtin_pattern(i));
    for (int i = 0; KW[i]; i++) fprintf(f, "%s%s", i ? "|" : "", KW[i]);
    fprintf(f, "\n%s\n", RE[0]);
    fclose(f);
    json_t *body = make_body();
    snprintf(path, sizeof path, "%s/text", dir);
    if (!(f = fopen(path, "w"))) return 1;
    /* every message's text as one line, the body over and over */
    size_t total = 0, lines = 0;
    char **line = NULL;
    size_t *len = NULL;
    json_t *m;
    size_t i;
    json_array_foreach(json_object_get(body, "messages"), i, m) {
        json_t *c = json_object_get(m, "content");
        const char *t = json_is_string(c) ? json_string_value(c)
                                          : json_string_value(json_object_get(json_array_get(c, 0), "text"));
        line = realloc(line, (lines + 1) * sizeof *line);
        len = realloc(len, (lines + 1) * sizeof *len);
        line[lines] = strdup(t);
        len[lines++] = strlen(t);
    }
    int reps = 0;
    while (total < 8u << 20) {
        for (size_t k = 0; k < lines; k++) {
            fprintf(f, "%s\n", line[k]);
            total += len[k] + 1;
        }
        reps++;
    }
    fclose(f);
    detect_hit hits[16];
    long found = 0;
    double t0 = now();
    for (int rep = 0; rep < reps; rep++)
        for (size_t k = 0; k < lines; k++) found += detect_text(r, line[k], len[k], hits, 16) > 0;
    double t = now() - t0;
    printf("detect_text over %s/text: %.1f MB in %zu lines, %ld with a hit: %.1f MB/s\n", dir, total / 1e6,
           lines * (size_t)reps, found, total / 1e6 / t);
    printf("DETECT_MBPS %.1f\n", total / 1e6 / t);
    for (size_t k = 0; k < lines; k++) free(line[k]);
    free(line);
    free(len);
    json_decref(body);
    return 0;
}

int main(int argc, char **argv)
{
    char err[256];
    detect_rules *r = detect_rules_new(KW, RE, err, sizeof err);
    if (!r) {
        fprintf(stderr, "detect_bench: %s\n", err);
        return 1;
    }
    if (argc > 2 && !strcmp(argv[1], "--grep")) {
        int rc = grep_mode(r, argv[2]);
        detect_rules_free(r);
        return rc;
    }
    int iters = argc > 1 ? atoi(argv[1]) : 20000;
    json_t *body = make_body();
    char *raw = json_dumps(body, JSON_COMPACT);
    size_t n = strlen(raw);

    detect_result res;
    detect_request(r, body, &res); /* warm up; also shows what it finds */
    double t0 = now();
    long hits = 0;
    for (int i = 0; i < iters; i++) {
        detect_request(r, body, &res);
        hits += res.hits;
    }
    double t_det = now() - t0;

    volatile size_t sink = 0;
    const char *volatile rawv = raw; /* stops the compiler hoisting memchr out of the loop */
    t0 = now();
    for (int i = 0; i < iters; i++) {
        const char *p = memchr(rawv, '\x01', n); /* absent: reads every byte */
        sink += p ? 1 : n;
    }
    double t_mem = now() - t0;
    (void)sink;

    double mb = (double)n * iters / 1e6;
    printf("body %zu bytes, %d iterations, %d hits/request (first: %s)\n", n, iters, res.hits,
           res.first_rule);
    printf("detect_request  %9.1f MB/s  %7.2f us/request\n", mb / t_det, t_det * 1e6 / iters);
    printf("memchr baseline %9.1f MB/s  %7.2f us/request\n", mb / t_mem, t_mem * 1e6 / iters);
    printf("ratio memchr/detect: %.0fx\n", (mb / t_mem) / (mb / t_det));
    free(raw);
    json_decref(body);
    detect_rules_free(r);
    return hits == (long)res.hits * iters ? 0 : 1;
}
