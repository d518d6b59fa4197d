/* api/files: GET /internal/v1/files/{sha256}/sources, the workers' lookup of
 * the peers that hold a model file (the registry answers; node/files.c). */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "api/coord.h"
#include "api/errors.h"
#include "util/clock.h"

void api_file_sources(coord *c, http_req *req, const char *id)
{
    char sha[65];
    size_t n = strlen(id);
    int ok = n == 64;
    for (size_t i = 0; ok && i < n; i++) {
        ok = isxdigit((unsigned char)id[i]) != 0;
        sha[i] = (char)tolower((unsigned char)id[i]);
    }
    if (!ok) {
        api_bad_request(req, "invalid_value", "sha256", "a file is named by its 64-digit sha256");
        return;
    }
    sha[64] = 0;
    json_t *resp = NULL;
    char why[256] = "";
    int status = registry_file_sources(c->reg, http_req_bearer(req), sha, http_req_peer(req), mono_ms(), &resp, why,
                                       sizeof why);
    if (status == 200) http_respond_json(req, 200, resp);
    else api_error(req, status, "invalid_request_error", status == 401 ? "unauthorized" : "forbidden", NULL, "%s", why);
    json_decref(resp);
}
