/* api/cache: the semantic cache (policy/cache*) in the chat path.  Owns the
 * decision whether a chat request is looked up, its key (partition = the API
 * key's owner id, tier = TRUSTED for a private request, else EXTERNAL), the
 * answer on a hit (the stored completion, or its SSE replay for stream:
 * true), storing a successful answer, the invalidate endpoint and the
 * cache's part of /metrics.  The vectors come from the built-in embedder, or
 * with --cache-embedder pool:MODEL from that embedding model through the
 * pool (api/pool_call; trusted capacity only for a private request), in
 * which case a lookup blocks and runs on a pool thread; when the model
 * cannot answer, the lookup is a miss that stores nothing.  See
 * docs/cache.md "Wiring". */
#ifndef GPUPOOL_API_CACHE_H
#define GPUPOOL_API_CACHE_H

#include <jansson.h>
#include <stddef.h>

#include "api/coord.h"
#include "policy/cache.h"
#include "policy/embed.h"
#include "util/buf.h"

/* The threshold with an embedding model of the pool unless one is given:
 * models' similarities run lower than the built-in embedder's; tune it on
 * bench/data/paraphrase.tsv (docs/cache.md). */
#define CACHE_POOL_DEFAULT_THRESHOLD 0.9

/* The largest vector an embedding model may give (a larger one: a miss). */
#define API_CACHE_MAX_DIM 4096

/* What a miss remembers so that its answer can be stored.  Self-contained
 * (no pointers into itself or into the request), so it may be copied. */
typedef struct api_cache_req {
    int store;         /* 1: a lookup missed and the answer may be stored */
    char model[256];
    char partition[40];
    cache_tier tier;
    unsigned char context[32];
    int dim;
    float vec[API_CACHE_MAX_DIM];
} api_cache_req;

/* Looks a chat request up, after prepare() validated and classified it.
 * Returns 1 when the client was answered from the cache (a hit), 0 when the
 * request must go to a node: then cr->store says whether its answer may be
 * stored, and on a lookup that missed X-Gpupool-Cache: miss is set.  A
 * request the cache may not answer (cache off, not chat, Cache-Control:
 * no-cache, too hot a temperature...) gets no header.  A body with
 * session_id (a conversation session's, rebuilt whole) is keyed on all its
 * turns and on that id, so it never meets another session's entries.  With
 * hit not NULL, a hit's stored completion is put there (caller decrefs). */
int api_cache_begin(coord *c, http_req *req, const json_t *body, int is_private, const char *private_rule,
                    api_cache_req *cr, json_t **hit_answer);

/* Stores a node's buffered answer to a request that missed, when it is a
 * storable chat.completion (status 200 only). */
void api_cache_store(coord *c, const api_cache_req *cr, long status, const char *body, size_t len);
/* The same for a completion already parsed (a collected stream). */
void api_cache_store_json(coord *c, const api_cache_req *cr, const json_t *completion);

/* DELETE /v1/cache[?model=M][&partition=P][&tier=trusted|external]. */
void api_cache_invalidate(coord *c, http_req *req);

/* Appends the gpupool_cache_* metrics (nothing when the cache is off). */
void api_cache_metrics(coord *c, buf *out);

#endif
