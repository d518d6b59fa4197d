/* sim/simreply: see simreply.h. */
#include "sim/simreply.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sim_replies_parse(const char *json, size_t len, sim_replies *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *root = json_loadb(json, len, 0, &je);
    if (!root) {
        snprintf(err, errlen, "--reply-map: not valid JSON: %s (line %d)", je.text, je.line);
        return -1;
    }
    int rc = -1;
    if (!json_is_array(root)) {
        snprintf(err, errlen, "--reply-map: want a JSON array of {\"match\", \"reply\"} objects");
        goto out;
    }
    out->v = calloc(json_array_size(root) + 1, sizeof *out->v);
    if (!out->v) {
        snprintf(err, errlen, "--reply-map: out of memory");
        goto out;
    }
    size_t i;
    json_t *e;
    json_array_foreach(root, i, e) {
        const char *m = json_string_value(json_object_get(e, "match"));
        const char *r = json_string_value(json_object_get(e, "reply"));
        if (!json_is_object(e) || !m || !r) {
            snprintf(err, errlen, "--reply-map: entry %zu needs string fields \"match\" and \"reply\"", i);
            goto out;
        }
        out->v[i].match = strdup(m);
        out->v[i].reply = strdup(r);
        out->n = i + 1;
        if (!out->v[i].match || !out->v[i].reply) {
            snprintf(err, errlen, "--reply-map: out of memory");
            goto out;
        }
    }
    rc = 0;
out:
    json_decref(root);
    if (rc) sim_replies_free(out);
    return rc;
}

void sim_replies_free(sim_replies *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->v[i].match);
        free(r->v[i].reply);
    }
    free(r->v);
    memset(r, 0, sizeof *r);
}

const char *sim_replies_find(const sim_replies *r, const char *text)
{
    if (!r) return NULL;
    for (size_t i = 0; i < r->n; i++) {
        const char *m = r->v[i].match;
        if (!strcmp(m, "*") || (text && strstr(text, m))) return r->v[i].reply;
    }
    return NULL;
}

static int is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* Splitting only at ASCII whitespace never cuts a UTF-8 sequence. */
size_t sim_reply_piece(const char *text)
{
    size_t i = 0;
    while (text[i] && is_space(text[i])) i++;
    while (text[i] && !is_space(text[i])) i++;
    return i;
}

int sim_reply_pieces(const char *text)
{
    int n = 0;
    for (size_t k; (k = sim_reply_piece(text)) > 0; text += k) n++;
    return n > 0 ? n : 1;
}
