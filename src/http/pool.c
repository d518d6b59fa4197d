/* http/pool: see pool.h. */
#include "http/pool.h"

#include <pthread.h>
#include <stdlib.h>

#include "util/clock.h"

#define IDLE_EXIT_MS 30000

typedef struct job {
    void (*fn)(void *);
    void *arg;
    struct job *next;
} job;

struct work_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv, done;
    job *head, *tail;
    int min, max, threads, idle, stopping;
};

static void *worker(void *arg)
{
    work_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->head && !p->stopping) {
            p->idle++;
            struct timespec ts = mono_deadline(IDLE_EXIT_MS);
            int rc = pthread_cond_timedwait(&p->cv, &p->mu, &ts);
            p->idle--;
            if (rc && !p->head && p->threads > p->min) goto out;
        }
        if (!p->head) break; /* stopping and nothing left */
        job *j = p->head;
        p->head = j->next;
        if (!p->head) p->tail = NULL;
        pthread_mutex_unlock(&p->mu);
        j->fn(j->arg);
        free(j);
        pthread_mutex_lock(&p->mu);
    }
out:
    p->threads--;
    pthread_cond_broadcast(&p->done);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static int spawn(work_pool *p)
{
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &a, worker, p);
    pthread_attr_destroy(&a);
    if (rc == 0) p->threads++;
    return rc;
}

work_pool *work_pool_new(int min_threads, int max_threads)
{
    work_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    pthread_mutex_init(&p->mu, NULL);
    cond_init_monotonic(&p->cv);
    cond_init_monotonic(&p->done);
    p->min = min_threads;
    p->max = max_threads;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < min_threads; i++) spawn(p);
    pthread_mutex_unlock(&p->mu);
    return p;
}

int work_pool_run(work_pool *p, void (*fn)(void *), void *arg)
{
    job *j = malloc(sizeof *j);
    if (!j) return -1;
    j->fn = fn;
    j->arg = arg;
    j->next = NULL;
    pthread_mutex_lock(&p->mu);
    if (p->stopping) { pthread_mutex_unlock(&p->mu); free(j); return -1; }
    if (p->tail) p->tail->next = j;
    else p->head = j;
    p->tail = j;
    /* Work may block for minutes, so a queued job must never wait for a
     * running one: grow while every thread is busy. */
    if (p->idle == 0 && p->threads < p->max) spawn(p);
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

void work_pool_free(work_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stopping = 1;
    pthread_cond_broadcast(&p->cv);
    while (p->threads > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    pthread_cond_destroy(&p->done);
    free(p);
}
