/* api/openapi: see openapi.h.  The bytes come from the generated
 * $(B)/gen/openapi_doc.c. */
#include "api/openapi.h"

extern const unsigned char gpupool_openapi_doc[];
extern const size_t gpupool_openapi_doc_len;

const char *api_openapi_doc(size_t *len)
{
    if (len) *len = gpupool_openapi_doc_len;
    return (const char *)gpupool_openapi_doc;
}

void api_openapi_serve(http_req *req)
{
    /* Tools fetch it rarely and it changes only with the binary. */
    http_set_header(req, "Cache-Control", "no-cache");
    http_respond(req, 200, "application/json", gpupool_openapi_doc, gpupool_openapi_doc_len);
}
