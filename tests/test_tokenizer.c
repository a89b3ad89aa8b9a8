/* test_tokenizer.c: every reference case of the shared data (tokenizer_cases.jsonl,
 * spm/cases.jsonl) and of tests/fixtures/tokenizer (HF tokenizers 0.23.2 and sentencepiece
 * output for special tokens, whitespace and Unicode corners, decode), the properties
 * Megatron reads (vocab size, eod), NullTokenizer / ByteLevelTokenizer, and the one-line
 * errors for bad files and inputs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_tokenizer_common.h"

typedef struct named_tok {
    const char *name;
    mc_tokenizer *plain;   /* special tokens matched in the text */
    mc_tokenizer *ordinary; /* special-token text is plain text */
} named_tok;

static named_tok toks[4];
static mc_tokenizer *gpt2_bpe;

static void open_all(void) {
    gpt2_bpe = tt_gpt2();
    toks[0] = (named_tok){"gpt2", tt_hf(tt_gpt2_json(), false, false), tt_hf(tt_gpt2_json(), false, true)};
    const char *names[3] = {"llama3", "llama2", "mistral"};
    for (int i = 0; i < 3; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "data/%s/tokenizer.json", names[i]);
        toks[i + 1] = (named_tok){names[i], tt_hf(tt_shared(rel), false, false), tt_hf(tt_shared(rel), false, true)};
    }
}

static named_tok *find_tok(const char *name) {
    for (int i = 0; i < 4; i++)
        if (!strcmp(toks[i].name, name)) return &toks[i];
    return NULL;
}

/* Encodes text and compares with want; on a mismatch prints both. */
static bool encode_check(mc_tokenizer *t, const char *label, const char *text, const cJSON *want, mc_ids *ids) {
    mc_tokenizer_scratch *s = mc_tokenizer_scratch_new(t);
    mc_err e = {{0}};
    ids->len = 0;
    int rc = mc_tokenizer_encode(t, s, text, strlen(text), ids, &e);
    mc_tokenizer_scratch_free(s);
    bool ok = rc == MC_OK && tt_ids_eq(ids, want);
    if (!ok) {
        fprintf(stderr, "  %s: \"%.80s\"%s\n", label, text, rc ? e.msg : "");
        tt_print_ids("got ", ids->data, ids->len);
        int n = cJSON_GetArraySize(want), i = 0;
        int32_t *w = malloc((size_t)(n + 1) * sizeof *w);
        const cJSON *x;
        cJSON_ArrayForEach(x, want) w[i++] = (int32_t)x->valuedouble;
        tt_print_ids("want", w, n);
        free(w);
    }
    return ok;
}

static bool decode_check(mc_tokenizer *t, const char *label, const mc_ids *ids, const char *want) {
    size_t len;
    char *got = mc_tokenizer_decode(t, ids->data, ids->len, &len);
    bool ok = len == strlen(want) && !memcmp(got, want, len);
    if (!ok) fprintf(stderr, "  %s decode: got \"%.80s\" want \"%.80s\"\n", label, got, want);
    free(got);
    return ok;
}

static void test_shared_cases(void) {
    int n, bad = 0, checked = 0;
    cJSON **rows = tt_jsonl(tt_shared("data/tokenizer_cases.jsonl"), &n);
    mc_ids ids = {0};
    for (int i = 0; rows[i]; i++) {
        const char *name = cJSON_GetObjectItem(rows[i], "tokenizer")->valuestring;
        const char *text = cJSON_GetObjectItem(rows[i], "text")->valuestring;
        const cJSON *want = cJSON_GetObjectItem(rows[i], "ids");
        bool special = cJSON_IsTrue(cJSON_GetObjectItem(rows[i], "parse_special"));
        bool roundtrip = cJSON_IsTrue(cJSON_GetObjectItem(rows[i], "roundtrip"));
        named_tok *nt = find_tok(name);
        CHECK(nt, "unknown tokenizer %s", name);
        if (!nt) continue;
        mc_tokenizer *t = special ? nt->plain : nt->ordinary;
        char label[64];
        snprintf(label, sizeof label, "%s line %d", name, i + 1);
        if (!encode_check(t, label, text, want, &ids)) bad++;
        else if (roundtrip && !decode_check(t, label, &ids, text)) bad++;
        checked++;
        /* and Megatron's GPT2BPETokenizer, which is HF's GPT-2 with <|endoftext|> parsed */
        if (!strcmp(name, "gpt2") && (special || !strstr(text, "<|endoftext|>"))) {
            snprintf(label, sizeof label, "GPT2BPETokenizer line %d", i + 1);
            if (!encode_check(gpt2_bpe, label, text, want, &ids)) bad++;
            else if (roundtrip && !decode_check(gpt2_bpe, label, &ids, text)) bad++;
            checked++;
        }
    }
    printf("  %d lines, %d checks, %d mismatches\n", n, checked, bad);
    CHECK(n == 151 && bad == 0, "%d of %d checks failed", bad, checked);
    mc_ids_free(&ids);
    tt_jsonl_free(rows);
}

static int encode_str(mc_tokenizer *t, const char *s, mc_ids *ids, mc_err *e) {
    mc_tokenizer_scratch *sc = mc_tokenizer_scratch_new(t);
    ids->len = 0;
    int rc = mc_tokenizer_encode(t, sc, s, strlen(s), ids, e);
    mc_tokenizer_scratch_free(sc);
    return rc;
}

/* GPT2BPETokenizer splits the literal <|endoftext|> out of the text as id 50256, as
 * Megatron's (HF's GPT-2 tokenizer) does: inside words, beside spaces and newlines, runs of
 * it; near misses stay text (tools/reference/make_gpt2_special_cases.py, transformers fast
 * and slow agreeing). With split_special_tokens it is plain text again. */
static void test_gpt2_special_tokens(void) {
    int n, bad = 0;
    cJSON **rows = tt_jsonl(TOK_FIX "gpt2_special_cases.jsonl", &n);
    mc_ids ids = {0};
    for (int i = 0; rows[i]; i++) {
        const char *text = cJSON_GetObjectItem(rows[i], "text")->valuestring;
        char label[64];
        snprintf(label, sizeof label, "gpt2_special_cases line %d", i + 1);
        if (!encode_check(gpt2_bpe, label, text, cJSON_GetObjectItem(rows[i], "ids"), &ids)) bad++;
        else if (!decode_check(gpt2_bpe, label, &ids, text)) bad++;
    }
    printf("  %d cases, %d mismatches\n", n, bad);
    CHECK(n == 30 && bad == 0, "%d of %d cases failed", bad, n);
    mc_tokenizer_options o = {.type = MC_TOKENIZER_GPT2BPE,
                              .vocab_file = tt_shared("data/gpt2/gpt2-vocab.json"),
                              .merge_file = tt_shared("data/gpt2/gpt2-merges.txt"),
                              .split_special_tokens = true};
    mc_tokenizer *ordinary = tt_open(&o);
    mc_err e;
    CHECK(encode_str(ordinary, "a<|endoftext|>", &ids, &e) == MC_OK && ids.len == 8 && ids.data[1] == 27,
          "%lld ids", (long long)ids.len);
    mc_tokenizer_free(ordinary);
    mc_ids_free(&ids);
    tt_jsonl_free(rows);
}

/* llama2/tokenizer.json with a Metaspace pre-tokenizer and decoder instead of the
 * normalizer, as make_tokenizer_golden.py's metaspace_variant() builds it. */
static const char *metaspace_json(bool split) {
    static char paths[2][128];
    char *path = paths[split];
    if (path[0]) return path;
    char *data = tt_read(tt_shared("data/llama2/tokenizer.json"), NULL);
    cJSON *root = cJSON_Parse(data);
    free(data);
    cJSON_ReplaceItemInObject(root, "normalizer", cJSON_CreateNull());
    cJSON *ms = cJSON_CreateObject();
    cJSON_AddStringToObject(ms, "type", "Metaspace");
    cJSON_AddStringToObject(ms, "replacement", "\xE2\x96\x81");
    cJSON_AddStringToObject(ms, "prepend_scheme", "first");
    cJSON_AddBoolToObject(ms, "split", split);
    cJSON_ReplaceItemInObject(root, "pre_tokenizer", cJSON_Duplicate(ms, 1));
    cJSON *dec = cJSON_CreateObject(), *bf = cJSON_CreateObject(), *fu = cJSON_CreateObject();
    cJSON_AddStringToObject(dec, "type", "Sequence");
    cJSON *list = cJSON_AddArrayToObject(dec, "decoders");
    cJSON_AddStringToObject(bf, "type", "ByteFallback");
    cJSON_AddStringToObject(fu, "type", "Fuse");
    cJSON_AddItemToArray(list, ms);
    cJSON_AddItemToArray(list, bf);
    cJSON_AddItemToArray(list, fu);
    cJSON_ReplaceItemInObject(root, "decoder", dec);
    snprintf(path, 128, "/tmp/mc_test_meta%d_%d.json", (int)split, (int)getpid());
    FILE *f = fopen(path, "w");
    char *txt = cJSON_PrintUnformatted(root);
    fputs(txt, f);
    fclose(f);
    free(txt);
    cJSON_Delete(root);
    return path;
}

/* A variant row of hf_cases.jsonl: the GPT-2 tokenizer.json with other components. */
static char variant_name[8][32], variant_path[8][128];
static int n_variants;

static void add_variant(const cJSON *row) {
    char *data = tt_read(tt_gpt2_json(), NULL);
    cJSON *root = cJSON_Parse(data);
    free(data);
    const char *keys[3] = {"pre_tokenizer", "post_processor", "added_tokens"};
    for (int k = 0; k < 3; k++)
        cJSON_ReplaceItemInObject(root, keys[k], cJSON_Duplicate(cJSON_GetObjectItem(row, keys[k]), 1));
    int v = n_variants++;
    snprintf(variant_name[v], 32, "%s", cJSON_GetObjectItem(row, "variant")->valuestring);
    snprintf(variant_path[v], 128, "/tmp/mc_test_%s_%d.json", variant_name[v], (int)getpid());
    FILE *f = fopen(variant_path[v], "w");
    char *txt = cJSON_PrintUnformatted(root);
    fputs(txt, f);
    fclose(f);
    free(txt);
    cJSON_Delete(root);
}

static const char *hf_path(const char *name) {
    static char rel[64];
    for (int v = 0; v < n_variants; v++)
        if (!strcmp(variant_name[v], name)) return variant_path[v];
    if (!strcmp(name, "gpt2")) return tt_gpt2_json();
    if (!strcmp(name, "llama2_meta")) return metaspace_json(false);
    if (!strcmp(name, "llama2_meta_split")) return metaspace_json(true);
    if (!strcmp(name, "flags")) return TOK_FIX "flags-tokenizer.json";
    snprintf(rel, sizeof rel, "data/%s/tokenizer.json", name);
    return tt_shared(rel);
}

/* Tokenizers opened on demand, by (file, include BOS, split special tokens). */
typedef struct open_tok {
    char name[32];
    bool include, split;
    mc_tokenizer *t;
} open_tok;
static open_tok opened[32];
static int n_opened;

static mc_tokenizer *get_hf(const char *name, bool include, bool split) {
    for (int i = 0; i < n_opened; i++)
        if (!strcmp(opened[i].name, name) && opened[i].include == include && opened[i].split == split) return opened[i].t;
    open_tok *o = &opened[n_opened++];
    snprintf(o->name, sizeof o->name, "%s", name);
    o->include = include;
    o->split = split;
    o->t = tt_hf(hf_path(name), include, split);
    return o->t;
}

static void test_hf_fixture_cases(void) {
    int n, bad = 0, meta = 0, flags = 0;
    cJSON **rows = tt_jsonl(TOK_FIX "hf_cases.jsonl", &n);
    mc_ids ids = {0};
    int variants = 0;
    for (int i = 0; rows[i]; i++) {
        if (cJSON_GetObjectItem(rows[i], "variant")) {
            add_variant(rows[i]);
            variants++;
            continue;
        }
        const char *name = cJSON_GetObjectItem(rows[i], "tokenizer")->valuestring;
        const char *text = cJSON_GetObjectItem(rows[i], "text")->valuestring;
        const cJSON *dj = cJSON_GetObjectItem(rows[i], "decoded");
        const char *decoded = dj ? dj->valuestring : text;
        const cJSON *want = cJSON_GetObjectItem(rows[i], "ids");
        bool special = cJSON_IsTrue(cJSON_GetObjectItem(rows[i], "parse_special"));
        bool add = cJSON_IsTrue(cJSON_GetObjectItem(rows[i], "add_special_tokens"));
        mc_tokenizer *t = get_hf(name, add, !special);
        meta += !strncmp(name, "llama2_meta", 11);
        flags += !strcmp(name, "flags");
        char label[96];
        snprintf(label, sizeof label, "%s special=%d bos=%d line %d", name, special, add, i + 1);
        if (!encode_check(t, label, text, want, &ids)) bad++;
        else if (!decode_check(t, label, &ids, decoded)) bad++;
        /* GPT2BPETokenizer: <|endoftext|> parsed, no BOS */
        if (!strcmp(name, "gpt2") && !add && (special || !strstr(text, "<|endoftext|>"))) {
            snprintf(label, sizeof label, "GPT2BPETokenizer line %d", i + 1);
            if (!encode_check(gpt2_bpe, label, text, want, &ids)) bad++;
        }
    }
    printf("  %d cases (%d of Metaspace variants, %d of added-token flags, %d GPT-2 variants), %d mismatches\n",
           n - variants, meta, flags, variants, bad);
    CHECK(bad == 0 && meta > 0 && flags > 0 && variants == 3, "%d of %d cases failed", bad, n);
    for (int v = 0; v < n_variants; v++) unlink(variant_path[v]);
    n_variants = 0;
    for (int i = 0; i < n_opened; i++) mc_tokenizer_free(opened[i].t);
    n_opened = 0;
    unlink(metaspace_json(false));
    unlink(metaspace_json(true));
    mc_ids_free(&ids);
    tt_jsonl_free(rows);
}

static void spm_cases(const char *model, const char *cases, bool has_decoded) {
    mc_tokenizer *t = tt_spm(model);
    int n, bad = 0;
    cJSON **rows = tt_jsonl(cases, &n);
    mc_ids ids = {0};
    for (int i = 0; rows[i]; i++) {
        const char *text = cJSON_GetObjectItem(rows[i], "text")->valuestring;
        const cJSON *want = cJSON_GetObjectItem(rows[i], "ids");
        const char *decoded = has_decoded ? cJSON_GetObjectItem(rows[i], "decoded")->valuestring
                              : cJSON_IsTrue(cJSON_GetObjectItem(rows[i], "roundtrip")) ? text : NULL;
        char label[64];
        snprintf(label, sizeof label, "%s line %d", strrchr(cases, '/') + 1, i + 1);
        if (!encode_check(t, label, text, want, &ids)) bad++;
        else if (decoded && !decode_check(t, label, &ids, decoded)) bad++;
    }
    printf("  %s: %d cases, %d mismatches\n", strrchr(cases, '/') + 1, n, bad);
    CHECK(bad == 0, "%s: %d of %d cases failed", cases, bad, n);
    mc_ids_free(&ids);
    tt_jsonl_free(rows);
    mc_tokenizer_free(t);
}

static void test_spm_cases(void) {
    spm_cases(tt_shared("data/spm/austen-bpe-4k.model"), tt_shared("data/spm/cases.jsonl"), false);
    spm_cases(tt_shared("data/spm/austen-bpe-4k.model"), TOK_FIX "spm_cases.jsonl", true);
    spm_cases(TOK_FIX "small-bpe.model", TOK_FIX "small_cases.jsonl", true);
}

static void test_properties(void) {
    CHECK(mc_tokenizer_vocab_size(gpt2_bpe) == 50257 && mc_tokenizer_eod(gpt2_bpe) == 50256);
    CHECK(!strcmp(mc_tokenizer_name(gpt2_bpe), "GPT2BPETokenizer"));
    CHECK(mc_tokenizer_vocab_size(toks[0].plain) == 50257 && mc_tokenizer_eod(toks[0].plain) == 50256);
    CHECK(mc_tokenizer_vocab_size(toks[1].plain) == 128256, "llama3 vocab %d", mc_tokenizer_vocab_size(toks[1].plain));
    CHECK(mc_tokenizer_eod(toks[1].plain) == 128001, "llama3 eod %d", mc_tokenizer_eod(toks[1].plain));
    CHECK(!strcmp(mc_tokenizer_name(toks[1].plain), "HuggingFaceTokenizer"));
    for (int k = 2; k < 4; k++) {
        CHECK(mc_tokenizer_vocab_size(toks[k].plain) == 32000, "%s vocab %d", toks[k].name, mc_tokenizer_vocab_size(toks[k].plain));
        CHECK(mc_tokenizer_eod(toks[k].plain) == 2, "%s eod %d", toks[k].name, mc_tokenizer_eod(toks[k].plain));
    }
    mc_tokenizer *s = tt_spm(tt_shared("data/spm/austen-bpe-4k.model"));
    CHECK(mc_tokenizer_vocab_size(s) == 4096 && mc_tokenizer_eod(s) == 2);
    mc_tokenizer *fl = tt_hf(TOK_FIX "flags-tokenizer.json", true, false);
    CHECK(mc_tokenizer_vocab_size(fl) == 425, "flags vocab %d (HF get_vocab_size(True) = 425)", mc_tokenizer_vocab_size(fl));
    mc_tokenizer_free(fl);
    CHECK(!strcmp(mc_tokenizer_name(s), "SentencePieceTokenizer"));
    mc_tokenizer_free(s);

    /* Megatron's HF path: tokenizer(text).input_ids, i.e. with the template's BOS */
    mc_tokenizer *l3 = tt_hf(tt_shared("data/llama3/tokenizer.json"), true, false);
    mc_tokenizer_scratch *sc = mc_tokenizer_scratch_new(l3);
    mc_ids ids = {0};
    mc_err e;
    CHECK(mc_tokenizer_encode(l3, sc, "Hello world", 11, &ids, &e) == MC_OK);
    CHECK(ids.len == 3 && ids.data[0] == 128000 && ids.data[1] == 9906 && ids.data[2] == 1917);
    ids.len = 0;
    CHECK(mc_tokenizer_encode(l3, sc, "", 0, &ids, &e) == MC_OK && ids.len == 1 && ids.data[0] == 128000);
    mc_tokenizer_scratch_free(sc);
    mc_tokenizer_free(l3);

    /* a directory works too, and tokenizer_config.json's eos_token names the eod */
    char dir[] = "/tmp/mc_tok_dirXXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char p[512], q[512];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    CHECK(symlink(realpath(tt_shared("data/llama3/tokenizer.json"), q), p) == 0);
    mc_tokenizer *d = tt_hf(dir, true, false);
    CHECK(mc_tokenizer_eod(d) == 128001);
    mc_tokenizer_free(d);
    snprintf(q, sizeof q, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(q, "w");
    fputs("{\"bos_token\": \"<|begin_of_text|>\", \"eos_token\": {\"content\": \"<|eot_id|>\", \"special\": true}}", f);
    fclose(f);
    d = tt_hf(dir, true, false);
    CHECK(mc_tokenizer_eod(d) == 128009, "eod from tokenizer_config.json: %d", mc_tokenizer_eod(d));
    mc_tokenizer_free(d);
    unlink(q);
    unlink(p);
    rmdir(dir);
    mc_ids_free(&ids);
}


static void test_null_and_byte(void) {
    mc_tokenizer_options o = {.type = MC_TOKENIZER_NULL, .vocab_size = 1000};
    mc_tokenizer *t = tt_open(&o);
    CHECK(mc_tokenizer_vocab_size(t) == 1000 && mc_tokenizer_eod(t) == 999);
    CHECK(!strcmp(mc_tokenizer_name(t), "NullTokenizer"));
    mc_ids ids = {0};
    mc_err e = {{0}};
    CHECK(encode_str(t, "5 17 999 0\n", &ids, &e) == MC_OK && ids.len == 4 && ids.data[1] == 17 && ids.data[2] == 999);
    size_t len;
    char *txt = mc_tokenizer_decode(t, ids.data, ids.len, &len);
    CHECK(!strcmp(txt, "5 17 999 0"), "%s", txt);
    free(txt);
    CHECK(encode_str(t, "", &ids, &e) == MC_OK && ids.len == 0);
    CHECK(encode_str(t, "1 2 x3 4", &ids, &e) == MC_ERR && strstr(e.msg, "\"x3\"") && strstr(e.msg, "not an integer"),
          "%s", e.msg);
    CHECK(encode_str(t, "1 1000", &ids, &e) == MC_ERR && strstr(e.msg, "\"1000\"") && strstr(e.msg, "out of range"), "%s",
          e.msg);
    CHECK(encode_str(t, "-3", &ids, &e) == MC_ERR && strstr(e.msg, "\"-3\""), "%s", e.msg);
    CHECK(encode_str(t, "1  2", &ids, &e) == MC_ERR && strstr(e.msg, "empty token"), "%s", e.msg);
    CHECK(encode_str(t, "2.5", &ids, &e) == MC_ERR && strstr(e.msg, "\"2.5\""), "%s", e.msg);
    mc_tokenizer_free(t);

    o = (mc_tokenizer_options){.type = MC_TOKENIZER_BYTE};
    t = tt_open(&o);
    CHECK(mc_tokenizer_vocab_size(t) == 257 && mc_tokenizer_eod(t) == 256);
    CHECK(encode_str(t, "h\xC3\xA9", &ids, &e) == MC_OK && ids.len == 3 && ids.data[1] == 0xC3);
    txt = mc_tokenizer_decode(t, ids.data, ids.len, &len);
    CHECK(len == 3 && !strcmp(txt, "h\xC3\xA9"));
    free(txt);
    mc_tokenizer_free(t);
    mc_ids_free(&ids);
}

/* A bad input: open fails with a one-line message that contains `want`. */
static void expect_open_error(const mc_tokenizer_options *o, const char *want) {
    mc_tokenizer *t = (mc_tokenizer *)1;
    mc_err e = {{0}};
    int rc = mc_tokenizer_open(&t, o, &e);
    CHECK(rc == MC_ERR && t == NULL, "expected failure for \"%s\"", want);
    CHECK(strstr(e.msg, want) != NULL, "message \"%s\" lacks \"%s\"", e.msg, want);
    CHECK(!strchr(e.msg, '\n') && strlen(e.msg) > 10, "not one line: \"%s\"", e.msg);
    printf("  error: %s\n", e.msg);
    if (rc == MC_OK) mc_tokenizer_free(t);
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

static void test_errors(void) {
    char dir[] = "/tmp/mc_tok_errXXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char p1[512], p2[512];
    const char *vocab = tt_shared("data/gpt2/gpt2-vocab.json"), *merges = tt_shared("data/gpt2/gpt2-merges.txt");
    mc_tokenizer_options o = {.type = MC_TOKENIZER_GPT2BPE, .vocab_file = "/nonexistent/vocab.json", .merge_file = merges};
    expect_open_error(&o, "--vocab-file /nonexistent/vocab.json: cannot open");
    o.vocab_file = vocab;
    o.merge_file = "/nonexistent/merges.txt";
    expect_open_error(&o, "--merge-file /nonexistent/merges.txt: cannot open");
    o.merge_file = NULL;
    expect_open_error(&o, "--merge-file");
    /* vocab and merges that do not belong together */
    snprintf(p1, sizeof p1, "%s/vocab.json", dir);
    snprintf(p2, sizeof p2, "%s/merges.txt", dir);
    const char *v = "{\"a\": 0, \"b\": 1, \"ab\": 2, \"c\": 3, \"<|endoftext|>\": 4}";
    write_file(p1, v, strlen(v));
    write_file(p2, "#version: 0.2\na b\nab c\n", 23);
    o = (mc_tokenizer_options){.type = MC_TOKENIZER_GPT2BPE, .vocab_file = p1, .merge_file = p2};
    expect_open_error(&o, "line 3");
    expect_open_error(&o, "\"abc\" is not in the vocabulary");
    write_file(p2, "#version: 0.2\na z\n", 18);
    expect_open_error(&o, "\"z\" is not in the vocabulary");
    o.merge_file = merges; /* the real merges against a toy vocab */
    expect_open_error(&o, "is not in the vocabulary");
    write_file(p2, "#version: 0.2\na b c\n", 20);
    o.merge_file = p2;
    expect_open_error(&o, "expected two tokens");
    write_file(p1, "{\"a\": 0, ", 9);
    expect_open_error(&o, "malformed JSON");
    write_file(p1, "{\"a\": 0}", 8);
    write_file(p2, "#version: 0.2\n", 14);
    expect_open_error(&o, "<|endoftext|>");

    /* tokenizer.json */
    o = (mc_tokenizer_options){.type = MC_TOKENIZER_HF, .tokenizer_model = "/nonexistent/tokenizer.json"};
    expect_open_error(&o, "--tokenizer-model /nonexistent/tokenizer.json: cannot open");
    snprintf(p1, sizeof p1, "%s/tokenizer.json", dir);
    write_file(p1, "{\"model\": {\"type\": \"BPE\", \"vocab\": {", 35);
    o.tokenizer_model = p1;
    expect_open_error(&o, "malformed JSON");
    const char *unsup = "{\"normalizer\": {\"type\": \"NFKC\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}";
    write_file(p1, unsup, strlen(unsup));
    expect_open_error(&o, "normalizer \"NFKC\" is not supported");
    /* ids outside int64's range (the cast to int64 was undefined) and beyond int32 */
    const char *huge = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1e30}, \"merges\": []}}";
    write_file(p1, huge, strlen(huge));
    expect_open_error(&o, "model.vocab[\"a\"] is not a valid id");
    huge = "{\"added_tokens\": [{\"id\": -1e300, \"content\": \"x\"}], \"model\": {\"type\": \"BPE\", "
           "\"vocab\": {\"a\": 0}, \"merges\": []}}";
    write_file(p1, huge, strlen(huge));
    expect_open_error(&o, "added_tokens");
    const char *uni = "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}";
    write_file(p1, uni, strlen(uni));
    expect_open_error(&o, "model \"Unigram\" is not supported");
    const char *wp = "{\"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}";
    write_file(p1, wp, strlen(wp));
    expect_open_error(&o, "pre_tokenizer \"Whitespace\" is not supported");
    const char *bad_merge = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}";
    write_file(p1, bad_merge, strlen(bad_merge));
    expect_open_error(&o, "model.merges[0]");
    const char *bad_re = "{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(a\"}, \"behavior\": "
                         "\"Isolated\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}";
    write_file(p1, bad_re, strlen(bad_re));
    expect_open_error(&o, "regex");
    write_file(p1, "[1, 2]", 6);
    expect_open_error(&o, "not a tokenizer.json");

    /* tokenizer.model */
    o = (mc_tokenizer_options){.type = MC_TOKENIZER_SENTENCEPIECE, .tokenizer_model = "/nonexistent/tokenizer.model"};
    expect_open_error(&o, "--tokenizer-model /nonexistent/tokenizer.model: cannot open");
    size_t len;
    char *model = tt_read(tt_shared("data/spm/austen-bpe-4k.model"), &len);
    snprintf(p2, sizeof p2, "%s/tokenizer.model", dir);
    o.tokenizer_model = p2;
    size_t cuts[] = {len / 2, len - 1, 3, len - 700};
    for (int i = 0; i < 4; i++) {
        write_file(p2, model, cuts[i]);
        expect_open_error(&o, "corrupt SentencePiece model");
    }
    char *bad = malloc(len);
    memcpy(bad, model, len);
    for (size_t i = 0; i < 64; i++) bad[i] = (char)0xFF; /* an endless varint */
    write_file(p2, bad, len);
    expect_open_error(&o, "corrupt SentencePiece model");
    write_file(p2, "", 0);
    expect_open_error(&o, "no pieces");
    write_file(p2, v, strlen(v)); /* JSON is no protobuf */
    expect_open_error(&o, p2);
    free(bad);
    free(model);

    o = (mc_tokenizer_options){.type = (mc_tokenizer_type)42};
    expect_open_error(&o, "--tokenizer-type: unknown tokenizer type 42");
    o = (mc_tokenizer_options){.type = MC_TOKENIZER_NULL};
    expect_open_error(&o, "--vocab-size");
    unlink(p1);
    unlink(p2);
    snprintf(p1, sizeof p1, "%s/vocab.json", dir);
    unlink(p1);
    snprintf(p1, sizeof p1, "%s/merges.txt", dir);
    unlink(p1);
    rmdir(dir);
}

/* A GPT-2 vocabulary without byte symbols and without an unk token: a word of other
 * bytes has no ids (as in HF), the first time and from the word cache the second (an empty
 * cache entry once added 0 to a NULL pointer and memcpy'd from it). */
static void test_word_without_ids(void) {
    char dir[] = "/tmp/mc_tok_noidsXXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char vocab[512], merges[512];
    snprintf(vocab, sizeof vocab, "%s/vocab.json", dir);
    snprintf(merges, sizeof merges, "%s/merges.txt", dir);
    const char *v = "{\"a\": 0, \"<|endoftext|>\": 1}";
    write_file(vocab, v, strlen(v));
    write_file(merges, "#version: 0.2\n", 14);
    mc_tokenizer_options o = {.type = MC_TOKENIZER_GPT2BPE, .vocab_file = vocab, .merge_file = merges};
    mc_tokenizer *t = tt_open(&o);
    mc_tokenizer_scratch *sc = mc_tokenizer_scratch_new(t);
    mc_ids ids = {0};
    mc_err e = {{0}};
    for (int pass = 0; pass < 2; pass++) {
        ids.len = 0;
        CHECK(mc_tokenizer_encode(t, sc, "b a b", 5, &ids, &e) == MC_OK, "%s", e.msg);
        CHECK(ids.len == 1 && ids.data[0] == 0, "pass %d: %lld ids", pass, (long long)ids.len);
    }
    mc_ids_free(&ids);
    mc_tokenizer_scratch_free(sc);
    mc_tokenizer_free(t);
    unlink(vocab);
    unlink(merges);
    rmdir(dir);
}

/* Bytes that are not UTF-8 go through the byte-level BPEs bytewise, and decode back. */
static void test_invalid_utf8(void) {
    const char text[] = "ok \xFF\xFE caf\xC3 \xE2\x82 end";
    mc_ids ids = {0};
    mc_err e;
    for (int k = 0; k < 2; k++) {
        mc_tokenizer *t = k ? toks[1].ordinary : gpt2_bpe;
        CHECK(encode_str(t, text, &ids, &e) == MC_OK && ids.len > 5);
        size_t len;
        char *d = mc_tokenizer_decode(t, ids.data, ids.len, &len);
        CHECK(strstr(d, "ok ") == d && strstr(d, "\xEF\xBF\xBD") && strstr(d, " end"), "%s", d);
        free(d);
    }
    mc_ids_free(&ids);
}

/* Mutated .model and tokenizer.json files: open either fails with one line or gives a
 * tokenizer that encodes and decodes without crashing. */
static void test_fuzz_parsers(void) {
    const char *files[3] = {TOK_FIX "small-bpe.model", tt_shared("data/spm/austen-bpe-4k.model"),
                            TOK_FIX "flags-tokenizer.json"};
    char path[128];
    snprintf(path, sizeof path, "/tmp/mc_test_fuzz_%d", (int)getpid());
    uint64_t rng = 20240601;
    int opened = 0, refused = 0;
    const char *texts[3] = {"Hello, World! \xEF\xBC\xA1 caf\xC3\xA9 <s>[SEP] yes", "  \t\n", "\xFF\xFEx"};
    for (int f = 0; f < 3; f++) {
        size_t len = 0;
        char *orig = tt_read(files[f], &len);
        char *buf = malloc(len);
        for (int it = 0; it < 200; it++) {
            memcpy(buf, orig, len);
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            int flips = 1 + (int)(rng >> 61);
            for (int k = 0; k < flips; k++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                buf[(rng >> 24) % len] = (char)(rng >> 16);
            }
            size_t n = it % 4 == 0 ? (size_t)(rng >> 33) % len : len;
            write_file(path, buf, n);
            mc_tokenizer_options o = {.type = f < 2 ? MC_TOKENIZER_SENTENCEPIECE : MC_TOKENIZER_HF, .tokenizer_model = path,
                                      .hf_include_special_tokens = true};
            mc_tokenizer *t = NULL;
            mc_err e = {{0}};
            if (mc_tokenizer_open(&t, &o, &e) != MC_OK) {
                CHECK(t == NULL && e.msg[0] && !strchr(e.msg, '\n'), "%s", e.msg);
                refused++;
                continue;
            }
            opened++;
            mc_tokenizer_scratch *s = mc_tokenizer_scratch_new(t);
            mc_ids ids = {0};
            for (int k = 0; k < 3; k++) {
                ids.len = 0;
                if (mc_tokenizer_encode(t, s, texts[k], strlen(texts[k]), &ids, &e) == MC_OK) {
                    size_t dl;
                    free(mc_tokenizer_decode(t, ids.data, ids.len, &dl));
                }
            }
            mc_ids_free(&ids);
            mc_tokenizer_scratch_free(s);
            mc_tokenizer_free(t);
        }
        free(buf);
        free(orig);
    }
    unlink(path);
    printf("  600 mutated files: %d opened and encoded, %d refused with one-line errors\n", opened, refused);
}

int main(void) {
    tt_need_shared();
    open_all();
    RUN(test_shared_cases);
    RUN(test_gpt2_special_tokens);
    RUN(test_hf_fixture_cases);
    RUN(test_spm_cases);
    RUN(test_properties);
    RUN(test_null_and_byte);
    RUN(test_errors);
    RUN(test_invalid_utf8);
    RUN(test_word_without_ids);
    RUN(test_fuzz_parsers);
    for (int i = 0; i < 4; i++) {
        mc_tokenizer_free(toks[i].plain);
        mc_tokenizer_free(toks[i].ordinary);
    }
    mc_tokenizer_free(gpt2_bpe);
    unlink(tt_gpt2_json());
    return check_summary();
}
