/* api/session_fit: see session_fit.h. */
#include "api/session_fit.h"

#include <stdlib.h>
#include <string.h>

#include "api/validate.h"
#include "util/buf.h"

int session_id_valid(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n > SESSION_ID_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = id[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
              ch == '_' || ch == ':' || ch == '-'))
            return 0;
    }
    return 1;
}

static const char *role_of(const json_t *m) { return json_string_value(json_object_get(m, "role")); }

static int is_system(const json_t *m)
{
    const char *r = role_of(m);
    return r && (!strcmp(r, "system") || !strcmp(r, "developer"));
}

int session_split(const json_t *messages, json_t **system, json_t **turn)
{
    *system = *turn = NULL;
    if (!json_is_array(messages)) return -1;
    json_t *sys = json_array(), *rest = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) json_array_append(is_system(m) ? sys : rest, m);
    if (json_array_size(sys)) *system = sys;
    else json_decref(sys);
    *turn = rest;
    return 0;
}

double session_tokens(const json_t *messages) { return messages ? api_estimate_json_tokens(messages) : 0; }

size_t session_fit_drop(const json_t *history, double fixed_tokens, double budget)
{
    size_t n = json_array_size(history);
    double total = fixed_tokens + session_tokens(history);
    size_t k = 0;
    while (k < n && total > budget) {
        /* One turn: a message, and whatever follows until the next user message. */
        do {
            total -= api_estimate_json_tokens(json_array_get(history, k));
            k++;
        } while (k < n && !(role_of(json_array_get(history, k)) &&
                            !strcmp(role_of(json_array_get(history, k)), "user")));
    }
    return k;
}

json_t *session_conversation(const json_t *system, const char *summary, const json_t *history, size_t from,
                             const json_t *turn)
{
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(system, i, m) json_array_append(out, m);
    if (summary && *summary) {
        buf note = {0};
        buf_append(&note, SESSION_SUMMARY_PREFIX, strlen(SESSION_SUMMARY_PREFIX));
        buf_append(&note, summary, strlen(summary));
        json_array_append_new(out, json_pack("{s:s, s:s%}", "role", "system", "content", note.data, note.len));
        buf_free(&note);
    }
    for (i = from; i < json_array_size(history); i++) json_array_append(out, json_array_get(history, i));
    json_array_foreach(turn, i, m) json_array_append(out, m);
    return out;
}

/* A message's text: its content string, or its text parts joined. */
static void append_text(buf *b, const json_t *content)
{
    if (json_is_string(content)) {
        buf_append(b, json_string_value(content), json_string_length(content));
        return;
    }
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part) {
        json_t *t = json_object_get(part, "text");
        if (json_is_string(t)) buf_append(b, json_string_value(t), json_string_length(t));
    }
}

json_t *session_summary_body(const char *model, const char *old_summary, const json_t *history, size_t n,
                             int max_tokens)
{
    buf t = {0};
    if (old_summary && *old_summary) {
        buf_printf(&t, "Earlier summary: %s\n\n", old_summary);
    }
    for (size_t i = 0; i < n && i < json_array_size(history); i++) {
        const json_t *m = json_array_get(history, i);
        const char *role = role_of(m);
        buf_printf(&t, "%s: ", role ? role : "user");
        append_text(&t, json_object_get(m, "content"));
        buf_append(&t, "\n", 1);
    }
    json_t *body = json_pack(
        "{s:s, s:i, s:f, s:[{s:s, s:s}, {s:s, s:s%}]}", "model", model, "max_tokens", max_tokens, "temperature", 0.0,
        "messages", "role", "system", "content",
        "Summarise the conversation below in a few sentences for whoever continues it. Keep names, numbers, "
        "decisions and open questions. Answer with the summary only.",
        "role", "user", "content", t.data ? t.data : "", t.len);
    buf_free(&t);
    return body;
}

json_t *session_assistant_message(const json_t *completion)
{
    json_t *msg = json_object_get(json_array_get(json_object_get(completion, "choices"), 0), "message");
    if (!json_is_object(msg)) return NULL;
    json_t *copy = json_deep_copy(msg);
    if (!json_object_get(copy, "role")) json_object_set_new(copy, "role", json_string("assistant"));
    return copy;
}

static json_t *str_or_null(const char *s) { return s && *s ? json_string(s) : json_null(); }

json_t *session_json(const session_rec *r)
{
    json_t *conv = session_conversation(r->system, r->summary, r->messages, 0, NULL);
    double tokens = session_tokens(conv);
    json_decref(conv);
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(r->id));
    json_object_set_new(o, "object", json_string("session"));
    json_object_set_new(o, "model", str_or_null(r->model));
    json_object_set_new(o, "system", r->system ? json_incref(r->system) : json_array());
    json_object_set_new(o, "summary", str_or_null(r->summary));
    json_object_set_new(o, "messages", r->messages ? json_incref(r->messages) : json_array());
    json_object_set_new(o, "message_count", json_integer((json_int_t)json_array_size(r->messages)));
    json_object_set_new(o, "tokens", json_integer((json_int_t)(tokens + 0.5)));
    json_object_set_new(o, "private", json_boolean(r->is_private));
    json_object_set_new(o, "private_rule", r->is_private ? str_or_null(r->private_rule) : json_null());
    json_object_set_new(o, "created_at", json_integer(r->created_ms));
    json_object_set_new(o, "updated_at", json_integer(r->updated_ms));
    json_object_set_new(o, "expires_at", r->expires_ms ? json_integer(r->expires_ms) : json_null());
    return o;
}
