/* fuzz_apps: libFuzzer target for the parsers of prompt apps: any bytes as
 * an --apps config, as a template and as a condition must neither crash nor
 * leak; input that parses as JSON also goes through the schema checker, and
 * a schema the checker accepts is applied to the document itself and to
 * the template's rendering.  Built and run by fuzz/run_apps.sh. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "apps/appcfg.h"
#include "apps/cond.h"
#include "apps/jschema.h"
#include "apps/stage.h"
#include "apps/template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    char err[512];
    apps_cfg_free(apps_cfg_parse(text, size, err, sizeof err));

    json_t *doc = json_loadb(text, size, JSON_DECODE_ANY, NULL);
    json_t *ctx = json_is_object(doc) ? json_incref(doc) : json_pack("{s:s,s:{s:{s:i}}}", "a", "b", "stages", "s", "n", 1);
    char *out = tmpl_render(text, ctx, err, sizeof err);
    if (!out != (tmpl_check(text, err, sizeof err) != 0)) abort(); /* checking and rendering agree */
    if (cond_eval(text, ctx, err, sizeof err) < -1) abort();
    jschema_error e;
    if (doc && jschema_check(doc, &e) == 0) {
        jschema_validate(doc, doc, &e);
        json_t *s = json_string(out ? out : "");
        if (s) jschema_validate(doc, s, &e);
        json_decref(s);
    }
    json_t *def = json_pack("{s:s,s:s,s:O?}", "name", "x", "model", "m", "output_schema", doc);
    json_t *o = NULL;
    if (def && stage_judge(def, text, &o, err, sizeof err) == 0 && !o) abort();
    json_decref(o);
    json_decref(def);
    free(out);
    json_decref(ctx);
    json_decref(doc);
    free(text);
    return 0;
}
