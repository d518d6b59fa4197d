/* worker/files: see files.h. */
#include "worker/files.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

void files_init(worker_files *f)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
}

void files_destroy(worker_files *f) { pthread_mutex_destroy(&f->mu); }

static void lower(const char *in, char out[65])
{
    int i = 0;
    for (; in[i] && i < 64; i++) out[i] = (char)tolower((unsigned char)in[i]);
    out[i] = 0;
}

void files_add_held(worker_files *f, const char *sha256, const char *path, uint64_t bytes)
{
    char sha[65];
    lower(sha256, sha);
    pthread_mutex_lock(&f->mu);
    int i = 0;
    while (i < f->nheld && strcmp(f->held[i].sha256, sha)) i++;
    if (i < FILES_MAX) {
        if (i == f->nheld) f->nheld++;
        snprintf(f->held[i].sha256, sizeof f->held[i].sha256, "%s", sha);
        snprintf(f->held[i].path, sizeof f->held[i].path, "%s", path);
        f->held[i].bytes = bytes;
    }
    pthread_mutex_unlock(&f->mu);
}

int files_find_held(worker_files *f, const char *sha256, char *path, size_t pathlen, uint64_t *bytes)
{
    char sha[65];
    lower(sha256, sha);
    int found = 0;
    pthread_mutex_lock(&f->mu);
    for (int i = 0; i < f->nheld && !found; i++) {
        if (strcmp(f->held[i].sha256, sha)) continue;
        snprintf(path, pathlen, "%s", f->held[i].path);
        *bytes = f->held[i].bytes;
        found = 1;
    }
    pthread_mutex_unlock(&f->mu);
    return found;
}

int files_transfer_add(worker_files *f, const char *sha256, const char *model, const char *dest)
{
    pthread_mutex_lock(&f->mu);
    int idx = f->nxfers < FILES_MAX ? f->nxfers++ : -1;
    if (idx >= 0) {
        file_transfer *t = &f->xfers[idx];
        memset(t, 0, sizeof *t);
        lower(sha256, t->sha256);
        snprintf(t->model, sizeof t->model, "%s", model);
        snprintf(t->dest, sizeof t->dest, "%s", dest);
        t->eta_s = -1;
    }
    pthread_mutex_unlock(&f->mu);
    return idx;
}

void files_transfer_set(worker_files *f, int idx, const file_transfer *t)
{
    pthread_mutex_lock(&f->mu);
    if (idx >= 0 && idx < f->nxfers) f->xfers[idx] = *t;
    pthread_mutex_unlock(&f->mu);
}

void files_transfer_get(worker_files *f, int idx, file_transfer *t)
{
    pthread_mutex_lock(&f->mu);
    if (idx >= 0 && idx < f->nxfers) *t = f->xfers[idx];
    pthread_mutex_unlock(&f->mu);
}

const char *xfer_state_name(xfer_state s)
{
    static const char *names[] = {"waiting", "fetching", "done", "failed"};
    return s <= XFER_FAILED ? names[s] : "unknown";
}

json_t *files_held_json(worker_files *f)
{
    json_t *a = json_array();
    pthread_mutex_lock(&f->mu);
    for (int i = 0; i < f->nheld; i++)
        json_array_append_new(a, json_pack("{s:s, s:I}", "sha256", f->held[i].sha256, "bytes",
                                           (json_int_t)f->held[i].bytes));
    pthread_mutex_unlock(&f->mu);
    return a;
}

json_t *files_transfers_json(worker_files *f)
{
    json_t *a = json_array();
    pthread_mutex_lock(&f->mu);
    for (int i = 0; i < f->nxfers; i++) {
        const file_transfer *t = &f->xfers[i];
        json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:i}", "sha256", t->sha256, "model", t->model,
                              "file", t->dest, "state", xfer_state_name(t->state), "bytes_done", (json_int_t)t->done,
                              "bytes_total", (json_int_t)t->total, "rate_bytes_per_s", (json_int_t)t->rate_bps,
                              "attempts", t->attempts);
        json_object_set_new(j, "eta_s", t->eta_s >= 0 ? json_integer((json_int_t)t->eta_s) : json_null());
        if (t->source[0]) json_object_set_new(j, "source", json_string(t->source));
        if (t->error[0]) json_object_set_new(j, "last_error", json_string(t->error));
        json_array_append_new(a, j);
    }
    pthread_mutex_unlock(&f->mu);
    return a;
}
