/* policy/classify: see classify.h. */
#include "policy/classify.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

int classify_request(const detect_rules *rules, const json_t *body, const char *header, int key_private,
                     classification *out)
{
    memset(out, 0, sizeof *out);
    if (header && strcasecmp(header, "private") && strcasecmp(header, "normal")) return -1;
    detect_result d = {0};
    if (rules && detect_request(rules, body, &d) != 0) d.sensitive = 1; /* fail closed */
    if (d.sensitive) {
        out->is_private = 1;
        snprintf(out->rule, sizeof out->rule, "%s", d.first_rule[0] ? d.first_rule : "error");
    } else if (header && !strcasecmp(header, "private")) {
        out->is_private = 1;
        snprintf(out->rule, sizeof out->rule, "header");
    } else if (key_private) {
        out->is_private = 1;
        snprintf(out->rule, sizeof out->rule, "api_key");
    }
    return 0;
}
