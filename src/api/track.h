/* api/track: the two-track router in the proxy path.  It holds the rules
 * (policy/track) and the budgets (policy/budget), reads a request's
 * features, asks for the decision at every hop, charges what goes to the
 * cloud (its answer's usage, at the backend's prices) and keeps the spend in
 * the store so that a restart does not reset it.  GET /v1/budget and the
 * gpupool_route_* / gpupool_budget_* metrics read it. */
#ifndef GPUPOOL_API_TRACK_H
#define GPUPOOL_API_TRACK_H

#include <jansson.h>
#include <stddef.h>

#include "http/server.h"
#include "policy/budget.h"
#include "policy/track.h"
#include "store/store.h"
#include "util/buf.h"

struct coord;

typedef struct api_track api_track;

/* Takes over cfg (its keywords) and the budget; loads today's spend from st. */
api_track *api_track_new(const track_cfg *cfg, budget *b, store *st);
void api_track_free(api_track *t);
const track_cfg *api_track_cfg(const api_track *t);

/* What the router reads from a request.  Returns 0, or -1 after answering
 * 400 for a bad X-Gpupool-Track or X-Gpupool-Urgency. */
int api_track_features(struct coord *c, http_req *req, const json_t *body, const char *model, double prompt_tokens,
                       double max_tokens, int priority, const char *private_rule, track_request *out);
/* The decision for this hop, with the key's budget as it is now. */
void api_track_decide(struct coord *c, const char *owner, const track_request *rq, track_decision *out);
/* Whether the key's budget lets a request (urgent or not) go to the cloud now. */
int api_track_cloud_allowed(struct coord *c, const char *owner, int urgent);

/* Charges one request sent to a cloud backend. */
void api_track_charge_request(struct coord *c, const char *owner);
/* Charges a cloud answer: its usage when it has one, else the estimates. */
void api_track_charge_answer(struct coord *c, const char *owner, const char *backend, const char *body, size_t len,
                             double prompt_est, double completion_est);
void api_track_charge_tokens(struct coord *c, const char *owner, const char *backend, int64_t prompt,
                             int64_t completion);
/* Counts a decision's outcome for gpupool_route_total. */
void api_track_count(struct coord *c, int cloud, const char *kind);

/* What a hop hands the forwarders: the route's reason and who pays. */
typedef struct api_track_hop {
    const char *reason;    /* X-Gpupool-Route's reason; NULL = the default */
    char owner[40];
    double prompt_tokens;  /* the estimate, for an answer without usage */
    int urgent;            /* for the budget's check at a later hop (a stream's continuation) */
} api_track_hop;

/* GET /v1/budget: the caller's key's limits, spend and level. */
void api_budget_get(struct coord *c, http_req *req);
void api_track_metrics(struct coord *c, buf *out);

#endif
