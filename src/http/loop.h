/* http/loop: the process's I/O threads.  Each waits on every socket the
 * HTTP server and the asynchronous HTTP client care about (epoll), runs
 * their timers, and runs work posted from other threads.  Serving a proxied
 * call then costs no hand-off between threads, as in an event-driven proxy. */
#ifndef GPUPOOL_HTTP_LOOP_H
#define GPUPOOL_HTTP_LOOP_H

#include <stdint.h>

typedef void (*io_fd_fn)(void *ctx, int fd, uint32_t events);
typedef struct io_timer io_timer;

#define IO_MAX_LOOPS 8

/* Starts loop 0 if it is not running; returns 0 or -1. */
int io_loop_start(void);
/* Starts loops until n run (at most IO_MAX_LOOPS); returns how many run.
 * Each loop is its own thread with its own sockets and timers: a server can
 * spread its connections over several, so that one core's worth of event
 * handling is not the limit. */
int io_loops_start(int n);
int io_loop_count(void);
/* Runs everything posted so far, then stops every loop thread. */
void io_loop_stop(void);
int io_on_loop(void);
/* The index of the loop this thread runs, or -1. */
int io_loop_index(void);

/* Runs fn(arg) soon on the loop this thread runs, or on loop 0 from any
 * other thread.  From a loop thread itself it still runs later, never inside
 * the caller. */
int io_post(void (*fn)(void *), void *arg);
/* The same on the given loop. */
int io_post_to(int loop, void (*fn)(void *), void *arg);
/* Runs fn(arg) on loop 0 (or the given loop) and waits for it. */
void io_run_sync(void (*fn)(void *), void *arg);
void io_run_sync_on(int loop, void (*fn)(void *), void *arg);

/* Watches fd for EPOLLIN/EPOLLOUT (0 = stop watching) on this thread's loop.
 * Loop threads only, as are the calls below. */
int io_watch(int fd, uint32_t events, io_fd_fn fn, void *ctx);
/* Stops delivering fd's events without a system call: the registration
 * stays, so watching it again with the same events costs nothing.  (A kept
 * connection between requests.)  An event that still arrives drops it. */
void io_idle(int fd);
/* fd is about to be closed: forget it (closing removes it from epoll). */
void io_forget(int fd);

/* One-shot timers; ms < 0 disarms.  Loop thread only. */
io_timer *io_timer_new(void (*fn)(void *), void *ctx);
void io_timer_set(io_timer *t, int64_t ms);
void io_timer_free(io_timer *t);

#endif
