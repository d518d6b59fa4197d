/* api/openapi: the OpenAPI 3.1 document of the coordinator's public API.
 * Its text is docs/openapi.json, compiled into the binary at build time
 * (scripts/embed.sh), so the document served is the one in the repository
 * and the tests check both against the code. */
#ifndef GPUPOOL_API_OPENAPI_H
#define GPUPOOL_API_OPENAPI_H

#include <stddef.h>

#include "http/server.h"

/* The document's text (NUL-terminated) and its length. */
const char *api_openapi_doc(size_t *len);
/* GET /openapi.json. */
void api_openapi_serve(http_req *req);

#endif
