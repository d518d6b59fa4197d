/* api/errors: OpenAI-shaped error answers and request-body reading shared by
 * every handler: {"error":{"message","type","code","param"}}. */
#ifndef GPUPOOL_API_ERRORS_H
#define GPUPOOL_API_ERRORS_H

#include <jansson.h>

#include "http/server.h"

void api_error(http_req *r, int status, const char *type, const char *code, const char *param,
               const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* Shorthands for the two common types. */
#define api_bad_request(r, code, param, ...) api_error(r, 400, "invalid_request_error", code, param, __VA_ARGS__)
#define api_server_error(r, status, code, ...) api_error(r, status, "server_error", code, NULL, __VA_ARGS__)

/* Parses the body as a JSON object.  On failure answers 400 (empty body,
 * malformed or non-UTF-8 JSON, not an object) and returns NULL. */
json_t *api_read_json_object(http_req *r);
/* The message of an OpenAI-shaped error body (a node's refusal, say), cut to
 * fit out; fallback when the body has none. */
const char *api_error_text(const char *body, size_t len, const char *fallback, char *out, size_t outlen);

#endif
