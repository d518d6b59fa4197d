/* log: see log.h. */
#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *component = "gpupool";
static int min_level = -1;

void log_set_component(const char *name) { component = name; }

static int level_from_env(void)
{
    const char *v = getenv("GPUPOOL_LOG");
    if (!v) return LOG_INFO;
    if (!strcmp(v, "debug")) return LOG_DEBUG;
    if (!strcmp(v, "warn")) return LOG_WARN;
    if (!strcmp(v, "error")) return LOG_ERROR;
    return LOG_INFO;
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
    static const char *names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
    if (min_level < 0) min_level = level_from_env();
    if ((int)lvl < min_level) return;

    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s [%s] ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, names[lvl], component);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* One fputs per line keeps lines from concurrent threads whole. */
    size_t len = strlen(line);
    if (len < sizeof line - 1) { line[len] = '\n'; line[len + 1] = 0; }
    fputs(line, stderr);
}
