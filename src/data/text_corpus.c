#include "data/text_corpus.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/byte_tokenizer.h"

static bool line_is_blank(const char *s, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return false;
    return true;
}

/* One pass over the lines; with tokens == NULL it only counts. */
static void scan(const char *text, int64_t n, int32_t *tokens, int64_t *offsets, int64_t *num_tokens,
                 int64_t *num_docs) {
    int64_t nt = 0, nd = 0;
    bool in_doc = false;
    for (int64_t pos = 0; pos < n;) {
        const char *nl = memchr(text + pos, '\n', (size_t)(n - pos));
        int64_t end = nl ? nl - text : n, len = end - pos;
        if (line_is_blank(text + pos, len)) {
            if (in_doc) {
                if (tokens) tokens[nt] = MC_BYTE_TOKENIZER_EOD;
                nt++;
                nd++;
                in_doc = false;
            }
        } else {
            if (len > 0 && text[end - 1] == '\r') len--;
            if (in_doc) {
                if (tokens) tokens[nt] = '\n';
                nt++;
            } else {
                if (offsets) offsets[nd] = nt;
                in_doc = true;
            }
            if (tokens) mc_byte_tokenizer_encode(text + pos, len, tokens + nt);
            nt += len;
        }
        pos = end + 1;
    }
    if (in_doc) {
        if (tokens) tokens[nt] = MC_BYTE_TOKENIZER_EOD;
        nt++;
        nd++;
    }
    if (offsets) offsets[nd] = nt;
    *num_tokens = nt;
    *num_docs = nd;
}

int mc_text_corpus_from_buffer(const char *text, int64_t n, const char *name, int32_t **tokens,
                               int64_t *num_tokens, int64_t **doc_offsets, int64_t *num_docs, mc_err *err) {
    *tokens = NULL;
    *doc_offsets = NULL;
    int64_t nt, nd;
    scan(text, n, NULL, NULL, &nt, &nd);
    if (nd == 0)
        return mc_err_set(err, "--text-data-path %s: no documents (the file is %s)", name,
                          n == 0 ? "empty" : "only blank lines");
    *tokens = mc_xmalloc((size_t)nt * sizeof **tokens);
    *doc_offsets = mc_xmalloc((size_t)(nd + 1) * sizeof **doc_offsets);
    scan(text, n, *tokens, *doc_offsets, num_tokens, num_docs);
    return MC_OK;
}

int mc_text_corpus_load(const char *path, int32_t **tokens, int64_t *num_tokens, int64_t **doc_offsets,
                        int64_t *num_docs, mc_err *err) {
    *tokens = NULL;
    *doc_offsets = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return mc_err_set(err, "--text-data-path %s: cannot open: %s", path, strerror(errno));
    /* Read in chunks: works for pipes and files whose size changes under us. */
    size_t cap = 1 << 20, n = 0;
    char *buf = mc_xmalloc(cap);
    for (;;) {
        if (n == cap) buf = mc_xrealloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        return mc_err_set(err, "--text-data-path %s: read error", path);
    }
    int rc = mc_text_corpus_from_buffer(buf, (int64_t)n, path, tokens, num_tokens, doc_offsets, num_docs, err);
    free(buf);
    return rc;
}
