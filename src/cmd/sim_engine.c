/* cmd/sim_engine: `gpupool sim-engine`, the GPU-free stand-in for an
 * OpenAI-compatible inference engine.  This file owns the command line and
 * the process's life: start, announce, wait for a signal, stop. */
#include <arpa/inet.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "http/server.h"
#include "sim/simcore.h"
#include "sim/simserver.h"
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
            "  --model NAME[:VRAM_GB]    a model to serve, repeatable (default %s:%g)\n"
            "  --ttft-ms N               time to first token (default 200)\n"
            "  --tps N                   tokens per second after it; 0 = no delay (default 50)\n"
            "  --slots N                 requests processed at once; more wait in line (default 4)\n"
            "  --seed N                  seeds the text and the fault draws (default 42)\n"
            "  --max-tokens-default N    tokens when a request gives no max_tokens (default 64)\n"
            "  --error-rate F            fraction of requests answered 500 (default 0)\n"
            "  --hang-rate F             fraction never answered at all (default 0)\n"
            "  --drop-rate F             fraction of streams cut off half-way (default 0)\n"
            "  --single-model            answer whatever model a request names with the first model,\n"
            "                            as llama-server does\n"
            "  --help                    show this\n",
            SIM_FIRST_TOKEN, SIM_DEFAULT_MODEL, SIM_DEFAULT_VRAM_GB);
}

/* Writes "PORT\n" so that a reader never sees a half-written file. */

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

int cmd_sim_engine(int argc, char **argv)
{
    enum { O_LISTEN = 1000, O_PORT_FILE, O_HELP, O_CONFIG, O_FLAG };
    static const struct option opts[] = {
        {"listen", required_argument, NULL, O_LISTEN},
        {"port-file", required_argument, NULL, O_PORT_FILE},
        {"help", no_argument, NULL, O_HELP},
        /* The rest go to sim_config_set under their own names. */
        {"model", required_argument, NULL, O_CONFIG},
        {"ttft-ms", required_argument, NULL, O_CONFIG},
        {"tps", required_argument, NULL, O_CONFIG},
        {"slots", required_argument, NULL, O_CONFIG},
        {"seed", required_argument, NULL, O_CONFIG},
        {"max-tokens-default", required_argument, NULL, O_CONFIG},
        {"error-rate", required_argument, NULL, O_CONFIG},
        {"hang-rate", required_argument, NULL, O_CONFIG},
        {"drop-rate", required_argument, NULL, O_CONFIG},
        {"single-model", no_argument, NULL, O_FLAG},
        {NULL, 0, NULL, 0},
    };
    sim_config cfg;
    sim_config_defaults(&cfg);
    const char *listen = "127.0.0.1:8090", *port_file = NULL;
    char err[512];
    int c, idx;
    log_set_component("sim-engine");
    optind = 0; /* getopt's state is global; start afresh */
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", opts, &idx)) != -1) {
        switch (c) {
        case O_LISTEN: listen = optarg; break;
        case O_PORT_FILE: port_file = optarg; break;
        case O_HELP: usage(stdout); return 0;
        case O_FLAG:
        case O_CONFIG:
            if (sim_config_set(&cfg, opts[idx].name, c == O_FLAG ? "1" : optarg, err, sizeof err)) {
                fprintf(stderr, "sim-engine: %s\n", err);
                return 2;
            }
            break;
        case ':':
            fprintf(stderr, "sim-engine: %s needs a value (see --help)\n", argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "sim-engine: unknown option '%s' (see --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "sim-engine: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    char host[128];
    int port;
    struct in6_addr any;
    if (http_parse_listen(listen, host, sizeof host, &port) ||
        (strcmp(host, "localhost") && inet_pton(AF_INET, host, &any) != 1 &&
         inet_pton(AF_INET6, host, &any) != 1)) {
        fprintf(stderr, "sim-engine: --listen: '%s' is not IP:PORT (numeric, or localhost)\n",
                listen);
        return 2;
    }
    if (sim_config_finish(&cfg, err, sizeof err)) {
        fprintf(stderr, "sim-engine: %s\n", err);
        return 2;
    }

    /* Blocked before any server thread exists, so that every thread inherits
     * the mask and the signals reach only sigwait below. */
    sigset_t sigs;
    block_stop_signals(&sigs);

    sim_server *srv = sim_server_start(&cfg, listen, err, sizeof err);
    if (!srv) {
        fprintf(stderr, "sim-engine: %s\n", err);
        return 1;
    }
    announce(&cfg, listen, sim_server_port(srv));
    if (port_file && write_port_file(port_file, sim_server_port(srv))) {
        fprintf(stderr, "sim-engine: cannot write the port file %s\n", port_file);
        sim_server_stop(srv);
        return 1;
    }
    int sig = 0;
    sigwait(&sigs, &sig);
    log_info("signal %d: stopping", sig);
    sim_server_stop(srv);
    return 0;
}
