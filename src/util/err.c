/* util/err: see err.h. */
#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>

int err_out(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        /* One line, whatever a library's message holds. */
        for (char *p = err; *p; p++)
            if (*p == '\n' || *p == '\r') *p = ' ';
    }
    return -1;
}
