/* e2e harness: starts real gpupool processes on 127.0.0.1 with ephemeral
 * ports, talks HTTP to them, waits on conditions with deadlines, and cleans
 * every process up.  The binary is $GPUPOOL_BIN (default build-asan/gpupool). */
#ifndef GPUPOOL_E2E_HARNESS_H
#define GPUPOOL_E2E_HARNESS_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <sys/types.h>

#define H_MAX_PROCS 16

typedef struct h_proc {
    pid_t pid;
    char name[32];
    char log[512];
    char portfile[512];
    int port;
} h_proc;

typedef struct h_pool {
    char dir[256];
    h_proc procs[H_MAX_PROCS];
    int nprocs;
    h_proc *coord;
    char base[64];           /* http://127.0.0.1:PORT of the coordinator */
    char join_token[128];
    char coord_args[1024];   /* extra serve args, kept for restarts */
    char api_key[128];       /* sent by h_request when no headers are given */
} h_pool;

typedef struct h_resp {
    long status;
    char *body;
    size_t len;
    char headers[4096];
    json_t *json;            /* parsed body when it is JSON */
} h_resp;

/* Runs only the tests matching $GPUPOOL_TEST_FILTER (a cmocka pattern). */
void h_apply_filter(void);
/* A fresh temporary directory for one test's pool. */
void h_pool_init(h_pool *p, const char *test_name);
/* A pool allocated and initialised, for a cmocka setup. */
h_pool *h_pool_new(const char *test_name);
/* A cmocka teardown for a pool from h_pool_new: cleans up, frees, and fails
 * the test on the problems h_pool_cleanup reports. */
int h_pool_teardown(void **state);
/* Stops every process and removes the directory.  Returns how many problems
 * it saw: a process that would not stop cleanly, or a sanitizer report. */
int h_pool_cleanup(h_pool *p);

/* The last lines of every process's log, to stderr: for a failure whose
 * cause is in a worker's log, since a failed test's logs are not shown. */
void h_dump_logs(const h_pool *p);

/* `gpupool serve` with extra args (space separated); waits for its port. */
h_proc *h_start_coordinator(h_pool *p, const char *extra_args);
/* Starts the coordinator again on the same port and data (after a crash). */
h_proc *h_restart_coordinator(h_pool *p);
/* `gpupool worker` joining p's coordinator with a sim engine (unless
 * extra_args names its own --engine or --load) and a fake 12 GB GPU (unless
 * it names its own --fake-gpu); machine_id
 * separates "machines" on this host.  Waits until the coordinator lists it. */
h_proc *h_start_worker(h_pool *p, const char *machine_id, const char *sim_args, const char *extra_args);
/* Starts any gpupool subcommand; args space separated; returns the process. */
h_proc *h_spawn(h_pool *p, const char *name, const char *args, const char *const *env);
/* A one-shot command (no --port-file); its output goes to proc->log. */
h_proc *h_run_cli(h_pool *p, const char *name, const char *args);
void h_kill(h_proc *proc, int sig);
/* Waits for exit; returns the exit status (or 128+signal), -1 on timeout. */
int h_wait_exit(h_proc *proc, int64_t timeout_ms);
int h_wait_port(h_proc *proc, int64_t timeout_ms);
/* True when the process's log contains text. */
int h_log_contains(h_proc *proc, const char *text);
/* The pid of a child process of parent whose command line has an argument
 * equal to arg (e.g. "sim-engine"), or -1 when there is none.  Read from
 * /proc; a zombie child (already dead) does not count. */
pid_t h_child_pid(pid_t parent, const char *arg);

/* HTTP against any URL; path may be "/v1/..." (coordinator) or a full URL. */
int h_request(h_pool *p, const char *method, const char *path, const char *body, const char *const *headers,
              h_resp *out);
void h_resp_free(h_resp *r);
/* A response header's value, or NULL when absent. */
const char *h_header(const h_resp *r, const char *name, char *out, size_t outlen);
/* Raw bytes over a TCP socket (for invalid encodings and disconnects).
 * Returns the socket, after sending; caller closes. */
int h_raw_connect_send(int port, const void *data, size_t len);
/* Reads from a socket until EOF or timeout into out (NUL-terminated). */
size_t h_raw_read(int fd, char *out, size_t max, int64_t timeout_ms);

/* Polls cond until true or the deadline; returns 1 if it became true. */
int h_wait_until(int (*cond)(void *), void *ctx, int64_t timeout_ms);
int64_t h_now_ms(void);

/* Helpers on top of h_request. */
int h_node_count(h_pool *p, const char *state);
/* A string field of the first node in /v1/nodes whose `key` equals `value`
 * ("" when there is none). */
const char *h_node_field(h_pool *p, const char *key, const char *value, const char *field, char *out, size_t len);
char *h_submit_task(h_pool *p, const char *body, const char *idem_key, long *status);
/* Polls a task until it reaches a final state; returns its JSON (caller
 * decrefs) or NULL on timeout. */
json_t *h_wait_task_final(h_pool *p, const char *id, int64_t timeout_ms);
const char *h_task_status(h_pool *p, const char *id, char *out, size_t outlen);

#endif
