/* test_tokenizer_corpus.c: every document of the Austen corpus through GPT2BPETokenizer,
 * the GPT-2 / Llama 3 / Llama 2 / Mistral tokenizer.json files and two SentencePiece models,
 * against the per-document token counts and id hashes that
 * tools/reference/make_tokenizer_golden.py recorded with HF tokenizers 0.23.2 and
 * sentencepiece (100% identical, and the README's totals); encoding from several threads at
 * once; the hand-written pre-tokenizer regexes against PCRE2; and one-core throughput. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_tokenizer_common.h"
#include "tokenizer/tok_regex.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct corpus {
    char **text;
    size_t *len;
    int n;
    size_t bytes;
} corpus;
static corpus C;

static void load_corpus(void) {
    int n;
    cJSON **rows = tt_jsonl(tt_shared("data/corpus/austen.jsonl"), &n);
    C.text = malloc((size_t)n * sizeof *C.text);
    C.len = malloc((size_t)n * sizeof *C.len);
    for (int i = 0; i < n; i++) {
        C.text[i] = strdup(cJSON_GetObjectItem(rows[i], "text")->valuestring);
        C.len[i] = strlen(C.text[i]);
        C.bytes += C.len[i];
    }
    C.n = n;
    tt_jsonl_free(rows);
}

typedef struct golden {
    int n;
    int64_t *count;
    uint64_t *hash;
    char **blocks; /* comma-separated 32-bit block hashes */
    int64_t total;
} golden;

static golden load_golden(const char *name) {
    char path[256];
    snprintf(path, sizeof path, TOK_FIX "austen_%s.tsv", name);
    char *data = tt_read(path, NULL);
    golden g = {0};
    if (!data) {
        fprintf(stderr, "missing fixture %s (run tools/reference/make_tokenizer_golden.py)\n", path);
        exit(1);
    }
    g.count = calloc((size_t)C.n, sizeof *g.count);
    g.hash = calloc((size_t)C.n, sizeof *g.hash);
    g.blocks = calloc((size_t)C.n, sizeof *g.blocks);
    for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n")) {
        if (*line == '#') continue;
        int doc;
        long long count;
        unsigned long long hash;
        char blocks[65536] = "";
        if (sscanf(line, "%d\t%lld\t%llx\t%65535s", &doc, &count, &hash, blocks) < 3 || doc < 0 || doc >= C.n) continue;
        g.count[doc] = count;
        g.hash[doc] = hash;
        g.blocks[doc] = strdup(blocks);
        g.total += count;
        g.n++;
    }
    free(data);
    return g;
}

static void free_golden(golden *g) {
    for (int i = 0; i < C.n; i++) free(g->blocks[i]);
    free(g->count);
    free(g->hash);
    free(g->blocks);
}

/* Reports the first document that differs: where (to 1024 ids) and what we produced. */
static void report_mismatch(const char *name, int doc, const mc_ids *ids, const golden *g) {
    fprintf(stderr, "  %s: document %d differs: %lld ids, expected %lld\n", name, doc, (long long)ids->len,
            (long long)g->count[doc]);
    const char *b = g->blocks[doc];
    for (int64_t start = 0;; start += 1024) {
        int64_t n = ids->len - start < 1024 ? ids->len - start : 1024;
        unsigned want = 0;
        bool have = b && *b && sscanf(b, "%8x", &want) == 1;
        unsigned got = n > 0 ? (unsigned)(tt_fnv1a64(ids->data + start, n) & 0xFFFFFFFFu) : 0;
        if (!have || n <= 0 || got != want) {
            fprintf(stderr, "  first difference at ids [%lld, %lld); ours there:\n", (long long)start, (long long)(start + 1024));
            if (n > 0) tt_print_ids("ours", ids->data + start, n);
            fprintf(stderr, "  reference ids: python3 tools/reference/make_tokenizer_golden.py dump %s %d\n", name, doc);
            return;
        }
        b = strchr(b, ',');
        b = b ? b + 1 : "";
    }
}

/* Encodes the corpus `passes` times with one scratch; checks every document; returns the
 * best MB/s. */
static double check_corpus(const char *fixture, mc_tokenizer *t, int64_t readme_total, int bos_per_doc, int passes) {
    golden g = load_golden(fixture);
    CHECK(g.n == C.n, "%s: fixture has %d documents, corpus %d", fixture, g.n, C.n);
    mc_tokenizer_scratch *s = mc_tokenizer_scratch_new(t);
    mc_ids *ids = calloc((size_t)C.n, sizeof *ids);
    double best = 1e30;
    for (int pass = 0; pass < passes; pass++) {
        double t0 = now();
        for (int i = 0; i < C.n; i++) {
            mc_err e;
            ids[i].len = 0;
            CHECK(mc_tokenizer_encode(t, s, C.text[i], C.len[i], &ids[i], &e) == MC_OK);
        }
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    int64_t total = 0, bad = 0;
    for (int i = 0; i < C.n; i++) {
        total += ids[i].len;
        if (ids[i].len != g.count[i] || tt_fnv1a64(ids[i].data, ids[i].len) != g.hash[i]) {
            if (!bad) report_mismatch(fixture, i, &ids[i], &g);
            bad++;
        }
        mc_ids_free(&ids[i]);
    }
    CHECK(bad == 0, "%s: %lld of %d documents differ", fixture, (long long)bad, C.n);
    CHECK(total == g.total, "%s: %lld ids, fixture %lld", fixture, (long long)total, (long long)g.total);
    if (readme_total >= 0)
        CHECK(total - (int64_t)bos_per_doc * C.n == readme_total, "%s: %lld ids without BOS, README says %lld", fixture,
              (long long)(total - bos_per_doc * C.n), (long long)readme_total);
    double mbs = (double)C.bytes / best / 1e6;
    printf("  %-8s %8lld ids, %d/%d documents identical, %6.1f MB/s (one thread, best of %d)\n", fixture,
           (long long)total, C.n - (int)bad, C.n, mbs, passes);
    free(ids);
    mc_tokenizer_scratch_free(s);
    free_golden(&g);
    return mbs;
}

static void test_corpus_gpt2(void) {
    mc_tokenizer *t = tt_gpt2();
    check_corpus("gpt2", t, 992532, 0, 3);
    mc_tokenizer_free(t);
    t = tt_hf(tt_gpt2_json(), true, false); /* the tokenizer.json form: no post-processor tokens */
    check_corpus("gpt2", t, 992532, 0, 1);
    mc_tokenizer_free(t);
}

static void test_corpus_llama3(void) {
    mc_tokenizer *t = tt_hf(tt_shared("data/llama3/tokenizer.json"), true, false);
    check_corpus("llama3", t, 958483, 1, 3); /* Megatron's HF path: with <|begin_of_text|> */
    mc_tokenizer_free(t);
}

static void test_corpus_llama2_mistral(void) {
    mc_tokenizer *t = tt_hf(tt_shared("data/llama2/tokenizer.json"), true, false);
    check_corpus("llama2", t, 1062817, 1, 2);
    mc_tokenizer_free(t);
    t = tt_hf(tt_shared("data/mistral/tokenizer.json"), true, false);
    check_corpus("mistral", t, 1045957, 1, 1);
    mc_tokenizer_free(t);
}

static void test_corpus_spm(void) {
    mc_tokenizer *t = tt_spm(tt_shared("data/spm/austen-bpe-4k.model"));
    check_corpus("spm", t, -1, 0, 2);
    mc_tokenizer_free(t);
    t = tt_spm(TOK_FIX "small-bpe.model");
    check_corpus("small", t, -1, 0, 1);
    mc_tokenizer_free(t);
}

/* ---- threads ------------------------------------------------------------------------------- */

typedef struct job {
    mc_tokenizer *t;
    int tid, nthreads;
    golden *g;
    int bad;
} job;

static void *worker(void *arg) {
    job *j = arg;
    mc_tokenizer_scratch *s = mc_tokenizer_scratch_new(j->t);
    mc_ids ids = {0};
    for (int rep = 0; rep < 2; rep++)
        for (int i = j->tid; i < C.n; i += j->nthreads) {
            mc_err e;
            ids.len = 0;
            if (mc_tokenizer_encode(j->t, s, C.text[i], C.len[i], &ids, &e) != MC_OK || ids.len != j->g->count[i] ||
                tt_fnv1a64(ids.data, ids.len) != j->g->hash[i])
                j->bad++;
        }
    mc_ids_free(&ids);
    mc_tokenizer_scratch_free(s);
    return NULL;
}

static void test_threads(void) {
    const char *names[2] = {"llama3", "spm"};
    for (int k = 0; k < 2; k++) {
        mc_tokenizer *t = k == 0 ? tt_hf(tt_shared("data/llama3/tokenizer.json"), true, false)
                                 : tt_spm(tt_shared("data/spm/austen-bpe-4k.model"));
        golden g = load_golden(names[k]);
        enum { NT = 4 };
        pthread_t th[NT];
        job jobs[NT];
        double t0 = now();
        for (int i = 0; i < NT; i++) {
            jobs[i] = (job){t, i, NT, &g, 0};
            pthread_create(&th[i], NULL, worker, &jobs[i]);
        }
        int bad = 0;
        for (int i = 0; i < NT; i++) {
            pthread_join(th[i], NULL);
            bad += jobs[i].bad;
        }
        printf("  %s: %d threads, each with its own scratch: %d mismatches (%.2f s)\n", names[k], NT, bad, now() - t0);
        CHECK(bad == 0, "%s: %d documents differ when encoded from %d threads", names[k], bad, NT);
        free_golden(&g);
        mc_tokenizer_free(t);
    }
}

/* ---- pre-tokenizer regexes: hand-written vs PCRE2 ----------------------------------------------- */

static int split_ends(const tok_regex *re, tok_regex_scratch *rs, const char *s, size_t n, size_t *ends, int cap) {
    size_t from = 0, ms, me;
    int k = 0;
    while (k < cap && tok_regex_next(re, rs, (const uint8_t *)s, n, from, &ms, &me)) {
        ends[k++] = ms << 20 | (me - ms); /* start and length, both within a document */
        from = me;
    }
    return k;
}

static const char *const k_alphabet[] = {
    "a", "Z", "s", "S", "t", "T", "l", "L", "r", "e", "v", "m", "d", "'", "'", "'", " ", " ", " ", "  ", "\t", "\n",
    "\r", "\r\n", "\v", "\f", "0", "7", "42", "!", ".", ",", "-", "_", "(", "\xC2\xA0" /* NBSP */,
    "\xC2\x85" /* NEL */, "\xE2\x80\xA8" /* LS */, "\xE3\x80\x80" /* ideographic space */, "\xE1\xA0\x8E" /* U+180E */,
    "\xE2\x80\x8B" /* ZWSP */, "\xEF\xBB\xBF" /* BOM */, "\xC3\xA9", "\xC3\x9F", "\xC5\xBF" /* long s */,
    "\xE2\x84\xAA" /* Kelvin */, "\xD9\xA1" /* Arabic 1 */, "\xE2\x85\xAB" /* XII */, "\xC2\xBD", "\xE4\xB8\xAD",
    "\xF0\x9F\x98\x80", "\xCC\x81" /* combining acute */, "\xE0\xA4\xA8\xE0\xA5\x8D", "\xCE\xA9", "\xD0\x96", "$",
    "\xE2\x80\x94", "\xE2\x80\x9C"};

static void test_regex_hand_vs_pcre2(void) {
    tok_regex probe;
    mc_err pe;
    if (tok_regex_compile(&probe, "a", false, &pe) != MC_OK) {
        printf("  %s: skipped\n", pe.msg);
        return;
    }
    tok_regex_free(&probe);
    const char *pats[2] = {tok_re_gpt2, tok_re_cl100k};
    const char *names[2] = {"gpt2", "cl100k"};
    size_t *a = malloc(4000000 * sizeof *a), *b = malloc(4000000 * sizeof *b);
    for (int p = 0; p < 2; p++) {
        tok_regex hand, pcre;
        mc_err e;
        CHECK(tok_regex_compile(&hand, pats[p], true, &e) == MC_OK && hand.kind != TOK_RE_PCRE2);
        CHECK(tok_regex_compile(&pcre, pats[p], false, &e) == MC_OK && pcre.kind == TOK_RE_PCRE2, "%s", e.msg);
        tok_regex_scratch hs, ps;
        tok_regex_scratch_init(&hs, &hand);
        tok_regex_scratch_init(&ps, &pcre);
        double th = 0, tp = 0;
        int bad = 0;
        for (int i = 0; i < C.n; i++) {
            double t0 = now();
            int na = split_ends(&hand, &hs, C.text[i], C.len[i], a, 4000000);
            double t1 = now();
            int nb = split_ends(&pcre, &ps, C.text[i], C.len[i], b, 4000000);
            th += t1 - t0;
            tp += now() - t1;
            if (na != nb || memcmp(a, b, (size_t)na * sizeof *a)) bad++;
        }
        /* random strings over an alphabet of the interesting characters */
        uint64_t rng = 12345;
        char buf[1024];
        for (int r = 0; r < 30000; r++) {
            size_t n = 0;
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            int len = 1 + (int)(rng >> 59);
            for (int k = 0; k < len; k++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                const char *c = k_alphabet[(rng >> 33) % (sizeof k_alphabet / sizeof *k_alphabet)];
                memcpy(buf + n, c, strlen(c));
                n += strlen(c);
            }
            int na = split_ends(&hand, &hs, buf, n, a, 1024), nb = split_ends(&pcre, &ps, buf, n, b, 1024);
            if (na != nb || memcmp(a, b, (size_t)na * sizeof *a)) {
                if (bad < 3) {
                    fprintf(stderr, "  %s splits differ on \"", names[p]);
                    for (size_t k = 0; k < n; k++) fprintf(stderr, (uint8_t)buf[k] < 32 || (uint8_t)buf[k] > 126 ? "\\x%02x" : "%c", (uint8_t)buf[k]);
                    fprintf(stderr, "\"\n");
                }
                bad++;
            }
        }
        printf("  %-6s hand-written == PCRE2 on the corpus and 30000 random strings: %d differences; split speed "
               "%.0f MB/s hand-written, %.0f MB/s PCRE2 JIT\n",
               names[p], bad, (double)C.bytes / th / 1e6, (double)C.bytes / tp / 1e6);
        CHECK(bad == 0, "%s: %d differences between the hand-written matcher and PCRE2", names[p], bad);
        tok_regex_scratch_free(&hs);
        tok_regex_scratch_free(&ps);
        tok_regex_free(&hand);
        tok_regex_free(&pcre);
    }
    free(a);
    free(b);
}

int main(void) {
    tt_need_shared();
    load_corpus();
    printf("  corpus: %d documents, %zu bytes\n", C.n, C.bytes);
    RUN(test_corpus_gpt2);
    RUN(test_corpus_llama3);
    RUN(test_corpus_llama2_mistral);
    RUN(test_corpus_spm);
    RUN(test_threads);
    RUN(test_regex_hand_vs_pcre2);
    unlink(tt_gpt2_json());
    for (int i = 0; i < C.n; i++) free(C.text[i]);
    free(C.text);
    free(C.len);
    return check_summary();
}
