/* worker/wcatalog: the model catalogue on the worker's side.
 *
 * The coordinator sends the catalogue as this node sees it (its overrides
 * applied) in its register and heartbeat answers, with an etag the worker
 * echoes so it is not sent again unchanged.  Each llama-server or command
 * entry becomes a started-on-demand engine exactly as a --load option
 * would (a --load of the same name wins); an entry whose file is not here
 * is reported missing, and looked for again now and then.  Ollama and vLLM entries are only reported: loaded
 * when an engine this worker fronts lists the model, else missing.
 *
 * Every started-on-demand model whose file the catalogue pins (its own
 * entries, and a --load of the same name) has its GGUF hashed once
 * (worker/filehash, DATA/hashes.json) on a thread of its own, never on the
 * heartbeat path; until then the model is reported "hashing".  Heartbeats carry per model
 * its sha256 and a state: loaded, loadable, mismatch (not the catalogue's
 * file), missing or hashing.  The coordinator decides routing from the
 * digest; the worker's own state is for people.
 *
 * Part of the agent module; the agent thread calls these. */
#ifndef GPUPOOL_WCATALOG_H
#define GPUPOOL_WCATALOG_H

#include <jansson.h>
#include <stddef.h>

#include "worker/agent.h"

/* Takes the catalogue from a register or heartbeat answer; nothing when the
 * answer carries none.  Reads GGUF headers: call without mu. */
void wcat_take(worker *w, json_t *answer);
/* Caller holds mu: adds "catalog_etag" and "model_files" to a report. */
void wcat_report_locked(worker *w, json_t *report);
/* Starts the hasher thread when a model file waits to be hashed. */
void wcat_hash_pending(worker *w);
/* Frees the catalogue when the agent stops (a hash under way is abandoned). */
void wcat_stop(worker *w);

/* Pure, for tests.  The --load spec for one catalogue entry (as the
 * coordinator sends it): "NAME=FILE[,ctx=N][,parallel=N][,ctk=T][,ctv=T]
 * [,keep-alive=Nms]".  0, or -1 with a reason (not a llama-server or
 * command entry, no file, or a name or path a spec cannot carry). */
int wcat_load_spec(json_t *entry, char *out, size_t outlen, char *err, size_t errlen);
/* A started-on-demand model's state from its hash (hash_state as in
 * managed_spec), the catalogue's digest ("" none: nothing is checked) and
 * whether its engine is up. */
const char *wcat_state(int hash_state, const char *sha256, const char *want, int running);

#endif
