/* worker/peerfetch: the worker's side of sharing model files in the LAN.
 *
 * One thread, started with the agent.  It first checks every --load file
 * that is here and has a sha256= against it (worker/filehash, cached in
 * DATA/hashes.json, so a large file is read once; a stop interrupts it) and
 * offers those that match to peers (worker/files).  Then, for each --load model
 * whose file is missing and whose sha256 is known, it asks the coordinator
 * which live peers hold it (GET /internal/v1/files/{sha256}/sources, with
 * the node token), downloads it from them (worker/fetch, at --fetch-rate),
 * and once it is verified sizes the model and offers it: until then the
 * model is "fetching" and not offered.  Failed rounds (no source yet, a
 * broken connection, a corrupt download) are retried with a growing pause;
 * the download's progress is in the heartbeat and the log. */
#ifndef GPUPOOL_PEERFETCH_H
#define GPUPOOL_PEERFETCH_H

#include "worker/agent.h"

int peerfetch_start(worker *w);
/* A model marked fetching was added (a catalogue entry whose file is not
 * here): fetch it, on the thread if it is still running, else on a new one.
 * Called from the agent's thread. */
void peerfetch_request(worker *w);
/* After worker_agent_stop (which sets w->stopping): waits for the thread. */
void peerfetch_stop(worker *w);

#endif
