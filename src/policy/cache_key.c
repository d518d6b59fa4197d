/* policy/cache_key: see cache_key.h.  The exact part is one SHA-256 over
 * length-framed fields, so no two different field lists hash alike by
 * concatenation; JSON values are hashed in their compact, key-sorted form so
 * that key order in the request does not matter. */
#include "policy/cache_key.h"
#include "policy/embed.h"

#include <openssl/evp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/buf.h"

/* Top-level fields that cannot change the answer's content. */
static const char *const NEUTRAL[] = {"messages", "model", "stream", "stream_options", "user",
                                      "temperature", NULL};

int cache_no_cache_header(const char *v)
{
    while (v && *v) {
        v += strspn(v, " \t,");
        size_t n = strcspn(v, ",");
        size_t k = n;
        while (k && (v[k - 1] == ' ' || v[k - 1] == '\t')) k--;
        if ((k == 8 && strncasecmp(v, "no-cache", 8) == 0) || (k == 8 && strncasecmp(v, "no-store", 8) == 0))
            return 1;
        v += n;
    }
    return 0;
}

/* A message's text (parts joined by newlines) into b; -1 when it holds
 * anything but text, -2 when memory ran out. */
static int message_text(const json_t *msg, buf *b)
{
    if (json_object_get(msg, "audio")) return -1;
    const json_t *c = json_object_get(msg, "content");
    if (!c || json_is_null(c)) return 0;
    if (json_is_string(c)) return buf_append(b, json_string_value(c), json_string_length(c)) == 0 ? 0 : -2;
    if (!json_is_array(c)) return -1;
    size_t i;
    const json_t *part;
    json_array_foreach(c, i, part) {
        const json_t *t = json_is_string(part) ? part : json_object_get(part, "text");
        const char *type = json_string_value(json_object_get(part, "type"));
        if (!json_is_string(t) || (type && strcmp(type, "text") != 0)) return -1;
        if ((i && buf_append(b, "\n", 1) != 0) || buf_append(b, json_string_value(t), json_string_length(t)) != 0)
            return -2;
    }
    return 0;
}

static int is_system(const json_t *msg)
{
    const char *r = json_string_value(json_object_get(msg, "role"));
    return r && (strcmp(r, "system") == 0 || strcmp(r, "developer") == 0);
}

const char *cache_skip_reason(const json_t *body, double max_temperature, int no_cache)
{
    if (no_cache) return "no_cache";
    const json_t *msgs = json_object_get(body, "messages");
    size_t n = json_array_size(msgs);
    if (!json_is_object(body) || !n) return "not_chat";
    const json_t *t = json_object_get(body, "temperature");
    if (t && !json_is_null(t) && !json_is_number(t)) return "temperature";
    double temp = json_is_number(t) ? json_number_value(t) : 1.0;
    if (!(temp <= max_temperature)) return "temperature";
    const char *role = json_string_value(json_object_get(json_array_get(msgs, n - 1), "role"));
    if (!role || strcmp(role, "user") != 0) return "last_not_user";
    buf b = {0};
    const char *why = NULL;
    for (size_t i = 0; i < n && !why; i++) {
        const json_t *m = json_array_get(msgs, i);
        if (!json_is_object(m)) why = "not_chat";
        else if (message_text(m, &b) == -1) why = "non_text_content";
        buf_reset(&b);
    }
    buf_free(&b);
    return why;
}

static int feed(EVP_MD_CTX *md, char tag, const void *p, size_t n)
{
    uint64_t len = n;
    return EVP_DigestUpdate(md, &tag, 1) == 1 && EVP_DigestUpdate(md, &len, sizeof len) == 1 &&
                   EVP_DigestUpdate(md, p, n) == 1
               ? 0
               : -1;
}

static int feed_json(EVP_MD_CTX *md, char tag, const json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    if (!s) return -1;
    int rc = feed(md, tag, s, strlen(s));
    free(s);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every parameter but the neutral ones, in key order. */
static int feed_params(EVP_MD_CTX *md, const json_t *body)
{
    size_t n = json_object_size(body), k = 0;
    const char **keys = malloc((n ? n : 1) * sizeof *keys);
    if (!keys) return -1;
    const char *name;
    const json_t *v;
    json_object_foreach((json_t *)body, name, v) {
        int neutral = 0;
        for (int i = 0; NEUTRAL[i]; i++) neutral |= strcmp(name, NEUTRAL[i]) == 0;
        if (!neutral) keys[k++] = name;
    }
    qsort(keys, k, sizeof *keys, cmp_str);
    int rc = 0;
    for (size_t i = 0; i < k && rc == 0; i++)
        rc = feed(md, 'k', keys[i], strlen(keys[i])) || feed_json(md, 'v', json_object_get(body, keys[i]));
    free(keys);
    return rc ? -1 : 0;
}

/* A message: everything but its content as JSON, and its content's
 * normalised text (into *norm when norm is not NULL, else hashed). */
static int feed_message(EVP_MD_CTX *md, char tag, const json_t *msg, char **norm, size_t *norm_len)
{
    json_t *rest = json_copy((json_t *)msg);
    buf b = {0};
    int rc = rest ? 0 : -1;
    if (rc == 0) json_object_del(rest, "content");
    if (rc == 0) rc = feed_json(md, tag, rest);
    if (rc == 0) rc = message_text(msg, &b) == 0 ? 0 : -1;
    size_t n = 0;
    char *t = rc == 0 ? embed_normalise(b.data ? b.data : "", b.len, &n) : NULL;
    if (rc == 0 && !t) rc = -1;
    if (rc == 0 && norm) {
        *norm = t;
        *norm_len = n;
        t = NULL;
    } else if (rc == 0) {
        rc = feed(md, 't', t, n);
    }
    free(t);
    buf_free(&b);
    json_decref(rest);
    return rc;
}

int cache_key_build(const json_t *body, int turns, const char *partition, cache_tier tier, cache_key *key,
                    char **text, size_t *text_len)
{
    *text = NULL;
    *text_len = 0;
    const json_t *msgs = json_object_get(body, "messages");
    const char *model = json_string_value(json_object_get(body, "model"));
    size_t n = json_array_size(msgs);
    if (!model || !n) return -1;
    memset(key, 0, sizeof *key);
    key->model = model;
    key->partition = partition ? partition : "";
    key->tier = tier;

    EVP_MD_CTX *md = EVP_MD_CTX_new();
    int rc = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 ? 0 : -1;
    static const char version[] = "gpupool-cache-key-v1";
    if (rc == 0) rc = feed(md, 'V', version, sizeof version - 1);
    if (rc == 0) rc = feed_params(md, body);
    /* The window: the last turns-1 non-system messages before the last one. */
    size_t others = 0, seen = 0;
    for (size_t i = 0; i + 1 < n; i++) others += !is_system(json_array_get(msgs, i));
    for (size_t i = 0; i + 1 < n && rc == 0; i++) {
        const json_t *m = json_array_get(msgs, i);
        if (is_system(m)) {
            rc = feed_message(md, 'S', m, NULL, NULL);
            continue;
        }
        if (turns <= 0 || seen++ + (size_t)(turns - 1) >= others) rc = feed_message(md, 'M', m, NULL, NULL);
    }
    if (rc == 0) rc = feed_message(md, 'L', json_array_get(msgs, n - 1), text, text_len);
    unsigned int len = 0;
    if (rc == 0 && EVP_DigestFinal_ex(md, key->context, &len) != 1) rc = -1;
    EVP_MD_CTX_free(md);
    if (rc != 0) {
        free(*text);
        *text = NULL;
        *text_len = 0;
    }
    return rc ? -1 : 0;
}
