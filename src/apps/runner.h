/* apps/runner: moves app and pipeline runs forward.  The only I/O in apps/.
 *
 * One thread looks at every queued or running run in the store and takes
 * the next step of each: it skips a stage whose condition is false, submits
 * a stage's try as an ordinary task (its model, the run's sensitivity, the
 * stage's max_attempts), so the dispatcher places it on a node holding that
 * model and retries it there on node failures; and when the task ends it
 * judges the answer (apps/stage), trying again with the validation error
 * added to the conversation until the stage's max_retries are spent.  All
 * state is in the store, so a restarted coordinator picks its runs up where
 * they were. */
#ifndef GPUPOOL_RUNNER_H
#define GPUPOOL_RUNNER_H

#include <stdint.h>

#include "sched/dispatch.h"
#include "store/store.h"

typedef struct app_runner app_runner;

app_runner *runner_start(store *st, dispatcher *disp);
/* Ends the thread and wakes every runner_wait (they return at once from
 * then on); runner_free after nothing can call in any more. */
void runner_stop(app_runner *r);
void runner_free(app_runner *r);
/* A run was stored: look at it now. */
void runner_kick(app_runner *r);
/* Waits until the run has ended or timeout_ms passed; returns its JSON (see
 * store_run_get; caller decrefs) either way, NULL when it cannot be read. */
json_t *runner_wait(app_runner *r, const char *id, int64_t timeout_ms);

#endif
