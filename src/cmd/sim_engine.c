/* cmd/sim_engine: placeholder until the subcommand lands. */
#include <stdio.h>
#include "cmd/cmd.h"
int cmd_sim_engine(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "gpupool: not built yet\n"); return 2; }
