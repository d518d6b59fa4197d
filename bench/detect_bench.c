/* detect_bench: what sensitive-data detection costs per request.  Scans a
 * ~4 KB chat body (parsed once, as the gateway will hold it) with
 * detect_request, and for scale runs memchr over the same bytes in the same
 * process: the cheapest possible pass over the data.  Prints MB/s for both
 * and their ratio.  Run by bench/detect.sh. */
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

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 20000;
    static const char *const kw[] = {"机密", "绝密", "Project Falcon", "internal only", NULL};
    static const char *const re[] = {"EMP-[0-9]{6}", NULL};
    char err[256];
    detect_rules *r = detect_rules_new(kw, re, err, sizeof err);
    if (!r) {
        fprintf(stderr, "detect_bench: %s\n", err);
        return 1;
    }
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
