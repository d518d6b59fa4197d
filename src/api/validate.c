/* api/validate: see validate.h. */
#include "api/validate.h"

#include <stdio.h>
#include <string.h>

api_kind api_kind_from_task_type(const char *type)
{
    if (!type) return KIND_UNKNOWN;
    if (!strcmp(type, "chat")) return KIND_CHAT;
    if (!strcmp(type, "completion")) return KIND_COMPLETION;
    if (!strcmp(type, "embedding")) return KIND_EMBEDDING;
    return KIND_UNKNOWN;
}

const char *api_kind_task_type(api_kind k)
{
    static const char *t[] = {"chat", "completion", "embedding", "unknown"};
    return t[k];
}

const char *api_kind_path(api_kind k)
{
    static const char *p[] = {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", ""};
    return p[k];
}

static int fail(api_invalid *why, const char *code, const char *param, const char *msg)
{
    why->code = code;
    snprintf(why->param, sizeof why->param, "%s", param);
    snprintf(why->message, sizeof why->message, "%s", msg);
    return -1;
}

static int string_or_strings(json_t *v)
{
    if (json_is_string(v)) return 1;
    if (!json_is_array(v) || json_array_size(v) == 0) return 0;
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) if (!json_is_string(x) && !json_is_array(x)) return 0;
    return 1;
}

static int check_messages(json_t *msgs, api_invalid *why)
{
    if (!msgs) return fail(why, "missing_field", "messages", "'messages' is required");
    if (!json_is_array(msgs)) return fail(why, "invalid_type", "messages", "'messages' must be an array");
    if (json_array_size(msgs) == 0) return fail(why, "invalid_value", "messages", "'messages' must not be empty");
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        char msg[128], param[64];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) {
            snprintf(msg, sizeof msg, "'%s' must be an object", param);
            return fail(why, "invalid_type", param, msg);
        }
        json_t *role = json_object_get(m, "role");
        if (!json_is_string(role)) {
            snprintf(msg, sizeof msg, "'%s.role' must be a string", param);
            return fail(why, role ? "invalid_type" : "missing_field", param, msg);
        }
        json_t *content = json_object_get(m, "content");
        if (content && !json_is_string(content) && !json_is_array(content) && !json_is_null(content)) {
            snprintf(msg, sizeof msg, "'%s.content' must be a string or an array of parts", param);
            return fail(why, "invalid_type", param, msg);
        }
    }
    return 0;
}

int api_validate_body(api_kind k, json_t *body, api_invalid *why)
{
    memset(why, 0, sizeof *why);
    if (!json_is_object(body)) return fail(why, "invalid_type", "", "the body must be a JSON object");
    json_t *model = json_object_get(body, "model");
    if (!model) return fail(why, "missing_field", "model", "'model' is required");
    if (!json_is_string(model) || !json_string_length(model))
        return fail(why, "invalid_type", "model", "'model' must be a non-empty string");
    if (json_string_length(model) > API_MODEL_MAX)
        return fail(why, "invalid_value", "model", "'model' is longer than 255 bytes");
    json_t *stream = json_object_get(body, "stream");
    if (stream && !json_is_boolean(stream) && !json_is_null(stream))
        return fail(why, "invalid_type", "stream", "'stream' must be a boolean");
    const char *ints[] = {"max_tokens", "max_completion_tokens", "n", "seed"};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        json_t *v = json_object_get(body, ints[i]);
        if (v && !json_is_integer(v) && !json_is_null(v)) {
            char msg[96];
            snprintf(msg, sizeof msg, "'%s' must be an integer", ints[i]);
            return fail(why, "invalid_type", ints[i], msg);
        }
        if (json_is_integer(v) && json_integer_value(v) < 0) {
            char msg[96];
            snprintf(msg, sizeof msg, "'%s' must not be negative", ints[i]);
            return fail(why, "invalid_value", ints[i], msg);
        }
    }
    json_t *temp = json_object_get(body, "temperature");
    if (temp && !json_is_number(temp) && !json_is_null(temp))
        return fail(why, "invalid_type", "temperature", "'temperature' must be a number");
    switch (k) {
    case KIND_CHAT:
        return check_messages(json_object_get(body, "messages"), why);
    case KIND_COMPLETION: {
        json_t *p = json_object_get(body, "prompt");
        if (!p) return fail(why, "missing_field", "prompt", "'prompt' is required");
        if (!string_or_strings(p))
            return fail(why, "invalid_type", "prompt", "'prompt' must be a string or an array of strings");
        return 0;
    }
    case KIND_EMBEDDING: {
        json_t *in = json_object_get(body, "input");
        if (!in) return fail(why, "missing_field", "input", "'input' is required");
        if (!string_or_strings(in))
            return fail(why, "invalid_type", "input", "'input' must be a string or an array of strings");
        if (stream && json_is_true(stream))
            return fail(why, "invalid_value", "stream", "embeddings cannot be streamed");
        return 0;
    }
    default:
        return fail(why, "invalid_value", "type", "unknown request kind");
    }
}

/* Tokens in a string: about four bytes of Latin text make a token, and a
 * CJK character (three bytes in UTF-8) about one. */
static double string_tokens(const char *s, size_t len)
{
    double ascii = 0, wide = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x80) ascii++;
        else if ((ch & 0xC0) != 0x80) wide++; /* a lead byte: one character */
    }
    return ascii / 4 + wide;
}

static double json_tokens(json_t *v, int depth)
{
    if (depth > 8) return 0;
    if (json_is_string(v)) return string_tokens(json_string_value(v), json_string_length(v));
    double n = 0;
    size_t i;
    json_t *x;
    const char *k;
    if (json_is_array(v)) json_array_foreach(v, i, x) n += json_tokens(x, depth + 1);
    else if (json_is_object(v)) json_object_foreach(v, k, x) n += json_tokens(x, depth + 1);
    return n;
}

double api_estimate_json_tokens(const json_t *v) { return json_tokens((json_t *)v, 0); }

double api_estimate_prompt_tokens(json_t *body)
{
    double n = 0;
    const char *fields[] = {"messages", "prompt", "input", NULL};
    for (int i = 0; fields[i]; i++) n += json_tokens(json_object_get(body, fields[i]), 0);
    return n;
}

double api_requested_max_tokens(json_t *body)
{
    json_t *m = json_object_get(body, "max_completion_tokens");
    if (!json_is_integer(m)) m = json_object_get(body, "max_tokens");
    if (!json_is_integer(m)) m = json_object_get(body, "num_predict"); /* Ollama's name */
    return json_is_integer(m) && json_integer_value(m) > 0 ? (double)json_integer_value(m) : 0;
}
