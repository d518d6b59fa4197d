/* http/pool: reusable threads for work that may block (a handler waiting in a
 * queue, a database write, a slow engine).  The event loop never blocks; it
 * hands such work here.  Threads are made on demand up to a limit, and the
 * ones idle for a while above the minimum go away. */
#ifndef GPUPOOL_HTTP_POOL_H
#define GPUPOOL_HTTP_POOL_H

typedef struct work_pool work_pool;

work_pool *work_pool_new(int min_threads, int max_threads);
/* Runs fn(arg) on a pool thread.  Returns 0, or -1 when stopping. */
int work_pool_run(work_pool *p, void (*fn)(void *), void *arg);
/* Waits for queued and running work to finish, then frees the pool. */
void work_pool_free(work_pool *p);

#endif
