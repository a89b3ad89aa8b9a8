/* tok_hf.h: the HF `tokenizers` pipeline (added tokens -> normalizer -> pre-tokenizer ->
 * BPE model -> post-processor; decoder for decode), as tok_hf.c loads it from a
 * tokenizer.json and tok_gpt2.c builds it for GPT2BPETokenizer. */
#ifndef MC_TOKENIZER_TOK_HF_H
#define MC_TOKENIZER_TOK_HF_H

#include "tokenizer/tok_bpe.h"
#include "tokenizer/tok_regex.h"

typedef struct hf_added {
    char *content;
    uint32_t len;
    int32_t id;
    bool single_word, lstrip, rstrip, normalized, special;
    char *norm_content; /* content through the normalizer (normalized tokens) */
    uint32_t norm_len;
} hf_added;

typedef enum { HF_NORM_PREPEND = 1, HF_NORM_REPLACE } hf_norm_kind;
typedef struct hf_norm {
    hf_norm_kind kind;
    char *a, *b; /* prepend: a; replace: a -> b */
    size_t alen, blen;
} hf_norm;

typedef enum { HF_PRE_SPLIT = 1, HF_PRE_BYTELEVEL, HF_PRE_METASPACE } hf_pre_kind;
typedef enum { HF_SPLIT_REMOVED = 1, HF_SPLIT_ISOLATED, HF_SPLIT_MERGED_PREV, HF_SPLIT_MERGED_NEXT, HF_SPLIT_CONTIGUOUS } hf_split_behavior;
typedef enum { HF_PREPEND_ALWAYS = 1, HF_PREPEND_FIRST, HF_PREPEND_NEVER } hf_prepend_scheme;
typedef struct hf_pre {
    hf_pre_kind kind;
    tok_regex re;               /* split pattern; ByteLevel with use_regex: GPT-2's */
    bool use_re;
    hf_split_behavior behavior; /* split */
    bool add_prefix_space;      /* ByteLevel */
    char repl[8];               /* Metaspace replacement (UTF-8) */
    size_t repl_len;
    hf_prepend_scheme prepend;
    bool split;
} hf_pre;

typedef enum { HF_DEC_BYTELEVEL = 1, HF_DEC_REPLACE, HF_DEC_BYTEFALLBACK, HF_DEC_FUSE, HF_DEC_STRIP, HF_DEC_METASPACE } hf_dec_kind;
typedef struct hf_dec {
    hf_dec_kind kind;
    char *a, *b; /* replace: a -> b; strip: a = the character */
    size_t alen, blen;
    int start, stop;
    char repl[8];
    size_t repl_len;
    hf_prepend_scheme prepend;
} hf_dec;

#define HF_MAX_PRE 8

typedef struct tok_hf {
    tok_bpe bpe;
    hf_added *added;
    int n_added;
    int n_raw_added, n_norm_added; /* matched on the raw / the normalized text */
    uint8_t first_raw[256], first_norm[256];
    hf_norm *norm;
    int n_norm;
    hf_pre pre[HF_MAX_PRE];
    int n_pre;
    bool segment_ws; /* the model's words split before each U+2581 that follows another char */
    /* The common pipeline "one hand-written regex (Isolated), then the byte-level model":
     * its match function, for a loop without the general pre-tokenizer machinery. */
    size_t (*fast_end)(const uint8_t *s, size_t n, size_t i);
    int32_t *prefix, *suffix;
    int n_prefix, n_suffix;
    hf_dec *dec;
    int n_dec;
    bool has_decoder;
    bool include_special, split_special;
    int32_t n_ids;       /* all ids, added tokens included */
    const char **id_text; /* decode text of every id (added token content or vocab token) */
    uint32_t *id_len;
} tok_hf;

/* Installs the HF vtable on t (impl = h); computes vocab size and the decode table. */
void tok_hf_install(mc_tokenizer *t, tok_hf *h, const char *name);
void tok_hf_free(void *impl);

#endif
