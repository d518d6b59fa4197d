/* worker/procs: which of this machine's processes are the worker's own, as
 * the owner rules need to know.  Owns reading /proc: a process's parent (so
 * an engine's children, such as Ollama's runners, count as the engine) and
 * the process listening on a local TCP port (so an engine the worker did not
 * start, but fronts, is not taken for the owner's work).  Seen from inside a
 * container without the host's PID namespace, the driver's pids match
 * nothing here. */
#ifndef GPUPOOL_PROCS_H
#define GPUPOOL_PROCS_H

#include <stddef.h>

/* Whether pid is one of roots or descends from one.  Reads /proc. */
int procs_descends_from(int pid, const int *roots, int nroots);
/* The pid of a process listening on TCP port `port` of this machine, or 0
 * when none can be found (or it belongs to a user whose descriptors we may
 * not read).  Reads /proc/net/tcp{,6} and /proc/[pid]/fd. */
int procs_tcp_listener(int port);

/* Pure parsers, for tests. */
/* The parent pid from the text of /proc/[pid]/stat; -1 when malformed. */
int procs_parse_ppid(const char *stat);
/* Socket inodes listening on `port` in the text of /proc/net/tcp or tcp6;
 * returns how many were stored (at most max). */
int procs_parse_listen(const char *text, int port, unsigned long *inodes, int max);
/* The port of an http:// URL whose host is this machine's loopback
 * (127.x.x.x, localhost, [::1]); 0 otherwise. */
int procs_loopback_port(const char *url);

#endif
