/* tok_bpe.h: the BPE model of HF `tokenizers` (models::BPE), shared by GPT2BPETokenizer and
 * HuggingFaceTokenizer: a vocabulary, ranked merges, and the encoding of one pre-token.
 *
 * Two symbol spaces: byte-level models (GPT-2, Llama 3) start from one symbol per byte of
 * the raw text (the ByteLevel byte -> unicode map is folded into the vocabulary: each token
 * is keyed by the raw bytes it stands for); char-level models (Llama 2, Mistral) start from
 * one symbol per UTF-8 character, with <0xNN> byte fallback and a (fused) unk for
 * characters outside the vocabulary. */
#ifndef MC_TOKENIZER_TOK_BPE_H
#define MC_TOKENIZER_TOK_BPE_H

#include "tokenizer/tok_internal.h"

typedef struct tok_bpe {
    int32_t n_ids;             /* ids 0..n_ids-1 (holes have tok == NULL) */
    char **tok;                /* token text as the vocabulary writes it */
    uint32_t *tok_len;
    char **key;                /* what the token matches in the text (raw bytes for byte-level) */
    uint32_t *key_len;
    tok_strmap tokmap;         /* token text -> id */
    tok_strmap keymap;         /* key -> id */
    tok_pairmap merges;
    bool byte_level, byte_fallback, fuse_unk, ignore_merges;
    int32_t unk_id;            /* -1: none */
    int32_t byte_sym[256];     /* byte-level: symbol of each byte; else the <0xNN> token, or -1 */
    int32_t ascii_sym[128];    /* char-level: token of each ASCII character, or -1 */
    tok_arena arena;
} tok_bpe;

typedef struct tok_bpe_scratch {
    tok_cache cache;
    tok_merge_buf mb;
} tok_bpe_scratch;

/* Loading: init, add every token, finish_vocab, add every merge in rank order, finish. */
void tok_bpe_init(tok_bpe *m, int32_t n_ids);
/* Errors (duplicate id or text) are one line without a file prefix; the caller adds it. */
int tok_bpe_add_token(tok_bpe *m, int32_t id, const char *s, size_t len, mc_err *err);
void tok_bpe_finish_vocab(tok_bpe *m, bool byte_level, size_t n_merges);
int tok_bpe_add_merge(tok_bpe *m, const char *a, size_t alen, const char *b, size_t blen, uint32_t rank, mc_err *err);
void tok_bpe_finish(tok_bpe *m);
void tok_bpe_free(tok_bpe *m);

void tok_bpe_scratch_init(tok_bpe_scratch *s);
void tok_bpe_scratch_free(tok_bpe_scratch *s);

/* Appends the ids of one pre-token w[0..n) (n > 0). */
void tok_bpe_encode_word(const tok_bpe *m, tok_bpe_scratch *s, const uint8_t *w, size_t n, mc_ids *out);

#endif
