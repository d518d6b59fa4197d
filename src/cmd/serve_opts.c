/* cmd/serve_opts: the options of `gpupool serve`: their help, their parsing
 * (with the keys file and CORS origins), and checks of their values. */
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
#include "cmd/serve_opts.h"

void serve_usage(FILE *f)
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
            "  --admin-key KEY           an API key that may also make the admin calls: drain and forget\n"
            "                            nodes, empty the cache, move rollouts, read the audit log\n"
            "                            (repeatable; or GPUPOOL_ADMIN_KEYS); without any key everyone may\n"
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

int serve_parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int serve_add_key(serve_opts *o, const char *k)
{
    if (!*k) return 0;
    if (o->cc.nkeys >= COORD_MAX_KEYS) return -1;
    o->cc.api_keys[o->cc.nkeys++] = strdup(k);
    return 0;
}

int serve_load_keys_file(serve_opts *o, const char *path)
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
        if (serve_add_key(o, s) || (admin && o->cc.nadmin >= COORD_MAX_KEYS)) {
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

int serve_parse(int argc, char **argv, serve_opts *o)
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
        case 'k': if (serve_add_key(o, optarg)) { fprintf(stderr, "gpupool serve: too many API keys\n"); return -1; } break;
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
        case ch: if (serve_parse_double(optarg, lo, hi, &f)) { fprintf(stderr, "gpupool serve: %s wants a number from %g to %g\n", name, (double)lo, (double)hi); return -1; } field = f; break;
        DBLOPT('s', o->queue.key_max_share, 0, 1, "--key-max-share")
        DBLOPT('e', o->hedge_factor, 0, 1000, "--hedge-factor")
        DBLOPT(257, o->cc.cache.threshold, 0, 1, "--cache-threshold")
        DBLOPT(261, o->cc.cache.max_temperature, 0, 2, "--cache-max-temperature")
#undef DBLOPT
        case 'X':
            if (serve_add_key(o, optarg) || o->cc.nadmin >= COORD_MAX_KEYS) { fprintf(stderr, "gpupool serve: too many API keys\n"); return -1; }
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
        case 'H': serve_usage(stdout); exit(0);
        default: serve_usage(stderr); return -1;
        }
    }
    if (optind < argc) { fprintf(stderr, "gpupool serve: unexpected argument '%s'\n", argv[optind]); return -1; }
    return 0;
}

