/* request.c: a request's sequences, their continuation text and stop rules (request.h). */
#include "serve/request.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

char *mc_serve_continuation_text(const mc_tokenizer *tok, const int32_t *prompt, int64_t nprompt, const int32_t *gen,
                                 int64_t ngen, size_t *len) {
    int32_t *all = mc_xmalloc(sizeof(int32_t) * (size_t)(nprompt + ngen + 1));
    memcpy(all, prompt, sizeof(int32_t) * (size_t)nprompt);
    memcpy(all + nprompt, gen, sizeof(int32_t) * (size_t)ngen);
    size_t nwhole, nhead;
    char *whole = mc_tokenizer_decode(tok, all, nprompt + ngen, &nwhole);
    char *head = mc_tokenizer_decode(tok, prompt, nprompt, &nhead);
    free(all);
    char *text;
    if (nhead <= nwhole && !memcmp(whole, head, nhead)) {
        *len = nwhole - nhead;
        text = mc_xmalloc(*len + 1);
        memcpy(text, whole + nhead, *len);
        text[*len] = 0;
    } else {
        text = mc_tokenizer_decode(tok, gen, ngen, len);
    }
    free(whole);
    free(head);
    return text;
}

/* memmem without GNU's: the first occurrence of needle (non-empty) in hay */
static const char *find(const char *hay, size_t n, const char *needle, size_t m) {
    for (size_t i = 0; m <= n && i <= n - m; i++)
        if (hay[i] == needle[0] && !memcmp(hay + i, needle, m)) return hay + i;
    return NULL;
}

bool mc_serve_stops_hit(const mc_serve_stops *s, const char *text, size_t len, size_t *cut) {
    *cut = len;
    bool hit = (s->on_eol && find(text, len, "\n", 1)) || (s->on_double_eol && find(text, len, "\n\n", 2));
    for (int i = 0; i < s->nstrings; i++) {
        const char *at = find(text, len, s->strings[i], strlen(s->strings[i]));
        if (at && (size_t)(at - text) < *cut) *cut = (size_t)(at - text);
    }
    return hit || *cut < len;
}

mc_finish mc_serve_seq_finish(const mc_serve_seq *s) {
    return s->stopped || s->produced < s->params.max_new_tokens ? MC_FINISH_STOP : MC_FINISH_LENGTH;
}

void mc_serve_stops_free(mc_serve_stops *s) {
    for (int i = 0; i < s->nstrings; i++) free(s->strings[i]);
    free(s->strings);
    memset(s, 0, sizeof *s);
}

void mc_serve_request_free(mc_serve_request *r) {
    if (!r) return;
    for (int i = 0; i < r->n; i++) {
        mc_ids_free(&r->seqs[i].prompt);
        free(r->seqs[i].out);
    }
    free(r->seqs);
    mc_serve_stops_free(&r->stops);
    free(r);
}
