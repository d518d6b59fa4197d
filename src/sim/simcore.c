/* sim/simcore: see simcore.h.  Pure: no I/O, no clocks, no locks. */
#include "sim/simcore.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- configuration ---- */

void sim_config_defaults(sim_config *c)
{
    memset(c, 0, sizeof *c);
    c->ttft_ms = 200;
    c->tps = 50;
    c->slots = 4;
    c->seed = 42;
    c->max_tokens_default = 64;
}

/* Whole-string parses: a trailing letter or an empty value is an error, not
 * a silent zero, since a typo in a rate would otherwise disable a fault. */
static int parse_ll(const char *s, long long min, long long max, long long *out)
{
    if (!s || !*s) return -1;
    char *e;
    errno = 0;
    long long v = strtoll(s, &e, 10);
    if (errno || *e || v < min || v > max) return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double min, double max, double *out)
{
    if (!s || !*s) return -1;
    char *e;
    errno = 0;
    double v = strtod(s, &e);
    if (errno || *e || !isfinite(v) || v < min || v > max) return -1;
    *out = v;
    return 0;
}

static int parse_u64(const char *s, uint64_t *out)
{
    /* strtoull accepts "-1" and wraps it; a seed is never negative. */
    if (!s || *s < '0' || *s > '9') return -1;
    char *e;
    errno = 0;
    unsigned long long v = strtoull(s, &e, 10);
    if (errno || *e) return -1;
    *out = v;
    return 0;
}

static int name_char_ok(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           strchr("._-/:+@", ch) != NULL;
}

int sim_parse_model(const char *spec, sim_model *out, char *err, size_t errlen)
{
    const char *colon = strrchr(spec, ':');
    size_t nlen = colon ? (size_t)(colon - spec) : strlen(spec);
    double gb = SIM_DEFAULT_VRAM_GB;
    if (nlen == 0) {
        snprintf(err, errlen, "--model: '%s' has no model name (want NAME[:VRAM_GB])", spec);
        return -1;
    }
    if (nlen >= SIM_MODEL_NAME_MAX) {
        snprintf(err, errlen, "--model: name is longer than %d characters", SIM_MODEL_NAME_MAX - 1);
        return -1;
    }
    for (size_t i = 0; i < nlen; i++) {
        /* Names go into JSON unescaped on the streaming fast path. */
        if (!name_char_ok(spec[i])) {
            snprintf(err, errlen,
                     "--model: '%s': names may use letters, digits and ._-/:+@ only", spec);
            return -1;
        }
    }
    if (colon && parse_double(colon + 1, 1e-6, 4096, &gb)) {
        snprintf(err, errlen, "--model: '%s': VRAM must be a number of GB in (0, 4096]", spec);
        return -1;
    }
    memcpy(out->name, spec, nlen);
    out->name[nlen] = 0;
    out->vram_bytes = (uint64_t)llround(gb * 1073741824.0);
    return 0;
}

int sim_find_model(const sim_config *c, const char *name)
{
    if (!name) return -1;
    for (int i = 0; i < c->n_models; i++)
        if (!strcmp(c->models[i].name, name)) return i;
    return -1;
}

static int add_model(sim_config *c, const char *spec, char *err, size_t errlen)
{
    sim_model m;
    if (sim_parse_model(spec, &m, err, errlen)) return -1;
    if (sim_find_model(c, m.name) >= 0) {
        snprintf(err, errlen, "--model: '%s' is given twice", m.name);
        return -1;
    }
    if (c->n_models >= SIM_MAX_MODELS) {
        snprintf(err, errlen, "--model: at most %d models", SIM_MAX_MODELS);
        return -1;
    }
    c->models[c->n_models++] = m;
    return 0;
}

int sim_config_set(sim_config *c, const char *opt, const char *val, char *err, size_t errlen)
{
    long long ll;
    double d;
    if (!val) val = "";
    if (!strcmp(opt, "model")) return add_model(c, val, err, errlen);
    if (!strcmp(opt, "ttft-ms")) {
        if (parse_ll(val, 0, 3600000, &ll)) {
            snprintf(err, errlen, "--ttft-ms: '%s' is not a whole number of milliseconds in [0, 3600000]", val);
            return -1;
        }
        c->ttft_ms = ll;
        return 0;
    }
    if (!strcmp(opt, "tps")) {
        if (parse_double(val, 0, 1e6, &d)) {
            snprintf(err, errlen, "--tps: '%s' is not a number of tokens per second in [0, 1000000]", val);
            return -1;
        }
        c->tps = d;
        return 0;
    }
    if (!strcmp(opt, "slots")) {
        if (parse_ll(val, 1, SIM_MAX_SLOTS, &ll)) {
            snprintf(err, errlen, "--slots: '%s' is not a whole number in [1, %d]", val, SIM_MAX_SLOTS);
            return -1;
        }
        c->slots = (int)ll;
        return 0;
    }
    if (!strcmp(opt, "seed")) {
        if (parse_u64(val, &c->seed)) {
            snprintf(err, errlen, "--seed: '%s' is not a non-negative whole number", val);
            return -1;
        }
        return 0;
    }
    if (!strcmp(opt, "single-model")) {
        c->single_model = 1;
        return 0;
    }
    if (!strcmp(opt, "max-tokens-default")) {
        if (parse_ll(val, 1, SIM_MAX_TOKENS, &ll)) {
            snprintf(err, errlen, "--max-tokens-default: '%s' is not a whole number in [1, %d]", val,
                     SIM_MAX_TOKENS);
            return -1;
        }
        c->max_tokens_default = (int)ll;
        return 0;
    }
    if (!strcmp(opt, "fail-first")) {
        if (parse_ll(val, 0, 1000000000, &ll)) {
            snprintf(err, errlen, "--fail-first: '%s' is not a whole number of requests in [0, 1000000000]", val);
            return -1;
        }
        c->fail_first = (int)ll;
        return 0;
    }
    double *rate = !strcmp(opt, "error-rate") ? &c->error_rate
                   : !strcmp(opt, "hang-rate") ? &c->hang_rate
                   : !strcmp(opt, "drop-rate") ? &c->drop_rate
                                                : NULL;
    if (rate) {
        if (parse_double(val, 0, 1, rate)) {
            snprintf(err, errlen, "--%s: '%s' is not a fraction in [0, 1]", opt, val);
            return -1;
        }
        return 0;
    }
    snprintf(err, errlen, "unknown option '--%s'", opt);
    return -1;
}

int sim_config_finish(sim_config *c, char *err, size_t errlen)
{
    if (c->error_rate + c->hang_rate + c->drop_rate > 1.0 + 1e-9) {
        snprintf(err, errlen,
                 "--error-rate + --hang-rate + --drop-rate is %.3g; together they must be at most 1",
                 c->error_rate + c->hang_rate + c->drop_rate);
        return -1;
    }
    if (c->n_models == 0) {
        snprintf(c->models[0].name, sizeof c->models[0].name, "%s", SIM_DEFAULT_MODEL);
        c->models[0].vram_bytes = (uint64_t)llround(SIM_DEFAULT_VRAM_GB * 1073741824.0);
        c->n_models = 1;
    }
    return 0;
}

/* ---- deterministic text ---- */

uint64_t sim_hash(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

uint64_t sim_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The seed goes in byte by byte so results do not depend on endianness. */
static uint64_t hash_u64(uint64_t h, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
    return sim_hash(h, b, 8);
}

/* Plain lower-case words and two punctuation marks: nothing that needs JSON
 * escaping (the streaming path relies on that). */
static const char *const words[] = {
    " the", " a", " river", " mountain", " quiet", " engine", " signal", " garden",
    " of", " and", " to", " in", " light", " morning", " stone", " window",
    " follows", " carries", " turns", " holds", " slowly", " bright", " old", " new",
    " city", " field", " road", " cloud", " paper", " song", " winter", " summer",
    " builds", " finds", " keeps", " opens", " under", " over", " near", " beyond",
    " little", " distant", " green", " silver", " simple", " careful", " open", " small",
    " bridge", " harbor", " lantern", " forest", " valley", " market", " letter", " story",
};
static const char *const puncts[] = {",", "."};
#define N_WORDS (sizeof words / sizeof words[0])

void sim_gen_init(sim_gen *g, uint64_t seed, uint64_t input_hash)
{
    g->state = hash_u64(input_hash, seed);
    g->n = 0;
    g->prev_punct = 1; /* no punctuation right after the marker */
}

const char *sim_gen_next(sim_gen *g)
{
    if (g->n++ == 0) return SIM_FIRST_TOKEN;
    uint64_t r = sim_splitmix64(&g->state);
    /* About one token in eight is punctuation, never two in a row. */
    if (!g->prev_punct && (r & 7) == 0) {
        g->prev_punct = 1;
        return puncts[(r >> 3) & 1];
    }
    g->prev_punct = 0;
    return words[(r >> 8) % N_WORDS];
}

int sim_count_words(const char *s, size_t len)
{
    int n = 0, in_word = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        int space = ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
        if (!space && !in_word) n++;
        in_word = !space;
    }
    return n;
}

void sim_embed(uint64_t seed, const char *text, size_t len, float out[SIM_EMBED_DIM])
{
    uint64_t st = sim_hash(hash_u64(SIM_HASH_INIT, seed), text, len);
    double v[SIM_EMBED_DIM], sum = 0;
    for (int i = 0; i < SIM_EMBED_DIM; i++) {
        v[i] = (double)(sim_splitmix64(&st) >> 11) * 0x1.0p-53 * 2.0 - 1.0;
        sum += v[i] * v[i];
    }
    double norm = sqrt(sum);
    for (int i = 0; i < SIM_EMBED_DIM; i++)
        out[i] = norm > 0 ? (float)(v[i] / norm) : (i == 0 ? 1.0f : 0.0f);
}

/* ---- faults ---- */

int sim_fails_first(const sim_config *c, uint64_t text_seq) { return text_seq < (uint64_t)c->fail_first; }

sim_fault sim_fault_draw(const sim_config *c, uint64_t seq, int streaming)
{
    /* Indexed by seq rather than a running state, so concurrent requests only
     * need an atomic counter and the sequence is the same for a given seed. */
    uint64_t st = hash_u64(hash_u64(SIM_HASH_INIT, c->seed), seq);
    double u = (double)(sim_splitmix64(&st) >> 11) * 0x1.0p-53;
    if (u < c->error_rate) return SIM_FAULT_ERROR;
    u -= c->error_rate;
    if (u < c->hang_rate) return SIM_FAULT_HANG;
    u -= c->hang_rate;
    if (u < c->drop_rate) return streaming ? SIM_FAULT_DROP : SIM_FAULT_NONE;
    return SIM_FAULT_NONE;
}

/* ---- pacing ---- */

int64_t sim_token_due_us(const sim_config *c, int i)
{
    int64_t t = c->ttft_ms * 1000;
    if (c->tps > 0 && i > 0) t += (int64_t)((double)i * 1e6 / c->tps);
    return t;
}

int sim_tokens_done(const sim_config *c, int n, int64_t elapsed_us)
{
    if (elapsed_us < c->ttft_ms * 1000) return 0;
    if (c->tps <= 0) return n;
    double k = floor((double)(elapsed_us - c->ttft_ms * 1000) * c->tps / 1e6) + 1;
    return k >= n ? n : (int)k;
}

int sim_drop_after(int n) { return n <= 1 ? 1 : (n + 1) / 2; }

/* ---- slots ---- */

int sim_slots_init(sim_slots *s, int n)
{
    memset(s, 0, sizeof *s);
    s->slot = calloc((size_t)n, sizeof *s->slot);
    if (!s->slot) return -1;
    s->n = n;
    for (int i = 0; i < n; i++) s->slot[i].task = -1;
    return 0;
}

void sim_slots_free(sim_slots *s)
{
    free(s->slot);
    memset(s, 0, sizeof *s);
}

int sim_slots_try_take(sim_slots *s, sim_waiter *w, int model, int n_predict, int stream,
                       int64_t now_us)
{
    if (s->busy >= s->n) return -1;
    if (w ? s->head != w : s->head != NULL) return -1;
    if (w) sim_slots_leave(s, w);
    int id = 0;
    while (s->slot[id].busy) id++;
    sim_slot *sl = &s->slot[id];
    sl->busy = 1;
    sl->task = s->next_task++;
    sl->model = model;
    sl->n_predict = n_predict;
    sl->stream = stream;
    sl->start_us = now_us;
    s->busy++;
    return id;
}

void sim_slots_enqueue(sim_slots *s, sim_waiter *w)
{
    w->next = NULL;
    w->prev = s->tail;
    if (s->tail) s->tail->next = w;
    else s->head = w;
    s->tail = w;
    s->waiting++;
}

void sim_slots_leave(sim_slots *s, sim_waiter *w)
{
    if (w->prev) w->prev->next = w->next;
    else s->head = w->next;
    if (w->next) w->next->prev = w->prev;
    else s->tail = w->prev;
    w->next = w->prev = NULL;
    s->waiting--;
}

void sim_slots_release(sim_slots *s, int id)
{
    if (id < 0 || id >= s->n || !s->slot[id].busy) return;
    s->slot[id].busy = 0;
    s->slot[id].task = -1;
    s->busy--;
}

int sim_slots_should_wake(const sim_slots *s) { return s->head && s->busy < s->n; }

/* ---- usage ---- */

void sim_usage_add(sim_usage *u, int prompt_tokens, int completion_tokens)
{
    u->requests++;
    u->prompt_tokens += (uint64_t)(prompt_tokens > 0 ? prompt_tokens : 0);
    u->completion_tokens += (uint64_t)(completion_tokens > 0 ? completion_tokens : 0);
}
