/* cmd/serve_opts: what `gpupool serve` is told, parsed from argv (a config
 * file's lines already expanded into it). */
#ifndef GPUPOOL_SERVE_OPTS_H
#define GPUPOOL_SERVE_OPTS_H

#include <stdio.h>

#include "api/audit.h"
#include "api/coord.h"
#include "api/track.h"
#include "api/webhooks.h"
#include "sched/placement.h"

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

void serve_usage(FILE *f);
/* Fills o from argv; 0, or -1 after saying why on stderr.  --help exits. */
int serve_parse(int argc, char **argv, serve_opts *o);
/* A client API key, or each line of a keys file ("KEY [private|admin]"):
 * 0, or -1 (too many keys, or the file cannot be read). */
int serve_add_key(serve_opts *o, const char *k);
int serve_load_keys_file(serve_opts *o, const char *path);
/* A number in [lo, hi]: 0, or -1. */
int serve_parse_double(const char *s, double lo, double hi, double *out);

#endif
