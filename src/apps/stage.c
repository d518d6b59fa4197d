/* apps/stage: see stage.h. */
#include "apps/stage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/jschema.h"
#include "apps/template.h"

json_t *stage_context(const json_t *input, const json_t *stages)
{
    json_t *ctx = json_is_object(input) ? json_deep_copy(input) : json_object();
    json_object_set_new(ctx, "input", input ? json_deep_copy(input) : json_object());
    json_object_set_new(ctx, "stages", stages ? json_deep_copy(stages) : json_object());
    return ctx;
}

static char *render(const json_t *def, const char *key, const json_t *ctx, char *err, size_t errlen)
{
    const char *t = json_string_value(json_object_get(def, key));
    return t ? tmpl_render(t, ctx, err, errlen) : NULL;
}

static void schema_hint(char **text, const json_t *schema)
{
    if (!schema) return;
    char *s = json_dumps(schema, JSON_COMPACT);
    size_t n = strlen(*text) + strlen(s ? s : "") + 96;
    char *out = malloc(n);
    snprintf(out, n, "%s\n\nReply with only a JSON value that satisfies this JSON Schema: %s", *text, s ? s : "");
    free(s);
    free(*text);
    *text = out;
}

json_t *stage_request(const json_t *def, const json_t *ctx, char *err, size_t errlen)
{
    char *user = render(def, "prompt", ctx, err, errlen);
    if (!user) return NULL;
    schema_hint(&user, json_object_get(def, "output_schema"));
    json_t *msgs = json_array();
    if (json_object_get(def, "system")) {
        char *sys = render(def, "system", ctx, err, errlen);
        if (!sys) {
            free(user);
            json_decref(msgs);
            return NULL;
        }
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", sys));
        free(sys);
    }
    json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content", user));
    free(user);
    json_t *req = json_pack("{s:O,s:o}", "model", json_object_get(def, "model"), "messages", msgs);
    const char *const pass[] = {"max_tokens", "temperature"};
    for (size_t i = 0; i < 2; i++)
        if (json_object_get(def, pass[i])) json_object_set(req, pass[i], json_object_get(def, pass[i]));
    return req;
}

json_t *stage_retry_request(const json_t *prev, const char *reply, const char *why, const json_t *schema)
{
    json_t *req = json_deep_copy(prev);
    json_t *msgs = json_object_get(req, "messages");
    json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "assistant", "content", reply ? reply : ""));
    char *s = schema ? json_dumps(schema, JSON_COMPACT) : NULL;
    size_t n = strlen(why) + (s ? strlen(s) : 0) + 160;
    char *text = malloc(n);
    snprintf(text, n,
             "Your previous reply was not valid: %s. Reply again with only a JSON value that satisfies this JSON "
             "Schema: %s",
             why, s ? s : "{}");
    json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content", text));
    free(text);
    free(s);
    return req;
}

const char *stage_reply_text(const json_t *result)
{
    const json_t *c = json_array_get(json_object_get(result, "choices"), 0);
    const char *t = json_string_value(json_object_get(json_object_get(c, "message"), "content"));
    return t ? t : json_string_value(json_object_get(c, "text"));
}

/* The JSON inside a reply: whitespace trimmed, and a Markdown code fence
 * (```json ... ```) removed, as models often wrap JSON so. */
static void unwrap(const char *text, const char **start, size_t *len)
{
    const char *s = text, *e = text + strlen(text);
    while (s < e && strchr(" \t\r\n", *s)) s++;
    while (e > s && strchr(" \t\r\n", e[-1])) e--;
    if (e - s >= 6 && !strncmp(s, "```", 3) && !strncmp(e - 3, "```", 3)) {
        const char *nl = memchr(s, '\n', (size_t)(e - s));
        if (nl && nl < e - 3) {
            s = nl + 1;
            e -= 3;
            while (e > s && strchr(" \t\r\n", e[-1])) e--;
        }
    }
    *start = s;
    *len = (size_t)(e - s);
}

int stage_judge(const json_t *def, const char *text, json_t **output, char *why, size_t whylen)
{
    *output = NULL;
    const json_t *schema = json_object_get(def, "output_schema");
    if (!text) {
        snprintf(why, whylen, "the model's answer has no text");
        return -1;
    }
    if (!schema) {
        *output = json_string(text);
        return *output ? 0 : -1;
    }
    const char *s;
    size_t n;
    unwrap(text, &s, &n);
    json_error_t je;
    json_t *v = json_loadb(s, n, JSON_DECODE_ANY, &je);
    if (!v) {
        snprintf(why, whylen, "it is not JSON (%s at character %d)", je.text, je.position);
        return -1;
    }
    jschema_error e;
    if (jschema_validate(schema, v, &e)) {
        snprintf(why, whylen, "%s", e.message);
        json_decref(v);
        return -1;
    }
    *output = v;
    return 0;
}
