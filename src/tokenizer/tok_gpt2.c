/* tok_gpt2.c: GPT2BPETokenizer, Megatron's GPT-2 BPE from --vocab-file (encoder.json) and
 * --merge-file (vocab.bpe); eod = <|endoftext|>.
 *
 * Megatron builds this type as Hugging Face's GPT-2 tokenizer (MegatronHFTokenizer ->
 * AutoTokenizer "gpt2" with these files) and stores tokenizer(text).input_ids, so its one
 * special token, <|endoftext|> (bos = eos = unk), is split out of the text before the
 * pre-tokenizer: the literal becomes id 50256 wherever it stands, inside a word too, and
 * the text on either side is pre-tokenized on its own (no stripping: "a <|endoftext|> b"
 * is "a", " ", 50256, " b"). Then, as GPT-2 does, the GPT-2 regex over each piece, its bytes
 * through the byte -> unicode map, and BPE. No BOS/EOS is added. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "tokenizer/tok_hf.h"

static int load_vocab(tok_bpe *b, const char *path, mc_err *err) {
    char *data;
    size_t len;
    MC_TRY(tok_read_file(path, "--vocab-file", &data, &len, err));
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(data, len, &end, false);
    size_t at = end && end >= data ? (size_t)(end - data) : 0;
    free(data);
    if (!root) return mc_err_set(err, "--vocab-file %s: malformed JSON near byte %zu", path, at);
    int rc = MC_ERR;
    const cJSON *it;
    int64_t max_id = -1;
    if (!cJSON_IsObject(root) || !root->child) {
        mc_err_set(err, "--vocab-file %s: not a GPT-2 vocab (expected a JSON object of token -> id)", path);
        goto done;
    }
    cJSON_ArrayForEach(it, root) {
        double d = it->valuedouble;
        if (!cJSON_IsNumber(it) || d < 0 || d >= INT32_MAX || d != (double)(int64_t)d) {
            mc_err_set(err, "--vocab-file %s: the id of \"%.60s\" is not a non-negative integer", path, it->string);
            goto done;
        }
        if ((int64_t)d > max_id) max_id = (int64_t)d;
    }
    int count = cJSON_GetArraySize(root);
    if (max_id >= 4 * (int64_t)count + 65536) {
        mc_err_set(err, "--vocab-file %s: ids are not dense (id %lld for %d tokens)", path, (long long)max_id, count);
        goto done;
    }
    tok_bpe_init(b, (int32_t)(max_id + 1));
    cJSON_ArrayForEach(it, root) {
        if (tok_bpe_add_token(b, (int32_t)it->valuedouble, it->string, strlen(it->string), err) != MC_OK) {
            mc_err_prefix(err, "--vocab-file %s: ", path);
            goto done;
        }
    }
    rc = MC_OK;
done:
    cJSON_Delete(root);
    return rc;
}

static bool is_sp(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

/* merges.txt: "#version: 0.2", then one "left right" per line in rank order. */
static int load_merges(tok_bpe *b, const char *path, mc_err *err) {
    char *data;
    size_t len;
    MC_TRY(tok_read_file(path, "--merge-file", &data, &len, err));
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += data[i] == '\n';
    tok_bpe_finish_vocab(b, true, lines);
    int rc = MC_OK;
    uint32_t rank = 0;
    size_t lineno = 0;
    for (char *p = data, *end = data + len; p < end && rc == MC_OK;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        lineno++;
        char *q = p;
        p = nl ? nl + 1 : end;
        if (lineno == 1 && *q == '#') continue; /* the "#version" header */
        const char *tok[3];
        size_t tl[3];
        int nt = 0;
        while (q < le && nt < 3) {
            while (q < le && is_sp(*q)) q++;
            if (q == le) break;
            tok[nt] = q;
            while (q < le && !is_sp(*q)) q++;
            tl[nt] = (size_t)(q - tok[nt]);
            nt++;
        }
        if (nt == 0) continue;
        if (nt != 2) {
            rc = mc_err_set(err, "--merge-file %s line %zu: expected two tokens, got \"%.*s\"", path, lineno,
                            (int)(le - tok[0] > 80 ? 80 : le - tok[0]), tok[0]);
            break;
        }
        if (tok_bpe_add_merge(b, tok[0], tl[0], tok[1], tl[1], rank++, err) != MC_OK) {
            rc = mc_err_prefix(err, "--merge-file %s line %zu (does it belong to this --vocab-file?): ", path, lineno);
            break;
        }
    }
    free(data);
    return rc;
}

int tok_open_gpt2(mc_tokenizer *t, const mc_tokenizer_options *opt, mc_err *err) {
    if (!opt->vocab_file || !*opt->vocab_file)
        return mc_err_set(err, "--vocab-file: GPT2BPETokenizer needs --vocab-file (gpt2-vocab.json)");
    if (!opt->merge_file || !*opt->merge_file)
        return mc_err_set(err, "--merge-file: GPT2BPETokenizer needs --merge-file (gpt2-merges.txt)");
    tok_hf *h = mc_xcalloc(1, sizeof *h);
    if (load_vocab(&h->bpe, opt->vocab_file, err) != MC_OK) {
        tok_hf_free(h);
        return MC_ERR;
    }
    if (load_merges(&h->bpe, opt->merge_file, err) != MC_OK) {
        tok_hf_free(h);
        return MC_ERR;
    }
    tok_bpe_finish(&h->bpe);
    int32_t eod = tok_strmap_get(&h->bpe.tokmap, "<|endoftext|>", 13);
    if (eod < 0) {
        tok_hf_free(h);
        return mc_err_set(err, "--vocab-file %s: no \"<|endoftext|>\" token (GPT2BPETokenizer's eod)", opt->vocab_file);
    }
    /* <|endoftext|> as the added special token HF's GPT-2 tokenizer has (not normalized, no
     * lstrip/rstrip/single_word) */
    h->added = mc_xcalloc(1, sizeof *h->added);
    h->added[0] = (hf_added){.content = mc_xstrdup("<|endoftext|>"), .len = 13, .id = eod, .special = true};
    h->n_added = 1;
    h->split_special = opt->split_special_tokens;
    hf_pre *st = &h->pre[h->n_pre++];
    st->kind = HF_PRE_BYTELEVEL;
    st->use_re = true;
    int rc = tok_regex_compile(&st->re, tok_re_gpt2, true, err); /* the hand-written matcher: cannot fail */
    MC_ASSERT(rc == MC_OK, "%s", err->msg);
    h->dec = mc_xcalloc(1, sizeof *h->dec);
    h->dec[0].kind = HF_DEC_BYTELEVEL;
    h->n_dec = 1;
    h->has_decoder = true;
    tok_hf_install(t, h, "GPT2BPETokenizer");
    t->eod = eod;
    return MC_OK;
}
