/* catalog: the pool's model catalogue, read from the coordinator's
 * --catalog file.  Pure: text in, validated structs out, no sockets.
 *
 * Each entry names one model (and its aliases), the engine kind that runs
 * it, where its weights are (a GGUF file, an Ollama tag or a directory),
 * the SHA-256 every node's copy of the file must have, the default context,
 * slots and KV cache types, a keep-alive and a trust tier.  An entry may
 * override its location and settings for single nodes, keyed by the node's
 * name (never its hash: one version everywhere).  Errors name the entry and
 * the field.  The coordinator sends each worker the catalogue as that node
 * sees it (catalog_node_json), with an etag so that it is sent only when it
 * changed. */
#ifndef GPUPOOL_CATALOG_H
#define GPUPOOL_CATALOG_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define CAT_MAX_ENTRIES 256
#define CAT_MAX_ALIASES 16
#define CAT_KEEP_ALIVE_UNSET INT64_MIN

typedef enum cat_engine { CAT_LLAMA_SERVER, CAT_OLLAMA, CAT_VLLM, CAT_COMMAND, CAT_ENGINES } cat_engine;
/* "llama-server", "ollama", "vllm", "command". */
const char *cat_engine_name(cat_engine e);

typedef enum cat_trust { CAT_TRUST_ANY, CAT_TRUST_TRUSTED } cat_trust;
/* "external" (may also be served by external capacity), "trusted" (only by the pool's own nodes). */
const char *cat_trust_name(cat_trust t);

/* What an entry says about running the model; in an override, an empty
 * string or 0 (CAT_KEEP_ALIVE_UNSET for keep_alive_ms) leaves the entry's. */
typedef struct cat_settings {
    char gguf[512];        /* llama-server, command: the GGUF file */
    char ollama[256];      /* ollama: the tag, e.g. "qwen2.5:7b" */
    char dir[512];         /* vllm: the model directory */
    char command[1024];    /* command: the start template, as --engine-cmd */
    int ctx, parallel;     /* 0: the worker's default */
    char ctk[16], ctv[16]; /* KV cache types; "": the worker's default */
    int64_t keep_alive_ms; /* CAT_KEEP_ALIVE_UNSET: the worker's default; -1 never */
} cat_settings;

typedef struct cat_override {
    char node[64];         /* the node's name (gpupool worker --name) */
    cat_settings s;
} cat_override;

typedef struct cat_entry {
    char name[128];
    char aliases[CAT_MAX_ALIASES][128];
    int naliases;
    cat_engine engine;
    char sha256[65];       /* lower-case hex; "" when not pinned */
    cat_trust trust;
    cat_settings s;
    cat_override *overrides;
    int noverrides;
} cat_entry;

typedef struct catalog {
    cat_entry *e;
    int n;
} catalog;

/* Parses and validates a catalogue ({"models":[...]}, see docs/models.md).
 * NULL with a one-line reason naming the entry and field. */
catalog *catalog_parse(const char *text, size_t len, char *err, size_t errlen);
/* catalog_parse of a file's contents. */
catalog *catalog_load(const char *path, char *err, size_t errlen);
void catalog_free(catalog *c);

/* The entry whose name or alias is model, or NULL. */
const cat_entry *catalog_find(const catalog *c, const char *model);
/* The entry's name for a name or an alias; NULL when the catalogue (which
 * may be NULL) does not know it. */
const char *catalog_resolve(const catalog *c, const char *model);
/* The entry's settings on the node called node_name (its overrides applied). */
void catalog_settings_for(const cat_entry *e, const char *node_name, cat_settings *out);

/* The catalogue as node_name sees it, for the worker:
 * {"etag":"…","models":[{name, aliases, engine, sha256, trust, gguf|ollama|dir,
 * command, ctx, parallel, ctk, ctv, keep_alive_ms}]} (settings left to the
 * worker's defaults omitted).  The etag is a digest of the models array, so
 * it changes exactly when what the node is told changes. */
json_t *catalog_node_json(const catalog *c, const char *node_name);
/* One entry for people (GET /v1/models): aliases, engine, location, sha256,
 * trust, defaults and the nodes it is overridden for. */
json_t *catalog_entry_json(const cat_entry *e);

/* Whether a node's reported digest is the one the entry pins: always true
 * for an entry that pins none; false for a NULL or empty report otherwise. */
int catalog_hash_matches(const cat_entry *e, const char *reported);

#endif
