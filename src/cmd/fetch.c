/* cmd/fetch: `gpupool fetch`, one peer file download by hand (and for the
 * benchmark): the worker's own downloader (worker/fetch) with its resume,
 * check, rate limit and retries, progress on stderr. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "http/client.h"
#include "util/clock.h"
#include "util/opts.h"
#include "worker/fetch.h"
#include "worker/filehash.h"
#include "worker/fileserve.h"

#define MAX_FROM 8

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gpupool fetch --from URL --sha256 HEX --out FILE [options]\n"
            "  --from URL              a worker holding the file (http://HOST:PORT) or the file's URL;\n"
            "                          repeatable: tried in turn\n"
            "  --sha256 HEX            the file's SHA-256; the download is checked against it\n"
            "  --out FILE              where it goes (FILE.part while it downloads; a later run resumes it)\n"
            "  --rate SIZE             at most SIZE bytes per second, e.g. 50M (default no limit)\n"
            "  --stall-ms N            give a source up after N ms without a byte (default 30000)\n"
            "  --rounds N              passes over the sources before giving up (default 3)\n"
            "  --join-token TOKEN      the pool's join token (or GPUPOOL_JOIN_TOKEN)\n"
            "  --join-token-file FILE  read the join token from FILE\n"
            "  --quiet                 no progress lines\n");
}

typedef struct cli_progress {
    int quiet;
    int64_t last_ms;
} cli_progress;

static void on_progress(void *ctx, const fetch_progress *p)
{
    cli_progress *c = ctx;
    int64_t now = mono_ms();
    if (c->quiet || !p->done || now - c->last_ms < 1000) return;
    c->last_ms = now;
    double mib = 1024.0 * 1024.0;
    if (p->total)
        fprintf(stderr, "gpupool fetch: %.1f of %.1f MiB (%.0f%%) at %.1f MiB/s, eta %lld s, from %s\n",
                (double)p->done / mib, (double)p->total / mib, 100.0 * (double)p->done / (double)p->total,
                p->rate_bps / mib, (long long)p->eta_s, p->source);
    else
        fprintf(stderr, "gpupool fetch: %.1f MiB at %.1f MiB/s from %s\n", (double)p->done / mib, p->rate_bps / mib,
                p->source);
}

int cmd_fetch(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"from", 1, 0, 'f'}, {"sha256", 1, 0, 's'}, {"out", 1, 0, 'o'}, {"rate", 1, 0, 'r'},
        {"stall-ms", 1, 0, 'S'}, {"rounds", 1, 0, 'R'}, {"join-token", 1, 0, 'j'}, {"join-token-file", 1, 0, 'J'},
        {"quiet", 0, 0, 'q'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *from[MAX_FROM], *sha = NULL, *out = NULL, *tok = NULL, *tokfile = NULL;
    int nfrom = 0;
    long stall = 30000, rounds = 3;
    int64_t rate = 0;
    cli_progress prog = {0};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'f':
            if (nfrom >= MAX_FROM) { fprintf(stderr, "gpupool fetch: at most %d --from\n", MAX_FROM); return 2; }
            from[nfrom++] = optarg;
            break;
        case 's': sha = optarg; break;
        case 'o': out = optarg; break;
        case 'r':
            if ((rate = opts_parse_size(optarg)) <= 0) { fprintf(stderr, "gpupool fetch: --rate wants a size per second such as 50M\n"); return 2; }
            break;
        case 'S':
            if (opts_parse_int(optarg, 100, 3600000, &stall)) { fprintf(stderr, "gpupool fetch: --stall-ms wants 100..3600000\n"); return 2; }
            break;
        case 'R':
            if (opts_parse_int(optarg, 1, 100, &rounds)) { fprintf(stderr, "gpupool fetch: --rounds wants 1..100\n"); return 2; }
            break;
        case 'j': tok = optarg; break;
        case 'J': tokfile = optarg; break;
        case 'q': prog.quiet = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!nfrom || !sha || !out) { fprintf(stderr, "gpupool fetch: --from, --sha256 and --out are required\n"); return 2; }
    if (!filehash_valid(sha)) { fprintf(stderr, "gpupool fetch: --sha256 wants 64 hex digits\n"); return 2; }
    if (!tok) tok = getenv("GPUPOOL_JOIN_TOKEN");
    char *fromfile = NULL;
    if (!tok && tokfile) {
        fromfile = read_small_file(tokfile, 255);
        if (!fromfile || !*fromfile) {
            fprintf(stderr, "gpupool fetch: cannot read a join token from %s\n", tokfile);
            free(fromfile);
            return 2;
        }
        tok = fromfile;
    }
    if (!tok || !*tok) { fprintf(stderr, "gpupool fetch: a join token is needed (--join-token, --join-token-file or GPUPOOL_JOIN_TOKEN)\n"); return 2; }
    char urls[MAX_FROM][600];
    const char *url_ptrs[MAX_FROM];
    for (int i = 0; i < nfrom; i++) {
        size_t n = strlen(from[i]);
        while (n && from[i][n - 1] == '/') n--;
        if (strstr(from[i], FILESERVE_PREFIX)) snprintf(urls[i], sizeof urls[i], "%s", from[i]);
        else snprintf(urls[i], sizeof urls[i], "%.*s%s%s", (int)n, from[i], FILESERVE_PREFIX, sha);
        url_ptrs[i] = urls[i];
    }
    http_client_global_init();
    fetch_opts o = {.urls = url_ptrs, .nurls = nfrom, .sha256 = sha, .dest = out, .join_token = tok,
                    .rate_bps = (uint64_t)rate, .stall_ms = stall, .rounds = (int)rounds, .progress = on_progress,
                    .ctx = &prog};
    char err[600];
    int64_t t0 = mono_ms();
    fetch_rc rc = fetch_file(&o, err, sizeof err);
    int64_t ms = mono_ms() - t0;
    free(fromfile);
    http_client_global_cleanup();
    if (rc != FETCH_OK) {
        fprintf(stderr, "gpupool fetch: %s\n", err);
        return 1;
    }
    uint64_t bytes = 0;
    FILE *f = fopen(out, "rb");
    if (f) { fseek(f, 0, SEEK_END); bytes = (uint64_t)ftell(f); fclose(f); }
    printf("fetched %s: %llu bytes in %lld ms (%.1f MB/s), sha256 verified\n", out, (unsigned long long)bytes,
           (long long)ms, ms > 0 ? (double)bytes / 1e6 / ((double)ms / 1000.0) : 0.0);
    return 0;
}
