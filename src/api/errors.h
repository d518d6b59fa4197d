/* api/errors: OpenAI-shaped error answers and request-body reading shared by
 * every handler: {"error":{"message","type","code","param"}}.  It also owns
 * the list of error codes clients can see, which docs/api.md and the OpenAPI
 * document must name (tests/unit/test_openapi.c holds them to it). */
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

/* Every code a client may get in an error, with the status it comes with
 * (0: not an HTTP status, e.g. the final event of a broken stream). */
typedef struct api_error_code {
    const char *code;
    int status;
} api_error_code;
const api_error_code *api_error_codes(size_t *n);
/* True when code is in that list. */
int api_error_code_known(const char *code);

#endif
