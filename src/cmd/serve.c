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
#include "cmd/serve_opts.h"

/* A task attempt's outcome, for the rollouts of its model. */
static void task_outcome(void *rollouts, const char *model, int ok, double total_ms)
{
    rollout_table_model_outcome(rollouts, model, !ok, total_ms);
}

/* --cloud NAME=URL,models=M1|M2[,key-env=VAR][,slots=N][,price-in=X,price-out=Y]:
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
        else if (!strncmp(kv, "price-in=", 9) && !serve_parse_double(kv + 9, 0, 1e9, &price_in)) {}
        else if (!strncmp(kv, "price-out=", 10) && !serve_parse_double(kv + 10, 0, 1e9, &price_out)) {}
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

/* A secret: given, from a file, from the environment, or made once (nbytes
 * random bytes as hex) and kept in the data directory as name, where whoever
 * needs it can read it (what says who, for the log).  NULL after saying why. */
static char *secret(const serve_opts *o, const char *given, const char *file, const char *env_name,
                    const char *name, size_t nbytes, const char *what)
{
    if (given) return strdup(given);
    if (file) {
        char *s = read_small_file(file, 1024);
        if (!s || !*s) fprintf(stderr, "gpupool serve: cannot read the %s from %s\n", name, file);
        if (s && !*s) { free(s); s = NULL; }
        return s;
    }
    const char *env = getenv(env_name);
    if (env && *env) return strdup(env);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", o->data, name);
    char *s = read_small_file(path, 1024);
    if (s && *s) return s;
    free(s);
    char fresh[65], line[80];
    rand_hex(fresh, nbytes);
    snprintf(line, sizeof line, "%s\n", fresh);
    if (write_file_atomic(path, line)) {
        fprintf(stderr, "gpupool serve: cannot write %s: %s\n", path, strerror(errno));
        return NULL;
    }
    log_info("generated the %s; %s from %s", name, what, path);
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
    if (serve_parse(argc, argv, &o)) goto done;
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
    if (o.keys_file && serve_load_keys_file(&o, o.keys_file)) goto done;
    const char *envkeys = getenv("GPUPOOL_API_KEYS");
    if (envkeys) {
        char *copy = strdup(envkeys), *save = NULL;
        for (char *k = strtok_r(copy, ", ", &save); k; k = strtok_r(NULL, ", ", &save)) serve_add_key(&o, k);
        free(copy);
    }
    const char *envadmin = getenv("GPUPOOL_ADMIN_KEYS");
    if (envadmin) {
        char *copy = strdup(envadmin), *save = NULL;
        for (char *k = strtok_r(copy, ", ", &save); k; k = strtok_r(NULL, ", ", &save))
            if (!serve_add_key(&o, k) && o.cc.nadmin < COORD_MAX_KEYS) o.cc.admin_keys[o.cc.nadmin++] = strdup(k);
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
    if (!(token = secret(&o, o.join_token, o.join_token_file, "GPUPOOL_JOIN_TOKEN", "join-token", 24,
                         "workers on this machine can read it"))) goto done;

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
    wh_db *wdb = (hook_secret = secret(&o, o.webhook_secret, o.webhook_secret_file, "GPUPOOL_WEBHOOK_SECRET",
                                           "webhook-secret", 32, "receivers can be given it")) ? wh_db_open(o.data, err, sizeof err) : NULL;
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
