/* apps/appcfg: the prompt apps and pipelines a coordinator serves, read from
 * its --apps file (docs/apps.md has the format and an example).
 *
 * Both come out in one normalised shape, so that one runner serves them: an
 * app is a pipeline of one stage named after it.
 *
 *   {"kind": "app"|"pipeline", "name", "description", "input_schema",
 *    "stages": [{"name", "model", "system", "prompt", "output_schema",
 *                "if", "max_retries", "max_attempts", "max_tokens",
 *                "temperature"}]}
 *
 * (absent optional fields are left out).  Parsing is pure; only
 * apps_cfg_load reads a file. */
#ifndef GPUPOOL_APPCFG_H
#define GPUPOOL_APPCFG_H

#include <jansson.h>
#include <stddef.h>

#define APPS_DEFAULT_RETRIES 2  /* output retries after the first try */
#define APPS_DEFAULT_ATTEMPTS 3 /* node attempts per try (the task's max_attempts) */

typedef struct apps_cfg apps_cfg;

/* NULL with a one-line reason naming the app, stage and field at fault. */
apps_cfg *apps_cfg_parse(const char *text, size_t len, char *err, size_t errlen);
apps_cfg *apps_cfg_load(const char *path, char *err, size_t errlen);
void apps_cfg_free(apps_cfg *c);

/* The normalised definition, borrowed; NULL when there is none (or c is). */
const json_t *apps_cfg_app(const apps_cfg *c, const char *name);
const json_t *apps_cfg_pipeline(const apps_cfg *c, const char *name);
/* Every app (pipelines = 0) or pipeline, sorted by name: a new array of the
 * public view {name, object, description, input_schema, output_schema
 * (apps), model (apps), stages (pipelines: name, model, if, output_schema)}. */
json_t *apps_cfg_list(const apps_cfg *c, int pipelines);

#endif
