/* http/loop: the process's one I/O thread.  It waits on every socket the
 * HTTP server and the asynchronous HTTP client care about (epoll), runs
 * their timers, and runs work posted from other threads.  Serving a proxied
 * call then costs no hand-off between threads, as in an event-driven proxy. */
#ifndef GPUPOOL_HTTP_LOOP_H
#define GPUPOOL_HTTP_LOOP_H

#include <stdint.h>

typedef void (*io_fd_fn)(void *ctx, int fd, uint32_t events);
typedef struct io_timer io_timer;

/* Starts the loop thread if it is not running; returns 0 or -1. */
int io_loop_start(void);
/* Runs everything posted so far, then stops the thread. */
void io_loop_stop(void);
int io_on_loop(void);

/* Runs fn(arg) on the loop thread soon.  Any thread; from the loop thread
 * itself it still runs later, never inside the caller. */
int io_post(void (*fn)(void *), void *arg);
/* Runs fn(arg) on the loop thread and waits for it (not from the loop). */
void io_run_sync(void (*fn)(void *), void *arg);

/* Watches fd for EPOLLIN/EPOLLOUT (0 = stop watching).  Loop thread only. */
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
