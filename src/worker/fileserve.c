/* worker/fileserve: see fileserve.h. */
#include "worker/fileserve.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/errors.h"
#include "http/range.h"
#include "util/log.h"
#include "worker/filehash.h"
#include "worker/peerauth.h"

void fileserve_handle(worker_files *f, const char *join_token, http_req *req)
{
    const char *method = http_req_method(req), *peer = http_req_peer(req);
    const char *id = http_req_path(req) + strlen(FILESERVE_PREFIX);
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
        http_set_header(req, "Allow", "GET, HEAD");
        api_error(req, 405, "invalid_request_error", "method_not_allowed", NULL, "use GET or HEAD");
        return;
    }
    char sha[65];
    if (!filehash_valid(id)) {
        api_error(req, 404, "invalid_request_error", "not_found", NULL, "a file is named by its 64-digit sha256");
        return;
    }
    for (int i = 0; i < 65; i++) sha[i] = (char)tolower((unsigned char)id[i]);
    char why[200];
    const char *bearer = http_req_bearer(req);
    if (peerauth_check(join_token, sha, bearer, (int64_t)time(NULL), PEERAUTH_WINDOW_S, why, sizeof why)) {
        log_warn("refused file %.12s to %s: %s", sha, peer, why);
        if (!bearer) http_set_header(req, "WWW-Authenticate", "Bearer");
        api_error(req, bearer ? 403 : 401, "invalid_request_error", bearer ? "forbidden" : "unauthorized", NULL,
                  "file requests need a pool member's file token: %s", why);
        return;
    }
    char path[512];
    uint64_t bytes;
    if (!files_find_held(f, sha, path, sizeof path, &bytes)) {
        log_warn("refused file %.12s to %s: not held here", sha, peer);
        api_error(req, 404, "invalid_request_error", "file_not_found", NULL, "this node holds no file %s", sha);
        return;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || (uint64_t)st.st_size != bytes) {
        /* A file replaced since it was hashed is not the file asked for. */
        log_warn("refused file %.12s to %s: %s %s", sha, peer, path, fd < 0 ? strerror(errno) : "changed size since it was hashed");
        if (fd >= 0) close(fd);
        api_error(req, 404, "invalid_request_error", "file_not_found", NULL, "the file %s is no longer here", sha);
        return;
    }
    char etag[70], cr[96];
    snprintf(etag, sizeof etag, "\"%s\"", sha);
    http_set_header(req, "ETag", etag);
    http_set_header(req, "Accept-Ranges", "bytes");
    uint64_t first = 0, last = bytes ? bytes - 1 : 0;
    http_range_rc rc = http_range_parse(http_req_header(req, "Range"), bytes, &first, &last);
    if (rc == HTTP_RANGE_BAD) {
        close(fd);
        log_warn("refused file %.12s to %s: unservable range '%s' of %llu bytes", sha, peer,
                 http_req_header(req, "Range"), (unsigned long long)bytes);
        http_content_range(1, 0, bytes, cr, sizeof cr);
        http_set_header(req, "Content-Range", cr);
        api_error(req, 416, "invalid_request_error", "range_not_satisfiable", NULL,
                  "one byte range within the file's %llu bytes is served", (unsigned long long)bytes);
        return;
    }
    if (rc == HTTP_RANGE_OK) {
        http_content_range(first, last, bytes, cr, sizeof cr);
        http_set_header(req, "Content-Range", cr);
    }
    uint64_t len = bytes ? last - first + 1 : 0;
    log_info("serving file %.12s from byte %llu (%llu of %llu bytes) to %s%s", sha, (unsigned long long)first,
             (unsigned long long)len, (unsigned long long)bytes, peer, strcmp(method, "HEAD") ? "" : " (HEAD)");
    http_respond_fd(req, rc == HTTP_RANGE_OK ? 206 : 200, "application/octet-stream", fd, first, len);
}
