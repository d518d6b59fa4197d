/* policy/compare: see compare.h. */
#include "policy/compare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Shown for an item where neither side gave JSON, under the default of
 * comparing every field (there is no field to name). */
#define NO_JSON "(no JSON)"

static json_t *parse_span(const char *s, size_t n)
{
    while (n && (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n')) n--;
    return n ? json_loadb(s, n, JSON_REJECT_DUPLICATES, NULL) : NULL;
}

json_t *cmp_extract_json(const char *text, size_t len)
{
    if (!text) return NULL;
    json_t *j = parse_span(text, len);
    if (j) return j;
    const char *end = text + len;
    const char *fence = memmem(text, len, "```", 3);
    if (fence) {
        /* The opening fence's line may name a language (```json). */
        const char *body = memchr(fence + 3, '\n', (size_t)(end - fence - 3));
        const char *close = body ? memmem(body, (size_t)(end - body), "```", 3) : NULL;
        if (close && (j = parse_span(body + 1, (size_t)(close - body - 1)))) return j;
    }
    const char *open = memchr(text, '{', len);
    const char *last = NULL;
    for (const char *p = end; p > text; p--)
        if (p[-1] == '}') { last = p; break; }
    if (open && last && last > open) return parse_span(open, (size_t)(last - open));
    return NULL;
}

int cmp_values_equal(const json_t *a, const json_t *b)
{
    if (!a || !b) return a == b;
    if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
    if (json_typeof(a) != json_typeof(b)) return 0;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b)) return 0;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!cmp_values_equal(json_array_get(a, i), json_array_get(b, i))) return 0;
        return 1;
    }
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b)) return 0;
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)a, k, v)
            if (!cmp_values_equal(v, json_object_get(b, k))) return 0;
        return 1;
    }
    return json_equal((json_t *)a, (json_t *)b);
}

json_t *cmp_request(const char *line, const char *model, int *is_chat, char *err, size_t errlen)
{
    json_error_t je;
    json_t *j = json_loads(line, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(j)) {
        snprintf(err, errlen, j ? "not a JSON object" : "not JSON: %s", je.text);
        json_decref(j);
        return NULL;
    }
    json_t *messages = json_object_get(j, "messages"), *prompt = json_object_get(j, "prompt");
    if (messages && !json_is_array(messages)) {
        snprintf(err, errlen, "\"messages\" must be an array");
        json_decref(j);
        return NULL;
    }
    if (!messages && !prompt) {
        snprintf(err, errlen, "a line needs \"messages\" (a chat) or \"prompt\" (a completion)");
        json_decref(j);
        return NULL;
    }
    *is_chat = messages != NULL;
    json_object_set_new(j, "model", json_string(model));
    json_object_del(j, "stream");
    if (!json_object_get(j, "temperature")) json_object_set_new(j, "temperature", json_integer(0));
    return j;
}

const char *cmp_answer_text(const json_t *answer)
{
    const json_t *choice = json_array_get(json_object_get(answer, "choices"), 0);
    const char *t = json_string_value(json_object_get(json_object_get(choice, "message"), "content"));
    return t ? t : json_string_value(json_object_get(choice, "text"));
}

void cmp_init(cmp_report *r, const char *const *fields, int nfields)
{
    memset(r, 0, sizeof *r);
    for (int i = 0; fields && i < nfields; i++) {
        if (r->nfields == r->capfields) {
            r->capfields = r->capfields ? 2 * r->capfields : 8;
            r->fields = realloc(r->fields, (size_t)r->capfields * sizeof *r->fields);
            if (!r->fields) abort();
        }
        r->fields[r->nfields++] = (cmp_field){.name = strdup(fields[i])};
    }
    r->fixed_fields = r->nfields > 0;
}

void cmp_free(cmp_report *r)
{
    for (int i = 0; i < r->nfields; i++) free(r->fields[i].name);
    free(r->fields);
    free(r->lat[0]);
    free(r->lat[1]);
    memset(r, 0, sizeof *r);
}

static cmp_field *field(cmp_report *r, const char *name)
{
    for (int i = 0; i < r->nfields; i++)
        if (!strcmp(r->fields[i].name, name)) return &r->fields[i];
    if (r->nfields == r->capfields) {
        r->capfields = r->capfields ? 2 * r->capfields : 8;
        r->fields = realloc(r->fields, (size_t)r->capfields * sizeof *r->fields);
        if (!r->fields) abort();
    }
    r->fields[r->nfields] = (cmp_field){.name = strdup(name)};
    if (!r->fields[r->nfields].name) abort();
    return &r->fields[r->nfields++];
}

/* Compares one field; returns whether it agreed. */
static int compare_field(cmp_report *r, cmp_field *f, const json_t *a, const json_t *b)
{
    int agree = a && b && cmp_values_equal(json_object_get(a, f->name), json_object_get(b, f->name));
    f->total++;
    f->agree += agree;
    r->total++;
    r->agree += agree;
    return agree;
}

static json_t *object_of(const char *text)
{
    json_t *j = text ? cmp_extract_json(text, strlen(text)) : NULL;
    if (json_is_object(j)) return j;
    json_decref(j);
    return NULL;
}

void cmp_add(cmp_report *r, const char *text_a, const char *text_b)
{
    json_t *a = object_of(text_a), *b = object_of(text_b);
    r->items++;
    r->answered[CMP_A] += text_a != NULL;
    r->answered[CMP_B] += text_b != NULL;
    r->parsed[CMP_A] += a != NULL;
    r->parsed[CMP_B] += b != NULL;
    int all = 1, compared = 0;
    if (r->fixed_fields) {
        for (int i = 0; i < r->nfields; i++, compared++) all &= compare_field(r, &r->fields[i], a, b);
    } else if (!a && !b) {
        compare_field(r, field(r, NO_JSON), NULL, NULL);
        all = 0;
        compared = 1;
    } else {
        /* Every field of either side, each once. */
        const char *k;
        json_t *v;
        json_object_foreach(a ? a : b, k, v) {
            all &= compare_field(r, field(r, k), a, b);
            compared++;
        }
        if (a && b)
            json_object_foreach(b, k, v) if (!json_object_get(a, k)) {
                all &= compare_field(r, field(r, k), a, b);
                compared++;
            }
    }
    r->items_identical += all && compared > 0;
    json_decref(a);
    json_decref(b);
}

void cmp_add_latency(cmp_report *r, int side, double ms)
{
    side = side ? 1 : 0;
    if (r->nlat[side] == r->caplat[side]) {
        r->caplat[side] = r->caplat[side] ? 2 * r->caplat[side] : 64;
        r->lat[side] = realloc(r->lat[side], (size_t)r->caplat[side] * sizeof(double));
        if (!r->lat[side]) abort();
    }
    r->lat[side][r->nlat[side]++] = ms;
}

double cmp_agreement(const cmp_report *r) { return r->total ? (double)r->agree / r->total : 1.0; }

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

double cmp_latency(const cmp_report *r, int side, double q)
{
    side = side ? 1 : 0;
    int n = r->nlat[side];
    if (!n) return 0;
    double *s = malloc((size_t)n * sizeof *s);
    if (!s) abort();
    memcpy(s, r->lat[side], (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    int rank = (int)ceil(q * n);
    double v = s[rank > 0 ? rank - 1 : 0];
    free(s);
    return v;
}

static json_t *side_json(const cmp_report *r, int side, const char *model)
{
    return json_pack("{s:s, s:i, s:i, s:f, s:f, s:f}", "model", model, "answered", r->answered[side], "parsed",
                     r->parsed[side], "parse_rate", r->items ? (double)r->parsed[side] / r->items : 0.0, "p50_ms",
                     cmp_latency(r, side, 0.5), "p95_ms", cmp_latency(r, side, 0.95));
}

json_t *cmp_report_json(const cmp_report *r, const char *model_a, const char *model_b, double threshold)
{
    json_t *fields = json_array();
    for (int i = 0; i < r->nfields; i++) {
        const cmp_field *f = &r->fields[i];
        json_array_append_new(fields, json_pack("{s:s, s:i, s:i, s:f}", "name", f->name, "agree", f->agree, "total",
                                                f->total, "rate", f->total ? (double)f->agree / f->total : 1.0));
    }
    double agreement = cmp_agreement(r);
    return json_pack("{s:i, s:f, s:b, s:f, s:i, s:i, s:i, s:{s:o, s:o}, s:{s:f, s:f}, s:o}", "items", r->items,
                     "threshold", threshold, "pass", agreement >= threshold, "agreement", agreement, "agreed",
                     r->agree, "compared", r->total, "items_identical", r->items_identical, "models", "a",
                     side_json(r, CMP_A, model_a), "b", side_json(r, CMP_B, model_b), "latency_diff_ms", "p50",
                     cmp_latency(r, CMP_B, 0.5) - cmp_latency(r, CMP_A, 0.5), "p95",
                     cmp_latency(r, CMP_B, 0.95) - cmp_latency(r, CMP_A, 0.95), "fields", fields);
}
