/* cmd/sim_engine: `gpupool sim-engine`, the GPU-free stand-in for an
 * OpenAI-compatible inference engine.  This file owns the command line and
 * the process's life: start, announce, "load" a model file (sim/simload
 * says what llama-server would print and how long it takes), wait for a
 * signal, stop.
 *
 * It takes llama-server's flags too, written llama-server's way (-m, -c,
 * -np, -ngl, -ctk, -ctv, -fa, --port ...), so a worker can start it with the
 * command line it would give llama-server.  getopt_long_only makes "-ngl"
 * one option rather than -n -g -l, as llama-server's own parser does. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "http/server.h"
#include "sim/simcore.h"
#include "sim/simload.h"
#include "sim/simreply.h"
#include "sim/simserver.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/opts.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gpupool sim-engine [options]\n"
            "\n"
            "A simulated, OpenAI-compatible inference engine: no model, no GPU.  Answers\n"
            "/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models, /health,\n"
            "/slots and /metrics with deterministic text whose first token is \"%s\".\n"
            "\n"
            "  --listen HOST:PORT        address to serve on (default 127.0.0.1:8090; port 0 = any)\n"
            "  --port-file PATH          write the bound port there once listening\n"
            "  --model NAME[:VRAM_GB]    a model to serve, repeatable (default %s:%g);\n"
            "                            a NAME ending in .gguf is a model file, as -m\n"
            "  --ttft-ms N               time to first token (default 200)\n"
            "  --tps N                   tokens per second after it; 0 = no delay (default 50)\n"
            "  --slots N                 requests processed at once; more wait in line (default 4, or -np)\n"
            "  --seed N                  seeds the text and the fault draws (default 42)\n"
            "  --max-tokens-default N    tokens when a request gives no max_tokens (default 64)\n"
            "  --error-rate F            fraction of requests answered 500 (default 0)\n"
            "  --hang-rate F             fraction never answered at all (default 0)\n"
            "  --drop-rate F             fraction of streams cut off half-way (default 0)\n"
            "  --fail-first N            answer the first N chat/completion requests 500 (default 0)\n"
            "  --reply-map FILE          canned answers: a JSON array of {\"match\": SUBSTRING,\n"
            "                            \"reply\": TEXT}; the first entry whose match is in the last\n"
            "                            user message (or the prompt) answers exactly TEXT; \"*\"\n"
            "                            matches anything; others get the generated text\n"
            "  --single-model            answer whatever model a request names with the first model,\n"
            "                            as llama-server does\n"
            "\n"
            "As llama-server (a model file is sized from its GGUF header by the planner; the\n"
            "engine answers 503 \"Loading model\" while it loads, prints llama.cpp's buffer lines\n"
            "on stderr, then serves the file as its one model):\n"
            "  -m, --model FILE.gguf     the model file\n"
            "  --alias NAME, -a NAME     the model's id in /v1/models (default the path)\n"
            "  --host H, --port N        where to listen (default 127.0.0.1:8080 when either is given)\n"
            "  -c, --ctx-size N          context of every slot together (default 4096; 0 = trained)\n"
            "  -np, --parallel N         slots (default 1)\n"
            "  -ngl, --n-gpu-layers N    layers on the GPU (default all)\n"
            "  -ctk, -ctv T              K and V cache types (default f16)\n"
            "  -fa, --flash-attn [on|off|auto]  flash attention (auto is sized as off)\n"
            "  -ub, --ubatch-size N      physical batch (default 512)\n"
            "  --kv-unified, -b, -t, --no-warmup, --jinja, --metrics, --no-mmap, --mlock, -cb,\n"
            "  -fit on|off, -lv N        accepted and ignored\n"
            "  --load-ms N               how long loading takes (default: the file's size at --load-gbps)\n"
            "  --load-gbps F             read speed for that (default 2 GB/s)\n"
            "  --unload-ms N             how long stopping takes after SIGTERM, as an engine freeing its\n"
            "                            GPU memory (default 0)\n"
            "  --mem-factor F            scale every printed buffer size (default 1: the planner's)\n"
            "  --help                    show this\n",
            SIM_FIRST_TOKEN, SIM_DEFAULT_MODEL, SIM_DEFAULT_VRAM_GB);
}

static void announce(const sim_config *c, const char *listen, int port)
{
    char host[128];
    int unused;
    if (http_parse_listen(listen, host, sizeof host, &unused)) snprintf(host, sizeof host, "?");
    char models[SIM_MAX_MODELS * (SIM_MODEL_NAME_MAX + 2)];
    size_t n = 0;
    models[0] = 0;
    for (int i = 0; i < c->n_models; i++)
        n += (size_t)snprintf(models + n, sizeof models - n, "%s%s", i ? ", " : "",
                              c->models[i].name);
    int v6 = strchr(host, ':') != NULL;
    fprintf(stderr,
            "sim-engine: SIMULATED engine listening on %s%s%s:%d (models: %s) — responses are "
            "simulated, no GPU is used\n",
            v6 ? "[" : "", host, v6 ? "]" : "", port, models);
}

enum {
    O_LISTEN = 1000, O_PORT_FILE, O_HELP, O_CONFIG, O_FLAG, O_MODEL, O_LLAMA, O_FA, O_HOST, O_PORT, O_IGNORE,
    O_IGNORE_VALUE, O_REPLY_MAP
};

/* llama-server's spellings map to one name each for sim_llama_set. */
static const struct { const char *flag, *name; } llama_names[] = {
    {"m", "model-file"}, {"a", "alias"}, {"alias", "alias"}, {"c", "ctx-size"}, {"ctx-size", "ctx-size"},
    {"np", "parallel"}, {"parallel", "parallel"}, {"ngl", "n-gpu-layers"}, {"n-gpu-layers", "n-gpu-layers"},
    {"gpu-layers", "n-gpu-layers"}, {"ctk", "cache-type-k"}, {"cache-type-k", "cache-type-k"},
    {"ctv", "cache-type-v"}, {"cache-type-v", "cache-type-v"}, {"ub", "ubatch-size"},
    {"ubatch-size", "ubatch-size"}, {"mem-factor", "mem-factor"}, {"load-ms", "load-ms"},
    {"load-gbps", "load-gbps"}, {"unload-ms", "unload-ms"},
};

static const char *llama_name(const char *flag)
{
    for (size_t i = 0; i < sizeof llama_names / sizeof llama_names[0]; i++)
        if (!strcmp(llama_names[i].flag, flag)) return llama_names[i].name;
    return flag;
}

static int ends_with_gguf(const char *s)
{
    size_t n = strlen(s);
    return n > 5 && !strcasecmp(s + n - 5, ".gguf");
}

typedef struct sim_opts {
    sim_config cfg;
    sim_llama llama;
    const char *listen, *port_file, *host, *port, *reply_map;
    int slots_given, load_given;
} sim_opts;

static int parse(int argc, char **argv, sim_opts *o)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, O_LISTEN},
        {"port-file", required_argument, NULL, O_PORT_FILE},
        {"help", no_argument, NULL, O_HELP},
        /* These go to sim_config_set under their own names. */
        {"model", required_argument, NULL, O_MODEL},
        {"ttft-ms", required_argument, NULL, O_CONFIG},
        {"tps", required_argument, NULL, O_CONFIG},
        {"slots", required_argument, NULL, O_CONFIG},
        {"seed", required_argument, NULL, O_CONFIG},
        {"max-tokens-default", required_argument, NULL, O_CONFIG},
        {"error-rate", required_argument, NULL, O_CONFIG},
        {"hang-rate", required_argument, NULL, O_CONFIG},
        {"drop-rate", required_argument, NULL, O_CONFIG},
        {"fail-first", required_argument, NULL, O_CONFIG},
        {"reply-map", required_argument, NULL, O_REPLY_MAP},
        {"single-model", no_argument, NULL, O_FLAG},
        /* llama-server's, to sim_llama_set. */
        {"m", required_argument, NULL, O_LLAMA}, {"a", required_argument, NULL, O_LLAMA},
        {"alias", required_argument, NULL, O_LLAMA}, {"c", required_argument, NULL, O_LLAMA},
        {"ctx-size", required_argument, NULL, O_LLAMA}, {"np", required_argument, NULL, O_LLAMA},
        {"parallel", required_argument, NULL, O_LLAMA}, {"ngl", required_argument, NULL, O_LLAMA},
        {"n-gpu-layers", required_argument, NULL, O_LLAMA}, {"gpu-layers", required_argument, NULL, O_LLAMA},
        {"ctk", required_argument, NULL, O_LLAMA}, {"cache-type-k", required_argument, NULL, O_LLAMA},
        {"ctv", required_argument, NULL, O_LLAMA}, {"cache-type-v", required_argument, NULL, O_LLAMA},
        {"ub", required_argument, NULL, O_LLAMA}, {"ubatch-size", required_argument, NULL, O_LLAMA},
        {"mem-factor", required_argument, NULL, O_LLAMA}, {"load-ms", required_argument, NULL, O_LLAMA},
        {"load-gbps", required_argument, NULL, O_LLAMA}, {"unload-ms", required_argument, NULL, O_LLAMA},
        {"fa", optional_argument, NULL, O_FA}, {"flash-attn", optional_argument, NULL, O_FA},
        {"host", required_argument, NULL, O_HOST}, {"port", required_argument, NULL, O_PORT},
        {"kv-unified", no_argument, NULL, O_IGNORE}, {"kvu", no_argument, NULL, O_IGNORE},
        {"no-warmup", no_argument, NULL, O_IGNORE}, {"jinja", no_argument, NULL, O_IGNORE},
        {"metrics", no_argument, NULL, O_IGNORE}, {"no-mmap", no_argument, NULL, O_IGNORE},
        {"mlock", no_argument, NULL, O_IGNORE}, {"cb", no_argument, NULL, O_IGNORE},
        {"cont-batching", no_argument, NULL, O_IGNORE},
        {"b", required_argument, NULL, O_IGNORE_VALUE}, {"batch-size", required_argument, NULL, O_IGNORE_VALUE},
        {"t", required_argument, NULL, O_IGNORE_VALUE}, {"threads", required_argument, NULL, O_IGNORE_VALUE},
        {"fit", required_argument, NULL, O_IGNORE_VALUE}, {"lv", required_argument, NULL, O_IGNORE_VALUE},
        {"verbosity", required_argument, NULL, O_IGNORE_VALUE},
        {NULL, 0, NULL, 0},
    };
    char err[512];
    int c, idx;
    optind = 0; /* getopt's state is global; start afresh */
    opterr = 0;
    /* "+": stop at the first non-option, so -fa's optional value can be
     * taken from the next argument without getopt reordering it away. */
    while ((c = getopt_long_only(argc, argv, "+:", opts, &idx)) != -1) {
        const char *name = c >= O_LISTEN ? opts[idx].name : "";
        int rc = 0;
        switch (c) {
        case O_LISTEN: o->listen = optarg; break;
        case O_PORT_FILE: o->port_file = optarg; break;
        case O_REPLY_MAP: o->reply_map = optarg; break;
        case O_HELP: usage(stdout); return 1;
        case O_HOST: o->host = optarg; break;
        case O_PORT: o->port = optarg; break;
        case O_IGNORE:
        case O_IGNORE_VALUE: break;
        case O_MODEL:
            if (ends_with_gguf(optarg)) rc = sim_llama_set(&o->llama, "model-file", optarg, err, sizeof err);
            else rc = sim_config_set(&o->cfg, "model", optarg, err, sizeof err);
            break;
        case O_FLAG:
        case O_CONFIG:
            o->slots_given |= !strcmp(name, "slots");
            rc = sim_config_set(&o->cfg, name, c == O_FLAG ? "1" : optarg, err, sizeof err);
            break;
        case O_LLAMA:
            o->load_given |= !strcmp(name, "load-ms") || !strcmp(name, "load-gbps");
            rc = sim_llama_set(&o->llama, llama_name(name), optarg, err, sizeof err);
            break;
        case O_FA: {
            const char *v = optarg;
            if (!v && optind < argc && (!strcmp(argv[optind], "on") || !strcmp(argv[optind], "off") ||
                                        !strcmp(argv[optind], "auto")))
                v = argv[optind++];
            rc = sim_llama_set(&o->llama, "flash-attn", v, err, sizeof err);
            break;
        }
        case ':':
            fprintf(stderr, "sim-engine: %s needs a value (see --help)\n", argv[optind - 1]);
            return -1;
        default:
            fprintf(stderr, "sim-engine: unknown option '%s' (see --help)\n", argv[optind - 1]);
            return -1;
        }
        if (rc) {
            fprintf(stderr, "sim-engine: %s\n", err);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "sim-engine: unexpected argument '%s' (see --help)\n", argv[optind]);
        return -1;
    }
    return 0;
}

/* --host/--port as llama-server takes them, or --listen. */
static int listen_address(sim_opts *o, char *out, size_t len)
{
    if (o->host || o->port) {
        if (o->listen) {
            fprintf(stderr, "sim-engine: give --listen or --host/--port, not both\n");
            return -1;
        }
        const char *h = o->host ? o->host : "127.0.0.1";
        snprintf(out, len, strchr(h, ':') ? "[%s]:%s" : "%s:%s", h, o->port ? o->port : "8080");
    } else {
        snprintf(out, len, "%s", o->listen ? o->listen : "127.0.0.1:8090");
    }
    char host[128];
    int port;
    struct in6_addr any;
    if (http_parse_listen(out, host, sizeof host, &port) ||
        (strcmp(host, "localhost") && inet_pton(AF_INET, host, &any) != 1 && inet_pton(AF_INET6, host, &any) != 1)) {
        fprintf(stderr, "sim-engine: --listen: '%s' is not IP:PORT (numeric, or localhost)\n", out);
        return -1;
    }
    return 0;
}

/* Sizes -m's file as llama-server would load it, and makes it the one model
 * served.  Errors read like llama-server's, so a log shows the same. */
static int open_model(sim_opts *o, sim_llama_sizes *sz, uint64_t *file_bytes)
{
    char err[512];
    plan_model *m = plan_model_open(o->llama.path, err, sizeof err);
    if (!m) {
        fprintf(stderr, "llama_model_load: error loading model: %s: %s\n", o->llama.path, err);
        fprintf(stderr, "sim-engine: SIMULATED engine: failed to load the model, exiting\n");
        return -1;
    }
    int rc = sim_llama_size(&o->llama, m, sz, err, sizeof err);
    *file_bytes = m->file_bytes;
    plan_model_free(m);
    if (rc) {
        fprintf(stderr, "llama_init_from_model: failed to initialize the context: %s\n", err);
        fprintf(stderr, "sim-engine: SIMULATED engine: failed to load the model, exiting\n");
        return -1;
    }
    /* llama-server lists the alias, else the path it was given. */
    sim_config *c = &o->cfg;
    if (c->n_models == 0) {
        const char *id = o->llama.alias[0] ? o->llama.alias : o->llama.path;
        /* A longer path is cut: the engine answers any model name anyway. */
        snprintf(c->models[0].name, sizeof c->models[0].name, "%.*s", (int)sizeof c->models[0].name - 1, id);
        c->models[0].vram_bytes = sz->gpu_weights + sz->gpu_kv + sz->gpu_compute;
        c->n_models = 1;
    }
    c->single_model = 1;
    if (!o->slots_given) c->slots = (int)o->llama.parallel;
    c->loading = 1;
    return 0;
}

/* Reads --reply-map's file into `out` and points the config at it. */
static int load_reply_map(sim_opts *o, sim_replies *out)
{
    FILE *f = fopen(o->reply_map, "rb");
    if (!f) {
        fprintf(stderr, "sim-engine: --reply-map: cannot open %s: %s\n", o->reply_map, strerror(errno));
        return -1;
    }
    buf text = {0};
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) buf_append(&text, chunk, n);
    int bad = ferror(f);
    fclose(f);
    char err[512];
    int rc = bad ? -1 : sim_replies_parse(text.data ? text.data : "", text.len, out, err, sizeof err);
    buf_free(&text);
    if (rc) {
        if (bad) snprintf(err, sizeof err, "--reply-map: cannot read %s", o->reply_map);
        fprintf(stderr, "sim-engine: %s\n", err);
        return -1;
    }
    o->cfg.replies = out;
    return 0;
}

/* Sleeps out the load, unless a stop signal comes first (then 1). */
static int wait_load(const sigset_t *sigs, int64_t ms)
{
    int64_t deadline = mono_ms() + ms;
    for (;;) {
        int64_t left = deadline - mono_ms();
        if (left <= 0) return 0;
        struct timespec ts = {left / 1000, (left % 1000) * 1000000};
        int sig = sigtimedwait(sigs, NULL, &ts);
        if (sig > 0) {
            log_info("signal %d while loading: stopping", sig);
            return 1;
        }
        if (errno != EINTR && errno != EAGAIN) return 0;
    }
}

/* Serves until a stop signal; the process's exit status. */
static int serve(const sim_opts *op, const char *listen, const sim_llama_sizes *szp, uint64_t file_bytes)
{
    const sim_opts o = *op;
    const sim_llama_sizes sz = *szp;
    char err[512];

    /* Blocked before any server thread exists, so that every thread inherits
     * the mask and the signals reach only sigwait below. */
    sigset_t sigs;
    block_stop_signals(&sigs);

    sim_server *srv = sim_server_start(&o.cfg, listen, err, sizeof err);
    if (!srv) {
        fprintf(stderr, "sim-engine: %s\n", err);
        return 1;
    }
    announce(&o.cfg, listen, sim_server_port(srv));
    if (o.port_file && write_port_file(o.port_file, sim_server_port(srv))) {
        fprintf(stderr, "sim-engine: cannot write the port file %s\n", o.port_file);
        sim_server_stop(srv);
        return 1;
    }
    if (o.cfg.loading) {
        int64_t ms = sim_llama_load_ms(&o.llama, file_bytes);
        buf lines = {0};
        if (o.llama.path[0]) {
            fprintf(stderr, "sim-engine: SIMULATED load of %s for %lld ms: the buffer sizes below are the planner's%s, "
                            "no GPU is used\n", o.llama.path, (long long)ms, o.llama.mem_factor != 1 ? " (scaled)" : "");
            sim_llama_model_lines(&lines, &sz);
            fputs(lines.data, stderr);
        }
        if (wait_load(&sigs, ms)) {
            buf_free(&lines);
            sim_server_stop(srv);
            return 0;
        }
        buf_reset(&lines);
        if (o.llama.path[0]) sim_llama_context_lines(&lines, &sz);
        buf_printf(&lines, "main: model loaded (simulated)\n");
        fputs(lines.data, stderr);
        buf_free(&lines);
        sim_server_loaded(srv);
    }
    int sig = 0;
    sigwait(&sigs, &sig);
    log_info("signal %d: stopping", sig);
    sim_server_stop(srv);
    if (o.llama.unload_ms > 0) {
        fprintf(stderr, "sim-engine: SIMULATED unload for %lld ms\n", (long long)o.llama.unload_ms);
        sleep_ms(o.llama.unload_ms);
    }
    return 0;
}

int cmd_sim_engine(int argc, char **argv)
{
    log_set_component("sim-engine");
    sim_opts o = {0};
    sim_config_defaults(&o.cfg);
    sim_llama_defaults(&o.llama);
    int p = parse(argc, argv, &o);
    if (p) return p > 0 ? 0 : 2;
    char listen[160], err[512];
    if (listen_address(&o, listen, sizeof listen)) return 2;
    sim_llama_sizes sz = {0};
    uint64_t file_bytes = 0;
    if (o.llama.path[0] && open_model(&o, &sz, &file_bytes)) return 1;
    if (!o.llama.path[0] && o.load_given) o.cfg.loading = 1; /* a load with nothing to size */
    if (sim_config_finish(&o.cfg, err, sizeof err)) {
        fprintf(stderr, "sim-engine: %s\n", err);
        return 2;
    }
    sim_replies replies = {0};
    if (o.reply_map && load_reply_map(&o, &replies)) return 2;
    int rc = serve(&o, listen, &sz, file_bytes);
    sim_replies_free(&replies);
    return rc;
}
