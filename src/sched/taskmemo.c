/* sched/taskmemo: see taskmemo.h.  Open addressing with linear probing;
 * deletions rebuild the table, which happens once a pass at most. */
#include "sched/taskmemo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct memo_table {
    task_memo *slots;   /* id[0] == 0: empty */
    size_t cap, n;
};

/* Entries survive this long unseen: a task being queued again is briefly
 * neither running nor visible as queued. */
#define KEEP_MS 10000

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    while (*s) { h ^= (unsigned char)*s++; h *= 1099511628211ull; }
    return h;
}

memo_table *memo_new(void)
{
    memo_table *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->cap = 256;
    t->slots = calloc(t->cap, sizeof *t->slots);
    if (!t->slots) { free(t); return NULL; }
    return t;
}

void memo_free(memo_table *t)
{
    if (!t) return;
    free(t->slots);
    free(t);
}

static task_memo *probe(task_memo *slots, size_t cap, const char *id)
{
    size_t i = (size_t)(hash(id) & (cap - 1));
    while (slots[i].id[0] && strcmp(slots[i].id, id)) i = (i + 1) & (cap - 1);
    return &slots[i];
}

static int rebuild(memo_table *t, size_t cap, int64_t now, int drop_stale)
{
    task_memo *fresh = calloc(cap, sizeof *fresh);
    if (!fresh) return -1;
    size_t n = 0;
    for (size_t i = 0; i < t->cap; i++) {
        task_memo *m = &t->slots[i];
        if (!m->id[0]) continue;
        if (drop_stale && !m->seen && m->keep_until_ms <= now) continue;
        *probe(fresh, cap, m->id) = *m;
        n++;
    }
    free(t->slots);
    t->slots = fresh;
    t->cap = cap;
    t->n = n;
    return 0;
}

task_memo *memo_find(memo_table *t, const char *id)
{
    task_memo *m = probe(t->slots, t->cap, id);
    return m->id[0] ? m : NULL;
}

task_memo *memo_get(memo_table *t, const char *id, int64_t now)
{
    task_memo *m = probe(t->slots, t->cap, id);
    if (m->id[0]) return m;
    if ((t->n + 1) * 2 > t->cap) {
        if (rebuild(t, t->cap * 2, now, 0)) return NULL;
        m = probe(t->slots, t->cap, id);
    }
    memset(m, 0, sizeof *m);
    snprintf(m->id, sizeof m->id, "%s", id);
    m->first_seen_ms = now;
    t->n++;
    return m;
}

void memo_failed(memo_table *t, const char *id, const char *node, int64_t delay_ms, int64_t now)
{
    task_memo *m = memo_get(t, id, now);
    if (!m) return;
    m->not_before_ms = now + delay_ms;
    m->keep_until_ms = now + KEEP_MS;
    if (!node || !*node) return;
    for (int i = 0; i < m->ntried; i++)
        if (!strcmp(m->tried[i], node)) return;
    if (m->ntried == MEMO_TRIED) {
        memmove(m->tried[0], m->tried[1], sizeof m->tried[0] * (MEMO_TRIED - 1));
        m->ntried--;
    }
    snprintf(m->tried[m->ntried++], sizeof m->tried[0], "%s", node);
}

void memo_begin_pass(memo_table *t)
{
    for (size_t i = 0; i < t->cap; i++) t->slots[i].seen = 0;
}

void memo_end_pass(memo_table *t, int64_t now)
{
    size_t stale = 0;
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].id[0] && !t->slots[i].seen && t->slots[i].keep_until_ms <= now) stale++;
    if (!stale) return;
    size_t cap = 256;
    while (cap < (t->n - stale + 1) * 2) cap *= 2;
    rebuild(t, cap, now, 1);
}

size_t memo_count(const memo_table *t) { return t->n; }
