/* sim/simreply: the simulator's canned answers (--reply-map).  A map is a
 * JSON array of {"match": SUBSTRING, "reply": TEXT}; the first entry whose
 * match occurs in a request's last user message (or prompt) gives the answer
 * text verbatim, so a test can make an engine say exactly what it needs, e.g.
 * JSON that must parse.  "*" matches anything, a missing text included.
 *
 * Pure: the caller reads the file; this parses, looks up and splits. */
#ifndef GPUPOOL_SIMREPLY_H
#define GPUPOOL_SIMREPLY_H

#include <stddef.h>

typedef struct sim_reply {
    char *match, *reply;
} sim_reply;

typedef struct sim_replies {
    sim_reply *v;
    size_t n;
} sim_replies;

/* Parses the map's text.  Returns 0, or -1 with a one-line reason (the
 * entry's index and what is wrong with it). */
int sim_replies_parse(const char *json, size_t len, sim_replies *out, char *err, size_t errlen);
void sim_replies_free(sim_replies *r);
/* The reply for `text` (NULL: the request had none), or NULL when no entry
 * matches.  The string lives as long as the map. */
const char *sim_replies_find(const sim_replies *r, const char *text);

/* Streaming splits a reply as the generator's tokens look: each piece is a
 * run of whitespace and the word after it.  Returns the length of the piece
 * starting at text (0 at the end). */
size_t sim_reply_piece(const char *text);
/* How many pieces; at least 1, so an empty reply is one empty token. */
int sim_reply_pieces(const char *text);

#endif
