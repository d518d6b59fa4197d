/* policy/cache_replay: see cache_replay.h.  The chunks follow OpenAI's
 * streamed shape closely enough for its SDKs: the first delta of a choice
 * carries the role, content and tool calls come as deltas, and the last
 * chunk of a choice has an empty delta and the finish reason.  A replay sends
 * the content in one delta: the client gets the same text, only sooner. */
#include "policy/cache_replay.h"

#include <stdlib.h>
#include <string.h>

#include "util/buf.h"

#define STREAM_MAX (16u << 20)

int cache_answer_storable(const json_t *c)
{
    const char *obj = json_string_value(json_object_get(c, "object"));
    const json_t *choices = json_object_get(c, "choices");
    if (!json_is_object(c) || json_object_get(c, "error") || (obj && strcmp(obj, "chat.completion") != 0) ||
        !json_array_size(choices))
        return 0;
    static const char *const ok[] = {"stop", "length", "tool_calls", "function_call", NULL};
    size_t i;
    const json_t *ch;
    json_array_foreach(choices, i, ch) {
        const char *fr = json_string_value(json_object_get(ch, "finish_reason"));
        int good = fr && json_is_object(json_object_get(ch, "message"));
        int known = 0;
        for (int k = 0; good && ok[k]; k++) known |= strcmp(fr, ok[k]) == 0;
        if (!known) return 0;
    }
    return 1;
}

/* ---- replay ----------------------------------------------------------------- */

/* Appends "data: <chunk>\n\n" for one chunk with these choices (stolen). */
static int event(buf *out, const json_t *c, json_t *choices, json_t *usage)
{
    json_t *chunk = json_object();
    if (!chunk || !choices) {
        json_decref(chunk);
        json_decref(choices);
        json_decref(usage);
        return -1;
    }
    static const char *const copied[] = {"id", "created", "model", "system_fingerprint", NULL};
    json_object_set_new(chunk, "id", json_string(""));
    for (int i = 0; copied[i]; i++) {
        json_t *v = json_object_get(c, copied[i]);
        if (v) json_object_set(chunk, copied[i], v);
    }
    json_object_set_new(chunk, "object", json_string("chat.completion.chunk"));
    json_object_set_new(chunk, "choices", choices);
    if (usage) json_object_set_new(chunk, "usage", usage);
    char *s = json_dumps(chunk, JSON_COMPACT);
    json_decref(chunk);
    int rc = s && buf_puts(out, "data: ") == 0 && buf_puts(out, s) == 0 && buf_puts(out, "\n\n") == 0 ? 0 : -1;
    free(s);
    return rc;
}

static json_t *one_choice(json_int_t index, json_t *delta, const json_t *finish)
{
    return json_pack("[{s:I,s:o,s:n,s:O}]", "index", index, "delta", delta, "logprobs", "finish_reason",
                     finish ? finish : json_null());
}

/* Tool calls of a message as deltas: each with its index. */
static json_t *tool_deltas(const json_t *calls)
{
    json_t *out = json_array();
    size_t i;
    const json_t *tc;
    json_array_foreach(calls, i, tc) {
        json_t *d = json_copy((json_t *)tc);
        if (!d) break;
        json_object_set_new(d, "index", json_integer((json_int_t)i));
        json_array_append_new(out, d);
    }
    return out;
}

char *cache_replay_sse(const json_t *c, int include_usage, size_t *len)
{
    const json_t *choices = json_object_get(c, "choices");
    if (!json_array_size(choices)) return NULL;
    buf out = {0};
    int rc = 0;
    size_t i;
    const json_t *ch;
    json_array_foreach(choices, i, ch) {
        if (rc) break;
        json_int_t index = json_is_integer(json_object_get(ch, "index"))
                               ? json_integer_value(json_object_get(ch, "index"))
                               : (json_int_t)i;
        const json_t *msg = json_object_get(ch, "message");
        const char *role = json_string_value(json_object_get(msg, "role"));
        json_t *first = json_pack("{s:s,s:o}", "role", role ? role : "assistant", "content",
                                  json_is_string(json_object_get(msg, "content")) ? json_string("") : json_null());
        rc |= event(&out, c, one_choice(index, first, NULL), NULL);
        const json_t *content = json_object_get(msg, "content");
        if (json_is_string(content) && json_string_length(content))
            rc |= event(&out, c, one_choice(index, json_pack("{s:O}", "content", content), NULL), NULL);
        const json_t *refusal = json_object_get(msg, "refusal");
        if (json_is_string(refusal))
            rc |= event(&out, c, one_choice(index, json_pack("{s:O}", "refusal", refusal), NULL), NULL);
        const json_t *calls = json_object_get(msg, "tool_calls");
        if (json_array_size(calls))
            rc |= event(&out, c, one_choice(index, json_pack("{s:o}", "tool_calls", tool_deltas(calls)), NULL),
                        NULL);
        const json_t *fc = json_object_get(msg, "function_call");
        if (json_is_object(fc))
            rc |= event(&out, c, one_choice(index, json_pack("{s:O}", "function_call", fc), NULL), NULL);
        rc |= event(&out, c, one_choice(index, json_object(), json_object_get(ch, "finish_reason")), NULL);
    }
    const json_t *usage = json_object_get(c, "usage");
    if (!rc && include_usage && json_is_object(usage)) rc |= event(&out, c, json_array(), json_deep_copy(usage));
    if (!rc) rc = buf_puts(&out, "data: [DONE]\n\n");
    if (rc) {
        buf_free(&out);
        return NULL;
    }
    if (len) *len = out.len;
    return buf_steal(&out);
}

/* ---- collecting a stream ------------------------------------------------------ */

typedef struct choice {
    json_int_t index;
    char *role;
    buf content, refusal;
    int has_content, has_refusal;
    json_t *tool_calls; /* array of {id,type,function:{name,arguments}} */
    json_t *finish;
} choice;

struct cache_stream {
    buf line;
    int failed, done;
    size_t total;
    json_t *head; /* id, created, model, system_fingerprint of the first chunk */
    json_t *usage;
    choice *ch;
    size_t n;
};

cache_stream *cache_stream_new(void) { return calloc(1, sizeof(cache_stream)); }

void cache_stream_free(cache_stream *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) {
        free(s->ch[i].role);
        buf_free(&s->ch[i].content);
        buf_free(&s->ch[i].refusal);
        json_decref(s->ch[i].tool_calls);
        json_decref(s->ch[i].finish);
    }
    free(s->ch);
    buf_free(&s->line);
    json_decref(s->head);
    json_decref(s->usage);
    free(s);
}

static choice *choice_at(cache_stream *s, json_int_t index)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->ch[i].index == index) return &s->ch[i];
    if (s->n >= 128) return NULL;
    choice *v = realloc(s->ch, (s->n + 1) * sizeof *v);
    if (!v) return NULL;
    s->ch = v;
    choice *c = &v[s->n++];
    memset(c, 0, sizeof *c);
    c->index = index;
    return c;
}

/* Appends a tool call delta to the call of its index. */
static int merge_tool(choice *c, const json_t *d)
{
    if (!c->tool_calls && !(c->tool_calls = json_array())) return -1;
    json_int_t idx = json_integer_value(json_object_get(d, "index"));
    if (idx < 0 || idx > 127) return -1;
    while (json_array_size(c->tool_calls) <= (size_t)idx)
        if (json_array_append_new(c->tool_calls, json_pack("{s:{s:s,s:s}}", "function", "name", "", "arguments",
                                                           "")) != 0)
            return -1;
    json_t *tc = json_array_get(c->tool_calls, (size_t)idx);
    const char *keys[] = {"id", "type"};
    for (int k = 0; k < 2; k++)
        if (json_is_string(json_object_get(d, keys[k])))
            json_object_set(tc, keys[k], json_object_get(d, keys[k]));
    json_t *fn = json_object_get(tc, "function");
    const json_t *dfn = json_object_get(d, "function");
    const char *fields[] = {"name", "arguments"};
    for (int k = 0; k < 2; k++) {
        const char *add = json_string_value(json_object_get(dfn, fields[k]));
        if (!add) continue;
        const char *had = json_string_value(json_object_get(fn, fields[k]));
        buf b = {0};
        if (buf_puts(&b, had ? had : "") != 0 || buf_puts(&b, add) != 0 ||
            json_object_set_new(fn, fields[k], json_stringn(b.data, b.len)) != 0) {
            buf_free(&b);
            return -1;
        }
        buf_free(&b);
    }
    return 0;
}

static int merge_chunk(cache_stream *s, const json_t *chunk)
{
    if (!json_is_object(chunk) || json_object_get(chunk, "error")) return -1;
    if (!s->head) {
        s->head = json_object();
        static const char *const keep[] = {"id", "created", "model", "system_fingerprint", NULL};
        for (int i = 0; s->head && keep[i]; i++)
            if (json_object_get(chunk, keep[i])) json_object_set(s->head, keep[i], json_object_get(chunk, keep[i]));
        if (!s->head) return -1;
    }
    const json_t *u = json_object_get(chunk, "usage");
    if (json_is_object(u)) {
        json_decref(s->usage);
        s->usage = json_deep_copy(u);
    }
    size_t i;
    const json_t *ch;
    json_array_foreach(json_object_get(chunk, "choices"), i, ch) {
        choice *c = choice_at(s, json_integer_value(json_object_get(ch, "index")));
        if (!c) return -1;
        const json_t *d = json_object_get(ch, "delta");
        const char *role = json_string_value(json_object_get(d, "role"));
        if (role && !c->role && !(c->role = strdup(role))) return -1;
        const json_t *t = json_object_get(d, "content");
        if (json_is_string(t) && json_string_length(t)) { /* a first "" says nothing */
            c->has_content = 1;
            if (buf_append(&c->content, json_string_value(t), json_string_length(t)) != 0) return -1;
        }
        t = json_object_get(d, "refusal");
        if (json_is_string(t)) {
            c->has_refusal = 1;
            if (buf_append(&c->refusal, json_string_value(t), json_string_length(t)) != 0) return -1;
        }
        size_t k;
        const json_t *tc;
        json_array_foreach(json_object_get(d, "tool_calls"), k, tc)
            if (merge_tool(c, tc) != 0) return -1;
        const json_t *fr = json_object_get(ch, "finish_reason");
        if (json_is_string(fr)) {
            json_decref(c->finish);
            c->finish = json_incref((json_t *)fr);
        }
    }
    return 0;
}

static int feed_line(cache_stream *s, char *line, size_t n)
{
    if (n && line[n - 1] == '\r') line[--n] = '\0';
    if (strncmp(line, "event:", 6) == 0) return strstr(line, "error") ? -1 : 0;
    if (strncmp(line, "data:", 5) != 0) return 0; /* blank, comment, id:, retry: */
    const char *p = line + 5;
    if (*p == ' ') p++;
    if (strcmp(p, "[DONE]") == 0) {
        s->done = 1;
        return 0;
    }
    if (s->done) return -1;
    json_t *chunk = json_loads(p, 0, NULL);
    int rc = chunk ? merge_chunk(s, chunk) : -1;
    json_decref(chunk);
    return rc;
}

int cache_stream_feed(cache_stream *s, const char *data, size_t len)
{
    if (s->failed) return -1;
    s->total += len;
    if (s->total > STREAM_MAX) s->failed = 1;
    for (size_t i = 0; i < len && !s->failed; i++) {
        if (data[i] != '\n') {
            if (buf_append(&s->line, data + i, 1) != 0) s->failed = 1;
            continue;
        }
        if (feed_line(s, s->line.data ? s->line.data : (char[]){""}, s->line.len) != 0) s->failed = 1;
        buf_reset(&s->line);
    }
    return s->failed ? -1 : 0;
}

json_t *cache_stream_finish(cache_stream *s)
{
    if (s->failed || !s->done || !s->n || !s->head) return NULL;
    json_t *choices = json_array();
    for (size_t i = 0; choices && i < s->n; i++) {
        choice *c = &s->ch[i];
        if (!c->finish) {
            json_decref(choices);
            return NULL;
        }
        json_t *msg = json_pack("{s:s}", "role", c->role ? c->role : "assistant");
        if (!msg) break;
        if (c->has_content || !c->tool_calls)
            json_object_set_new(msg, "content", json_stringn(c->content.data ? c->content.data : "", c->content.len));
        else
            json_object_set_new(msg, "content", json_null());
        if (c->has_refusal) json_object_set_new(msg, "refusal", json_stringn(c->refusal.data ? c->refusal.data : "", c->refusal.len));
        if (c->tool_calls) json_object_set(msg, "tool_calls", c->tool_calls);
        json_array_append_new(choices, json_pack("{s:I,s:o,s:n,s:O}", "index", c->index, "message", msg,
                                                 "logprobs", "finish_reason", c->finish));
    }
    json_t *out = json_deep_copy(s->head);
    if (!out || !choices) {
        json_decref(out);
        json_decref(choices);
        return NULL;
    }
    json_object_set_new(out, "object", json_string("chat.completion"));
    json_object_set_new(out, "choices", choices);
    if (s->usage) json_object_set(out, "usage", s->usage);
    return out;
}
