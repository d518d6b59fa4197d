/* cmd: the subcommands.  Each takes argv with argv[0] = the command's name
 * and returns the process exit status. */
#ifndef GPUPOOL_CMD_H
#define GPUPOOL_CMD_H

#define GPUPOOL_VERSION "0.1.0"

int cmd_serve(int argc, char **argv);
int cmd_worker(int argc, char **argv);
int cmd_sim_engine(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_nodes(int argc, char **argv);
int cmd_drain(int argc, char **argv);
int cmd_undrain(int argc, char **argv);
int cmd_forget(int argc, char **argv);
int cmd_apps(int argc, char **argv);
int cmd_rollout(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_models(int argc, char **argv);
int cmd_logs(int argc, char **argv);
int cmd_fetch(int argc, char **argv);

#endif
