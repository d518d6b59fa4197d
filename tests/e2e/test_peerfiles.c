/* e2e: model files shared inside the LAN.  Worker A holds a ~30 MB GGUF;
 * worker B is given the same model by name, path and sha256 but lacks the
 * file: it finds A through the coordinator's sources lookup, downloads the
 * file (rate-limited, so its progress can be watched on /v1/nodes; killed
 * half-way and started again, it resumes from its .part), and offers the
 * model only once the file is verified; a request routed to B is then
 * served there.  `gpupool fetch` interrupted mid-way resumes from
 * its .part (A's log shows the second request starting past byte 0), and a
 * byte flipped in the .part is caught by the sha256 check.  A file served
 * from a tampered copy is never offered, and requests without a valid file
 * token or node token are refused. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "unit/gguf_writer.h"
#include "util/ids.h"
#include "worker/peerauth.h"

/* About 30 MB at F16: one layer, a 4096-token vocabulary. */
static const gw_llama TINY = {1, 1024, 1024, 8, 8, 128, 4096, 0, 1, false};

#define SIM_CMD                                                                                                   \
    "{self}%20sim-engine%20-m%20{model}%20--alias%20{name}%20--host%20127.0.0.1%20--port%20{port}%20-c%20"     \
    "{ctx_total}%20-np%20{parallel}%20--kv-unified%20-ngl%20999%20-ctk%20{cache_type_k}%20-ctv%20"             \
    "{cache_type_v}%20-fa%20{flash_attn}%20--ttft-ms%200"

typedef struct fixture {
    h_pool p;
    char gguf[400];     /* A's copy */
    char sha[65];
    uint64_t bytes;
    char a_url[256];    /* A's front door */
} fixture;

/* Fills the tensor region with varied bytes, so that a download that
 * skipped or repeated a piece could not hash the same. */
static void fill(const char *path, uint64_t from)
{
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    static unsigned char block[1 << 16];
    uint32_t x = 2463534242u;
    for (uint64_t off = from; off < (uint64_t)st.st_size; off += sizeof block) {
        for (size_t i = 0; i < sizeof block; i++) {
            x ^= x << 13; x ^= x >> 17; x ^= x << 5;
            block[i] = (unsigned char)x;
        }
        uint64_t n = (uint64_t)st.st_size - off < sizeof block ? (uint64_t)st.st_size - off : sizeof block;
        assert_true(pwrite(fd, block, (size_t)n, (off_t)off) == (ssize_t)n);
    }
    close(fd);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    h_pool_init(&f->p, "peerfiles");
    setenv("TMPDIR", f->p.dir, 1);
    gw w;
    gw_init(&w, 3);
    gw_llama_kv(&w, "llama", &TINY, 2048);
    gw_llama_tensors(&w, &TINY);
    gw_write_file(&w, f->gguf, sizeof f->gguf);
    size_t header;
    free(gw_header(&w, &header));
    gw_free(&w);
    fill(f->gguf, (uint64_t)header + 64);
    assert_int_equal(sha256_file_hex(f->gguf, f->sha), 0);
    struct stat st;
    assert_int_equal(stat(f->gguf, &st), 0);
    f->bytes = (uint64_t)st.st_size;
    assert_true(f->bytes > 20u << 20 && f->bytes < 50u << 20);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    int problems = h_pool_cleanup(&f->p);
    free(f);
    return problems;
}

static h_proc *start_a(fixture *f)
{
    h_start_coordinator(&f->p, "");
    char args[1500];
    snprintf(args, sizeof args, "--load tiny=%s,ctx=512,sha256=%s --data %s/a-data --engine-cmd %s", f->gguf, f->sha,
             f->p.dir, SIM_CMD);
    h_proc *a = h_start_worker(&f->p, "wa", NULL, args);
    h_node_field(&f->p, "name", "wa", "address", f->a_url, sizeof f->a_url);
    assert_true(f->a_url[0]);
    return a;
}

/* The node named `name` in /v1/nodes (caller decrefs), or NULL. */
static json_t *node_json(h_pool *p, const char *name)
{
    h_resp r;
    h_request(p, "GET", "/v1/nodes", NULL, NULL, &r);
    size_t i;
    json_t *n, *found = NULL;
    json_array_foreach(json_object_get(r.json, "data"), i, n)
        if (!strcmp(json_string_value(json_object_get(n, "name")), name)) found = json_incref(n);
    h_resp_free(&r);
    return found;
}

typedef struct watch {
    fixture *f;
    const char *name;
} watch;

static int holds_file(void *ctx)
{
    watch *w = ctx;
    json_t *n = node_json(&w->f->p, w->name);
    size_t i;
    json_t *e;
    int yes = 0;
    json_array_foreach(json_object_get(n, "files"), i, e)
        yes |= !strcmp(json_string_value(json_object_get(e, "sha256")), w->f->sha) &&
               json_integer_value(json_object_get(e, "bytes")) == (json_int_t)w->f->bytes;
    json_decref(n);
    return yes;
}

static int offers_tiny(json_t *n)
{
    size_t i;
    json_t *l;
    json_array_foreach(json_object_get(n, "loadable"), i, l)
        if (!strcmp(json_string_value(json_object_get(l, "model")), "tiny")) return 1;
    return 0;
}

/* B's download under way, seen on /v1/nodes: bytes moving, the model not
 * offered meanwhile. */
static int fetching_seen(void *ctx)
{
    watch *w = ctx;
    json_t *n = node_json(&w->f->p, w->name);
    json_t *t = json_array_get(json_object_get(n, "transfers"), 0);
    int yes = t && !strcmp(json_string_value(json_object_get(t, "state")), "fetching") &&
              json_integer_value(json_object_get(t, "bytes_done")) > 0 &&
              json_integer_value(json_object_get(t, "bytes_total")) == (json_int_t)w->f->bytes &&
              json_integer_value(json_object_get(t, "rate_bytes_per_s")) > 0;
    if (yes) {
        /* --fetch-rate 6M holds it far below what loopback carries. */
        assert_true(json_integer_value(json_object_get(t, "rate_bytes_per_s")) < 16 << 20);
        assert_false(offers_tiny(n));
        json_t *e = json_array_get(json_object_get(n, "engines"), 0);
        assert_string_equal(json_string_value(json_object_get(e, "state")), "fetching");
    }
    json_decref(n);
    return yes;
}

static int offered(void *ctx)
{
    watch *w = ctx;
    json_t *n = node_json(&w->f->p, w->name);
    int yes = offers_tiny(n);
    json_decref(n);
    return yes;
}

typedef struct part_watch {
    const char *path;
    long at_least;
} part_watch;
static int part_grew(void *ctx);
static long file_size(const char *path);
static long long largest_start(h_proc *a);

static int only_a_ready(void *ctx)
{
    return h_node_count(ctx, "ready") == 1;
}

static void peer_fetch_makes_the_model_servable(void **state)
{
    fixture *f = *state;
    h_proc *a = start_a(f);
    watch wa = {f, "wa"}, wb = {f, "wb"};
    assert_true(h_wait_until(holds_file, &wa, 20000));
    char dest[600], args[1800];
    snprintf(dest, sizeof dest, "%s/b-models/tiny.gguf", f->p.dir);
    snprintf(args, sizeof args, "--load tiny=%s,ctx=512,sha256=%s --data %s/b-data --fetch-rate 6M --engine-cmd %s",
             dest, f->sha, f->p.dir, SIM_CMD);
    h_proc *b = h_start_worker(&f->p, "wb", NULL, args);
    assert_true(h_wait_until(fetching_seen, &wb, 15000));

    /* Killed mid-way, B picks the download up from its .part when it starts again. */
    char part[620];
    snprintf(part, sizeof part, "%s.part", dest);
    part_watch pw = {part, 3L << 20};
    assert_true(h_wait_until(part_grew, &pw, 15000));
    h_kill(b, SIGKILL);
    assert_int_equal(h_wait_exit(b, 5000), 128 + SIGKILL);
    long have = file_size(part);
    assert_true(have >= 3L << 20 && have < (long)f->bytes);
    assert_int_equal(largest_start(a), 0);
    assert_true(h_wait_until(only_a_ready, &f->p, 10000));
    b = h_start_worker(&f->p, "wb", NULL, args);
    assert_true(h_wait_until(fetching_seen, &wb, 15000));
    assert_true(h_wait_until(offered, &wb, 30000));
    assert_true(largest_start(a) >= have);
    char got[65];
    assert_int_equal(sha256_file_hex(dest, got), 0);
    assert_string_equal(got, f->sha);
    assert_true(h_log_contains(b, "sha256 verified; offered from now on"));
    assert_true(h_log_contains(a, "serving file "));
    /* B now offers the file itself. */
    assert_true(h_wait_until(holds_file, &wb, 10000));

    /* With A drained the request can only go to B, which starts the model. */
    char a_id[64], path[128];
    h_node_field(&f->p, "name", "wa", "id", a_id, sizeof a_id);
    snprintf(path, sizeof path, "/v1/nodes/%s/drain", a_id);
    h_resp r;
    h_request(&f->p, "POST", path, "{}", NULL, &r);
    assert_int_equal(r.status, 200);
    h_resp_free(&r);
    h_request(&f->p, "POST", "/v1/chat/completions",
              "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3}", NULL, &r);
    if (r.status != 200) fail_msg("chat on B: %ld %s", r.status, r.body ? r.body : "");
    assert_non_null(strstr(r.body, "[simulated]"));
    h_resp_free(&r);
    assert_true(h_log_contains(b, "engine for tiny is up"));
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static int part_grew(void *ctx)
{
    part_watch *w = ctx;
    return file_size(w->path) >= w->at_least;
}

static h_proc *fetch_cli(fixture *f, const char *out, const char *extra)
{
    char args[1500];
    snprintf(args, sizeof args, "fetch --from %s --sha256 %s --out %s --join-token %s %s", f->a_url, f->sha, out,
             f->p.join_token, extra);
    return h_run_cli(&f->p, "fetch", args);
}

/* The largest "from byte N" in A's log of serving the file. */
static long long largest_start(h_proc *a)
{
    FILE *fp = fopen(a->log, "r");
    long long best = -1;
    char line[1024];
    while (fp && fgets(line, sizeof line, fp)) {
        const char *p = strstr(line, "from byte ");
        if (strstr(line, "serving file ") && p) {
            long long v = atoll(p + 10);
            if (v > best) best = v;
        }
    }
    if (fp) fclose(fp);
    return best;
}

/* Starts a slow download and kills it once the .part holds some MiB. */
static void interrupted_download(fixture *f, const char *out, const char *part)
{
    h_proc *c = fetch_cli(f, out, "--rate 4M --quiet");
    part_watch pw = {part, 3L << 20};
    assert_true(h_wait_until(part_grew, &pw, 15000));
    h_kill(c, SIGKILL);
    assert_int_equal(h_wait_exit(c, 5000), 128 + SIGKILL);
    long have = file_size(part);
    assert_true(have >= 3L << 20 && have < (long)f->bytes);
    assert_int_equal(access(out, F_OK), -1);
}

static void interrupted_fetch_resumes_and_a_corrupt_byte_is_caught(void **state)
{
    fixture *f = *state;
    h_proc *a = start_a(f);
    watch wa = {f, "wa"};
    assert_true(h_wait_until(holds_file, &wa, 20000));
    char out[600], part[620];
    snprintf(out, sizeof out, "%s/cli/tiny.gguf", f->p.dir);
    snprintf(part, sizeof part, "%s.part", out);

    interrupted_download(f, out, part);
    long long before = largest_start(a);
    assert_int_equal(before, 0);
    h_proc *c = fetch_cli(f, out, "");
    assert_int_equal(h_wait_exit(c, 20000), 0);
    assert_true(h_log_contains(c, "sha256 verified"));
    /* The second request began where the first left off. */
    assert_true(largest_start(a) >= 3L << 20);
    char got[65];
    assert_int_equal(sha256_file_hex(out, got), 0);
    assert_string_equal(got, f->sha);
    assert_int_equal(access(part, F_OK), -1);

    /* Again, with one byte of the .part flipped before the resume. */
    assert_int_equal(unlink(out), 0);
    interrupted_download(f, out, part);
    int fd = open(part, O_RDWR);
    assert_true(fd >= 0);
    unsigned char byte;
    assert_int_equal(pread(fd, &byte, 1, 1 << 20), 1);
    byte ^= 0x40;
    assert_int_equal(pwrite(fd, &byte, 1, 1 << 20), 1);
    close(fd);
    c = fetch_cli(f, out, "--rounds 1");
    assert_int_equal(h_wait_exit(c, 20000), 1);
    assert_true(h_log_contains(c, "sha256 mismatch"));
    assert_int_equal(access(part, F_OK), -1);
    assert_int_equal(access(out, F_OK), -1);
}

static int transfer_failed_on_sha(void *ctx)
{
    watch *w = ctx;
    json_t *n = node_json(&w->f->p, w->name);
    json_t *t = json_array_get(json_object_get(n, "transfers"), 0);
    const char *e = json_string_value(json_object_get(t, "last_error"));
    int yes = e && strstr(e, "sha256 mismatch") && t && json_integer_value(json_object_get(t, "attempts")) >= 1;
    json_decref(n);
    return yes;
}

/* A's copy changes after it was hashed (a disk that went bad, say): B's
 * download does not match, is thrown away, and the model is never offered. */
static void tampered_source_is_never_offered(void **state)
{
    fixture *f = *state;
    start_a(f);
    watch wa = {f, "wa"}, wb = {f, "wb"};
    assert_true(h_wait_until(holds_file, &wa, 20000));
    struct stat st;
    assert_int_equal(stat(f->gguf, &st), 0);
    int fd = open(f->gguf, O_RDWR);
    unsigned char byte;
    assert_int_equal(pread(fd, &byte, 1, 5 << 20), 1);
    byte ^= 1;
    assert_int_equal(pwrite(fd, &byte, 1, 5 << 20), 1);
    close(fd);
    char dest[600], args[1800];
    snprintf(dest, sizeof dest, "%s/b-models/tiny.gguf", f->p.dir);
    snprintf(args, sizeof args, "--load tiny=%s,ctx=512,sha256=%s --data %s/b-data --engine-cmd %s", dest, f->sha,
             f->p.dir, SIM_CMD);
    h_proc *b = h_start_worker(&f->p, "wb", NULL, args);
    assert_true(h_wait_until(transfer_failed_on_sha, &wb, 20000));
    assert_true(h_log_contains(b, "sha256 mismatch"));
    json_t *n = node_json(&f->p, "wb");
    assert_false(offers_tiny(n));
    assert_int_equal(json_array_size(json_object_get(n, "files")), 0);
    json_decref(n);
    assert_int_equal(access(dest, F_OK), -1);
    h_resp r;
    h_request(&f->p, "POST", "/v1/chat/completions",
              "{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3}", NULL, &r);
    /* Only A can serve it; B never started an engine for it. */
    h_resp_free(&r);
    assert_false(h_log_contains(b, "starting "));
}

static long get_file(fixture *f, const char *method, const char *auth, const char *range, h_resp *r)
{
    char url[400], ah[200], rh[100];
    snprintf(url, sizeof url, "%s/internal/v1/files/%s", f->a_url, f->sha);
    const char *hdrs[3] = {NULL, NULL, NULL};
    int n = 0;
    if (auth) { snprintf(ah, sizeof ah, "Authorization: Bearer %s", auth); hdrs[n++] = ah; }
    if (range) { snprintf(rh, sizeof rh, "Range: %s", range); hdrs[n++] = rh; }
    if (!n) hdrs[n++] = "X-None: 1";
    h_request(&f->p, method, url, NULL, hdrs, r);
    return r->status;
}

static void file_requests_need_credentials(void **state)
{
    fixture *f = *state;
    h_proc *a = start_a(f);
    watch wa = {f, "wa"};
    assert_true(h_wait_until(holds_file, &wa, 20000));
    h_resp r;
    char tok[PEERAUTH_TOKEN_MAX], hv[128];
    int64_t now = (int64_t)time(NULL);

    assert_int_equal(get_file(f, "GET", NULL, NULL, &r), 401);
    h_resp_free(&r);
    peerauth_make("not-the-pool's-token", f->sha, now, tok);
    assert_int_equal(get_file(f, "GET", tok, NULL, &r), 403);
    h_resp_free(&r);
    peerauth_make(f->p.join_token, f->sha, now - 3600, tok);
    assert_int_equal(get_file(f, "GET", tok, NULL, &r), 403);
    h_resp_free(&r);
    assert_true(h_log_contains(a, "refused file "));
    assert_true(h_log_contains(a, "stale file token"));

    /* HEAD over a raw socket: the head alone, with the length and the ETag. */
    peerauth_make(f->p.join_token, f->sha, now, tok);
    char req[600], head[4096];
    snprintf(req, sizeof req, "HEAD /internal/v1/files/%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
             "Connection: close\r\n\r\n", f->sha, tok);
    int sock = h_raw_connect_send(atoi(strrchr(f->a_url, ':') + 1), req, strlen(req));
    h_raw_read(sock, head, sizeof head, 5000);
    close(sock);
    assert_non_null(strstr(head, "HTTP/1.1 200"));
    snprintf(hv, sizeof hv, "Content-Length: %llu\r\n", (unsigned long long)f->bytes);
    assert_non_null(strcasestr(head, hv));
    snprintf(hv, sizeof hv, "ETag: \"%s\"", f->sha);
    assert_non_null(strcasestr(head, hv));
    assert_true(strlen(strstr(head, "\r\n\r\n")) == 4); /* no body */
    char got[128];
    assert_int_equal(get_file(f, "GET", tok, "bytes=10-19", &r), 206);
    assert_int_equal(r.len, 10);
    snprintf(hv, sizeof hv, "bytes 10-19/%llu", (unsigned long long)f->bytes);
    assert_string_equal(h_header(&r, "Content-Range", got, sizeof got), hv);
    h_resp_free(&r);
    snprintf(hv, sizeof hv, "bytes=%llu-", (unsigned long long)f->bytes);
    assert_int_equal(get_file(f, "GET", tok, hv, &r), 416);
    h_resp_free(&r);

    /* The coordinator's lookup wants a node token. */
    char path[200];
    snprintf(path, sizeof path, "/internal/v1/files/%s/sources", f->sha);
    h_request(&f->p, "GET", path, NULL, NULL, &r);
    assert_int_equal(r.status, 401);
    h_resp_free(&r);
    const char *bad[] = {"Authorization: Bearer 0123456789abcdef", NULL};
    h_request(&f->p, "GET", path, NULL, bad, &r);
    assert_int_equal(r.status, 401);
    h_resp_free(&r);
}

int main(void)
{
    h_apply_filter();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(peer_fetch_makes_the_model_servable, setup, teardown),
        cmocka_unit_test_setup_teardown(interrupted_fetch_resumes_and_a_corrupt_byte_is_caught, setup, teardown),
        cmocka_unit_test_setup_teardown(tampered_source_is_never_offered, setup, teardown),
        cmocka_unit_test_setup_teardown(file_requests_need_credentials, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
