/* tok_regex.h: the pre-tokenizer patterns. Two patterns that matter most have exact
 * hand-written matchers (about 10x faster than PCRE2 JIT here; tests check both agree):
 *   GPT-2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   cl100k (Llama 3):  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *            ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Any other regex goes to PCRE2 (UTF + UCP + JIT), with \s, \p{L} and \p{N} rewritten into
 * explicit classes of Unicode 16.0 (the version of HF tokenizers 0.23's Oniguruma; PCRE2
 * 10.42 has 14.0, and its UCP \s also takes U+180E); other properties use PCRE2's tables.
 * Invalid UTF-8 bytes are characters of no class (never \s, \p{L}, \p{N}) in the hand
 * matchers and unmatchable in PCRE2. */
#ifndef MC_TOKENIZER_TOK_REGEX_H
#define MC_TOKENIZER_TOK_REGEX_H

#include "tokenizer/tok_internal.h"

typedef enum {
    TOK_RE_NONE = 0,
    TOK_RE_GPT2,    /* hand-written */
    TOK_RE_CL100K,  /* hand-written */
    TOK_RE_PCRE2,
    TOK_RE_LITERAL, /* a plain string (HF Split with a String pattern) */
} tok_regex_kind;

typedef struct tok_regex {
    tok_regex_kind kind;
    void *code; /* pcre2_code_8 */
    char *literal;
    size_t literal_len;
} tok_regex;

typedef struct tok_regex_scratch {
    void *match_data, *match_ctx, *jit_stack;
} tok_regex_scratch;

extern const char tok_re_gpt2[];
extern const char tok_re_cl100k[];

/* Compiles a pattern; use_hand picks the hand-written matcher for the two known patterns
 * (false forces PCRE2, for tests). Errors name the pattern. */
int tok_regex_compile(tok_regex *re, const char *pattern, bool use_hand, mc_err *err);
void tok_regex_literal(tok_regex *re, const char *s, size_t n);
void tok_regex_free(tok_regex *re);

void tok_regex_scratch_init(tok_regex_scratch *rs, const tok_regex *re);
void tok_regex_scratch_free(tok_regex_scratch *rs);

/* The first non-empty match in s[from..n): 1 with [*ms, *me), 0 when there is none. Empty
 * matches are skipped (an empty match at p resumes the search one character later, as
 * Oniguruma's find_iter does). */
int tok_regex_next(const tok_regex *re, tok_regex_scratch *rs, const uint8_t *s, size_t n, size_t from, size_t *ms,
                   size_t *me);

/* The hand-written matchers: the end of the match that starts at i (< n). Every position
 * starts a match of these patterns. */
size_t tok_re_gpt2_end(const uint8_t *s, size_t n, size_t i);
size_t tok_re_cl100k_end(const uint8_t *s, size_t n, size_t i);

#endif
