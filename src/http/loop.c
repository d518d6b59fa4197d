/* http/loop: see loop.h. */
#include "http/loop.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"

#define MAX_TIMERS 64

typedef struct watch {
    int fd;
    uint32_t events; /* registered with epoll */
    int idle;        /* registered, but nobody wants its events now */
    int dead;        /* dropped while events were being delivered */
    io_fd_fn fn;
    void *ctx;
    struct watch *next;
} watch;

struct io_timer {
    void (*fn)(void *);
    void *ctx;
    int64_t due_us; /* 0 = disarmed */
};

typedef struct post {
    void (*fn)(void *);
    void *arg;
    struct post *next;
} post;

typedef struct io_loop {
    pthread_mutex_t mu;     /* posts, start/stop */
    int index;
    int running, stopping;
    pthread_t thread;
    int epfd, evfd;
    post *head, *tail;
    int sleeping;           /* in epoll_wait: posts must write the eventfd */
    watch *watches;         /* loop thread only */
    int delivering;         /* in the middle of a batch of events */
    watch *dropped;         /* dropped during it: freed after it, since later events of the batch may name them */
    io_timer *timers[MAX_TIMERS];
    int ntimers;
} io_loop;

static io_loop loops[IO_MAX_LOOPS];
static pthread_mutex_t start_mu = PTHREAD_MUTEX_INITIALIZER;
static int nloops; /* started so far; they run until io_loop_stop */

/* The loop this thread runs, if any: the watches and timers of a call are
 * those of the loop it is made on. */
static __thread io_loop *cur;
#define L (*cur)

int io_on_loop(void) { return cur != NULL; }
int io_loop_index(void) { return cur ? cur->index : -1; }

int io_loop_count(void)
{
    pthread_mutex_lock(&start_mu);
    int n = nloops;
    pthread_mutex_unlock(&start_mu);
    return n;
}

static watch *find_watch(int fd)
{
    for (watch *w = L.watches; w; w = w->next)
        if (w->fd == fd) return w;
    return NULL;
}

static void drop_watch(watch *w)
{
    for (watch **pp = &L.watches; *pp; pp = &(*pp)->next)
        if (*pp == w) { *pp = w->next; break; }
    if (L.delivering) {
        w->dead = 1;
        w->next = L.dropped;
        L.dropped = w;
        return;
    }
    free(w);
}

int io_watch(int fd, uint32_t events, io_fd_fn fn, void *ctx)
{
    watch *w = find_watch(fd);
    if (!events) {
        if (!w) return 0;
        epoll_ctl(L.epfd, EPOLL_CTL_DEL, fd, NULL);
        drop_watch(w);
        return 0;
    }
    struct epoll_event ev = {.events = events};
    if (w) {
        w->fn = fn;
        w->ctx = ctx;
        w->idle = 0;
        if (w->events == events) return 0;
        w->events = events;
        ev.data.ptr = w;
        return epoll_ctl(L.epfd, EPOLL_CTL_MOD, fd, &ev);
    }
    w = calloc(1, sizeof *w);
    if (!w) return -1;
    w->fd = fd;
    w->fn = fn;
    w->ctx = ctx;
    w->events = events;
    ev.data.ptr = w;
    if (epoll_ctl(L.epfd, EPOLL_CTL_ADD, fd, &ev)) { free(w); return -1; }
    w->next = L.watches;
    L.watches = w;
    return 0;
}

void io_idle(int fd)
{
    watch *w = find_watch(fd);
    if (w) w->idle = 1;
}

void io_forget(int fd)
{
    watch *w = find_watch(fd);
    if (w) drop_watch(w);
}

io_timer *io_timer_new(void (*fn)(void *), void *ctx)
{
    if (L.ntimers >= MAX_TIMERS) return NULL;
    io_timer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->fn = fn;
    t->ctx = ctx;
    L.timers[L.ntimers++] = t;
    return t;
}

void io_timer_set(io_timer *t, int64_t ms)
{
    if (t) t->due_us = ms < 0 ? 0 : mono_us() + ms * 1000 + (ms == 0);
}

void io_timer_free(io_timer *t)
{
    for (int i = 0; i < L.ntimers; i++)
        if (L.timers[i] == t) { L.timers[i] = L.timers[--L.ntimers]; break; }
    free(t);
}

static int post_on(io_loop *lp, void (*fn)(void *), void *arg)
{
    post *p = malloc(sizeof *p);
    if (!p) return -1;
    p->fn = fn;
    p->arg = arg;
    p->next = NULL;
    pthread_mutex_lock(&lp->mu);
    if (lp->tail) lp->tail->next = p;
    else lp->head = p;
    lp->tail = p;
    int wake = lp->sleeping;
    lp->sleeping = 0;
    pthread_mutex_unlock(&lp->mu);
    if (wake) {
        uint64_t one = 1;
        ssize_t n = write(lp->evfd, &one, sizeof one);
        (void)n;
    }
    return 0;
}

int io_post(void (*fn)(void *), void *arg) { return post_on(cur ? cur : &loops[0], fn, arg); }

int io_post_to(int loop, void (*fn)(void *), void *arg)
{
    if (loop < 0 || loop >= IO_MAX_LOOPS) return -1;
    return post_on(&loops[loop], fn, arg);
}

typedef struct sync_call {
    void (*fn)(void *);
    void *arg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
} sync_call;

static void run_sync_call(void *arg)
{
    sync_call *s = arg;
    s->fn(s->arg);
    pthread_mutex_lock(&s->mu);
    s->done = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void io_run_sync_on(int loop, void (*fn)(void *), void *arg)
{
    if (cur && cur->index == loop) { fn(arg); return; }
    sync_call s = {.fn = fn, .arg = arg};
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    io_post_to(loop, run_sync_call, &s);
    pthread_mutex_lock(&s.mu);
    while (!s.done) pthread_cond_wait(&s.cv, &s.mu);
    pthread_mutex_unlock(&s.mu);
    pthread_mutex_destroy(&s.mu);
    pthread_cond_destroy(&s.cv);
}

void io_run_sync(void (*fn)(void *), void *arg) { io_run_sync_on(0, fn, arg); }

static int run_posts(void)
{
    pthread_mutex_lock(&L.mu);
    post *p = L.head;
    L.head = L.tail = NULL;
    pthread_mutex_unlock(&L.mu);
    int n = 0;
    while (p) {
        post *next = p->next;
        p->fn(p->arg);
        free(p);
        p = next;
        n++;
    }
    return n;
}

static int run_timers(void)
{
    int64_t now = mono_us();
    int fired = 0;
    for (int i = 0; i < L.ntimers; i++) {
        io_timer *t = L.timers[i];
        if (t->due_us && t->due_us <= now) {
            t->due_us = 0;
            t->fn(t->ctx);
            fired++;
        }
    }
    return fired;
}

static int wait_ms(void)
{
    int64_t soonest = 0;
    for (int i = 0; i < L.ntimers; i++)
        if (L.timers[i]->due_us && (!soonest || L.timers[i]->due_us < soonest)) soonest = L.timers[i]->due_us;
    if (!soonest) return 1000;
    /* A timer due in under a millisecond is "as soon as possible" (libmicrohttpd's
     * zero timeout once a resumed connection has work): rounding it up to
     * epoll's 1 ms would add that to every proxied call. */
    int64_t left = soonest - mono_us();
    if (left < 1000) return 0;
    int64_t ms = (left + 999) / 1000;
    return ms > 1000 ? 1000 : (int)ms;
}

static void drain_eventfd(void *ctx, int fd, uint32_t events)
{
    (void)ctx; (void)events;
    uint64_t v;
    ssize_t n = read(fd, &v, sizeof v);
    (void)n;
}

static void *loop_thread(void *arg)
{
    cur = arg;
    struct epoll_event evs[64];
    for (;;) {
        int busy = run_posts() + run_timers();
        pthread_mutex_lock(&L.mu);
        int more = busy || L.head;
        int stop = L.stopping && !L.head;
        /* Posts arriving from now on write the eventfd. */
        L.sleeping = !more;
        pthread_mutex_unlock(&L.mu);
        if (stop) break;
        int n = epoll_wait(L.epfd, evs, 64, more ? 0 : wait_ms());
        pthread_mutex_lock(&L.mu);
        L.sleeping = 0;
        pthread_mutex_unlock(&L.mu);
        L.delivering = 1;
        for (int i = 0; i < n; i++) {
            watch *w = evs[i].data.ptr;
            if (w->dead) continue;
            if (w->idle) { /* e.g. the peer closed a kept connection: stop watching it */
                epoll_ctl(L.epfd, EPOLL_CTL_DEL, w->fd, NULL);
                drop_watch(w);
                continue;
            }
            w->fn(w->ctx, w->fd, evs[i].events);
        }
        L.delivering = 0;
        while (L.dropped) {
            watch *d = L.dropped;
            L.dropped = d->next;
            free(d);
        }
    }
    return NULL;
}

static int start_one(io_loop *lp, int index)
{
    memset(lp, 0, sizeof *lp);
    pthread_mutex_init(&lp->mu, NULL);
    lp->index = index;
    lp->epfd = epoll_create1(EPOLL_CLOEXEC);
    lp->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN};
    watch *w = calloc(1, sizeof *w);
    if (lp->epfd >= 0 && lp->evfd >= 0 && w) {
        w->fd = lp->evfd;
        w->fn = drain_eventfd;
        ev.data.ptr = w;
        lp->watches = w;
        if (epoll_ctl(lp->epfd, EPOLL_CTL_ADD, lp->evfd, &ev) == 0 && pthread_create(&lp->thread, NULL, loop_thread, lp) == 0) {
            lp->running = 1;
            return 0;
        }
    }
    log_error("cannot start an I/O loop: %s", strerror(errno));
    free(w);
    lp->watches = NULL;
    if (lp->epfd >= 0) close(lp->epfd);
    if (lp->evfd >= 0) close(lp->evfd);
    pthread_mutex_destroy(&lp->mu);
    return -1;
}

int io_loops_start(int n)
{
    if (n < 1) n = 1;
    if (n > IO_MAX_LOOPS) n = IO_MAX_LOOPS;
    pthread_mutex_lock(&start_mu);
    while (nloops < n && start_one(&loops[nloops], nloops) == 0) nloops++;
    int got = nloops;
    pthread_mutex_unlock(&start_mu);
    return got;
}

int io_loop_start(void) { return io_loops_start(1) >= 1 ? 0 : -1; }

static void stop_one(io_loop *lp)
{
    pthread_mutex_lock(&lp->mu);
    lp->stopping = 1;
    pthread_mutex_unlock(&lp->mu);
    uint64_t one = 1;
    ssize_t n = write(lp->evfd, &one, sizeof one);
    (void)n;
    pthread_join(lp->thread, NULL);
    while (lp->watches) {
        watch *w = lp->watches;
        lp->watches = w->next;
        free(w);
    }
    for (int i = 0; i < lp->ntimers; i++) free(lp->timers[i]);
    lp->ntimers = 0;
    close(lp->epfd);
    close(lp->evfd);
    lp->epfd = lp->evfd = -1;
    lp->running = 0;
    pthread_mutex_destroy(&lp->mu);
}

void io_loop_stop(void)
{
    pthread_mutex_lock(&start_mu);
    while (nloops > 0) stop_one(&loops[--nloops]);
    pthread_mutex_unlock(&start_mu);
}
