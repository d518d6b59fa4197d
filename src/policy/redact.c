/* policy/redact: see redact.h. */
#include "policy/redact.h"

#include <stdlib.h>
#include <string.h>

#define MARK_OPEN  "[REDACTED:"
#define MARK_CLOSE "]"

static char *redact_once(const detect_rules *r, const char *text, size_t len, size_t *out_len)
{
    /* Most texts have few hits: try a stack array before asking for more. */
    detect_hit few[32], *hits = few;
    if (!text) text = "", len = 0;
    int n = detect_text(r, text, len, few, 32);
    if (n < 0) return NULL;
    if (n > 32) {
        if (!(hits = malloc(sizeof *hits * (size_t)n))) return NULL;
        if (detect_text(r, text, len, hits, n) != n) { /* rules are immutable: cannot differ */
            free(hits);
            return NULL;
        }
    }
    size_t total = len + 1;
    for (int i = 0; i < n; i++) total += strlen(MARK_OPEN MARK_CLOSE) + strlen(hits[i].rule) - hits[i].len;
    char *o = malloc(total);
    if (o) {
        size_t at = 0, w = 0;
        for (int i = 0; i < n; i++) {
            memcpy(o + w, text + at, hits[i].start - at);
            w += hits[i].start - at;
            w += (size_t)sprintf(o + w, MARK_OPEN "%s" MARK_CLOSE, hits[i].rule);
            at = hits[i].start + hits[i].len;
        }
        if (len > at) memcpy(o + w, text + at, len - at);
        w += len - at;
        o[w] = 0;
        if (out_len) *out_len = w;
    }
    if (hits != few) free(hits);
    return o;
}

/* Passes until nothing is found: where two rules claim overlapping bytes one
 * wins, and the loser's other bytes may hold a hit that shows only once the
 * winner's are replaced.  A built-in hit's placeholder has no digit and no
 * '@', so two or three passes end it; the bound is for configured rules that
 * would match their own placeholders. */
#define REDACT_PASSES 8

char *redact_text(const detect_rules *r, const char *text, size_t len, size_t *out_len)
{
    size_t n = 0;
    char *o = redact_once(r, text, len, &n);
    for (int pass = 1; o && pass < REDACT_PASSES; pass++) {
        detect_hit h;
        int found = detect_text(r, o, n, &h, 1);
        if (found == 0) break;
        char *next = found > 0 ? redact_once(r, o, n, &n) : NULL;
        free(o);
        o = next;
    }
    if (o && out_len) *out_len = n;
    return o;
}

static int redact_field(json_t *field, const char *text, size_t len, void *ctx)
{
    size_t n;
    char *red = redact_text(ctx, text, len, &n);
    if (!red) return -1;
    /* Untouched text keeps its node as it was (tool arguments stay in their
     * original, possibly escaped, form). */
    int rc = 0;
    if (n != len || memcmp(red, text, len)) rc = json_string_setn(field, red, n);
    free(red);
    return rc;
}

json_t *redact_request(const detect_rules *r, const json_t *openai_body)
{
    json_t *copy = json_deep_copy(openai_body);
    if (!copy) return NULL;
    if (detect_walk_request(copy, redact_field, (void *)r) != 0) {
        json_decref(copy);
        return NULL;
    }
    return copy;
}
