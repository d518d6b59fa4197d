/* worker/owner: whether the machine's owner wants it back.  Pure: it reads
 * no clock, file or device; the worker gathers the facts at every heartbeat
 * and this decides from them, with `now` (monotonic ms) for hysteresis.
 *
 * A node drains (takes no new work, finishes what runs) while any of these
 * holds, the first named being the reason shown:
 *   - a compute process that is not one of this worker's engines is on a GPU;
 *   - VRAM is in use beyond what the worker's engines explain: used memory
 *     rose more than the tolerance above the lowest level seen (desktop,
 *     driver), which catches games and other graphics work too;
 *   - the worker's engines use more VRAM than the owner's cap;
 *   - the user touched keyboard or mouse less than the pause ago (or that
 *     cannot be read while such a pause is asked for);
 *   - the local time is outside the serving hours.
 * The GPU conditions clear only after staying clear for settle_ms, so a
 * process that comes and goes does not make the node flap. */
#ifndef GPUPOOL_OWNER_H
#define GPUPOOL_OWNER_H

#include <stddef.h>
#include <stdint.h>

#include "worker/gpu.h"

#define OWNER_MAX_WINDOWS 16
#define OWNER_MAX_PIDS 64
#define OWNER_REASON_LEN 128

/* One serving window.  It starts on the weekdays in `days` (bit 0 Sunday ..
 * bit 6 Saturday) at start_min and ends at end_min (minutes after
 * midnight, 1440 = the next midnight); end_min < start_min runs past
 * midnight into the next day. */
typedef struct owner_window {
    unsigned days;
    int start_min, end_min;
} owner_window;

typedef struct owner_policy {
    owner_window hours[OWNER_MAX_WINDOWS];
    int nhours;                    /* 0: any time */
    char hours_text[80];           /* the windows as written, for reasons */
    uint64_t max_vram_bytes;       /* 0: no cap */
    int64_t pause_active_s;        /* 0: user activity does not matter */
    uint64_t tolerance_bytes;      /* unexplained VRAM below this is noise */
    int64_t settle_ms;             /* how long a GPU condition must stay clear */
} owner_policy;

#define OWNER_DEFAULT_TOLERANCE (512ULL << 20)

typedef struct owner_input {
    const gpu_info *gpus;
    int ngpus;                     /* -1: the GPUs could not be read this time */
    const int *own_pids;           /* this worker's engines and their children */
    int nown;
    uint64_t expected_bytes;       /* what the engines should use, from what was started */
    int starting;                  /* an engine is loading: free VRAM means nothing yet */
    int weekday, hour, minute;     /* local wall time; weekday 0 = Sunday */
    int64_t idle_s;                /* seconds since keyboard/mouse input, -1 unknown */
    const char *idle_why;          /* why it is unknown */
} owner_input;

typedef enum owner_rule {
    OWNER_OK,
    OWNER_FOREIGN_PROCESS,
    OWNER_FOREIGN_VRAM,
    OWNER_OVER_CAP,
    OWNER_USER_ACTIVE,
    OWNER_ACTIVITY_UNKNOWN,
    OWNER_OUTSIDE_HOURS,
    OWNER_RULES
} owner_rule;

/* Carried from one decision to the next; zero it to start. */
typedef struct owner_state {
    int have_baseline;
    int64_t baseline;              /* lowest unexplained VRAM use seen, bytes */
    int64_t seen_at[OWNER_RULES];  /* when each GPU condition last held */
    int held[OWNER_RULES];
    char reason[OWNER_RULES][OWNER_REASON_LEN];
} owner_state;

typedef struct owner_verdict {
    int draining;
    owner_rule rule;               /* the reason's rule, OWNER_OK when serving */
    char reason[OWNER_REASON_LEN];
    uint64_t own_bytes;            /* the engines' VRAM use, measured or expected */
    int foreign_procs[GPU_MAX];    /* per GPU, -1 unknown */
    uint64_t offer_free[GPU_MAX];  /* free VRAM to offer: within the cap */
} owner_verdict;

void owner_decide(const owner_policy *p, const owner_input *in, owner_state *st, int64_t now, owner_verdict *out);
const char *owner_rule_name(owner_rule r);

/* Adds serving windows: comma-separated "[DAYS ]HH:MM-HH:MM", DAYS being a
 * day (mon..sun), a range of days (mon-fri, fri-mon), "weekdays",
 * "weekends" or "daily" (the default).  Returns 0, or -1 with a reason. */
int owner_parse_hours(const char *spec, owner_policy *p, char *err, size_t errlen);
/* Whether a local time falls in the serving windows (always, with none). */
int owner_in_hours(const owner_policy *p, int weekday, int minute_of_day);

#endif
