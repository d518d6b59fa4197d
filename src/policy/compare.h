/* policy/compare: the arithmetic of `gpupool compare`, which runs one input
 * set through two models (say F16 and Q4_K_M) and says whether the second
 * answers like the first.  From the answers' texts: the share that parse
 * as JSON (bare, in a ```json fence, or the outermost {...} in prose), the
 * field-by-field agreement of the parsed objects, and latency percentiles.
 * Pure: no sockets, no clock. */
#ifndef GPUPOOL_POLICY_COMPARE_H
#define GPUPOOL_POLICY_COMPARE_H

#include <jansson.h>
#include <stddef.h>

enum { CMP_A = 0, CMP_B = 1 };

/* The JSON value in a model's answer text, or NULL when there is none:
 * the whole text, else the first ```json (or ```) fenced block, else the
 * span from the first '{' to the last '}'.  Caller decrefs. */
json_t *cmp_extract_json(const char *text, size_t len);
/* Equality of structured outputs: numbers by value (1 equals 1.0), strings
 * exactly, arrays in order, objects by key whatever the order. */
int cmp_values_equal(const json_t *a, const json_t *b);

/* One input line as the request for model: a chat body ({"messages":...})
 * or a completion body ({"prompt":...}).  "model" is set, "stream" dropped,
 * and "temperature" set to 0 unless the line gives one, so differences are
 * the models'.  Returns the body (caller decrefs) and sets *is_chat, or NULL
 * with a sentence in err. */
json_t *cmp_request(const char *line, const char *model, int *is_chat, char *err, size_t errlen);
/* The answer's text: choices[0].message.content (chat) or choices[0].text;
 * NULL when the answer has none. */
const char *cmp_answer_text(const json_t *answer);

typedef struct cmp_field {
    char *name;
    int agree, total;
} cmp_field;

typedef struct cmp_report {
    int items;
    int parsed[2];          /* answers whose text held a JSON object */
    int answered[2];        /* requests that got a 200 at all */
    cmp_field *fields;
    int nfields, capfields;
    int fixed_fields;       /* the fields were named (--fields): only those count */
    int agree, total;       /* every field comparison */
    int items_identical;    /* items whose compared fields all agreed */
    double *lat[2];
    int nlat[2], caplat[2];
} cmp_report;

/* fields: the top-level fields to compare (NULL/0 = all of both sides'). */
void cmp_init(cmp_report *r, const char *const *fields, int nfields);
void cmp_free(cmp_report *r);
/* One item: each side's answer text (NULL when its request failed). A side
 * that gave no JSON object disagrees on every field compared: the fields
 * named, or else those of the other side (one field when neither parsed),
 * so a model that breaks its format cannot pass.  A field absent on both
 * sides agrees. */
void cmp_add(cmp_report *r, const char *text_a, const char *text_b);
/* A request's latency, for the side's percentiles (failed requests too). */
void cmp_add_latency(cmp_report *r, int side, double ms);

/* Agreed / compared over every field of every item; 1 when nothing was
 * compared. */
double cmp_agreement(const cmp_report *r);
/* The side's latency at quantile q (0..1, nearest rank); 0 without samples. */
double cmp_latency(const cmp_report *r, int side, double q);
/* The report as `compare --json` prints it: {items, threshold, pass,
 * agreement, items_identical, models:{a:{model, answered, parsed,
 * parse_rate, p50_ms, p95_ms}, b:{...}}, latency_diff_ms:{p50, p95},
 * fields:[{name, agree, total, rate}]}.  Caller decrefs. */
json_t *cmp_report_json(const cmp_report *r, const char *model_a, const char *model_b, double threshold);

#endif
