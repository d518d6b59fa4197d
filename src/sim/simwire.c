/* sim/simwire: see simwire.h. */
#include "sim/simwire.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sim/simreply.h"

#define MAX_EMBED_INPUTS 2048 /* OpenAI's own limit */

void sim_error_set(sim_error *e, int status, const char *type, const char *code,
                   const char *param, const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->code = code;
    e->param = param;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

json_t *sim_error_json(const sim_error *e)
{
    return json_pack("{s:{s:s,s:s,s:o,s:s}}", "error", "message", e->message, "type", e->type,
                     "param", e->param ? json_string(e->param) : json_null(), "code", e->code);
}

static int bad(sim_error *e, const char *param, const char *fmt, const char *detail)
{
    sim_error_set(e, 400, "invalid_request_error", "invalid_request", param, fmt, detail);
    return -1;
}

/* ---- reading requests ----
 * Input text feeds two things: the word count that stands in for prompt
 * tokens, and the hash that makes the generated text depend on the input. */
typedef struct input_acc {
    uint64_t hash;
    int words;
} input_acc;

static void take_text(input_acc *a, const char *s, size_t len)
{
    a->hash = sim_hash(a->hash, s, len);
    a->hash = sim_hash(a->hash, "", 1); /* separator: ["ab"] and ["a","b"] differ */
    a->words += sim_count_words(s, len);
}

/* Roles steer the text but are not prompt text, so they are not counted. */
static void take_role(input_acc *a, const char *s, size_t len)
{
    a->hash = sim_hash(a->hash, s, len);
    a->hash = sim_hash(a->hash, "", 1);
}

static int read_messages(json_t *msgs, input_acc *a, sim_error *e)
{
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return bad(e, "messages", "%s", "'messages' must be a non-empty array of messages");
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        json_t *role = json_object_get(m, "role");
        if (!json_is_object(m) || !json_is_string(role))
            return bad(e, "messages", "%s", "each message must be an object with a string 'role'");
        take_role(a, json_string_value(role), json_string_length(role));
        json_t *content = json_object_get(m, "content");
        if (!content || json_is_null(content)) continue; /* assistant turns with tool calls */
        if (json_is_string(content)) {
            take_text(a, json_string_value(content), json_string_length(content));
            continue;
        }
        if (!json_is_array(content))
            return bad(e, "messages", "%s", "message 'content' must be a string or an array of parts");
        size_t j;
        json_t *part;
        json_array_foreach(content, j, part) {
            json_t *text = json_object_get(part, "text");
            if (!json_is_object(part))
                return bad(e, "messages", "%s", "each content part must be an object");
            if (json_is_string(text)) take_text(a, json_string_value(text), json_string_length(text));
        }
    }
    return 0;
}

/* A string, or a non-empty array of strings (prompt and input alike). */
static int read_strings(json_t *v, const char *param, size_t max, input_acc *a, sim_error *e)
{
    char msg[128];
    snprintf(msg, sizeof msg, "'%s' must be a string or a non-empty array of strings", param);
    if (json_is_string(v)) {
        take_text(a, json_string_value(v), json_string_length(v));
        return 0;
    }
    if (!json_is_array(v) || json_array_size(v) == 0) return bad(e, param, "%s", msg);
    if (json_array_size(v) > max) return bad(e, param, "%s", "too many inputs (at most 2048)");
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s) {
        if (!json_is_string(s)) return bad(e, param, "%s", msg);
        take_text(a, json_string_value(s), json_string_length(s));
    }
    return 0;
}

static int read_max_tokens(const sim_config *c, json_t *root, sim_request *rq, sim_error *e)
{
    const char *name = "max_completion_tokens";
    json_t *v = json_object_get(root, name);
    if (!v || json_is_null(v)) v = json_object_get(root, name = "max_tokens");
    rq->max_tokens = c->max_tokens_default;
    if (!v || json_is_null(v)) return 0;
    json_int_t n = json_is_integer(v) ? json_integer_value(v) : 0;
    if (n < 1 || n > SIM_MAX_TOKENS) {
        sim_error_set(e, 400, "invalid_request_error", "invalid_request", name,
                      "'%s' must be a whole number in [1, %d]", name, SIM_MAX_TOKENS);
        return -1;
    }
    rq->max_tokens = (int)n;
    return 0;
}

static int read_stream(json_t *root, sim_request *rq, sim_error *e)
{
    json_t *v = json_object_get(root, "stream");
    if (v && !json_is_null(v) && !json_is_boolean(v))
        return bad(e, "stream", "%s", "'stream' must be true or false");
    rq->stream = json_is_true(v);
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so) && !json_is_object(so))
        return bad(e, "stream_options", "%s", "'stream_options' must be an object");
    rq->include_usage = rq->stream && json_is_true(json_object_get(so, "include_usage"));
    return 0;
}

static void model_list(const sim_config *c, char *out, size_t len)
{
    size_t n = 0;
    out[0] = 0;
    for (int i = 0; i < c->n_models && n < len; i++)
        n += (size_t)snprintf(out + n, len - n, "%s%s", i ? ", " : "", c->models[i].name);
}

static int read_model(const sim_config *c, json_t *root, sim_request *rq, sim_error *e)
{
    json_t *v = json_object_get(root, "model");
    if (v && !json_is_string(v)) return bad(e, "model", "%s", "'model' must be a string");
    rq->model = sim_find_model(c, json_string_value(v));
    if (rq->model < 0 && c->single_model) rq->model = 0; /* one model, whatever the name */
    if (rq->model >= 0) return 0;
    char served[160];
    model_list(c, served, sizeof served);
    if (v)
        sim_error_set(e, 404, "invalid_request_error", "model_not_found", "model",
                      "the model '%.64s' is not served by this engine (it serves: %s)",
                      json_string_value(v), served);
    else
        sim_error_set(e, 404, "invalid_request_error", "model_not_found", "model",
                      "the request names no model (this engine serves: %s)", served);
    return -1;
}

/* A message's text: its string content, or its first text part. */
static const char *content_text(json_t *content)
{
    if (json_is_string(content)) return json_string_value(content);
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part) {
        const char *t = json_string_value(json_object_get(part, "text"));
        if (t) return t;
    }
    return NULL;
}

/* What --reply-map matches against: the last user turn, or the prompt. */
static const char *match_text(json_t *root, sim_kind kind)
{
    if (kind == SIM_COMPLETION) {
        json_t *p = json_object_get(root, "prompt");
        return json_string_value(json_is_array(p) ? json_array_get(p, 0) : p);
    }
    json_t *msgs = json_object_get(root, "messages");
    for (size_t i = json_array_size(msgs); i-- > 0;) {
        json_t *m = json_array_get(msgs, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (role && !strcmp(role, "user")) return content_text(json_object_get(m, "content"));
    }
    return NULL;
}

int sim_request_parse(const sim_config *c, sim_kind kind, const char *body, size_t len,
                      json_t **rootp, sim_request *rq, sim_error *e)
{
    memset(rq, 0, sizeof *rq);
    rq->kind = kind;
    *rootp = NULL;
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    if (!root) {
        sim_error_set(e, 400, "invalid_request_error", "invalid_json", NULL,
                      "the request body is not valid JSON: %s", je.text);
        return -1;
    }
    input_acc a = {SIM_HASH_INIT, 0};
    int rc = -1;
    if (!json_is_object(root)) {
        bad(e, NULL, "%s", "the request body must be a JSON object");
        goto out;
    }
    if (read_model(c, root, rq, e)) goto out;
    /* The model is part of the text's seed: two models answer differently. */
    a.hash = sim_hash(a.hash, c->models[rq->model].name, strlen(c->models[rq->model].name) + 1);
    if (kind == SIM_CHAT) {
        if (read_messages(json_object_get(root, "messages"), &a, e)) goto out;
    } else if (kind == SIM_COMPLETION) {
        if (read_strings(json_object_get(root, "prompt"), "prompt", SIZE_MAX, &a, e)) goto out;
    } else {
        rq->input = json_object_get(root, "input");
        if (read_strings(rq->input, "input", MAX_EMBED_INPUTS, &a, e)) goto out;
        json_t *fmt = json_object_get(root, "encoding_format");
        const char *f = json_string_value(fmt);
        if (fmt && !json_is_null(fmt) && (!f || (strcmp(f, "float") && strcmp(f, "base64")))) {
            bad(e, "encoding_format", "%s", "'encoding_format' must be \"float\" or \"base64\"");
            goto out;
        }
        rq->base64 = f && !strcmp(f, "base64");
    }
    if (kind != SIM_EMBEDDING && (read_max_tokens(c, root, rq, e) || read_stream(root, rq, e)))
        goto out;
    rq->prompt_tokens = a.words > 0 ? a.words : 1;
    rq->input_hash = a.hash;
    if (kind != SIM_EMBEDDING) {
        rq->match_text = match_text(root, kind);
        rq->reply = sim_replies_find(c->replies, rq->match_text);
        if (rq->reply) rq->max_tokens = sim_reply_pieces(rq->reply);
    }
    rc = 0;
out:
    if (rc) {
        json_decref(root);
        rq->input = NULL;
    } else {
        *rootp = root;
    }
    return rc;
}

/* ---- whole answers ---- */

json_t *sim_models_json(const sim_config *c, int64_t created_s)
{
    json_t *data = json_array();
    for (int i = 0; i < c->n_models; i++)
        json_array_append_new(
            data, json_pack("{s:s,s:s,s:s,s:I,s:{s:b,s:I}}", "id", c->models[i].name, "object",
                            "model", "owned_by", "gpupool-sim", "created", (json_int_t)created_s,
                            "meta", "simulated", 1, "vram_bytes",
                            (json_int_t)c->models[i].vram_bytes));
    return json_pack("{s:s,s:o}", "object", "list", "data", data);
}

static json_t *usage_json(int prompt, int completion)
{
    return json_pack("{s:i,s:i,s:i}", "prompt_tokens", prompt, "completion_tokens", completion,
                     "total_tokens", prompt + completion);
}

json_t *sim_completion_json(const sim_config *c, const sim_request *rq, const char *id,
                            int64_t created_s, const char *text)
{
    json_t *choice;
    const char *finish = rq->reply ? "stop" : "length";
    if (rq->kind == SIM_CHAT)
        choice = json_pack("{s:i,s:{s:s,s:s},s:n,s:s}", "index", 0, "message", "role", "assistant",
                           "content", text, "logprobs", "finish_reason", finish);
    else
        choice = json_pack("{s:s,s:i,s:n,s:s}", "text", text, "index", 0, "logprobs",
                           "finish_reason", finish);
    return json_pack("{s:s,s:s,s:I,s:s,s:s,s:[o],s:o}", "id", id, "object",
                     rq->kind == SIM_CHAT ? "chat.completion" : "text_completion", "created",
                     (json_int_t)created_s, "model", c->models[rq->model].name,
                     "system_fingerprint", "gpupool-sim", "choices", choice, "usage",
                     usage_json(rq->prompt_tokens, rq->max_tokens));
}

static void base64(const unsigned char *in, size_t n, char *out)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < n) v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < n) v |= in[i + 2];
        out[o++] = tbl[(v >> 18) & 63];
        out[o++] = tbl[(v >> 12) & 63];
        out[o++] = i + 1 < n ? tbl[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? tbl[v & 63] : '=';
    }
    out[o] = 0;
}

/* OpenAI's base64 form is the little-endian float32 array, which is what the
 * official clients ask for by default. */
static json_t *embedding_value(const float *v, int b64)
{
    if (!b64) {
        json_t *arr = json_array();
        for (int i = 0; i < SIM_EMBED_DIM; i++) json_array_append_new(arr, json_real(v[i]));
        return arr;
    }
    unsigned char raw[SIM_EMBED_DIM * 4];
    for (int i = 0; i < SIM_EMBED_DIM; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++) raw[4 * i + k] = (unsigned char)(u >> (8 * k));
    }
    char text[(SIM_EMBED_DIM * 4 + 2) / 3 * 4 + 1];
    base64(raw, sizeof raw, text);
    return json_string(text);
}

json_t *sim_embeddings_json(const sim_config *c, const sim_request *rq)
{
    json_t *data = json_array();
    size_t n = json_is_array(rq->input) ? json_array_size(rq->input) : 1;
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(rq->input) ? json_array_get(rq->input, i) : rq->input;
        float v[SIM_EMBED_DIM];
        sim_embed(c->seed, json_string_value(s), json_string_length(s), v);
        json_array_append_new(data, json_pack("{s:s,s:I,s:o}", "object", "embedding", "index",
                                              (json_int_t)i, "embedding",
                                              embedding_value(v, rq->base64)));
    }
    return json_pack("{s:s,s:o,s:s,s:{s:i,s:i}}", "object", "list", "data", data, "model",
                     c->models[rq->model].name, "usage", "prompt_tokens", rq->prompt_tokens,
                     "total_tokens", rq->prompt_tokens);
}

json_t *sim_slots_json(const sim_config *c, const sim_slots *s, int64_t now_us)
{
    json_t *arr = json_array();
    for (int i = 0; i < s->n; i++) {
        const sim_slot *sl = &s->slot[i];
        int done = sl->busy ? sim_tokens_done(c, sl->n_predict, now_us - sl->start_us) : 0;
        int n_predict = sl->busy ? sl->n_predict : -1;
        json_array_append_new(
            arr, json_pack("{s:i,s:I,s:i,s:b,s:b,s:s,s:{s:i,s:b},s:{s:b,s:b,s:i,s:i,s:s}}", "id", i,
                           "id_task", (json_int_t)sl->task, "n_ctx", SIM_N_CTX, "speculative", 0,
                           "is_processing", sl->busy, "model",
                           c->models[sl->busy ? sl->model : 0].name, "params", "n_predict",
                           n_predict, "stream", sl->busy && sl->stream, "next_token",
                           "has_next_token", sl->busy && done < sl->n_predict, "has_new_line", 0,
                           "n_remain", sl->busy ? sl->n_predict - done : -1, "n_decoded", done,
                           "stopping_word", ""));
    }
    return arr;
}

int sim_metrics_text(buf *out, const sim_slots *s, const sim_usage *u)
{
    return buf_printf(out,
                      "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n"
                      "# TYPE llamacpp:prompt_tokens_total counter\n"
                      "llamacpp:prompt_tokens_total %llu\n"
                      "# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.\n"
                      "# TYPE llamacpp:tokens_predicted_total counter\n"
                      "llamacpp:tokens_predicted_total %llu\n"
                      "# HELP llamacpp:requests_processing Number of requests processing.\n"
                      "# TYPE llamacpp:requests_processing gauge\n"
                      "llamacpp:requests_processing %d\n"
                      "# HELP llamacpp:requests_deferred Number of requests deferred.\n"
                      "# TYPE llamacpp:requests_deferred gauge\n"
                      "llamacpp:requests_deferred %d\n",
                      (unsigned long long)u->prompt_tokens,
                      (unsigned long long)u->completion_tokens, s->busy, s->waiting);
}

/* ---- SSE ---- */

void sim_sse_init(sim_sse *x, const sim_config *c, const sim_request *rq, const char *id,
                  int64_t created_s)
{
    /* Model names are restricted to characters that need no escaping. */
    x->chat = rq->kind == SIM_CHAT;
    x->include_usage = rq->include_usage;
    x->stop = rq->reply != NULL;
    int n = snprintf(x->head, sizeof x->head,
                     "data: {\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":\"%s\","
                     "\"system_fingerprint\":\"gpupool-sim\",\"choices\":[",
                     id, x->chat ? "chat.completion.chunk" : "text_completion",
                     (long long)created_s, c->models[rq->model].name);
    x->head_len = n < 0 ? 0 : (size_t)n >= sizeof x->head ? sizeof x->head - 1 : (size_t)n;
}

/* One event: head, the choices' contents, the tail. */
static int event(buf *out, const sim_sse *x, const char *choice_a, const char *mid,
                 const char *choice_b)
{
    int rc = buf_append(out, x->head, x->head_len);
    rc |= buf_puts(out, choice_a);
    if (mid) rc |= buf_puts(out, mid);
    if (choice_b) rc |= buf_puts(out, choice_b);
    rc |= buf_puts(out, x->include_usage ? "],\"usage\":null}\n\n" : "]}\n\n");
    return rc ? -1 : 0;
}

int sim_sse_role(buf *out, const sim_sse *x)
{
    return event(out, x,
                 "{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
                 "\"logprobs\":null,\"finish_reason\":null}",
                 NULL, NULL);
}

int sim_sse_token(buf *out, const sim_sse *x, const char *token)
{
    if (x->chat)
        return event(out, x, "{\"index\":0,\"delta\":{\"content\":\"", token,
                     "\"},\"logprobs\":null,\"finish_reason\":null}");
    return event(out, x, "{\"text\":\"", token,
                 "\",\"index\":0,\"logprobs\":null,\"finish_reason\":null}");
}

int sim_sse_text(buf *out, const sim_sse *x, const char *text, size_t len)
{
    buf esc = {0};
    int rc = buf_puts(&esc, "") || buf_put_json_text(&esc, text, len);
    if (!rc) rc = sim_sse_token(out, x, esc.data);
    buf_free(&esc);
    return rc ? -1 : 0;
}

int sim_sse_final(buf *out, const sim_sse *x)
{
    if (x->chat)
        return event(out, x, "{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":",
                     x->stop ? "\"stop\"" : "\"length\"", "}");
    return event(out, x, "{\"text\":\"\",\"index\":0,\"logprobs\":null,\"finish_reason\":",
                 x->stop ? "\"stop\"" : "\"length\"", "}");
}

int sim_sse_usage(buf *out, const sim_sse *x, int prompt_tokens, int completion_tokens)
{
    int rc = buf_append(out, x->head, x->head_len);
    rc |= buf_printf(out,
                     "],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n",
                     prompt_tokens, completion_tokens, prompt_tokens + completion_tokens);
    return rc ? -1 : 0;
}

int sim_sse_done(buf *out) { return buf_puts(out, "data: [DONE]\n\n"); }
