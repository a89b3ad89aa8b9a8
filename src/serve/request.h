/* request.h: what `megatron-c serve` holds of one HTTP request: its sequences (a tokenized
 * prompt, how to draw its tokens, when to stop, the continuation made), how it ends and
 * the texts it answers with. api.h fills one from a JSON body and writes the answer;
 * queue.h hands its sequences to the generator's thread and back.
 *
 * The continuation text of a sequence is the text of prompt + continuation less the text
 * of the prompt (Megatron's completions endpoint cuts prompt_plus_generation after the
 * prompt), or the continuation's own text where the first does not begin with the second
 * (a tokenizer whose text of the whole is not the prompt's followed by more). Stop rules
 * read that text, so a stop string is matched exactly where the answer would show it. */
#ifndef MC_SERVE_REQUEST_H
#define MC_SERVE_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "generate/generator.h"
#include "tokenizer/tokenizer.h"

typedef enum {
    MC_API_MEGATRON = 0, /* PUT /api: Megatron's text generation server */
    MC_API_COMPLETIONS,  /* POST /v1/completions: OpenAI's completions */
} mc_api_kind;

/* How a sequence ends besides its token budget and the end of document. */
typedef struct mc_serve_stops {
    bool on_eol;        /* Megatron's stop_on_eol: at a newline in the continuation (kept) */
    bool on_double_eol; /* stop_on_double_eol: at two newlines in a row (kept) */
    char **strings;     /* OpenAI's stop: at the first of these in the continuation, which ends before it */
    int nstrings;
} mc_serve_stops;

typedef enum { MC_FINISH_LENGTH = 0, MC_FINISH_STOP } mc_finish;

typedef struct mc_serve_request mc_serve_request;

typedef struct mc_serve_seq {
    mc_ids prompt;               /* token ids, every one < the model's vocabulary */
    mc_gen_params params;
    const mc_serve_stops *stops; /* the request's (never NULL) */
    int32_t *out;                /* params.max_new_tokens entries */
    int produced;                /* the continuation: out[0..produced) */
    bool stopped;                /* ended by a stop rule (not the budget, not the end of document) */
    mc_serve_request *req;       /* the request it belongs to (NULL on a TP follower rank) */
} mc_serve_seq;

struct mc_serve_request {
    mc_api_kind api;
    mc_serve_seq *seqs;
    int n;
    mc_serve_stops stops;
    bool echo;   /* completions: the prompt's text before the continuation's */
    bool no_log; /* /api: no log line for this request */
    /* set by the queue (queue.h) */
    int pending;     /* sequences not yet generated */
    int status;      /* 0 while pending, then the HTTP status of the answer */
    char error[512]; /* the message of a status >= 400 */
};

/* The continuation's text (malloc'd, NUL-terminated, *len bytes) of prompt + gen[0..ngen). */
char *mc_serve_continuation_text(const mc_tokenizer *tok, const int32_t *prompt, int64_t nprompt, const int32_t *gen,
                                 int64_t ngen, size_t *len);
/* Whether the continuation text hits a stop rule; for a stop string, *cut is where the
 * text ends (its first occurrence), else the whole length. */
bool mc_serve_stops_hit(const mc_serve_stops *s, const char *text, size_t len, size_t *cut);
/* A sequence's finish: stop when a stop rule or the end of document ended it before its budget. */
mc_finish mc_serve_seq_finish(const mc_serve_seq *s);

void mc_serve_stops_free(mc_serve_stops *s);
void mc_serve_request_free(mc_serve_request *r);

#endif
