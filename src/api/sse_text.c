/* api/sse_text: see sse_text.h. */
#include "api/sse_text.h"

#include <jansson.h>
#include <string.h>

/* The text one chunk adds: a chat delta's content, or a completion's text. */
static const char *chunk_text(json_t *chunk)
{
    json_t *choice = json_array_get(json_object_get(chunk, "choices"), 0);
    const char *t = json_string_value(json_object_get(json_object_get(choice, "delta"), "content"));
    return t ? t : json_string_value(json_object_get(choice, "text"));
}

int sse_collect_text(const char *events, size_t len, buf *text)
{
    int n = 0;
    const char *p = events, *end = events + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *line_end = nl ? nl : end;
        size_t l = (size_t)(line_end - p);
        if (l && p[l - 1] == '\r') l--;
        if (l > 5 && !strncmp(p, "data:", 5)) {
            const char *d = p + 5;
            size_t dl = l - 5;
            while (dl && *d == ' ') { d++; dl--; }
            json_t *chunk = json_loadb(d, dl, 0, NULL);
            const char *t = chunk_text(chunk);
            if (t && *t) {
                buf_append(text, t, strlen(t));
                n++;
            }
            json_decref(chunk);
        }
        p = nl ? nl + 1 : end;
    }
    return n;
}
