/* unit: the OpenAPI document compiled into the binary is kept in step with
 * the code: every route the router answers is documented and every
 * documented operation is routed; the error codes it lists are the ones
 * api/errors knows, the ones docs/api.md lists, and every literal code the
 * handlers in src/api pass to api_error; every $ref resolves.  (Its validity
 * as OpenAPI 3.1 is checked by a real validator: tests/openapi/validate.sh.)
 * Runs from the repository root, where docs/ and src/ are. */
#include <ctype.h>
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <cmocka.h>
#include <jansson.h>

#include "api/errors.h"
#include "api/openapi.h"
#include "api/routes.h"

static json_t *doc(void)
{
    size_t len;
    const char *text = api_openapi_doc(&len);
    json_error_t e;
    json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &e);
    if (!j) fail_msg("docs/openapi.json does not parse: %s (line %d)", e.text, e.line);
    return j;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    return s;
}

static void lower(const char *in, char *out, size_t n)
{
    size_t i = 0;
    for (; in[i] && i + 1 < n; i++) out[i] = (char)tolower((unsigned char)in[i]);
    out[i] = 0;
}

static void is_openapi_31_and_the_file(void **state)
{
    (void)state;
    json_t *d = doc();
    assert_string_equal(json_string_value(json_object_get(d, "openapi")), "3.1.0");
    json_decref(d);
    /* The bytes served are docs/openapi.json's: a stale build would show. */
    char *file = slurp("docs/openapi.json");
    if (!file) skip();
    size_t len;
    const char *text = api_openapi_doc(&len);
    assert_int_equal(strlen(file), len);
    assert_memory_equal(file, text, len);
    free(file);
}

static void every_route_is_documented(void **state)
{
    (void)state;
    json_t *d = doc(), *paths = json_object_get(d, "paths");
    size_t n;
    const api_route *r = api_routes(&n);
    for (size_t i = 0; i < n; i++) {
        json_t *item = json_object_get(paths, r[i].path);
        char m[16];
        lower(r[i].method, m, sizeof m);
        if (r[i].internal) {
            if (item) fail_msg("%s is the workers' control plane; it should not be in the public document", r[i].path);
            continue;
        }
        if (!item || !json_object_get(item, m))
            fail_msg("the router answers %s %s but docs/openapi.json does not describe it", r[i].method, r[i].path);
        json_t *o = json_object_get(item, m);
        assert_non_null(json_object_get(o, "operationId"));
        /* Open routes say so; the others need the bearer scheme. */
        json_t *sec = json_object_get(o, "security");
        if (r[i].auth == AUTH_OPEN) {
            if (!json_is_array(sec) || json_array_size(sec) != 0)
                fail_msg("%s %s needs no key; its operation should have \"security\": []", r[i].method, r[i].path);
        } else if (sec) {
            fail_msg("%s %s needs a key; it should keep the document's bearer security", r[i].method, r[i].path);
        }
    }
    json_decref(d);
}

static void every_documented_operation_is_routed(void **state)
{
    (void)state;
    static const char *const methods[] = {"get", "put", "post", "delete", "options", "head", "patch", "trace"};
    json_t *d = doc(), *paths = json_object_get(d, "paths");
    const char *path;
    json_t *item;
    size_t n;
    const api_route *r = api_routes(&n);
    json_object_foreach(paths, path, item) {
        for (size_t k = 0; k < sizeof methods / sizeof methods[0]; k++) {
            if (!json_object_get(item, methods[k])) continue;
            int found = 0;
            for (size_t i = 0; i < n && !found; i++)
                found = !strcmp(r[i].path, path) && !strcasecmp(r[i].method, methods[k]);
            if (!found) fail_msg("docs/openapi.json describes %s %s but the router has no such route", methods[k], path);
        }
    }
    json_decref(d);
}

static int in_enum(json_t *e, const char *code)
{
    size_t i;
    json_t *v;
    json_array_foreach(e, i, v) if (!strcmp(json_string_value(v), code)) return 1;
    return 0;
}

static void error_codes_match_the_code_and_api_md(void **state)
{
    (void)state;
    json_t *d = doc();
    json_t *e = json_object_get(json_object_get(json_object_get(json_object_get(d, "components"), "schemas"),
                                                "ErrorCode"), "enum");
    assert_true(json_is_array(e));
    size_t n;
    const api_error_code *codes = api_error_codes(&n);
    assert_int_equal(json_array_size(e), n);
    char *md = slurp("docs/api.md");
    for (size_t i = 0; i < n; i++) {
        if (!in_enum(e, codes[i].code)) fail_msg("error code %s is not in the document's ErrorCode", codes[i].code);
        char quoted[80];
        snprintf(quoted, sizeof quoted, "`%s`", codes[i].code);
        if (md && !strstr(md, quoted)) fail_msg("error code %s is not in docs/api.md", codes[i].code);
    }
    free(md);
    json_decref(d);
}

/* The string literal passed as the code in an api_error-style call at p
 * (just after its opening parenthesis), or 0 when the code is not a
 * literal.  api_error(r, STATUS, "type", "code", …),
 * api_server_error(r, STATUS, "code", …), api_bad_request(r, "code", …). */
static int code_literal(const char *p, int skip_args, char *out, size_t n)
{
    for (int a = 0; a < skip_args; a++) {
        /* Skips one argument: up to the next comma outside quotes. */
        int q = 0;
        while (*p && (q || *p != ',')) {
            if (*p == '"' && p[-1] != '\\') q = !q;
            p++;
        }
        if (!*p) return 0;
        p++;
    }
    while (*p == ' ' || *p == '\n') p++;
    if (*p != '"') return 0;
    const char *end = strchr(p + 1, '"');
    if (!end || (size_t)(end - p - 1) >= n) return 0;
    memcpy(out, p + 1, (size_t)(end - p - 1));
    out[end - p - 1] = 0;
    return 1;
}

static void handlers_use_only_listed_codes(void **state)
{
    (void)state;
    DIR *dir = opendir("src/api");
    if (!dir) skip();
    static const struct { const char *call; int skip; } calls[] = {
        {"api_error(", 3}, {"api_server_error(", 2}, {"api_bad_request(", 1}};
    struct dirent *de;
    int seen = 0;
    while ((de = readdir(dir))) {
        size_t l = strlen(de->d_name);
        if (l < 3 || strcmp(de->d_name + l - 2, ".c")) continue;
        char path[512];
        snprintf(path, sizeof path, "src/api/%s", de->d_name);
        char *src = slurp(path);
        for (size_t c = 0; src && c < sizeof calls / sizeof calls[0]; c++) {
            for (const char *p = strstr(src, calls[c].call); p; p = strstr(p + 1, calls[c].call)) {
                if (p > src && (isalnum((unsigned char)p[-1]) || p[-1] == '_')) continue;
                char code[64];
                if (!code_literal(p + strlen(calls[c].call), calls[c].skip, code, sizeof code)) continue;
                seen++;
                /* Nobody reads the answer to a client that left. */
                if (!strcmp(code, "client_closed")) continue;
                if (!api_error_code_known(code))
                    fail_msg("%s answers error code '%s', which api/errors.c, docs/api.md and docs/openapi.json "
                             "do not list", path, code);
            }
        }
        free(src);
    }
    closedir(dir);
    assert_true(seen > 20); /* the scan found the handlers' calls at all */
}

static void check_refs(json_t *root, json_t *j)
{
    if (json_is_object(j)) {
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) {
            if (!strcmp(k, "$ref") && json_is_string(v)) {
                const char *ref = json_string_value(v);
                if (strncmp(ref, "#/", 2)) fail_msg("$ref %s is not local", ref);
                char copy[256];
                snprintf(copy, sizeof copy, "%s", ref + 2);
                json_t *at = root;
                char *save = NULL;
                for (char *part = strtok_r(copy, "/", &save); part && at; part = strtok_r(NULL, "/", &save))
                    at = json_object_get(at, part);
                if (!at) fail_msg("$ref %s points nowhere", ref);
            } else {
                check_refs(root, v);
            }
        }
    } else if (json_is_array(j)) {
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) check_refs(root, v);
    }
}

static void refs_resolve(void **state)
{
    (void)state;
    json_t *d = doc();
    check_refs(d, d);
    json_decref(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(is_openapi_31_and_the_file),
        cmocka_unit_test(every_route_is_documented),
        cmocka_unit_test(every_documented_operation_is_routed),
        cmocka_unit_test(error_codes_match_the_code_and_api_md),
        cmocka_unit_test(handlers_use_only_listed_codes),
        cmocka_unit_test(refs_resolve),
    };
    return cmocka_run_group_tests_name("openapi", tests, NULL, NULL);
}
