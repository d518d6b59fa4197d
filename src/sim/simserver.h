/* sim/simserver: the engine simulator's HTTP side.  It routes requests, makes
 * inference requests wait for a slot, paces tokens on the monotonic clock and
 * acts out the faults that simcore draws. */
#ifndef GPUPOOL_SIMSERVER_H
#define GPUPOOL_SIMSERVER_H

#include <stddef.h>

#include "sim/simcore.h"

typedef struct sim_server sim_server;

/* Starts serving `c` (copied) on `listen`; NULL with a one-line reason on
 * failure. */
sim_server *sim_server_start(const sim_config *c, const char *listen, char *err, size_t errlen);
int sim_server_port(const sim_server *s);
/* Ends the loading state that c->loading started: from now on it answers. */
void sim_server_loaded(sim_server *s);
/* Wakes every waiting, pacing and hanging request so that they end, then
 * stops the HTTP server and frees everything. */
void sim_server_stop(sim_server *s);

#endif
