/* cmd/serve: `gpupool serve`, the coordinator.  Parses options, opens the
 * store, recovers tasks a crash left running, and runs the HTTP gateway, the
 * dispatcher and the heartbeat sweeper until SIGINT/SIGTERM. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api/cache.h"
#include "api/coord.h"
#include "api/track.h"
#include "apps/appcfg.h"
#include "apps/runner.h"
#include "api/rollout_table.h"
#include "cmd/cmd.h"
#include "http/client.h"
#include "http/relay.h"
#include "policy/cache.h"
#include "policy/embed.h"
#include "policy/detect.h"
#include "util/clock.h"
#include "util/ids.h"
#include "util/log.h"
#include "util/opts.h"
#include "catalog/catalog.h"

typedef struct serve_opts {
    const char *listen, *data, *join_token, *join_token_file, *keys_file, *port_file;
    size_t max_body;
    long heartbeat_ms, missed, token_ttl_s, breaker_failures, breaker_cooldown_ms;
    long task_timeout_ms;
    coord_cfg cc;
    cidr_list allow;
    place_cfg placement;
    queue_cfg queue;
    double hedge_factor;
    long hedge_min_ms, backoff_ms;
    const char *keywords[65], *regexes[65];
    int nkeywords, nregexes;
    const char *clouds[17];
    int nclouds;
    int cache_on;
    const char *apps_file; /* --apps: prompt apps and pipelines */
    int64_t cache_max_bytes;
    long cache_ttl_s;
    int cache_threshold_set;
    char cache_embedder_id[300];
    long session_ttl_s, session_max_tokens, session_summary_tokens;
    track_cfg track;              /* --auto-local, --auto-cloud, --track-rule, --cloud prices */
    const char *budgets[65];      /* --budget KEY:SPEC */
    int nbudgets;
    const char *catalog_file;
    int audit_on;
    audit_cfg audit;
    const char *webhook_secret, *webhook_secret_file;
    webhook_cfg hooks;
} serve_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gpupool serve [options]\n"
            "  --listen HOST:PORT        where to serve (default 127.0.0.1:8420)\n"
            "  --data DIR                store directory (default ./gpupool-data)\n"
            "  --join-token TOKEN        pool join token (or GPUPOOL_JOIN_TOKEN; default: generated\n"
            "                            once and kept in DIR/join-token)\n"
            "  --join-token-file FILE    read the join token from FILE\n"
            "  --api-key KEY             a client API key (repeatable; or GPUPOOL_API_KEYS=k1,k2)\n"
            "  --api-keys-file FILE      client API keys, one per line\n"
            "  --allow-cidr RANGE        worker addresses allowed (repeatable; default any)\n"
            "  --max-body SIZE           largest request body (default 8M)\n"
            "  --queue-max N             requests that may wait for a slot (default 256)\n"
            "  --queue-timeout-ms N      how long a request waits for a slot (default 60000)\n"
            "  --task-queue-max N        async tasks that may be queued; more get 429 (default 100000)\n"
            "  --upstream-timeout-ms N   longest wait for a node's answer (default 600000)\n"
            "  --heartbeat-ms N          worker heartbeat interval (default 2000)\n"
            "  --missed-heartbeats N     offline after this many missed beats (default 3)\n"
            "  --token-ttl-s N           node token lifetime (default 600)\n"
            "  --max-attempts N          nodes tried per request or task (default 3)\n"
            "  --breaker-failures N      failures in a row that stop sending a node work (default 3)\n"
            "  --breaker-cooldown-ms N   first pause before probing it again; doubles (default 5000)\n"
            "  --task-timeout-ms N       longest run of one task attempt (default 600000)\n"
            "  --models-dir DIR          GGUF files that POST /v1/plan may read\n"
            "  --apps FILE               prompt apps and pipelines (JSON; see docs/apps.md)\n"
            "  --catalog FILE            the model catalogue (JSON, see docs/models.md): names, aliases,\n"
            "                            engines, files and their sha256, defaults, per-node overrides\n"
            "  --admin-key KEY           an API key that may also drain and forget nodes (repeatable;\n"
            "                            or GPUPOOL_ADMIN_KEYS); without any key everyone may\n"
            "  --placement POLICY        gpupool (default), round-robin or least-connections\n"
            "  --placement-weights SPEC  e.g. speed=1,affinity=1,load=1,link=1,success=2,temp=1,\n"
            "                            hot_c=83,defer=0.5 (see docs/config.md)\n"
            "  --queue-aging-ms N        waiting this long lifts a task one priority class (default 30000)\n"
            "  --key-max-running N       running tasks one API key may have (default 0: no limit)\n"
            "  --key-max-share F         share of the pool's slots one key may hold while others\n"
            "                            wait, 0..1 (default 0: no limit)\n"
            "  --hedge-factor F          start a slow attempt again elsewhere past F x its estimate\n"
            "                            (default 2; 0 = never)\n"
            "  --hedge-min-ms N          never sooner than this (default 2000)\n"
            "  --retry-backoff-ms N      first delay before a failed task runs again; doubles (default 250)\n"
            "  --stream-continue on|off  continue a stream that broke after tokens on another node (default on)\n"
            "  --cache on|off            the semantic cache of chat answers, in DIR/cache.db (default off)\n"
            "  --cache-threshold F       cosine similarity a cache hit needs, 0..1 (default 0.95)\n"
            "  --cache-max-bytes SIZE    bound on the cache's entries, LRU beyond it (default 64M)\n"
            "  --cache-ttl-s N           an entry expires N seconds after it was stored (default 86400; 0 = never)\n"
            "  --cache-turns N           messages the cache key covers, the last one included (default 8; 0 = all)\n"
            "  --cache-max-temperature F requests sampling hotter than F are not cached (default 0.3)\n"
            "  --cache-embedder E        builtin (default) or pool:MODEL, an embedding model of the pool\n"
            "                            (then --cache-threshold defaults to 0.9)\n"
            "  --session-max-tokens N    a session's conversation budget, answer included (default 4096)\n"
            "  --session-ttl-s N         a session expires N seconds after its last turn (default 86400; 0 = never)\n"
            "  --session-summary-model M summarise a session's dropped turns with M (default: just drop them)\n"
            "  --session-summary-max-tokens N  the longest such summary (default 256)\n"
            "  --audit on|off            the audit log of every call, redacted, in DIR/gpupool.db (default on)\n"
            "  --audit-days N            audit records are kept N days (default 7)\n"
            "  --audit-body-max SIZE     bytes kept of each request and answer body (default 64K)\n"
            "  --audit-queue-max N       records that may wait for the writer; more are dropped (default 8192)\n"
            "  --webhook-secret S        signs webhook deliveries (or GPUPOOL_WEBHOOK_SECRET; default:\n"
            "                            generated once and kept in DIR/webhook-secret)\n"
            "  --webhook-secret-file F   read the webhook secret from F\n"
            "  --webhook-max-attempts N  tries per webhook delivery (default 8)\n"
            "  --webhook-backoff-ms N    first retry delay, doubling with jitter (default 1000)\n"
            "  --webhook-max-backoff-ms N  longest retry delay (default 600000)\n"
            "  --webhook-timeout-ms N    one delivery attempt's limit (default 10000)\n"
            "  --webhook-allow-cidr R    hosts callback URLs may reach (repeatable; default any)\n"
            "  --privacy-keyword WORD    requests containing WORD are private (repeatable)\n"
            "  --privacy-regex RE        requests matching the PCRE2 pattern RE are private (repeatable)\n"
            "  --cloud NAME=URL,models=M1|M2,key-env=VAR[,slots=N][,price-in=X,price-out=Y]\n"
            "                            an external OpenAI-compatible backend (repeatable); private\n"
            "                            requests never go there; its API key comes from $VAR; prices\n"
            "                            per million prompt / completion tokens, for budgets\n"
            "  --auto-local MODEL        what model \"auto\" runs on the pool's own nodes\n"
            "  --auto-cloud MODEL        what model \"auto\" runs on a --cloud backend\n"
            "  --track-rule RULE         when auto goes to the cloud: prompt-tokens=N, max-tokens=N,\n"
            "                            keyword=WORD; urgent-priority=N (repeatable; docs/routing.md)\n"
            "  --budget KEY:LIMITS       cloud budget of an API key, or default: for every key, e.g.\n"
            "                            default:rpm=60,tokens-day=2000000,cost-day=5,soft=0.8 (repeatable)\n"
            "  --cors-origin ORIGIN      a web origin (https://host[:port]) whose pages may call the API\n"
            "                            from a browser, with credentials (repeatable, or comma-separated)\n"
            "  --cors-max-age S          how long browsers may keep a preflight's answer (default 600)\n"
            "  --envelope always200|off  answer every /v1 call with status 200 and {\"ok\",\"status\",\"data\"|\"error\"}\n"
            "                            unless it asks otherwise (default off)\n"
            "  --envelope-origin ORIGIN  the same, only for requests from this origin (repeatable)\n"
            "  --field-case camel|snake  the field names /v1 calls read and answer by default (default snake)\n"
            "  --port-file FILE          write the bound port here once listening\n"
            "  --config FILE             read options from FILE (key = value lines)\n");
}

/* A task attempt's outcome, for the rollouts of its model. */
static void task_outcome(void *rollouts, const char *model, int ok, double total_ms)
{
    rollout_table_model_outcome(rollouts, model, !ok, total_ms);
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* --cloud NAME=URL,models=M1|M2,key-env=VAR[,slots=N][,price-in=X,price-out=Y]:
 * registers the backend and its prices. */
static int add_cloud(registry *reg, track_cfg *track, const char *spec, int64_t now)
{
    char *copy = strdup(spec), *save = NULL;
    char *eq = copy ? strchr(copy, '=') : NULL;
    int rc = -1;
    if (!eq) goto bad;
    *eq = 0;
    const char *name = copy, *url = NULL, *models_s = NULL, *key_env = NULL;
    long slots = 16;
    double price_in = 0, price_out = 0;
    for (char *kv = strtok_r(eq + 1, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        if (!url) { url = kv; continue; }
        if (!strncmp(kv, "models=", 7)) models_s = kv + 7;
        else if (!strncmp(kv, "key-env=", 8)) key_env = kv + 8;
        else if (!strncmp(kv, "slots=", 6) && !opts_parse_int(kv + 6, 1, 10000, &slots)) {}
        else if (!strncmp(kv, "price-in=", 9) && !parse_double(kv + 9, 0, 1e9, &price_in)) {}
        else if (!strncmp(kv, "price-out=", 10) && !parse_double(kv + 10, 0, 1e9, &price_out)) {}
        else goto bad;
    }
    if (!*name || !url || (strncmp(url, "http://", 7) && strncmp(url, "https://", 8)) || !models_s) goto bad;
    const char *key = key_env ? getenv(key_env) : NULL;
    if (key_env && (!key || !*key)) {
        fprintf(stderr, "gpupool serve: --cloud %s: $%s is not set\n", name, key_env);
        free(copy);
        return -1;
    }
    const char *models[32];
    int n = 0;
    char *msave = NULL, *mcopy = strdup(models_s);
    for (char *m = strtok_r(mcopy, "|", &msave); m && n < 32; m = strtok_r(NULL, "|", &msave)) models[n++] = m;
    rc = n ? registry_add_external(reg, name, url, key, models, n, (int)slots, now) : -1;
    char id[40];
    snprintf(id, sizeof id, "cloud-%.33s", name);
    if (!rc && (price_in > 0 || price_out > 0) && track_price_set(track, id, price_in, price_out)) rc = -1;
    free(mcopy);
    if (rc) fprintf(stderr, "gpupool serve: --cloud %s: cannot add it (a duplicate name, or no models)\n", name);
    free(copy);
    return rc;
bad:
    fprintf(stderr, "gpupool serve: --cloud wants NAME=URL,models=M1|M2[,key-env=VAR][,slots=N][,price-in=X,price-out=Y], "
                    "not '%s'\n", spec);
    free(copy);
    return -1;
}

/* --budget KEY:LIMITS, KEY an API key or "default": the key is kept only as
 * the digest that names its owner (api/router coord_owner). */
static budget *make_budgets(serve_opts *o)
{
    budget *b = budget_new();
    for (int i = 0; b && i < o->nbudgets; i++) {
        const char *spec = o->budgets[i], *colon = strrchr(spec, ':');
        char err[200], owner[40] = "";
        budget_limits l;
        if (!colon || colon == spec) {
            fprintf(stderr, "gpupool serve: --budget wants KEY:LIMITS or default:LIMITS, not '%s'\n", spec);
            goto bad;
        }
        if (budget_limits_parse(colon + 1, &l, err, sizeof err)) {
            fprintf(stderr, "gpupool serve: --budget: %s\n", err);
            goto bad;
        }
        size_t klen = (size_t)(colon - spec);
        if (klen != 7 || strncmp(spec, "default", 7)) {
            int known = 0;
            for (int k = 0; k < o->cc.nkeys; k++)
                known |= strlen(o->cc.api_keys[k]) == klen && !strncmp(o->cc.api_keys[k], spec, klen);
            if (!known) {
                fprintf(stderr, "gpupool serve: --budget: '%.*s' is not a client API key (or default)\n", (int)klen, spec);
                goto bad;
            }
            char digest[65];
            sha256_hex(spec, klen, digest);
            snprintf(owner, sizeof owner, "key-%.12s", digest);
        }
        if (budget_set_limits(b, owner, &l)) goto bad;
    }
    return b;
bad:
    budget_free(b);
    return NULL;
}

static int add_key(serve_opts *o, const char *k)
{
    if (!*k) return 0;
    if (o->cc.nkeys >= COORD_MAX_KEYS) return -1;
    o->cc.api_keys[o->cc.nkeys++] = strdup(k);
    return 0;
}

static int load_keys_file(serve_opts *o, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) { fprintf(stderr, "gpupool serve: cannot read %s: %s\n", path, strerror(errno)); return -1; }
    char line[512];
    while (fgets(line, sizeof line, f)) {
        /* "KEY", "KEY admin" (or role=admin), "KEY private" (or sensitivity=private);
         * # starts a comment. */
        char *s = line;
        line[strcspn(line, "#\r\n")] = 0;
        while (*s == ' ' || *s == '\t') s++;
        char *rest = s + strcspn(s, " \t");
        if (*rest) *rest++ = 0;
        while (*rest == ' ' || *rest == '\t') rest++;
        rest[strcspn(rest, " \t")] = 0;
        int admin = !strcmp(rest, "admin") || !strcmp(rest, "role=admin");
        int private_ = !strcmp(rest, "sensitivity=private") || !strcmp(rest, "private");
        if (!*s) continue;
        if (add_key(o, s) || (admin && o->cc.nadmin >= COORD_MAX_KEYS)) {
            fclose(f);
            fprintf(stderr, "gpupool serve: too many API keys\n");
            return -1;
        }
        if (admin) o->cc.admin_keys[o->cc.nadmin++] = strdup(s);
        if (private_ && o->cc.nprivate < COORD_MAX_KEYS) o->cc.private_keys[o->cc.nprivate++] = strdup(s);
    }
    fclose(f);
    return 0;
}

/* --cors-origin and --envelope-origin take one origin or several separated
 * by commas (an origin has none). */
static int add_origins(lowcode_cfg *lc, int cors, const char *list)
{
    char *copy = strdup(list), *save = NULL, err[200];
    int rc = copy ? 0 : -1;
    for (char *one = copy ? strtok_r(copy, ", ", &save) : NULL; one && !rc; one = strtok_r(NULL, ", ", &save))
        if (lowcode_add_origin(lc, cors, one, err, sizeof err)) {
            fprintf(stderr, "gpupool serve: %s: %s\n", cors ? "--cors-origin" : "--envelope-origin", err);
            rc = -1;
        }
    free(copy);
    return rc;
}

static int parse(int argc, char **argv, serve_opts *o)
{
    static const struct option longopts[] = {
        {"listen", 1, 0, 'l'}, {"data", 1, 0, 'd'}, {"join-token", 1, 0, 'j'}, {"join-token-file", 1, 0, 'J'},
        {"api-key", 1, 0, 'k'}, {"api-keys-file", 1, 0, 'K'}, {"allow-cidr", 1, 0, 'a'},
        {"max-body", 1, 0, 'b'}, {"queue-max", 1, 0, 'q'}, {"queue-timeout-ms", 1, 0, 'Q'},
        {"upstream-timeout-ms", 1, 0, 'u'}, {"heartbeat-ms", 1, 0, 'h'}, {"missed-heartbeats", 1, 0, 'm'},
        {"token-ttl-s", 1, 0, 't'}, {"max-attempts", 1, 0, 'A'}, {"task-timeout-ms", 1, 0, 'T'},
        {"port-file", 1, 0, 'p'}, {"models-dir", 1, 0, 'M'}, {"breaker-failures", 1, 0, 'F'},
        {"breaker-cooldown-ms", 1, 0, 'C'}, {"admin-key", 1, 0, 'X'}, {"placement", 1, 0, 'P'},
        {"placement-weights", 1, 0, 'W'}, {"queue-aging-ms", 1, 0, 'g'}, {"key-max-running", 1, 0, 'r'},
        {"key-max-share", 1, 0, 's'}, {"hedge-factor", 1, 0, 'e'}, {"hedge-min-ms", 1, 0, 'E'},
        {"retry-backoff-ms", 1, 0, 'B'}, {"task-queue-max", 1, 0, 'Y'},
        {"privacy-keyword", 1, 0, 'w'}, {"privacy-regex", 1, 0, 'R'}, {"cloud", 1, 0, 'c'}, {"stream-continue", 1, 0, 'S'},
        {"cors-origin", 1, 0, 'o'}, {"cors-max-age", 1, 0, 'G'}, {"envelope", 1, 0, 'v'},
        {"envelope-origin", 1, 0, 'O'}, {"field-case", 1, 0, 'z'},
        {"cache", 1, 0, 256}, {"cache-threshold", 1, 0, 257}, {"cache-max-bytes", 1, 0, 258},
        {"cache-ttl-s", 1, 0, 259}, {"cache-turns", 1, 0, 260}, {"cache-max-temperature", 1, 0, 261},
        {"cache-embedder", 1, 0, 262}, {"session-max-tokens", 1, 0, 263}, {"session-ttl-s", 1, 0, 264},
        {"session-summary-model", 1, 0, 265}, {"session-summary-max-tokens", 1, 0, 266},
        {"auto-local", 1, 0, 270}, {"auto-cloud", 1, 0, 271}, {"track-rule", 1, 0, 272}, {"budget", 1, 0, 273},
        {"apps", 1, 0, 280},
        {"catalog", 1, 0, 281},
        {"webhook-secret", 1, 0, 330}, {"webhook-secret-file", 1, 0, 331}, {"webhook-max-attempts", 1, 0, 332},
        {"webhook-backoff-ms", 1, 0, 333}, {"webhook-max-backoff-ms", 1, 0, 334}, {"webhook-timeout-ms", 1, 0, 335},
        {"webhook-allow-cidr", 1, 0, 336},
        {"audit", 1, 0, 320}, {"audit-days", 1, 0, 321}, {"audit-body-max", 1, 0, 322}, {"audit-queue-max", 1, 0, 323},
        {"help", 0, 0, 'H'}, {0, 0, 0, 0}};
    long v;
    double f;
    char err[200];
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (c == 257) o->cache_threshold_set = 1;
        switch (c) {
        case 'l': o->listen = optarg; break;
        case 'd': o->data = optarg; break;
        case 'j': o->join_token = optarg; break;
        case 'J': o->join_token_file = optarg; break;
        case 'k': if (add_key(o, optarg)) { fprintf(stderr, "gpupool serve: too many API keys\n"); return -1; } break;
        case 'K': o->keys_file = optarg; break;
        case 'a':
            if (cidr_list_add(&o->allow, optarg, err, sizeof err)) { fprintf(stderr, "gpupool serve: %s\n", err); return -1; }
            break;
        case 'b': {
            int64_t s = opts_parse_size(optarg);
            if (s < 1024) { fprintf(stderr, "gpupool serve: --max-body wants a size of at least 1K, like 8M\n"); return -1; }
            o->max_body = (size_t)s;
            break;
        }
#define INTOPT(ch, field, lo, hi, name) \
        case ch: if (opts_parse_int(optarg, lo, hi, &v)) { fprintf(stderr, "gpupool serve: %s wants a number from %ld to %ld\n", name, (long)lo, (long)hi); return -1; } field = v; break;
        INTOPT('q', o->cc.queue_max, 0, 1000000, "--queue-max")
        INTOPT('Q', o->cc.queue_timeout_ms, 0, 86400000, "--queue-timeout-ms")
        INTOPT('u', o->cc.upstream_timeout_ms, 100, 86400000, "--upstream-timeout-ms")
        INTOPT('h', o->heartbeat_ms, 50, 600000, "--heartbeat-ms")
        INTOPT('m', o->missed, 1, 100, "--missed-heartbeats")
        INTOPT('t', o->token_ttl_s, 10, 86400 * 30, "--token-ttl-s")
        INTOPT('A', o->cc.max_attempts, 1, 8, "--max-attempts")
        INTOPT('T', o->task_timeout_ms, 100, 86400000, "--task-timeout-ms")
        INTOPT('F', o->breaker_failures, 1, 1000, "--breaker-failures")
        INTOPT('C', o->breaker_cooldown_ms, 100, 3600000, "--breaker-cooldown-ms")
        INTOPT('g', o->queue.aging_ms, 0, 86400000, "--queue-aging-ms")
        INTOPT('r', o->queue.key_max_running, 0, 1000000, "--key-max-running")
        INTOPT('E', o->hedge_min_ms, 1, 86400000, "--hedge-min-ms")
        INTOPT('B', o->backoff_ms, 1, 600000, "--retry-backoff-ms")
        INTOPT('Y', o->cc.task_queue_max, 1, 100000000, "--task-queue-max")
        INTOPT('G', o->cc.lowcode.max_age_s, 1, 86400, "--cors-max-age")
        INTOPT(259, o->cache_ttl_s, 0, 86400L * 365, "--cache-ttl-s")
        INTOPT(260, o->cc.cache.turns, 0, 10000, "--cache-turns")
        INTOPT(263, o->session_max_tokens, 16, 10000000, "--session-max-tokens")
        INTOPT(264, o->session_ttl_s, 0, 86400L * 365, "--session-ttl-s")
        INTOPT(266, o->session_summary_tokens, 1, 100000, "--session-summary-max-tokens")
        INTOPT(321, o->audit.days, 1, 3650, "--audit-days")
        INTOPT(323, o->audit.queue_max, 1, 1000000, "--audit-queue-max")
        INTOPT(332, o->hooks.max_attempts, 1, 100, "--webhook-max-attempts")
        INTOPT(333, o->hooks.backoff_ms, 1, 3600000, "--webhook-backoff-ms")
        INTOPT(334, o->hooks.max_backoff_ms, 1, 86400000, "--webhook-max-backoff-ms")
        INTOPT(335, o->hooks.timeout_ms, 100, 600000, "--webhook-timeout-ms")
#undef INTOPT
#define DBLOPT(ch, field, lo, hi, name) \
        case ch: if (parse_double(optarg, lo, hi, &f)) { fprintf(stderr, "gpupool serve: %s wants a number from %g to %g\n", name, (double)lo, (double)hi); return -1; } field = f; break;
        DBLOPT('s', o->queue.key_max_share, 0, 1, "--key-max-share")
        DBLOPT('e', o->hedge_factor, 0, 1000, "--hedge-factor")
        DBLOPT(257, o->cc.cache.threshold, 0, 1, "--cache-threshold")
        DBLOPT(261, o->cc.cache.max_temperature, 0, 2, "--cache-max-temperature")
#undef DBLOPT
        case 'X':
            if (add_key(o, optarg) || o->cc.nadmin >= COORD_MAX_KEYS) { fprintf(stderr, "gpupool serve: too many API keys\n"); return -1; }
            o->cc.admin_keys[o->cc.nadmin++] = strdup(optarg);
            break;
        case 'w':
            if (o->nkeywords >= 64) { fprintf(stderr, "gpupool serve: too many --privacy-keyword\n"); return -1; }
            o->keywords[o->nkeywords++] = optarg;
            break;
        case 'R':
            if (o->nregexes >= 64) { fprintf(stderr, "gpupool serve: too many --privacy-regex\n"); return -1; }
            o->regexes[o->nregexes++] = optarg;
            break;
        case 'c':
            if (o->nclouds >= 16) { fprintf(stderr, "gpupool serve: too many --cloud backends\n"); return -1; }
            o->clouds[o->nclouds++] = optarg;
            break;
        case 256:
            if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
                fprintf(stderr, "gpupool serve: --cache wants on or off\n");
                return -1;
            }
            o->cache_on = !strcmp(optarg, "on");
            break;
        case 262:
            if (!strcmp(optarg, "builtin")) {
                o->cc.cache_pool_model = NULL;
            } else if (!strncmp(optarg, "pool:", 5) && optarg[5] && strlen(optarg) < 256) {
                o->cc.cache_pool_model = optarg + 5;
            } else {
                fprintf(stderr, "gpupool serve: --cache-embedder wants builtin or pool:MODEL\n");
                return -1;
            }
            break;
        case 265: o->cc.sessions.summary_model = optarg; break;
        case 330: o->webhook_secret = optarg; break;
        case 331: o->webhook_secret_file = optarg; break;
        case 336:
            if (cidr_list_add(&o->hooks.allow, optarg, err, sizeof err)) {
                fprintf(stderr, "gpupool serve: --webhook-allow-cidr: %s\n", err);
                return -1;
            }
            break;
        case 320:
            if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
                fprintf(stderr, "gpupool serve: --audit wants on or off\n");
                return -1;
            }
            o->audit_on = !strcmp(optarg, "on");
            break;
        case 322: {
            int64_t s = opts_parse_size(optarg);
            if (s < 0 || s > (64 << 20)) { fprintf(stderr, "gpupool serve: --audit-body-max wants a size up to 64M, like 64K\n"); return -1; }
            o->audit.body_max = (size_t)s;
            break;
        }
        case 258: {
            int64_t s = opts_parse_size(optarg);
            if (s < 4096) { fprintf(stderr, "gpupool serve: --cache-max-bytes wants a size of at least 4K, like 64M\n"); return -1; }
            o->cache_max_bytes = s;
            break;
        }
        case 270: snprintf(o->track.auto_local, sizeof o->track.auto_local, "%s", optarg); break;
        case 271: snprintf(o->track.auto_cloud, sizeof o->track.auto_cloud, "%s", optarg); break;
        case 272:
            if (track_rule_add(&o->track, optarg, err, sizeof err)) { fprintf(stderr, "gpupool serve: --track-rule: %s\n", err); return -1; }
            break;
        case 273:
            if (o->nbudgets >= 64) { fprintf(stderr, "gpupool serve: too many --budget\n"); return -1; }
            o->budgets[o->nbudgets++] = optarg;
            break;
        case 'S':
            if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
                fprintf(stderr, "gpupool serve: --stream-continue wants on or off\n");
                return -1;
            }
            o->cc.stream_continue = !strcmp(optarg, "on");
            break;
        case 'o':
        case 'O':
            if (add_origins(&o->cc.lowcode, c == 'o', optarg)) return -1;
            break;
        case 'v':
            if (strcmp(optarg, "always200") && strcmp(optarg, "off")) {
                fprintf(stderr, "gpupool serve: --envelope wants always200 or off\n");
                return -1;
            }
            o->cc.lowcode.envelope_all = !strcmp(optarg, "always200");
            break;
        case 'z':
            if (strcmp(optarg, "camel") && strcmp(optarg, "snake")) {
                fprintf(stderr, "gpupool serve: --field-case wants camel or snake\n");
                return -1;
            }
            o->cc.lowcode.camel_all = !strcmp(optarg, "camel");
            break;
        case 'P':
            if (place_policy_parse(optarg, &o->placement.policy)) {
                fprintf(stderr, "gpupool serve: --placement wants gpupool, round-robin or least-connections\n");
                return -1;
            }
            break;
        case 'W':
            if (place_weights_parse(optarg, &o->placement.w, err, sizeof err)) {
                fprintf(stderr, "gpupool serve: --placement-weights: %s\n", err);
                return -1;
            }
            break;
        case 'p': o->port_file = optarg; break;
        case 'M': o->cc.models_dir = optarg; break;
        case 280: o->apps_file = optarg; break;
        case 281: o->catalog_file = optarg; break;
        case 'H': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
    }
    if (optind < argc) { fprintf(stderr, "gpupool serve: unexpected argument '%s'\n", argv[optind]); return -1; }
    return 0;
}

/* The pool's join token: given, from a file, from the environment, or made
 * once and kept in the data directory so workers on this machine can read it. */
static char *join_token(serve_opts *o)
{
    if (o->join_token) return strdup(o->join_token);
    if (o->join_token_file) {
        char *t = read_small_file(o->join_token_file, 256);
        if (!t || !*t) fprintf(stderr, "gpupool serve: cannot read a join token from %s\n", o->join_token_file);
        return t;
    }
    const char *env = getenv("GPUPOOL_JOIN_TOKEN");
    if (env && *env) return strdup(env);
    char path[4096];
    snprintf(path, sizeof path, "%s/join-token", o->data);
    char *t = read_small_file(path, 256);
    if (t && *t) return t;
    free(t);
    char fresh[65];
    rand_hex(fresh, 24);
    char line[80];
    snprintf(line, sizeof line, "%s\n", fresh);
    if (write_file_atomic(path, line)) {
        fprintf(stderr, "gpupool serve: cannot write %s: %s\n", path, strerror(errno));
        return NULL;
    }
    log_info("generated a join token; workers can read it from %s", path);
    return strdup(fresh);
}

/* The webhook signing secret: given, from a file, from the environment, or
 * made once and kept in the data directory for receivers to be given. */
static char *webhook_secret(serve_opts *o)
{
    if (o->webhook_secret) return strdup(o->webhook_secret);
    if (o->webhook_secret_file) {
        char *s = read_small_file(o->webhook_secret_file, 1024);
        if (!s || !*s) fprintf(stderr, "gpupool serve: cannot read a webhook secret from %s\n", o->webhook_secret_file);
        if (s && !*s) { free(s); s = NULL; }
        return s;
    }
    const char *env = getenv("GPUPOOL_WEBHOOK_SECRET");
    if (env && *env) return strdup(env);
    char path[4096];
    snprintf(path, sizeof path, "%s/webhook-secret", o->data);
    char *s = read_small_file(path, 1024);
    if (s && *s) return s;
    free(s);
    char fresh[65], line[80];
    rand_hex(fresh, 32);
    snprintf(line, sizeof line, "%s\n", fresh);
    if (write_file_atomic(path, line)) {
        fprintf(stderr, "gpupool serve: cannot write %s: %s\n", path, strerror(errno));
        return NULL;
    }
    log_info("generated a webhook signing secret; receivers can be given it from %s", path);
    return strdup(fresh);
}

int cmd_serve(int argc0, char **argv0)
{
    log_set_component("serve");
    char err[512];
    int argc;
    char **argv = opts_expand_config(argc0, argv0, &argc, err, sizeof err);
    if (!argv) { fprintf(stderr, "gpupool serve: %s\n", err); return 2; }
    serve_opts o = {.listen = "127.0.0.1:8420", .data = "./gpupool-data", .heartbeat_ms = 2000, .missed = 3,
                    .token_ttl_s = 600, .task_timeout_ms = 600000,
                    .cc = {.queue_max = 256, .queue_timeout_ms = 60000, .upstream_timeout_ms = 600000,
                           .max_attempts = 3, .stream_continue = 1, .task_queue_max = 100000},
                    .queue = {.aging_ms = 30000}, .hedge_factor = 2, .hedge_min_ms = 2000, .backoff_ms = 250,
                    .audit_on = 1, .audit = {.days = 7, .body_max = 64 * 1024, .queue_max = 8192},
                    .hooks = {.max_attempts = 8, .backoff_ms = 1000, .max_backoff_ms = 600000, .timeout_ms = 10000}};
    place_weights_default(&o.placement.w);
    cache_config_init(&o.cc.cache);
    o.cache_ttl_s = (long)(o.cc.cache.ttl_ms / 1000);
    o.cache_max_bytes = (int64_t)o.cc.cache.max_bytes;
    o.session_max_tokens = SESSION_DEFAULT_MAX_TOKENS;
    o.session_ttl_s = SESSION_DEFAULT_TTL_S;
    o.session_summary_tokens = SESSION_DEFAULT_SUMMARY_TOKENS;
    int rc = 2;
    char *token = NULL;
    store *st = NULL;
    registry *reg = NULL;
    dispatcher *disp = NULL;
    http_server *srv = NULL;
    detect_rules *rules = NULL;
    semcache *cache = NULL;
    api_track *track = NULL;
    budget *budgets = NULL;
    track_cfg_init(&o.track);
    apps_cfg *apps = NULL;
    app_runner *runner = NULL;
    rollout_table *rollouts = NULL;
    catalog *cat = NULL;
    auditor *audit = NULL;
    webhooks *hooks = NULL;
    char *hook_secret = NULL;
    if (parse(argc, argv, &o)) goto done;
    o.cc.cache.ttl_ms = (int64_t)o.cache_ttl_s * 1000;
    o.cc.cache.max_bytes = (size_t)o.cache_max_bytes;
    o.cc.sessions.max_tokens = (double)o.session_max_tokens;
    o.cc.sessions.ttl_ms = (int64_t)o.session_ttl_s * 1000;
    o.cc.sessions.summary_max_tokens = (int)o.session_summary_tokens;
    if (o.cc.cache_pool_model) {
        /* Its vectors are its own: entries of another embedder never meet them. */
        snprintf(o.cache_embedder_id, sizeof o.cache_embedder_id, "model:%s", o.cc.cache_pool_model);
        o.cc.cache.embedder = o.cache_embedder_id;
        if (!o.cache_threshold_set) o.cc.cache.threshold = CACHE_POOL_DEFAULT_THRESHOLD;
    }
    if (o.keys_file && load_keys_file(&o, o.keys_file)) goto done;
    const char *envkeys = getenv("GPUPOOL_API_KEYS");
    if (envkeys) {
        char *copy = strdup(envkeys), *save = NULL;
        for (char *k = strtok_r(copy, ", ", &save); k; k = strtok_r(NULL, ", ", &save)) add_key(&o, k);
        free(copy);
    }
    const char *envadmin = getenv("GPUPOOL_ADMIN_KEYS");
    if (envadmin) {
        char *copy = strdup(envadmin), *save = NULL;
        for (char *k = strtok_r(copy, ", ", &save); k; k = strtok_r(NULL, ", ", &save))
            if (!add_key(&o, k) && o.cc.nadmin < COORD_MAX_KEYS) o.cc.admin_keys[o.cc.nadmin++] = strdup(k);
        free(copy);
    }
    if (!http_listen_is_loopback(o.listen) && o.cc.nkeys == 0) {
        fprintf(stderr, "gpupool serve: refusing to listen on %s beyond loopback without client API keys "
                        "(give --api-key, --api-keys-file or GPUPOOL_API_KEYS)\n", o.listen);
        goto done;
    }
    if (mkdir(o.data, 0700) && errno != EEXIST) {
        fprintf(stderr, "gpupool serve: cannot create %s: %s\n", o.data, strerror(errno));
        goto done;
    }
    if (!(token = join_token(&o))) goto done;

    /* Signals are taken by sigtimedwait below, so every thread blocks them. */
    sigset_t sigs;
    block_stop_signals(&sigs);
    http_client_global_init();

    st = store_open(o.data, err, sizeof err);
    if (!st) { fprintf(stderr, "gpupool serve: %s\n", err); goto done; }
    int back = store_requeue_running(st);
    if (back > 0) log_info("%d task(s) were running when the coordinator stopped; queued again", back);
    rollouts = rollout_table_open(st, err, sizeof err);
    if (!rollouts) { fprintf(stderr, "gpupool serve: %s\n", err); goto done; }

    registry_cfg rc_cfg = {.join_token = token, .allow = o.allow, .heartbeat_ms = o.heartbeat_ms,
                           .missed_beats = (int)o.missed, .token_ttl_ms = o.token_ttl_s * 1000,
                           .breaker_failures = (int)o.breaker_failures, .breaker_cooldown_ms = o.breaker_cooldown_ms,
                           .placement = o.placement};
    reg = registry_new(&rc_cfg);
    dispatch_cfg dc = {.st = st, .reg = reg, .max_attempts = o.cc.max_attempts, .task_timeout_ms = o.task_timeout_ms,
                       .queue = o.queue, .hedge_factor = o.hedge_factor, .hedge_min_ms = o.hedge_min_ms,
                       .backoff_ms = o.backoff_ms, .outcome = task_outcome, .outcome_ctx = rollouts};
    disp = dispatcher_start(&dc);
    if (!reg || !disp) { fprintf(stderr, "gpupool serve: cannot start the scheduler\n"); goto done; }
    registry_on_change(reg, (void (*)(void *))dispatcher_wake, disp);
    if (o.catalog_file) {
        if (!(cat = catalog_load(o.catalog_file, err, sizeof err))) { fprintf(stderr, "gpupool serve: --catalog %s\n", err); goto done; }
        registry_set_catalog(reg, cat);
        log_info("model catalogue %s: %d model(s)", o.catalog_file, cat->n);
    }
    for (int i = 0; i < o.nclouds; i++)
        if (add_cloud(reg, &o.track, o.clouds[i], mono_ms())) goto done;
    if (o.track.auto_cloud[0] && !registry_model_known(reg, o.track.auto_cloud)) {
        fprintf(stderr, "gpupool serve: --auto-cloud %s: no --cloud backend serves it\n", o.track.auto_cloud);
        goto done;
    }
    if (!(budgets = make_budgets(&o))) goto done;
    track = api_track_new(&o.track, budgets, st);
    if (!track) goto done;
    budgets = NULL; /* the router owns them, and the rules' keywords */
    o.track.nkeywords = 0;
    if (o.track.auto_local[0] || o.track.auto_cloud[0])
        log_info("model auto: local %s, cloud %s; %s", o.track.auto_local[0] ? o.track.auto_local : "(none)",
                 o.track.auto_cloud[0] ? o.track.auto_cloud : "(none)",
                 o.nbudgets ? "cloud budgets on" : "no cloud budget");
    rules = detect_rules_new(o.keywords, o.regexes, err, sizeof err);
    if (!rules) { fprintf(stderr, "gpupool serve: %s\n", err); goto done; }

    if (o.cache_on) {
        /* Its own file: the cache is disposable, the task store is not. */
        char path[4096];
        snprintf(path, sizeof path, "%s/cache.db", o.data);
        cache = semcache_open(path, &o.cc.cache, mono_ms(), wall_ms(), err, sizeof err);
        if (!cache) { fprintf(stderr, "gpupool serve: semantic cache: %s\n", err); goto done; }
        cache_stats cs;
        semcache_stats(cache, &cs);
        log_info("semantic cache on (%s, embedder %s): %llu entr%s, threshold %.3g, max %llu bytes, ttl %ld s, %d turns, "
                 "temperature up to %.2g", path, o.cc.cache.embedder ? o.cc.cache.embedder : EMBED_BUILTIN_ID,
                 (unsigned long long)cs.entries, cs.entries == 1 ? "y" : "ies",
                 o.cc.cache.threshold, (unsigned long long)o.cc.cache.max_bytes, o.cache_ttl_s, o.cc.cache.turns,
                 o.cc.cache.max_temperature);
    }

    if (o.audit_on) {
        o.audit.raw_scan = o.nregexes == 0;
        audit_db *adb = audit_db_open(o.data, err, sizeof err);
        if (!adb || !(audit = auditor_start(adb, rules, &o.audit))) {
            if (adb) audit_db_close(adb);
            fprintf(stderr, "gpupool serve: audit log: %s\n", adb ? "cannot start its writer" : err);
            goto done;
        }
        log_info("audit log on: kept %d day(s), bodies up to %zu bytes, redacted", o.audit.days, o.audit.body_max);
    }

    if (o.apps_file) {
        apps = apps_cfg_load(o.apps_file, err, sizeof err);
        if (!apps) { fprintf(stderr, "gpupool serve: --apps: %s\n", err); goto done; }
    }
    /* Always running: runs stored before a restart go on even if --apps is now gone. */
    runner = runner_start(st, disp);
    if (!runner) { fprintf(stderr, "gpupool serve: cannot start the app runner\n"); goto done; }

    coord c = {.cfg = o.cc, .st = st, .reg = reg, .disp = disp, .rules = rules, .cache = cache,
               .track = track, .apps = apps, .runner = runner, .rollouts = rollouts, .catalog = cat,
               .audit = audit, .started_mono = mono_ms()};
    wh_db *wdb = (hook_secret = webhook_secret(&o)) ? wh_db_open(o.data, err, sizeof err) : NULL;
    o.hooks.secret = hook_secret;
    if (!wdb || !(hooks = c.hooks = webhooks_start(&c, wdb, &o.hooks))) {
        if (wdb) wh_db_close(wdb);
        else if (hook_secret) fprintf(stderr, "gpupool serve: webhooks: %s\n", err);
        goto done;
    }
    http_server_opts ho = {.listen = o.listen, .max_body = o.max_body, .fast = coord_fast, .handler = coord_handle,
                           .observe = coord_observe, .answer = coord_answer, .app = &c};
    srv = http_server_start(&ho, err, sizeof err);
    if (!srv) { fprintf(stderr, "gpupool serve: %s\n", err); goto done; }
    int port = http_server_port(srv);
    if (o.port_file && write_port_file(o.port_file, port)) log_warn("cannot write the port file %s", o.port_file);
    log_info("coordinator listening on %s (port %d), data in %s, %s, placement %s", o.listen, port, o.data,
             o.cc.nkeys ? "client API keys required" : "no client API keys (loopback only)",
             place_policy_name(o.placement.policy));
    if (o.cc.lowcode.ncors || o.cc.lowcode.envelope_all || o.cc.lowcode.nenvelope || o.cc.lowcode.camel_all)
        log_info("low-code mode: %d CORS origin(s), envelope %s, field case %s", o.cc.lowcode.ncors,
                 o.cc.lowcode.envelope_all ? "always200" : o.cc.lowcode.nenvelope ? "for some origins" : "on request",
                 o.cc.lowcode.camel_all ? "camel" : "snake");

    char offline[64][40];
    int64_t expired_at = mono_ms();
    for (;;) {
        /* Wake when the next node would turn silent or offline, so a frozen
         * node is noticed on time rather than up to a tick late. */
        int64_t now = mono_ms(), wait_ms = registry_next_deadline(reg, now) - now;
        if (wait_ms > o.heartbeat_ms / 2) wait_ms = o.heartbeat_ms / 2;
        if (wait_ms < 5) wait_ms = 5;
        struct timespec ts = {(time_t)(wait_ms / 1000), (long)(wait_ms % 1000) * 1000000L};
        int sig = sigtimedwait(&sigs, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM) { log_info("stopping on signal %d", sig); break; }
        int n = registry_sweep(reg, mono_ms(), offline, 64);
        for (int i = 0; i < n && i < 64; i++) dispatcher_node_offline(disp, offline[i]);
        n = registry_silent(reg, mono_ms(), offline, 64);
        for (int i = 0; i < n && i < 64; i++) dispatcher_node_silent(disp, offline[i]);
        /* Lookups never return expired entries; this gives their bytes back. */
        if (mono_ms() - expired_at >= 60000) {
            expired_at = mono_ms();
            if (cache) semcache_expire(cache, expired_at);
            long gone = store_session_expire(st, wall_ms());
            if (gone > 0) log_info("%ld session(s) expired", gone);
        }
    }
    rc = 0;
done:
    relay_abort_all();
    if (reg) registry_shutdown(reg);
    runner_stop(runner); /* wakes app calls waiting on their runs */
    http_server_stop(srv);
    webhooks_stop(hooks);
    auditor_stop(audit);
    dispatcher_stop(disp);
    runner_free(runner);
    apps_cfg_free(apps);
    rollout_table_close(rollouts);
    registry_free(reg);
    catalog_free(cat);
    store_close(st);
    detect_rules_free(rules);
    semcache_close(cache);
    api_track_free(track);
    budget_free(budgets);
    track_cfg_free(&o.track);
    for (int i = 0; i < o.cc.nkeys; i++) free(o.cc.api_keys[i]);
    for (int i = 0; i < o.cc.nadmin; i++) free(o.cc.admin_keys[i]);
    for (int i = 0; i < o.cc.nprivate; i++) free(o.cc.private_keys[i]);
    free(token);
    free(hook_secret);
    opts_free_argv(argv);
    if (rc == 0) http_client_global_cleanup();
    return rc;
}
