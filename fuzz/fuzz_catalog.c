/* fuzz_catalog: libFuzzer target for the model catalogue's parser and what
 * a parsed catalogue feeds: alias resolution, per-node settings, the view a
 * node is sent (and its etag) and the entry as people see it.  Any input must end in a catalogue
 * or a one-line error: no crash, no sanitizer report, no leak.  Built and
 * run by fuzz/run_catalog.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/catalog.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[400];
    catalog *c = catalog_parse((const char *)data, size, err, sizeof err);
    if (!c) {
        if (!err[0] || strchr(err, '\n')) abort();
        return 0;
    }
    for (int i = 0; i < c->n; i++) {
        const cat_entry *e = &c->e[i];
        if (catalog_find(c, e->name) != e || strcmp(catalog_resolve(c, e->name), e->name)) abort();
        for (int k = 0; k < e->naliases; k++)
            if (catalog_find(c, e->aliases[k]) != e) abort();
        cat_settings s;
        catalog_settings_for(e, e->noverrides ? e->overrides[0].node : "none", &s);
        json_t *j = catalog_entry_json(e);
        json_decref(j);
    }
    json_t *view = catalog_node_json(c, c->n && c->e[0].noverrides ? c->e[0].overrides[0].node : "none");
    if (!view || json_array_size(json_object_get(view, "models")) != (size_t)c->n) abort();
    json_decref(view);
    catalog_free(c);
    return 0;
}
