/* cache_bench: what a semantic-cache lookup costs, and how well the built-in
 * embedder tells paraphrases from near-misses.  Run by bench/cache.sh.
 *
 * Part 1: N random 384-d entries (N = 10k and 100k) in one partition and one
 * context, the worst case: every lookup scans them all.  A lookup through
 * semcache_lookup is timed against the floor for reading the same bytes, a
 * plain vectorised sum over an array of the same vectors, in the same run.
 * The two are measured in alternation so that a noisy neighbour hits both.
 *
 * Part 2: the labelled pairs of bench/data/paraphrase.tsv.  For each pair the
 * first text is stored and the second looked up through the real path
 * (embed_text, semcache_insert, semcache_lookup) at the default threshold;
 * then the cosine of every pair gives a table over thresholds. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "policy/cache.h"
#include "policy/embed.h"

#define D EMBED_DIM

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double quantile(double *v, int n, double q)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[(int)(q * (n - 1) + 0.5)];
}

/* xorshift64*: reproducible vectors without libc's rand. */
static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static double uniform(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (double)((rng * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

static void random_unit(float *v)
{
    double s = 0;
    for (int i = 0; i < D; i++) {
        v[i] = (float)(uniform() * 2 - 1);
        s += (double)v[i] * v[i];
    }
    for (int i = 0; i < D; i++) v[i] = (float)(v[i] / sqrt(s));
}

typedef float v4 __attribute__((vector_size(16)));

/* The floor: every byte of the vectors read once, summed with independent
 * accumulators so the loop runs at memory speed, not add latency. */
static float scan_sum(const float *a, size_t n)
{
    v4 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    for (size_t i = 0; i + 16 <= n; i += 16) {
        v4 x0, x1, x2, x3;
        memcpy(&x0, a + i, 16);
        memcpy(&x1, a + i + 4, 16);
        memcpy(&x2, a + i + 8, 16);
        memcpy(&x3, a + i + 12, 16);
        s0 += x0;
        s1 += x1;
        s2 += x2;
        s3 += x3;
    }
    v4 s = (s0 + s1) + (s2 + s3);
    return s[0] + s[1] + s[2] + s[3];
}

static int latency(int n, int reps)
{
    cache_config cfg;
    cache_config_init(&cfg);
    cfg.max_bytes = (size_t)4 << 30;
    cfg.ttl_ms = 0;
    char err[256];
    semcache *c = semcache_open(NULL, &cfg, 0, 0, err, sizeof err);
    if (!c) {
        fprintf(stderr, "cache_bench: %s\n", err);
        return 1;
    }
    cache_key k = {"bench-model", "bench-key", CACHE_TIER_EXTERNAL, {0}};
    float *all = aligned_alloc(64, (size_t)n * D * sizeof(float));
    if (!all) return 1;
    static const char answer[] = "{\"object\":\"chat.completion\",\"choices\":[{\"message\":{\"content\":\"ok\"}}]}";
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        random_unit(all + (size_t)i * D);
        if (semcache_insert(c, &k, all + (size_t)i * D, D, answer, sizeof answer - 1, 0) != 0) {
            fprintf(stderr, "cache_bench: insert failed: %s\n", semcache_errmsg(c));
            return 1;
        }
    }
    double t_ins = now_s() - t0;

    double *lk = malloc((size_t)reps * sizeof *lk), *fl = malloc((size_t)reps * sizeof *fl);
    float q[D];
    volatile float sink = 0;
    int hits = 0;
    for (int r = -3; r < reps; r++) { /* three warm-up rounds */
        random_unit(q);
        if (r % 4 == 0 && r >= 0) memcpy(q, all + (size_t)(r * 7919 % n) * D, sizeof q); /* some hits */
        t0 = now_s();
        sink += scan_sum(all, (size_t)n * D);
        double t1 = now_s();
        cache_hit h;
        int rc = semcache_lookup(c, &k, q, D, 1, &h);
        double t2 = now_s();
        hits += rc == 1 && r >= 0;
        cache_hit_free(&h);
        if (r >= 0) {
            fl[r] = t1 - t0;
            lk[r] = t2 - t1;
        }
    }
    (void)sink;
    double mb = (double)n * D * sizeof(float) / 1e6;
    double fl_med = quantile(fl, reps, 0.5), lk_med = quantile(lk, reps, 0.5);
    double lk_p90 = quantile(lk, reps, 0.9);
    cache_stats st;
    semcache_stats(c, &st);
    printf("%7d entries  %6.1f MB of vectors (cache bytes %.1f MB)  insert %.2f us/entry\n", n, mb,
           (double)st.bytes / 1e6, t_ins * 1e6 / n);
    printf("  lookup   median %9.1f us  p90 %9.1f us  %6.2f GB/s   (%d/%d hits)\n", lk_med * 1e6, lk_p90 * 1e6,
           mb / 1e3 / lk_med, hits, reps);
    printf("  floor    median %9.1f us                 %6.2f GB/s   (plain sum over the same bytes)\n",
           fl_med * 1e6, mb / 1e3 / fl_med);
    printf("  ratio    lookup/floor %.2fx   (target <= 1.5x)\n", lk_med / fl_med);
    free(lk);
    free(fl);
    free(all);
    semcache_close(c);
    return 0;
}

/* ---- paraphrases ---------------------------------------------------------- */

typedef struct pair {
    int same, zh;
    double cos;
    int hit;
} pair;

static int has_cjk(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s >= 0xE3 && (unsigned char)*s <= 0xE9) return 1; /* lead bytes of U+3000..U+9FFF */
    return 0;
}

static int paraphrases(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        return 1;
    }
    pair *p = NULL;
    int n = 0, cap = 0, texts = 0;
    char line[4096];
    cache_config cfg;
    cache_config_init(&cfg);
    char err[256];
    semcache *c = semcache_open(NULL, &cfg, 0, 0, err, sizeof err);
    double t_embed = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0] || line[0] == '#') continue;
        char *a = strchr(line, '\t'), *b = a ? strchr(a + 1, '\t') : NULL;
        if (!b || (strncmp(line, "same\t", 5) != 0 && strncmp(line, "different\t", 10) != 0)) {
            fprintf(stderr, "cache_bench: bad line in %s: %s\n", path, line);
            return 1;
        }
        *a++ = 0;
        *b++ = 0;
        if (n == cap) p = realloc(p, (size_t)(cap = cap ? cap * 2 : 256) * sizeof *p);
        float x[D], y[D];
        double t0 = now_s();
        embed_text(a, strlen(a), x);
        embed_text(b, strlen(b), y);
        t_embed += now_s() - t0;
        texts += 2;
        double s = 0;
        for (int i = 0; i < D; i++) s += (double)x[i] * y[i];
        /* Each pair in its own context, as if each were its own conversation. */
        cache_key k = {"m", "", CACHE_TIER_EXTERNAL, {0}};
        memcpy(k.context, &n, sizeof n);
        semcache_insert(c, &k, x, D, a, strlen(a), 0);
        cache_hit h;
        int hit = semcache_lookup(c, &k, y, D, 0, &h) == 1;
        cache_hit_free(&h);
        p[n++] = (pair){strcmp(line, "same") == 0, has_cjk(a) || has_cjk(b), s, hit};
    }
    fclose(f);
    semcache_close(c);

    int ns[2] = {0}, nd[2] = {0}, hs[2] = {0}, hd[2] = {0};
    for (int i = 0; i < n; i++) {
        if (p[i].same) ns[p[i].zh]++, hs[p[i].zh] += p[i].hit;
        else nd[p[i].zh]++, hd[p[i].zh] += p[i].hit;
    }
    printf("\nparaphrase set %s: %d pairs (%d same, %d different; %d English, %d Chinese)\n", path, n,
           ns[0] + ns[1], nd[0] + nd[1], ns[0] + nd[0], ns[1] + nd[1]);
    printf("built-in embedder: %.1f us per text (mean over %d)\n", t_embed * 1e6 / texts, texts);
    printf("at the default threshold %.2f, through semcache_insert/semcache_lookup:\n", CACHE_DEFAULT_THRESHOLD);
    printf("  hit rate (same pairs)        %5.1f%%  (English %5.1f%%, Chinese %5.1f%%)\n",
           100.0 * (hs[0] + hs[1]) / (ns[0] + ns[1]), 100.0 * hs[0] / ns[0], 100.0 * hs[1] / ns[1]);
    printf("  false-hit rate (different)   %5.1f%%  (English %5.1f%%, Chinese %5.1f%%)\n",
           100.0 * (hd[0] + hd[1]) / (nd[0] + nd[1]), 100.0 * hd[0] / nd[0], 100.0 * hd[1] / nd[1]);
    printf("\nthreshold   hit rate   false-hit rate   (cosine of each pair)\n");
    static const double thr[] = {0.80, 0.85, 0.88, 0.90, 0.92, 0.93, 0.94, 0.95, 0.96, 0.98};
    for (size_t t = 0; t < sizeof thr / sizeof *thr; t++) {
        int h = 0, fh = 0;
        for (int i = 0; i < n; i++) {
            if (p[i].cos + 1e-6 < thr[t]) continue; /* the store compares in float */
            if (p[i].same) h++;
            else fh++;
        }
        printf("  %.2f%s     %5.1f%%       %5.1f%%\n", thr[t], fabs(thr[t] - CACHE_DEFAULT_THRESHOLD) < 1e-9 ? "*" : " ",
               100.0 * h / (ns[0] + ns[1]), 100.0 * fh / (nd[0] + nd[1]));
    }
    double worst = -1;
    for (int i = 0; i < n; i++)
        if (!p[i].same && p[i].cos > worst) worst = p[i].cos;
    printf("  (* default; the most similar different pair scores %.3f)\n", worst);
    free(p);
    return 0;
}

int main(int argc, char **argv)
{
    const char *tsv = argc > 1 ? argv[1] : "bench/data/paraphrase.tsv";
    int reps = argc > 2 ? atoi(argv[2]) : 41;
    printf("semantic cache lookup, %d-d float vectors, one partition and context (every lookup scans all)\n", D);
    if (latency(10000, reps * 4) || latency(100000, reps)) return 1;
    return paraphrases(tsv);
}
