/* api.h: the JSON of serve's two APIs: a request body read, checked and tokenized into an
 * mc_serve_request, and the answer written.
 *
 * PUT /api (Megatron-LM's text generation server, megatron/inference/text_generation_server.py)
 *   request:  prompts            list of 1..128 strings (required); "" only with add_BOS
 *             tokens_to_generate integer >= 1, default 64 (Megatron's 0, the prompt's
 *                                logprobs only, is refused with logprobs); each prompt's
 *                                tokens + tokens_to_generate at most the positions
 *             temperature        number in [0, 100], default 1; 0 is greedy (Megatron
 *                                refuses 0: its greedy is top_k 1, which is greedy here too)
 *             top_k              integer in [0, 1000], default 0 (all tokens)
 *             top_p              number in [0, 1], default 0 (no nucleus cut, as 1); top_k
 *                                and top_p may be given together (Megatron refuses that)
 *             random_seed        integer in [0, 2^53]: the Philox key of every prompt's draws
 *                                (`generate --seed`); default: a seed of its own per request
 *             add_BOS            bool: the tokenizer's end of document before each prompt
 *             stop_on_eol, stop_on_double_eol   bool: end at a newline (two) in the continuation
 *             no_log             bool: no log line for this request
 *             logprobs           false only; top_p_decay, top_p_bound 0 only;
 *                                prevent_newline_after_colon false only; beam_width,
 *                                stop_token, length_penalty (beam search) refused
 *   answer:   {"text": [prompt + continuation], "segments": [[the text of each token]],
 *              "tokens": [[prompt ids + continuation ids]]}; a continuation ends before the
 *             end-of-document token, which is not returned
 *
 * POST /v1/completions (OpenAI's completions)
 *   request:  prompt             string, list of strings, list of ids, or list of lists of
 *                                ids (1..128 prompts; required)
 *             model              string (any: this server has one model)
 *             max_tokens         integer >= 1, default 16; prompt + max_tokens at most the positions
 *             temperature        number in [0, 2], default 1; 0 is greedy
 *             top_p              number in (0, 1], default 1
 *             top_k              integer >= 0 (an extension), default 0 (all tokens)
 *             seed               integer in [0, 2^53], as random_seed
 *             stop               string or list of at most 4 non-empty strings
 *             echo               bool: the prompt's text before the continuation's
 *             n 1, stream false, logprobs null, presence_penalty and frequency_penalty 0 only;
 *             user               string, unused
 *   answer:   {"id", "object": "text_completion", "created", "model", "choices": [{"text",
 *             "index", "logprobs": null, "finish_reason": "stop" | "length"}],
 *             "usage": {"prompt_tokens", "completion_tokens", "total_tokens"}}
 *
 * On both, null is the same as an absent field; any other field is refused. Every refusal
 * says which field (or prompt) and why. */
#ifndef MC_SERVE_API_H
#define MC_SERVE_API_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "serve/request.h"
#include "tokenizer/tokenizer.h"

#define MC_API_MAX_PROMPTS 128

typedef struct mc_api_limits {
    int64_t max_positions; /* prompt + continuation */
    int vocab;             /* ids must be below */
    int32_t eod;           /* the end of document (add_BOS's token, stop_at_eod); -1: none */
    uint64_t seed;         /* the seed of a request that gives none */
} mc_api_limits;

/* body[0..len) (NUL-terminated at len) into a new request; NULL with err set on input to
 * refuse (an HTTP 400). */
mc_serve_request *mc_api_parse(mc_api_kind api, const char *body, size_t len, const mc_tokenizer *tok,
                               const mc_api_limits *lim, mc_err *err);

/* The answer of a completed request (malloc'd JSON). model and id are the completions
 * answer's; created its Unix time. */
char *mc_api_answer(const mc_serve_request *r, const mc_tokenizer *tok, const char *model, const char *id,
                    int64_t created);

/* {"error": msg} (malloc'd). */
char *mc_api_error(const char *msg);

#endif
