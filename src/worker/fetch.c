/* worker/fetch: see fetch.h. */
#include "worker/fetch.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "http/client.h"
#include "http/range.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/opts.h"
#include "util/ratelimit.h"
#include "worker/peerauth.h"

typedef struct xfer {
    const fetch_opts *o;
    const char *url;
    int attempt;
    int fd;
    EVP_MD_CTX *md;
    uint64_t offset;          /* the .part's size when this attempt began */
    uint64_t done;            /* bytes received for the .part, all hashed */
    char *buf;                /* the last of them, not yet written */
    size_t buffered;
    uint64_t total;
    long status;
    char content_range[128];
    rate_bucket bucket;
    int64_t last_byte_ms, last_report_ms, mark_ms;
    uint64_t mark_bytes;
    double rate;
    int write_errno, stalled, cancelled, wrong_range;
    char errbody[300];
    size_t errbody_len;
} xfer;

static int is_cancelled(const fetch_opts *o) { return o->cancelled && o->cancelled(o->ctx); }

static void report(xfer *x, int force)
{
    int64_t now = mono_ms();
    if (!force && now - x->last_report_ms < 500) return;
    if (now > x->mark_ms) {
        double inst = (double)(x->done - x->mark_bytes) * 1000.0 / (double)(now - x->mark_ms);
        x->rate = x->rate > 0 ? 0.5 * x->rate + 0.5 * inst : inst;
        x->mark_ms = now;
        x->mark_bytes = x->done;
    }
    x->last_report_ms = now;
    if (!x->o->progress) return;
    fetch_progress p = {.done = x->done, .total = x->total, .resumed_from = x->offset, .rate_bps = x->rate,
                        .eta_s = -1, .source = x->url, .attempt = x->attempt};
    if (x->total && x->rate > 1)
        p.eta_s = (int64_t)((double)(x->total - (x->done < x->total ? x->done : x->total)) / x->rate);
    x->o->progress(x->o->ctx, &p);
}

/* Starts the .part again from nothing (the source sent the whole file, or
 * the .part was longer than the file). */
#define WRITE_BUF (1u << 20)

/* Writes what is buffered at its place in the .part.  Large writes: the
 * client hands over 16 KiB at a time, and a syscall per piece costs. */
static int flush(xfer *x)
{
    uint64_t at = x->done - x->buffered;
    for (size_t off = 0; off < x->buffered;) {
        ssize_t w = pwrite(x->fd, x->buf + off, x->buffered - off, (off_t)(at + off));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) { x->write_errno = w < 0 ? errno : ENOSPC; return -1; }
        off += (size_t)w;
    }
    x->buffered = 0;
    return 0;
}

static int restart(xfer *x)
{
    x->buffered = 0;
    if (ftruncate(x->fd, 0) != 0) { x->write_errno = errno; return -1; }
    EVP_DigestInit_ex(x->md, EVP_sha256(), NULL);
    x->offset = x->done = x->mark_bytes = 0;
    return 0;
}

/* A header's value in a response head ("Name: value\r\n" lines), or "". */
static void header_value(const char *head, const char *name, char *out, size_t outlen)
{
    out[0] = 0;
    size_t nl = strlen(name);
    for (const char *p = head; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncasecmp(p, name, nl) || p[nl] != ':') continue;
        const char *v = p + nl + 1;
        while (*v == ' ') v++;
        size_t vl = strcspn(v, "\r\n");
        if (vl >= outlen) vl = outlen - 1;
        memcpy(out, v, vl);
        out[vl] = 0;
        return;
    }
}

/* The answer's head: is it the range asked for? */
static int on_status(void *ctx, long status, const char *ctype, const char *head)
{
    (void)ctype;
    xfer *x = ctx;
    x->status = status;
    header_value(head, "Content-Range", x->content_range, sizeof x->content_range);
    if (status == 206) {
        uint64_t first, total;
        if (http_content_range_parse(x->content_range, &first, &total) || first != x->offset) {
            x->wrong_range = 1;
            return 1;
        }
        x->total = total;
    } else if (status == 200) {
        char len[32];
        header_value(head, "Content-Length", len, sizeof len);
        if (x->offset && restart(x)) return 1;
        x->total = strtoull(len, NULL, 10);
    }
    return 0;
}

static int on_data(void *ctx, const char *p, size_t len)
{
    xfer *x = ctx;
    if (x->status != 200 && x->status != 206) {
        size_t room = sizeof x->errbody - 1 - x->errbody_len;
        size_t take = len < room ? len : room;
        memcpy(x->errbody + x->errbody_len, p, take);
        x->errbody_len += take;
        x->errbody[x->errbody_len] = 0;
        return 0;
    }
    EVP_DigestUpdate(x->md, p, len);
    for (size_t off = 0; off < len;) {
        size_t take = len - off < WRITE_BUF - x->buffered ? len - off : WRITE_BUF - x->buffered;
        memcpy(x->buf + x->buffered, p + off, take);
        x->buffered += take;
        x->done += take;
        off += take;
        if (x->buffered == WRITE_BUF && flush(x)) return 1;
    }
    int64_t wait_us = rate_take(&x->bucket, len, mono_us());
    while (wait_us > 0) {
        if (is_cancelled(x->o)) { x->cancelled = 1; return 1; }
        int64_t slice = wait_us < 100000 ? wait_us : 100000;
        struct timespec ts = {slice / 1000000, (long)(slice % 1000000) * 1000};
        nanosleep(&ts, NULL);
        wait_us -= slice;
    }
    x->last_byte_ms = mono_ms();
    report(x, 0);
    return 0;
}

/* Polled by the client while it waits: the caller's cancel, and a source
 * that went quiet (on the monotonic clock, whatever curl's own check sees). */
static int on_poll(void *ctx)
{
    xfer *x = ctx;
    if (is_cancelled(x->o)) { x->cancelled = 1; return 1; }
    if (mono_ms() - x->last_byte_ms > x->o->stall_ms) { x->stalled = 1; return 1; }
    return 0;
}

/* Hashes what the .part already holds. */
static int hash_existing(xfer *x, char *err, size_t errlen, const char *part)
{
    struct stat st;
    if (fstat(x->fd, &st) != 0) return err_out(err, errlen, "%s: %s", part, strerror(errno));
    char *block = malloc(1 << 20);
    if (!block) return err_out(err, errlen, "out of memory");
    uint64_t have = 0, size = (uint64_t)st.st_size;
    while (have < size) {
        ssize_t r = pread(x->fd, block, 1 << 20, (off_t)have);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) { free(block); return err_out(err, errlen, "cannot read %s: %s", part, r < 0 ? strerror(errno) : "short"); }
        EVP_DigestUpdate(x->md, block, (size_t)r);
        have += (uint64_t)r;
    }
    free(block);
    x->offset = x->done = x->mark_bytes = size;
    return 0;
}

/* The digest against the expected one: the .part becomes dest, or goes. */
static fetch_rc finish(xfer *x, const char *part, char *err, size_t errlen)
{
    unsigned char d[32];
    unsigned dl = 0;
    EVP_DigestFinal_ex(x->md, d, &dl);
    char hex[65];
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
    if (strcasecmp(hex, x->o->sha256)) {
        unlink(part);
        err_out(err, errlen, "sha256 mismatch: %s from %s has sha256 %s, not %s; the partial file was deleted",
                x->o->dest, x->url, hex, x->o->sha256);
        return FETCH_CORRUPT;
    }
    if (fsync(x->fd) != 0 || rename(part, x->o->dest) != 0)
        return err_out(err, errlen, "cannot move %s to %s: %s", part, x->o->dest, strerror(errno));
    return FETCH_OK;
}

static fetch_rc attempt(const fetch_opts *o, const char *url, int n, char *err, size_t errlen)
{
    char part[600];
    snprintf(part, sizeof part, "%s.part", o->dest);
    xfer x = {.o = o, .url = url, .attempt = n, .fd = -1};
    fetch_rc rc = FETCH_FAILED;
    http_result res;
    memset(&res, 0, sizeof res);
    x.fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (x.fd < 0) return err_out(err, errlen, "cannot write %s: %s", part, strerror(errno));
    x.md = EVP_MD_CTX_new();
    x.buf = malloc(WRITE_BUF);
    if (!x.md || !x.buf) { err_out(err, errlen, "out of memory"); goto out; }
    EVP_DigestInit_ex(x.md, EVP_sha256(), NULL);
    if (hash_existing(&x, err, errlen, part)) goto out;

    char range[64], token[PEERAUTH_TOKEN_MAX], sha[65];
    for (int i = 0; i < 65; i++) sha[i] = (char)(o->sha256[i] >= 'A' && o->sha256[i] <= 'F' ? o->sha256[i] + 32 : o->sha256[i]);
    peerauth_make(o->join_token ? o->join_token : "", sha, (int64_t)time(NULL), token);
    const char *hdrs[2] = {NULL, NULL};
    if (x.offset) {
        snprintf(range, sizeof range, "Range: bytes=%llu-", (unsigned long long)x.offset);
        hdrs[0] = range;
    }
    http_call_opts co = {.url = url, .bearer = token, .headers = hdrs, .connect_timeout_ms = (long)o->connect_timeout_ms,
                         .idle_timeout_ms = (long)o->stall_ms, .recv_buffer = 512L * 1024};
    http_stream_cbs cb = {.on_status = on_status, .on_data = on_data, .cancelled = on_poll, .ctx = &x};
    rate_init(&x.bucket, o->rate_bps, 0, mono_us());
    x.last_byte_ms = x.mark_ms = x.last_report_ms = mono_ms();
    int cc = http_call_stream(&co, &cb, &res);
    flush(&x); /* what arrived stays in the .part, for a resume */
    report(&x, 1);
    if (x.cancelled) { rc = FETCH_CANCELLED; err_out(err, errlen, "cancelled"); goto out; }
    if (x.stalled || res.timed_out) { err_out(err, errlen, "%s sent nothing for %lld ms", url, (long long)o->stall_ms); goto out; }
    if (x.write_errno) { err_out(err, errlen, "cannot write %s: %s", part, strerror(x.write_errno)); goto out; }
    if (x.wrong_range) {
        err_out(err, errlen, "%s answered range '%s', not from byte %llu", url, x.content_range, (unsigned long long)x.offset);
        goto out;
    }
    if (cc != 0) {
        err_out(err, errlen, "%s: %s (the download stopped at byte %llu; the next try resumes there)", url, res.error,
                (unsigned long long)x.done);
        goto out;
    }
    if (x.status == 416) {
        uint64_t first, total;
        /* A .part that is already whole (stopped before its rename) is
         * checked as it is; a longer one is started again. */
        if (!http_content_range_parse(x.content_range, &first, &total) && total == x.offset && total) {
            x.total = total;
            rc = finish(&x, part, err, errlen);
        } else {
            restart(&x);
            err_out(err, errlen, "%s cannot serve from byte %llu; starting again", url, (unsigned long long)x.offset);
        }
        goto out;
    }
    if (x.status != 200 && x.status != 206) {
        x.errbody[strcspn(x.errbody, "\r\n")] = 0;
        err_out(err, errlen, "%s answered %ld: %.200s", url, x.status, x.errbody);
        goto out;
    }
    if (x.total && x.done != x.total) {
        err_out(err, errlen, "%s ended at byte %llu of %llu", url, (unsigned long long)x.done, (unsigned long long)x.total);
        goto out;
    }
    rc = finish(&x, part, err, errlen);
out:
    if (rc != FETCH_OK && x.done == 0 && x.buffered == 0) unlink(part); /* nothing to resume from */
    http_result_free(&res);
    if (x.md) EVP_MD_CTX_free(x.md);
    free(x.buf);
    close(x.fd);
    return rc;
}

fetch_rc fetch_file(const fetch_opts *in, char *err, size_t errlen)
{
    fetch_opts o = *in;
    if (!o.stall_ms) o.stall_ms = 30000;
    if (!o.connect_timeout_ms) o.connect_timeout_ms = 5000;
    if (!o.rounds) o.rounds = 3;
    if (!o.backoff_ms) o.backoff_ms = 1000;
    if (o.nurls <= 0) return err_out(err, errlen, "no source holds the file");
    char dir[600];
    snprintf(dir, sizeof dir, "%s", o.dest);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        if (make_dirs(dir)) return err_out(err, errlen, "cannot make %s: %s", dir, strerror(errno));
    }
    fetch_rc last = FETCH_FAILED;
    int n = 0;
    int64_t pause = o.backoff_ms;
    for (int round = 0; round < o.rounds; round++) {
        for (int i = 0; i < o.nurls; i++) {
            if (is_cancelled(&o)) break;
            last = attempt(&o, o.urls[i], ++n, err, errlen);
            if (last == FETCH_OK || last == FETCH_CANCELLED) return last;
        }
        if (round + 1 == o.rounds) break;
        for (int64_t until = mono_ms() + pause; mono_ms() < until && !is_cancelled(&o);) sleep_ms(50);
        if (is_cancelled(&o)) {
            err_out(err, errlen, "cancelled");
            return FETCH_CANCELLED;
        }
        pause = pause * 2 > 30000 ? 30000 : pause * 2;
    }
    return last;
}
