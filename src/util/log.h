/* log: one-line, timestamped diagnostics on stderr.
 * The level comes from GPUPOOL_LOG (debug|info|warn|error, default info).
 * Wall time appears here only for display. */
#ifndef GPUPOOL_LOG_H
#define GPUPOOL_LOG_H

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };

void log_set_component(const char *name);
void log_msg(enum log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
