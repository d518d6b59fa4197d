/* api/jsoncase: renames JSON object keys between camelCase and snake_case,
 * for clients (low-code tools, JavaScript data sources) that speak camelCase
 * to an API whose fields are snake_case.  Pure.
 *
 * Only keys are renamed, never values.  Some subtrees hold names that belong
 * to the caller, not to the API, and are left as they are: the values of
 * "metadata", "logit_bias", "parameters" (a tool's JSON schema) and "schema"
 * (a response format's JSON schema).  The keys of an object under "models"
 * are model names (a node's measured profile), so they stay while their
 * values are renamed. */
#ifndef GPUPOOL_API_JSONCASE_H
#define GPUPOOL_API_JSONCASE_H

#include <jansson.h>
#include <stddef.h>

/* "maxTokens" -> "max_tokens", "userID" -> "user_id".  A key that is not a
 * camelCase identifier ([A-Za-z][A-Za-z0-9]*) is copied as it is.  Returns
 * the length, or -1 when out is too small. */
int jsoncase_to_snake(const char *in, char *out, size_t outlen);
/* "max_tokens" -> "maxTokens", "success_rate_1h" -> "successRate1h".  A key
 * that is not a snake_case identifier ([a-z][a-z0-9_]*) is copied as it is. */
int jsoncase_to_camel(const char *in, char *out, size_t outlen);

/* Renames every key of j in place (recursively, except as above).  When two
 * keys would end up the same ("maxTokens" and "max_tokens"), the one already
 * in the target case wins.  Returns 0, or -1 when out of memory. */
int jsoncase_keys_to_snake(json_t *j);
int jsoncase_keys_to_camel(json_t *j);

#endif
