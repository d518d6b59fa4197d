/* worker/wcatalog: see wcatalog.h. */
#include "worker/wcatalog.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "util/clock.h"
#include "util/err.h"
#include "util/log.h"
#include "util/opts.h"
#include "worker/filehash.h"
#include "worker/peerfetch.h"

#define WCAT_MAX 64
/* How often the files already hashed are looked at again: a replaced or
 * touched file is read anew (filehash's cache knows an unchanged one), so
 * fixing a mismatch needs no restart.  Meanwhile the old digest stands. */
#define WCAT_RECHECK_MS 10000
#define HASH_RECHECK 2          /* managed_spec.hash_state: hashed, a re-check is due */
#define HASH_MISSING_RECHECK -2 /* could not be read, a re-check is due */

/* A catalogue entry this worker did not turn into an engine of its own:
 * one it only reports (Ollama, vLLM), or one whose file is not here. */
typedef struct wcat_other {
    char name[128];
    char engine[16];
    char tag[256];       /* ollama: its tag */
    char error[300];     /* why it could not become an engine; "" for the reported kinds */
} wcat_other;

/* An engine the catalogue made: the --load spec it was made from, and
 * whether a newer one waits for the engine to be stopped. */
typedef struct wcat_made {
    char name[128];
    char spec[1400];
    int pending;
} wcat_made;

typedef struct wcatalog {
    char etag[24];
    wcat_made made[WCAT_MAX];
    int nmade;
    int64_t recheck_at;  /* monotonic ms: the next look at hashed files and missing ones */
    json_t *models;      /* the entries as sent, for trying missing files again */
    wcat_other other[WCAT_MAX];
    int nother;
} wcatalog;

static const char *str(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* Appends to out; *n past outlen afterwards means it did not fit. */
static void append(char *out, size_t outlen, size_t *n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void append(char *out, size_t outlen, size_t *n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(out + (*n < outlen ? *n : outlen), *n < outlen ? outlen - *n : 0, fmt, ap);
    va_end(ap);
    *n += w > 0 ? (size_t)w : 0;
}

int wcat_load_spec(json_t *entry, char *out, size_t outlen, char *err, size_t errlen)
{
    const char *name = str(entry, "name"), *kind = str(entry, "engine"), *gguf = str(entry, "gguf");
    if (strcmp(kind, "llama-server") && strcmp(kind, "command"))
        return err_out(err, errlen, "engine %s is not started by the worker", *kind ? kind : "(none)");
    if (!*name || strpbrk(name, "=, ") || strlen(name) >= 128) return err_out(err, errlen, "not a model name '%.60s'", name);
    if (!*gguf || strchr(gguf, ',')) return err_out(err, errlen, "%s: no GGUF file a --load spec can name", name);
    size_t n = 0;
    append(out, outlen, &n, "%s=%s", name, gguf);
    json_int_t ctx = json_integer_value(json_object_get(entry, "ctx"));
    json_int_t par = json_integer_value(json_object_get(entry, "parallel"));
    const char *ctk = str(entry, "cache_type_k"), *ctv = str(entry, "cache_type_v");
    json_t *ka = json_object_get(entry, "keep_alive_ms");
    if (ctx > 0) append(out, outlen, &n, ",ctx=%lld", (long long)ctx);
    if (par > 0) append(out, outlen, &n, ",parallel=%lld", (long long)par);
    if (*ctk && !strpbrk(ctk, ",=")) append(out, outlen, &n, ",ctk=%s", ctk);
    if (*ctv && !strpbrk(ctv, ",=")) append(out, outlen, &n, ",ctv=%s", ctv);
    if (json_is_integer(ka) && json_integer_value(ka) < 0) append(out, outlen, &n, ",keep-alive=-1");
    else if (json_is_integer(ka)) append(out, outlen, &n, ",keep-alive=%lldms", (long long)json_integer_value(ka));
    if (n >= outlen) return err_out(err, errlen, "%s: the entry is too long for a --load spec", name);
    return 0;
}

const char *wcat_state(int hash_state, const char *sha256, const char *want, int running)
{
    if (!want || !*want) return running ? "loaded" : "loadable"; /* nothing to check */
    if (hash_state < 0) return "missing";
    if (hash_state == 0) return "hashing";
    if (strcasecmp(want, sha256 ? sha256 : "")) return "mismatch";
    return running ? "loaded" : "loadable";
}

/* Caller holds mu.  The started-on-demand engine for model, or NULL. */
static managed_spec *managed_for(worker *w, const char *model)
{
    for (int i = 0; i < w->nengines; i++)
        if (w->engines[i].managed && !strcmp(w->engines[i].managed->name, model)) return w->engines[i].managed;
    return NULL;
}

static int exists_locked(worker *w, const char *model)
{
    pthread_mutex_lock(&w->mu);
    int found = managed_for(w, model) != NULL;
    pthread_mutex_unlock(&w->mu);
    return found;
}

/* Turns one llama-server or command entry into an engine.  Its file is
 * read (the planner sizes it), so this runs without mu.  0, or -1 with why. */
static int add_engine(worker *w, json_t *entry, char spec[1400], char *err, size_t errlen)
{
    const char *name = str(entry, "name");
    engine e;
    struct stat sb;
    int rc = wcat_load_spec(entry, spec, 1400, err, errlen);
    /* A missing file the catalogue pins comes from a peer that holds it
     * (worker/peerfetch); without a digest there is nothing to ask for. */
    int fetch = 0;
    if (!rc && stat(str(entry, "gguf"), &sb)) {
        const char *sha = str(entry, "sha256");
        if (!*sha) rc = err_out(err, errlen, "%s: no file %s on this node", name, str(entry, "gguf"));
        else if (strlen(spec) + 8 + strlen(sha) >= 1400) rc = err_out(err, errlen, "%s: the entry is too long", name);
        else {
            strcat(spec, ",sha256=");
            strcat(spec, sha);
            fetch = 1;
        }
    }
    if (!rc) rc = managed_parse(spec, &w->managed, &e, err, errlen);
    if (rc) return -1;
    managed_spec *m = e.managed;
    if (!strcmp(str(entry, "engine"), "command")) snprintf(m->engine_cmd, sizeof m->engine_cmd, "%s", str(entry, "command"));
    snprintf(m->pinned_sha256, sizeof m->pinned_sha256, "%s", str(entry, "sha256"));
    pthread_mutex_lock(&w->mu);
    if (w->nengines < WORKER_MAX_ENGINES) {
        w->engines[w->nengines++] = e;
        if (m->fetching)
            log_info("catalogue model %s: %s is not on this node; it is fetched from a peer", name, m->gguf);
        else
            log_info("catalogue model %s can be loaded here from %s: needs %llu MiB at %d context x %d slot(s)", name,
                     m->gguf, (unsigned long long)(m->need_bytes >> 20), m->ctx, m->parallel);
    } else {
        rc = err_out(err, errlen, "%s: this worker runs %d engines already", name, WORKER_MAX_ENGINES);
        free(m);
    }
    pthread_mutex_unlock(&w->mu);
    if (!rc && fetch) peerfetch_request(w);
    return rc;
}

static void note_made(wcatalog *c, const char *name, const char *spec)
{
    if (c->nmade >= WCAT_MAX) return;
    wcat_made *md = &c->made[c->nmade++];
    /* Names and specs were checked against these sizes when they were made. */
    snprintf(md->name, sizeof md->name, "%.127s", name);
    snprintf(md->spec, sizeof md->spec, "%.1399s", spec);
    md->pending = 0;
}

static json_t *entry_named(json_t *models, const char *name)
{
    size_t i;
    json_t *entry;
    json_array_foreach(models, i, entry) if (!strcmp(str(entry, "name"), name)) return entry;
    return NULL;
}

/* A changed entry (another path or setting for this node) replaces its
 * engine's settings in place, and only while that engine is stopped and
 * nothing waits on it: requests and starts keep pointers to the spec.
 * 1 when it was taken up. */
static int update_engine(worker *w, wcat_made *md, json_t *entry)
{
    char err[600];
    engine e;
    struct stat sb;
    if (!entry || stat(str(entry, "gguf"), &sb) || managed_parse(md->spec, &w->managed, &e, err, sizeof err)) return 0;
    managed_spec *nm = e.managed;
    if (!strcmp(str(entry, "engine"), "command")) snprintf(nm->engine_cmd, sizeof nm->engine_cmd, "%s", str(entry, "command"));
    snprintf(nm->pinned_sha256, sizeof nm->pinned_sha256, "%s", str(entry, "sha256"));
    pthread_mutex_lock(&w->mu);
    int done = 0;
    for (int i = 0; i < w->nengines && !done; i++) {
        engine *en = &w->engines[i];
        managed_spec *m = en->managed;
        if (!m || strcmp(m->name, md->name)) continue;
        if (en->child || en->inflight || m->loading || w->starting) break;
        nm->starts = m->starts;
        *m = *nm;
        en->default_slots = m->parallel;
        done = 1;
        log_info("catalogue model %s: new settings taken up (%s)", md->name, md->spec);
    }
    pthread_mutex_unlock(&w->mu);
    free(nm);
    if (done) md->pending = 0;
    return done;
}

/* The agent thread's: changed entries whose engines were running. */
static void apply_pending(worker *w, wcatalog *c)
{
    for (int i = 0; i < c->nmade; i++)
        if (c->made[i].pending) update_engine(w, &c->made[i], entry_named(c->models, c->made[i].name));
}

static void note_other(wcatalog *c, json_t *entry, const char *error)
{
    if (c->nother >= WCAT_MAX) return;
    wcat_other *o = &c->other[c->nother++];
    snprintf(o->name, sizeof o->name, "%s", str(entry, "name"));
    snprintf(o->engine, sizeof o->engine, "%s", str(entry, "engine"));
    snprintf(o->tag, sizeof o->tag, "%s", str(entry, "ollama"));
    snprintf(o->error, sizeof o->error, "%.299s", error ? error : "");
}

/* The agent thread's: entries whose file was not here are tried again, so
 * a file copied onto the node later is taken up without a restart.  The
 * catalogue is replaced only by this thread, so its entries stay valid
 * while mu is not held. */
static void retry_missing(worker *w)
{
    char names[WCAT_MAX][128];
    int n = 0;
    pthread_mutex_lock(&w->mu);
    const wcatalog *c = w->catalog;
    for (int i = 0; c && i < c->nother; i++)
        if (c->other[i].error[0]) snprintf(names[n++], sizeof names[0], "%s", c->other[i].name);
    json_t *models = c ? c->models : NULL;
    pthread_mutex_unlock(&w->mu);
    if (c) apply_pending(w, w->catalog);
    for (int k = 0; k < n; k++) {
        size_t i;
        json_t *entry;
        char err[600];
        json_array_foreach(models, i, entry) {
            char spec[1400];
            if (strcmp(str(entry, "name"), names[k]) || exists_locked(w, names[k]) ||
                add_engine(w, entry, spec, err, sizeof err))
                continue;
            pthread_mutex_lock(&w->mu);
            wcatalog *cur = w->catalog;
            note_made(cur, names[k], spec);
            for (int j = 0; j < cur->nother; j++)
                if (!strcmp(cur->other[j].name, names[k])) {
                    memmove(&cur->other[j], &cur->other[j + 1], sizeof cur->other[0] * (size_t)(cur->nother - j - 1));
                    cur->nother--;
                    break;
                }
            pthread_mutex_unlock(&w->mu);
        }
    }
}

void wcat_take(worker *w, json_t *answer)
{
    json_t *models = json_object_get(answer, "catalog");
    const char *etag = str(answer, "catalog_etag");
    if (!json_is_array(models)) return;
    wcatalog *next = calloc(1, sizeof *next);
    if (!next) return;
    snprintf(next->etag, sizeof next->etag, "%s", etag);
    next->models = json_incref(models);
    if (w->catalog) { /* only this thread replaces it */
        memcpy(next->made, w->catalog->made, sizeof next->made);
        next->nmade = w->catalog->nmade;
    }
    size_t i;
    json_t *entry;
    int added = 0;
    json_array_foreach(models, i, entry) {
        const char *name = str(entry, "name"), *kind = str(entry, "engine");
        if (!*name) continue;
        if (!strcmp(kind, "llama-server") || !strcmp(kind, "command")) {
            char spec[1400], err[600];
            if (exists_locked(w, name)) {
                /* A --load of the same name stays as it is; an entry of an
                 * earlier catalogue takes changed settings when it can.
                 * Either way its file is checked. */
                pthread_mutex_lock(&w->mu);
                managed_spec *m = managed_for(w, name);
                if (m) snprintf(m->pinned_sha256, sizeof m->pinned_sha256, "%s", str(entry, "sha256"));
                pthread_mutex_unlock(&w->mu);
                for (int k = 0; k < next->nmade; k++) {
                    wcat_made *md = &next->made[k];
                    if (strcmp(md->name, name) || wcat_load_spec(entry, spec, sizeof spec, err, sizeof err) ||
                        !strcmp(spec, md->spec))
                        continue;
                    snprintf(md->spec, sizeof md->spec, "%s", spec);
                    md->pending = 1;
                    if (!update_engine(w, md, entry))
                        log_info("catalogue model %s: new settings apply once its engine is stopped", name);
                }
                continue;
            }
            if (add_engine(w, entry, spec, err, sizeof err) == 0) {
                note_made(next, name, spec);
                added++;
            } else {
                log_warn("catalogue model %s cannot be served here: %s", name, err);
                note_other(next, entry, err);
            }
        } else {
            note_other(next, entry, NULL);
        }
    }
    pthread_mutex_lock(&w->mu);
    wcatalog *old = w->catalog;
    next->recheck_at = old ? old->recheck_at : mono_ms() + WCAT_RECHECK_MS;
    w->catalog = next;
    pthread_mutex_unlock(&w->mu);
    if (old) json_decref(old->models);
    free(old);
    log_info("model catalogue %s from the coordinator: %zu model(s), %d new here", etag, json_array_size(models), added);
    wcat_hash_pending(w);
}

/* Caller holds mu.  Whether an engine this worker fronts lists model. */
static int fronted(worker *w, const char *model)
{
    for (int i = 0; model && *model && i < w->nengines; i++)
        if (!w->engines[i].managed && w->engines[i].healthy && engine_has_model(&w->engines[i], model)) return 1;
    return 0;
}

void wcat_report_locked(worker *w, json_t *report)
{
    json_t *files = json_array();
    for (int i = 0; i < w->nengines; i++) {
        const managed_spec *m = w->engines[i].managed;
        if (!m) continue;
        const char *st = m->fetching ? "fetching" : wcat_state(m->hash_state, m->sha256, m->pinned_sha256, w->engines[i].healthy);
        json_t *f = json_pack("{s:s, s:s, s:s}", "model", m->name, "state", st, "file", m->gguf);
        json_object_set_new(f, "sha256", m->hash_state > 0 ? json_string(m->sha256) : json_null());
        json_array_append_new(files, f);
    }
    const wcatalog *c = w->catalog;
    for (int i = 0; c && i < c->nother; i++) {
        const wcat_other *o = &c->other[i];
        int up = !o->error[0] && (fronted(w, o->name) || fronted(w, o->tag));
        json_t *f = json_pack("{s:s, s:s, s:n}", "model", o->name, "state", up ? "loaded" : "missing", "sha256");
        if (o->error[0]) json_object_set_new(f, "error", json_string(o->error));
        json_array_append_new(files, f);
    }
    json_object_set_new(report, "model_files", files);
    if (c) json_object_set_new(report, "catalog_etag", json_string(c->etag));
}

/* Only a file the catalogue pins is hashed: without a digest to compare
 * with, reading a large model would tell nobody anything. */
static int needs_hash(const managed_spec *m)
{
    return m && m->pinned_sha256[0] && !m->fetching &&
           (m->hash_state == 0 || m->hash_state == HASH_RECHECK || m->hash_state == HASH_MISSING_RECHECK);
}

/* Detached: a stopping worker does not wait for a large file to be read.
 * After each file it looks at `stopping` under mu before touching the
 * engines, which are freed only once the agent has stopped. */
static void *hasher_thread(void *arg)
{
    worker *w = arg;
    char cache[600];
    snprintf(cache, sizeof cache, "%s/hashes.json", w->managed.data_dir);
    if (make_dirs(w->managed.data_dir)) log_warn("cannot create %s: the file digests are not kept", w->managed.data_dir);
    for (;;) {
        char name[128] = "", file[512] = "";
        pthread_mutex_lock(&w->mu);
        for (int i = 0; i < w->nengines && !name[0] && !w->stopping; i++) {
            const managed_spec *m = w->engines[i].managed;
            if (!needs_hash(m)) continue;
            snprintf(name, sizeof name, "%s", m->name);
            snprintf(file, sizeof file, "%s", m->gguf);
        }
        if (!name[0]) w->hasher_running = 0;
        pthread_mutex_unlock(&w->mu);
        if (!name[0]) return NULL;
        char sha[65], err[300];
        uint64_t bytes = 0;
        int64_t t0 = mono_ms();
        int rc = filehash_get(cache, file, sha, &bytes, err, sizeof err);
        pthread_mutex_lock(&w->mu);
        if (w->stopping) {
            w->hasher_running = 0;
            pthread_mutex_unlock(&w->mu);
            return NULL;
        }
        managed_spec *m = managed_for(w, name);
        if (m && !strcmp(m->gguf, file)) {
            int again = m->hash_state != 0, was_missing = m->hash_state == HASH_MISSING_RECHECK;
            int same = again && !rc && !strcmp(m->sha256, sha);
            m->hash_state = rc ? -1 : 1;
            snprintf(m->sha256, sizeof m->sha256, "%s", rc ? "" : sha);
            int quiet = same || (rc && was_missing); /* a re-check that found nothing new */
            if (!quiet && rc) log_warn("cannot hash the file of %s: %s", name, err);
            else if (!quiet && strcasecmp(m->pinned_sha256, sha))
                log_warn("%s: %s is not the catalogue's file (sha256 %.12s..., the catalogue pins %.12s...); the "
                         "pool sends this node no work for it", name, file, sha, m->pinned_sha256);
            else if (!quiet)
                log_info("%s: sha256 %.12s... (%llu MiB in %lld ms)%s", name, sha, (unsigned long long)(bytes >> 20),
                         (long long)(mono_ms() - t0), again ? ", the file changed" : "");
            /* The pinned file, checked: peers that lack it may fetch it here. */
            if (!rc && !strcasecmp(m->pinned_sha256, sha)) files_add_held(&w->files, sha, file, bytes);
        }
        pthread_mutex_unlock(&w->mu);
    }
}

void wcat_hash_pending(worker *w)
{
    pthread_mutex_lock(&w->mu);
    int64_t now = mono_ms();
    int due = w->catalog && now >= w->catalog->recheck_at && !w->hasher_running;
    if (due) {
        w->catalog->recheck_at = now + WCAT_RECHECK_MS;
        for (int i = 0; i < w->nengines; i++) {
            managed_spec *m = w->engines[i].managed;
            if (m && m->pinned_sha256[0] && m->hash_state) m->hash_state = m->hash_state > 0 ? HASH_RECHECK : HASH_MISSING_RECHECK;
        }
    }
    pthread_mutex_unlock(&w->mu);
    if (due) retry_missing(w);
    pthread_mutex_lock(&w->mu);
    int pending = 0;
    for (int i = 0; i < w->nengines; i++) pending |= needs_hash(w->engines[i].managed);
    int start = pending && !w->hasher_running && !w->stopping;
    if (start) w->hasher_running = 1;
    pthread_mutex_unlock(&w->mu);
    if (!start) return;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    if (pthread_create(&t, &attr, hasher_thread, w)) {
        pthread_mutex_lock(&w->mu);
        w->hasher_running = 0;
        pthread_mutex_unlock(&w->mu);
    }
    pthread_attr_destroy(&attr);
}

void wcat_stop(worker *w)
{
    pthread_mutex_lock(&w->mu);
    if (w->catalog) json_decref(w->catalog->models);
    free(w->catalog);
    w->catalog = NULL;
    pthread_mutex_unlock(&w->mu);
}
