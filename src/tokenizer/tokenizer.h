/* tokenizer.h: the tokenizers of Megatron's --tokenizer-type, behind one interface.
 *
 *   GPT2BPETokenizer        --vocab-file vocab.json --merge-file merges.txt; eod <|endoftext|>,
 *                           which is also split out of the text as one token (Megatron's
 *                           GPT-2 tokenizer is HF's: "a<|endoftext|>b" is a, 50256, b)
 *   HuggingFaceTokenizer    --tokenizer-model path/to/tokenizer.json (or its directory): BPE
 *                           with a byte-level pre-tokenizer (GPT-2, Llama 3) or with
 *                           Metaspace/byte-fallback (Llama 2, Mistral); normalizers,
 *                           pre-tokenizer regexes, added/special tokens, and the
 *                           post-processor's BOS/EOS, which Megatron's HF path includes by
 *                           default (--tokenizer-hf-no-include-special-tokens turns it off);
 *                           eod = the eos token: eos_token of a tokenizer_config.json beside
 *                           the tokenizer.json, else the first of <|end_of_text|>,
 *                           <|endoftext|>, </s>, <eos>, <|im_end|>, [SEP] that is a token;
 *                           vocab size = len(tokenizer) (added tokens included)
 *   SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer
 *                           --tokenizer-model tokenizer.model (SentencePiece BPE protobuf),
 *                           as Megatron's HEAD wrapper: encode_as_ids (no BOS), eod = eos_id,
 *                           vocab size = the piece count
 *   NullTokenizer           --vocab-size V: text is space-separated ids; eod = V - 1
 *   ByteLevelTokenizer      (Megatron-C) bytes 0..255, eod 256
 *
 * Encoding is what Megatron's preprocess_data.py stores for a document: tokenize(text),
 * without EOD (the caller appends it with --append-eod). A tokenizer is immutable after
 * open, so any number of threads may encode with it at once, each with its own
 * mc_tokenizer_scratch (caches and buffers). */
#ifndef MC_TOKENIZER_TOKENIZER_H
#define MC_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "megatron.h"

typedef struct mc_tokenizer mc_tokenizer;
typedef struct mc_tokenizer_scratch mc_tokenizer_scratch;

typedef struct mc_tokenizer_options {
    mc_tokenizer_type type;
    const char *vocab_file, *merge_file, *tokenizer_model;
    int vocab_size;              /* NullTokenizer */
    bool hf_include_special_tokens; /* HuggingFaceTokenizer: post-processor tokens (default true) */
    /* HuggingFaceTokenizer, GPT2BPETokenizer: special-token text in the input is encoded as
     * ordinary text (HF's split_special_tokens / encode_special_tokens, tiktoken's
     * encode_ordinary). The default (false) is HF's and Megatron's: "<|eot_id|>" in the text
     * becomes that one token. */
    bool split_special_tokens;
} mc_tokenizer_options;

/* Growable id buffer owned by the caller. */
typedef struct mc_ids {
    int32_t *data;
    int64_t len, cap;
} mc_ids;

void mc_ids_push(mc_ids *ids, int32_t id);
void mc_ids_free(mc_ids *ids);

/* Opens a tokenizer; errors name the flag and file (missing file, malformed JSON or
 * protobuf, vocab/merges that do not belong together, unknown tokenizer type). */
int mc_tokenizer_open(mc_tokenizer **out, const mc_tokenizer_options *opt, mc_err *err);
void mc_tokenizer_free(mc_tokenizer *t);

mc_tokenizer_scratch *mc_tokenizer_scratch_new(const mc_tokenizer *t);
void mc_tokenizer_scratch_free(mc_tokenizer_scratch *s);

/* Appends the ids of text[0..len) to out. Fails only on input the tokenizer cannot
 * represent (invalid UTF-8 for the byte-level BPEs is encoded bytewise, as HF does;
 * NullTokenizer rejects non-integers), with the reason in err. */
int mc_tokenizer_encode(const mc_tokenizer *t, mc_tokenizer_scratch *s, const char *text, size_t len, mc_ids *out,
                        mc_err *err);
/* The text of ids (malloc'd, NUL-terminated, *len_out bytes), as the library's decode:
 * GPT-2 and HF write special tokens as their text (skip_special_tokens=False); SentencePiece
 * drops control pieces and writes <unk> as " \u2047 "; unknown ids are skipped. */
char *mc_tokenizer_decode(const mc_tokenizer *t, const int32_t *ids, int64_t n, size_t *len_out);

/* Megatron's tokenizer.vocab_size: decides the .bin dtype (uint16 below 65500) and the
 * model's padded vocabulary. */
int mc_tokenizer_vocab_size(const mc_tokenizer *t);
/* The end-of-document id (-1 when the tokenizer has none: an error for --append-eod). */
int32_t mc_tokenizer_eod(const mc_tokenizer *t);
/* Megatron's name for the type ("GPT2BPETokenizer", ...). */
const char *mc_tokenizer_name(const mc_tokenizer *t);

#endif
