/* sched/taskmemo: what the dispatcher remembers about a queued task between
 * passes and that the store does not keep: when it was first seen queued (on
 * the monotonic clock, for aging), until when it backs off after a failure,
 * and which nodes it failed on (so a retry goes elsewhere).  Lost on a
 * restart, which only resets those clocks.  A hash table keyed by task id;
 * not thread-safe (the dispatcher's lock guards it). */
#ifndef GPUPOOL_TASKMEMO_H
#define GPUPOOL_TASKMEMO_H

#include <stddef.h>
#include <stdint.h>

#define MEMO_TRIED 4

typedef struct task_memo {
    char id[64];
    int64_t first_seen_ms;
    int64_t not_before_ms;
    int64_t keep_until_ms;        /* kept while not seen queued (a requeue in flight) */
    char tried[MEMO_TRIED][40];   /* most recent failures last */
    int ntried;
    int seen;                     /* seen in the current pass */
} task_memo;

typedef struct memo_table memo_table;

memo_table *memo_new(void);
void memo_free(memo_table *t);
/* The task's entry, made (first seen now) when missing; NULL without memory. */
task_memo *memo_get(memo_table *t, const char *id, int64_t now);
task_memo *memo_find(memo_table *t, const char *id);
/* Notes a failure on node: back off for delay_ms, avoid the node. */
void memo_failed(memo_table *t, const char *id, const char *node, int64_t delay_ms, int64_t now);
/* Starts a pass: every entry unseen. */
void memo_begin_pass(memo_table *t);
/* Ends a pass: drops entries neither seen in it nor kept. */
void memo_end_pass(memo_table *t, int64_t now);
size_t memo_count(const memo_table *t);

#endif
