/* worker/fileserve: the worker's answer to GET and HEAD
 * /internal/v1/files/{sha256}: a file it holds (worker/files), to a pool
 * member with a file token (worker/peerauth), whole (200) or one byte range
 * (206, Content-Range; 416 for a range it cannot serve), ETag the digest.
 * The bytes go from the file to the socket by the kernel (http_respond_fd).
 * Refusals are logged with their reason. */
#ifndef GPUPOOL_FILESERVE_H
#define GPUPOOL_FILESERVE_H

#include "http/server.h"
#include "worker/files.h"

#define FILESERVE_PREFIX "/internal/v1/files/"

void fileserve_handle(worker_files *f, const char *join_token, http_req *req);

#endif
