/* gpupool: the subcommand table.  Each subcommand lives in src/cmd/. */
#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"serve", cmd_serve, "run the coordinator (gateway, scheduler, registry, store)"},
    {"worker", cmd_worker, "run a worker on a GPU machine and join a pool"},
    {"sim-engine", cmd_sim_engine, "run the GPU-free, OpenAI-compatible engine simulator"},
    {"plan", cmd_plan, "work out the VRAM a GGUF model needs and where it fits"},
    {"nodes", cmd_nodes, "list the pool's nodes, their state and why"},
    {"drain", cmd_drain, "stop sending a node new work (running work finishes)"},
    {"undrain", cmd_undrain, "let a drained node take work again"},
    {"forget", cmd_forget, "remove a node from the pool"},
    {"apps", cmd_apps, "list the prompt apps and pipelines the coordinator serves"},
    {"rollout", cmd_rollout, "move traffic from one model to another in steps, with automatic rollback"},
    {"compare", cmd_compare, "run one input set through two models and compare their JSON answers"},
    {"models", cmd_models, "list the model catalogue and each node's state for every model"},
    {"logs", cmd_logs, "show the audit log: each call, its route and redacted bodies"},
    {"fetch", cmd_fetch, "download a model file from a worker that holds it (checked, resumable)"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: gpupool <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n`gpupool <command> --help` shows a command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("gpupool %s\n", GPUPOOL_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "gpupool: unknown command '%s' (see gpupool --help)\n", argv[1]);
    return 2;
}
