/* util/opts: what every subcommand's option parsing shares: a config file
 * expanded into options (so flags given after it override it), sizes with
 * units, and small file helpers. */
#ifndef GPUPOOL_OPTS_H
#define GPUPOOL_OPTS_H

#include <stddef.h>
#include <stdint.h>

/* If argv holds `--config FILE` (or --config=FILE), returns a new argv with
 * the file's `key = value` lines inserted as `--key=value` right after
 * argv[0], and the --config option removed.  Lines starting with # are
 * comments.  Returns NULL with a one-line reason on a bad file.  Free with
 * opts_free_argv. */
char **opts_expand_config(int argc, char **argv, int *out_argc, char *err, size_t errlen);
void opts_free_argv(char **argv);

/* "8M", "512k", "1G", "1048576" (binary units) -> bytes; -1 when malformed. */
int64_t opts_parse_size(const char *s);
/* A whole number in [min, max], else -1 with err set. */
int opts_parse_int(const char *s, long min, long max, long *out);

/* Writes content to path via a temporary file and rename, mode 0600. */
int write_file_atomic(const char *path, const char *content);
/* Writes "PORT\n" atomically, for scripts and tests that started us on port 0. */
int write_port_file(const char *path, int port);
/* Reads a small text file, trims trailing whitespace; NULL if unreadable. */
char *read_small_file(const char *path, size_t max);
/* mkdir -p, mode 0700 for what it creates.  0 when dir is a directory at the
 * end; -1 with errno set (ENOTDIR when something else is in the way). */
int make_dirs(const char *dir);

/* Blocks SIGINT and SIGTERM in the calling thread (call before starting any
 * thread, so all inherit it; the main thread then takes them with sigwait)
 * and ignores SIGPIPE, which a closed peer would otherwise raise. */
#include <signal.h>
void block_stop_signals(sigset_t *set);

#endif
