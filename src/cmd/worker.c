/* cmd/worker: `gpupool worker`, run on each GPU machine.  Finds the GPUs and
 * engines, starts the simulator when there is no engine, takes the owner's
 * policy, opens the front door for dispatched work and keeps the node
 * registered with the coordinator. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "http/client.h"
#include "http/relay.h"
#include "http/server.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/opts.h"
#include "worker/agent.h"
#include "worker/fingerprint.h"
#include "worker/frontdoor.h"
#include "worker/managed.h"
#include "worker/peerfetch.h"
#include "plan/plan.h"

#define MAX_SPECS 16

typedef struct worker_opts {
    const char *coordinator, *join_token, *join_token_file, *listen, *advertise, *name, *sim_args, *port_file;
    const char *engines[MAX_SPECS];
    int nengines;
    const char *fakes[MAX_SPECS + 1];
    int nfakes;
    const char *loads[MAX_SPECS];
    int nloads;
    const char *engine_cmd, *data_dir, *margin;
    long load_timeout_ms, unload_wait_ms;
    long heartbeat_ms, slots;
    const char *fake_gpu_file, *fake_idle_file;
    long fake_release_ms;
    int64_t fetch_rate;
    owner_policy owner;
} worker_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gpupool worker [options]\n"
            "  --coordinator URL       the coordinator (default http://127.0.0.1:8420)\n"
            "  --join-token TOKEN      the pool's join token (or GPUPOOL_JOIN_TOKEN)\n"
            "  --join-token-file FILE  read the join token from FILE\n"
            "  --listen HOST:PORT      where dispatched work arrives (default 127.0.0.1:8421)\n"
            "  --advertise URL         the address the coordinator should call (default from --listen)\n"
            "  --name NAME             a name for people (default the host name)\n"
            "  --engine SPEC           openai=URL | ollama=URL | sim (repeatable; default: look for\n"
            "                          llama-server, vLLM or Ollama here, else the simulator);\n"
            "                          none: only the models it starts (--load, the coordinator's catalogue)\n"
            "  --slots N               parallel slots of an engine that does not report them (default 4)\n"
            "  --load NAME=FILE.gguf[,sha256=HEX][,ctx=N][,parallel=N][,keep-alive=D][,ctk=T][,ctv=T][,fa=on|off][,pin]\n"
            "                          a model whose engine starts on first use and stops when idle\n"
            "                          (repeatable; sized by the planner, then by what the engine\n"
            "                          allocated; offered where it fits; keep-alive 300 s by default,\n"
            "                          10m or -1 (never) also work; pin: never stopped to make room;\n"
            "                          sha256: the file's digest: the file is checked and offered to peers,\n"
            "                          or, when it is missing, fetched from a peer that holds it)\n"
            "  --fetch-rate SIZE       download files from peers at most this fast, e.g. 100M (per second;\n"
            "                          default no limit)\n"
            "  --engine-cmd \"CMD\"      how to start such an engine; {model} {name} {port} {ctx}\n"
            "                          {ctx_total} {parallel} {cache_type_k} {cache_type_v} {flash_attn}\n"
            "                          {self} are filled in (default: llama-server)\n"
            "  --load-timeout-ms N     longest wait for a started engine to answer (default 120000)\n"
            "  --unload-wait-ms N      longest wait for VRAM to come back after stopping engines (default 15000)\n"
            "  --data DIR              engine logs (DIR/logs) and measured memory (DIR/measured.json)\n"
            "                          (default ./gpupool-worker, made when first needed)\n"
            "  --margin X              kept on top of a model's need: 5%% (default) or a size like 512M\n"
            "  --sim-args \"ARGS\"       options for the simulator (see gpupool sim-engine --help)\n"
            "  --serve-hours \"[DAYS ]HH:MM-HH:MM\"  serve only then, local time (repeatable or comma\n"
            "                          separated; DAYS: mon, mon-fri, weekdays, weekends, daily;\n"
            "                          18:00-08:00 runs past midnight; default any time)\n"
            "  --max-vram SIZE         the most VRAM this worker's engines may use, e.g. 8G\n"
            "  --pause-when-user-active S  serve only after S seconds without keyboard or mouse input\n"
            "                          (reads /dev/input: needs the input group)\n"
            "  --foreign-vram-tolerance SIZE  VRAM others may take before the node drains (default 512M)\n"
            "  --fake-gpu NAME:TOTAL_GB:FREE_GB  pretend to have this GPU (repeatable)\n"
            "  --fake-gpu-file FILE    fake GPUs from FILE, read at every heartbeat: lines of\n"
            "                          NAME:TOTAL_GB:FREE_GB [proc=PID[:USED_GB]]..., or \"lost\"\n"
            "  --fake-idle-file FILE   seconds since the user's last input, instead of /dev/input\n"
            "  --fake-gpu-release-ms N fake GPUs give a stopped engine's memory back N ms later\n"
            "  --heartbeat-ms N        heartbeat interval until the coordinator says otherwise (default 2000)\n"
            "  --port-file FILE        write the bound port here once listening\n"
            "  --config FILE           read options from FILE (key = value lines)\n");
}

static int parse(int argc, char **argv, worker_opts *o)
{
    static const struct option longopts[] = {
        {"coordinator", 1, 0, 'c'}, {"join-token", 1, 0, 'j'}, {"join-token-file", 1, 0, 'J'},
        {"listen", 1, 0, 'l'}, {"advertise", 1, 0, 'a'}, {"name", 1, 0, 'n'}, {"engine", 1, 0, 'e'},
        {"slots", 1, 0, 's'}, {"sim-args", 1, 0, 'S'}, {"fake-gpu", 1, 0, 'g'}, {"heartbeat-ms", 1, 0, 'h'},
        {"port-file", 1, 0, 'p'}, {"load", 1, 0, 'L'}, {"engine-cmd", 1, 0, 'C'}, {"load-timeout-ms", 1, 0, 'T'},
        {"fake-gpu-file", 1, 0, 'f'}, {"serve-hours", 1, 0, 'o'}, {"max-vram", 1, 0, 'm'},
        {"pause-when-user-active", 1, 0, 'u'}, {"fake-idle-file", 1, 0, 'i'}, {"foreign-vram-tolerance", 1, 0, 'v'},
        {"data", 1, 0, 'd'}, {"margin", 1, 0, 'M'}, {"unload-wait-ms", 1, 0, 'W'},
        {"fake-gpu-release-ms", 1, 0, 'R'}, {"fetch-rate", 1, 0, 'F'},
        {"help", 0, 0, 'H'}, {0, 0, 0, 0}};
    char err[256];
    int64_t size;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'c': o->coordinator = optarg; break;
        case 'j': o->join_token = optarg; break;
        case 'J': o->join_token_file = optarg; break;
        case 'l': o->listen = optarg; break;
        case 'a': o->advertise = optarg; break;
        case 'n': o->name = optarg; break;
        case 'e':
            if (o->nengines >= MAX_SPECS) { fprintf(stderr, "gpupool worker: too many engines\n"); return -1; }
            o->engines[o->nengines++] = optarg;
            break;
        case 's':
            if (opts_parse_int(optarg, 1, 1024, &o->slots)) { fprintf(stderr, "gpupool worker: --slots wants 1..1024\n"); return -1; }
            break;
        case 'S': o->sim_args = optarg; break;
        case 'g':
            if (o->nfakes >= MAX_SPECS) { fprintf(stderr, "gpupool worker: too many fake GPUs\n"); return -1; }
            o->fakes[o->nfakes++] = optarg;
            break;
        case 'h':
            if (opts_parse_int(optarg, 50, 600000, &o->heartbeat_ms)) { fprintf(stderr, "gpupool worker: --heartbeat-ms wants 50..600000\n"); return -1; }
            break;
        case 'p': o->port_file = optarg; break;
        case 'L':
            if (o->nloads >= MAX_SPECS) { fprintf(stderr, "gpupool worker: too many --load models\n"); return -1; }
            o->loads[o->nloads++] = optarg;
            break;
        case 'C': o->engine_cmd = optarg; break;
        case 'T':
            if (opts_parse_int(optarg, 100, 3600000, &o->load_timeout_ms)) { fprintf(stderr, "gpupool worker: --load-timeout-ms wants 100..3600000\n"); return -1; }
            break;
        case 'f': o->fake_gpu_file = optarg; break;
        case 'd': o->data_dir = optarg; break;
        case 'R':
            if (opts_parse_int(optarg, 0, 600000, &o->fake_release_ms)) { fprintf(stderr, "gpupool worker: --fake-gpu-release-ms wants 0..600000\n"); return -1; }
            break;
        case 'M': o->margin = optarg; break;
        case 'F':
            if ((o->fetch_rate = opts_parse_size(optarg)) <= 0) { fprintf(stderr, "gpupool worker: --fetch-rate wants a size per second such as 100M\n"); return -1; }
            break;
        case 'W':
            if (opts_parse_int(optarg, 0, 600000, &o->unload_wait_ms)) { fprintf(stderr, "gpupool worker: --unload-wait-ms wants 0..600000\n"); return -1; }
            break;
        case 'i': o->fake_idle_file = optarg; break;
        case 'o':
            if (owner_parse_hours(optarg, &o->owner, err, sizeof err)) { fprintf(stderr, "gpupool worker: %s\n", err); return -1; }
            break;
        case 'm':
            if ((size = opts_parse_size(optarg)) <= 0) { fprintf(stderr, "gpupool worker: --max-vram wants a size such as 8G\n"); return -1; }
            o->owner.max_vram_bytes = (uint64_t)size;
            break;
        case 'v':
            if ((size = opts_parse_size(optarg)) < 0) { fprintf(stderr, "gpupool worker: --foreign-vram-tolerance wants a size such as 512M\n"); return -1; }
            o->owner.tolerance_bytes = (uint64_t)size;
            break;
        case 'u': {
            long secs;
            if (opts_parse_int(optarg, 1, 604800, &secs)) { fprintf(stderr, "gpupool worker: --pause-when-user-active wants 1..604800 seconds\n"); return -1; }
            o->owner.pause_active_s = secs;
            break;
        }
        case 'H': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
    }
    if (optind < argc) { fprintf(stderr, "gpupool worker: unexpected argument '%s'\n", argv[optind]); return -1; }
    if (o->fake_gpu_file && o->nfakes) { fprintf(stderr, "gpupool worker: --fake-gpu and --fake-gpu-file do not mix\n"); return -1; }
    if (o->fake_idle_file && !o->owner.pause_active_s)
        fprintf(stderr, "gpupool worker: --fake-idle-file matters only with --pause-when-user-active\n");
    return 0;
}

/* One line saying what the owner asked for, so a node that drains can be
 * understood from its log. */
static void log_policy(const owner_policy *p)
{
    char line[400] = "", piece[160];
    if (p->nhours) {
        snprintf(piece, sizeof piece, "; serving hours %s (local time)", p->hours_text);
        strncat(line, piece, sizeof line - strlen(line) - 1);
    }
    if (p->max_vram_bytes) {
        snprintf(piece, sizeof piece, "; at most %llu MiB of VRAM", (unsigned long long)(p->max_vram_bytes >> 20));
        strncat(line, piece, sizeof line - strlen(line) - 1);
    }
    if (p->pause_active_s) {
        snprintf(piece, sizeof piece, "; paused until %lld s after the last keyboard or mouse input",
                 (long long)p->pause_active_s);
        strncat(line, piece, sizeof line - strlen(line) - 1);
    }
    log_info("owner policy: drains while a foreign process or more than %llu MiB of unexplained use is on its "
             "GPUs%s", (unsigned long long)(p->tolerance_bytes >> 20), line);
}

/* --margin "5%", "5" or "512M", as the planner takes it. */
static int parse_margin(const char *v, managed_defaults *d)
{
    plan_settings s;
    plan_settings_init(&s);
    json_t *j = json_pack("{s:s}", "margin", v);
    int rc = plan_settings_from_json(j, &s, NULL, 0);
    json_decref(j);
    d->margin_pct = s.margin_pct;
    d->margin_bytes = s.margin_bytes;
    d->overhead_bytes = s.overhead;
    return rc;
}

static int setup_engines(worker *w, worker_opts *o)
{
    char err[512];
    snprintf(w->managed.data_dir, sizeof w->managed.data_dir, "%s", o->data_dir ? o->data_dir : "./gpupool-worker");
    if (parse_margin(o->margin ? o->margin : "5%", &w->managed)) {
        fprintf(stderr, "gpupool worker: --margin wants a percentage like 5%% or a size like 512M\n");
        return -1;
    }
    for (int i = 0; i < o->nloads && w->nengines < WORKER_MAX_ENGINES; i++) {
        engine e;
        if (managed_parse(o->loads[i], &w->managed, &e, err, sizeof err)) { fprintf(stderr, "gpupool worker: %s\n", err); return -1; }
        const managed_spec *m = e.managed;
        if (m->fetching)
            log_info("%s waits for its file %s, to be fetched from a peer", m->name, m->gguf);
        else if (m->measured)
            log_info("%s can be loaded here: needs %llu MiB at %d context x %d slot(s), as measured before "
                     "(the planner says %llu MiB)%s", m->name, (unsigned long long)(m->need_bytes >> 20), m->ctx,
                     m->parallel, (unsigned long long)(m->estimate_bytes >> 20), m->pinned ? "; pinned" : "");
        else
            log_info("%s can be loaded here: needs %llu MiB at %d context x %d slot(s)%s", m->name,
                     (unsigned long long)(m->need_bytes >> 20), m->ctx, m->parallel, m->pinned ? "; pinned" : "");
        w->engines[w->nengines++] = e;
    }
    w->unload_wait_ms = o->unload_wait_ms >= 0 ? o->unload_wait_ms : 15000;
    snprintf(w->engine_cmd, sizeof w->engine_cmd, "%s", o->engine_cmd ? o->engine_cmd : MANAGED_DEFAULT_CMD);
    w->load_timeout_ms = o->load_timeout_ms ? o->load_timeout_ms : 120000;
    if (o->nengines == 0 && o->nloads == 0) {
        engine found;
        if (engine_autodetect(&found) == 0) {
            log_info("found a running %s engine at %s", engine_kind_name(found.kind), found.url);
            w->engines[w->nengines++] = found;
        } else {
            log_warn("no GPU engine found (llama-server :8080, vLLM :8000, Ollama :11434): "
                     "serving the SIMULATOR; every answer is simulated, no model runs");
            o->engines[o->nengines++] = "sim";
        }
    }
    for (int i = 0; i < o->nengines && w->nengines < WORKER_MAX_ENGINES; i++) {
        engine e;
        if (!strcmp(o->engines[i], "none")) continue; /* only started models, from --load or the catalogue */
        if (engine_parse_spec(o->engines[i], &e, err, sizeof err)) { fprintf(stderr, "gpupool worker: %s\n", err); return -1; }
        if (o->slots) e.default_slots = (int)o->slots;
        if (e.kind == ENGINE_SIM && engine_start_sim(&e, o->sim_args, err, sizeof err)) {
            fprintf(stderr, "gpupool worker: %s\n", err);
            return -1;
        }
        w->engines[w->nengines++] = e;
    }
    return 0;
}

static int fill_identity(worker *w, worker_opts *o, int port)
{
    const char *tok = o->join_token ? o->join_token : getenv("GPUPOOL_JOIN_TOKEN");
    char *fromfile = NULL;
    if (!tok && o->join_token_file) {
        fromfile = read_small_file(o->join_token_file, 255);
        if (!fromfile || !*fromfile) {
            fprintf(stderr, "gpupool worker: cannot read a join token from %s\n", o->join_token_file);
            free(fromfile);
            return -1;
        }
        tok = fromfile;
    }
    if (!tok || !*tok) {
        fprintf(stderr, "gpupool worker: a join token is needed (--join-token, --join-token-file or GPUPOOL_JOIN_TOKEN)\n");
        return -1;
    }
    snprintf(w->join_token, sizeof w->join_token, "%s", tok);
    free(fromfile);
    snprintf(w->coordinator, sizeof w->coordinator, "%s", o->coordinator);
    size_t n = strlen(w->coordinator);
    while (n && w->coordinator[n - 1] == '/') w->coordinator[--n] = 0;
    char host[128];
    if (o->name) snprintf(w->name, sizeof w->name, "%s", o->name);
    else if (gethostname(host, sizeof host) == 0) snprintf(w->name, sizeof w->name, "%.63s", host);
    if (o->advertise) {
        snprintf(w->address, sizeof w->address, "%s", o->advertise);
    } else {
        int p;
        http_parse_listen(o->listen, host, sizeof host, &p);
        if (!strcmp(host, "0.0.0.0") || !strcmp(host, "::")) {
            fprintf(stderr, "gpupool worker: listening on %s needs --advertise http://THIS-MACHINE:%d\n", o->listen, port);
            return -1;
        }
        snprintf(w->address, sizeof w->address, strchr(host, ':') ? "http://[%s]:%d" : "http://%s:%d", host, port);
    }
    worker_refresh(w);
    if (machine_fingerprint(w->gpus, w->ngpus, w->fingerprint)) {
        fprintf(stderr, "gpupool worker: cannot work out a machine fingerprint (no /etc/machine-id)\n");
        return -1;
    }
    return 0;
}

int cmd_worker(int argc0, char **argv0)
{
    log_set_component("worker");
    char err[512];
    int argc;
    char **argv = opts_expand_config(argc0, argv0, &argc, err, sizeof err);
    if (!argv) { fprintf(stderr, "gpupool worker: %s\n", err); return 2; }
    worker_opts o = {.coordinator = "http://127.0.0.1:8420", .listen = "127.0.0.1:8421", .heartbeat_ms = 2000, .unload_wait_ms = -1,
                     .owner = {.tolerance_bytes = OWNER_DEFAULT_TOLERANCE}};
    static worker w;
    memset(&w, 0, sizeof w);
    pthread_mutex_init(&w.mu, NULL);
    cond_init_monotonic(&w.cv); /* the agent waits with monotonic deadlines */
    pthread_cond_init(&w.load_cv, NULL);
    pthread_mutex_init(&w.probe_mu, NULL);
    files_init(&w.files);
    int rc = 2, agent = 0;
    http_server *srv = NULL;
    if (parse(argc, argv, &o)) goto done;
    w.heartbeat_ms = o.heartbeat_ms;
    w.fetch_rate_bps = (uint64_t)o.fetch_rate;

    sigset_t sigs;
    block_stop_signals(&sigs);
    http_client_global_init();

    w.probe = o.fake_gpu_file ? gpu_probe_open_file(o.fake_gpu_file, err, sizeof err)
                              : gpu_probe_open(o.nfakes ? o.fakes : NULL, err, sizeof err);
    if (!w.probe) { fprintf(stderr, "gpupool worker: %s\n", err); goto done; }
    gpu_probe_set_release_ms(w.probe, o.fake_release_ms);
    log_info("GPUs from %s", gpu_source_name(gpu_probe_source(w.probe)));
    w.owner = o.owner;
    if (o.owner.pause_active_s) {
        w.idle = idle_open(o.fake_idle_file, mono_ms());
        if (!w.idle) { fprintf(stderr, "gpupool worker: out of memory\n"); goto done; }
    }
    log_policy(&w.owner);
    if (setup_engines(&w, &o)) goto done;

    http_server_opts ho = {.listen = o.listen, .fast = frontdoor_fast, .handler = frontdoor_handle, .app = &w};
    srv = http_server_start(&ho, err, sizeof err);
    if (!srv) { fprintf(stderr, "gpupool worker: %s\n", err); goto done; }
    int port = http_server_port(srv);
    if (fill_identity(&w, &o, port)) goto done;
    if (worker_agent_start(&w)) { fprintf(stderr, "gpupool worker: cannot start the agent\n"); goto done; }
    agent = 1;
    if (peerfetch_start(&w)) log_warn("cannot start sharing model files with peers");
    if (o.port_file && write_port_file(o.port_file, port)) log_warn("cannot write the port file %s", o.port_file);
    log_info("worker %s listening at %s, coordinator %s", w.name, w.address, w.coordinator);
    int sig;
    sigwait(&sigs, &sig);
    log_info("stopping on signal %d", sig);
    rc = 0;
done:
    if (agent) worker_agent_stop(&w);
    peerfetch_stop(&w);
    relay_abort_all();
    http_server_stop(srv);
    for (int i = 0; i < w.nengines; i++) {
        engine_stop(&w.engines[i]);
        free(w.engines[i].managed);
    }
    gpu_probe_close(w.probe);
    idle_close(w.idle);
    opts_free_argv(argv);
    files_destroy(&w.files);
    if (rc == 0) http_client_global_cleanup();
    return rc;
}
