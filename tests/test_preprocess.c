/* test_preprocess.c: `megatron-c preprocess` (src/data/preprocess.h) against
 * tools/reference/make_preprocess_golden.py, a restatement of Megatron's
 * tools/preprocess_data.py writer run with the real tokenizer libraries:
 *   - byte-identical .bin/.idx for NullTokenizer, ByteLevelTokenizer, GPT2BPETokenizer
 *     (uint16) and HuggingFaceTokenizer Llama 3 (int32, with and without its BOS), on a
 *     fixture with empty documents, unicode, JSON escapes, <|endoftext|> in the text (GPT-2
 *     splits it out as 50256, inside words and beside spaces and newlines too), list values
 *     (sentences), a repeated key, CRLF and a missing final newline, two --json-keys;
 *   - the same bytes with 1 or many workers, with --partitions (round-robin, and
 *     --keep-sequential-samples equal to one partition), and from a .jsonl.gz;
 *   - bad input: each a one-line error naming the line, --skip-bad-lines, and no output or
 *     temporary file left behind (the output directory is listed); existing outputs are
 *     replaced only on success;
 *   - merge-datasets (add_index) of prefixes and of a directory. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data/indexed_dataset.h"
#include "data/jsonl.h"
#include "data/preprocess.h"
#include "fixture_util.h"

#if defined(__has_include)
#if __has_include(<zlib.h>)
#include <zlib.h>
#define HAVE_ZLIB 1
#endif
#endif

#define PFX "tests/fixtures/preprocess/"

static char *g_tmp;
static FILE *g_log;

static mc_preprocess_options base_options(const char *input, const char *out, mc_tokenizer_type type) {
    mc_preprocess_options o = {.input = input, .output_prefix = out, .njson_keys = 2, .append_eod = true,
                               .workers = 3, .partitions = 1, .log_interval = 2, .log = g_log};
    o.json_keys[0] = "text";
    o.json_keys[1] = "title";
    o.tokenizer.type = type;
    o.tokenizer.vocab_size = 1000;
    o.tokenizer.hf_include_special_tokens = true;
    return o;
}

/* PREFIX_{key}_document.{bin,idx} equal the golden case's files. */
static bool same_as_golden(const char *out, const char *golden_case, const char *key) {
    char a[700], b[700];
    bool ok = true;
    for (int e = 0; e < 2; e++) {
        const char *ext = e ? "idx" : "bin";
        snprintf(a, sizeof a, "%s_%s_document.%s", out, key, ext);
        snprintf(b, sizeof b, PFX "expected/%s_%s_document.%s", golden_case, key, ext);
        if (!fu_same_file(a, b)) {
            fprintf(stderr, "  %s differs from %s\n", a, b);
            ok = false;
        }
    }
    return ok;
}

static void run_case(const char *name, mc_preprocess_options *o, const char *golden_case, int nkeys) {
    mc_err err;
    mc_preprocess_stats st;
    CHECK(mc_preprocess_run(o, &st, &err) == MC_OK, "%s: %s", name, err.msg);
    CHECK(same_as_golden(o->output_prefix, golden_case, "text"), "%s: text", name);
    if (nkeys > 1) CHECK(same_as_golden(o->output_prefix, golden_case, "title"), "%s: title", name);
}

static void outp(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", g_tmp, name); }

static void test_null_and_bytes(void) {
    char out[600];
    outp(out, sizeof out, "null");
    mc_preprocess_options o = base_options(PFX "nulls.jsonl", out, MC_TOKENIZER_NULL);
    run_case("null, 3 workers", &o, "null", 2);
    o.workers = 1;
    run_case("null, 1 worker", &o, "null", 2);
    /* --partitions 3: round-robin lines, merged in partition order. */
    outp(out, sizeof out, "null_rr3");
    o.workers = 3;
    o.partitions = 3;
    run_case("null, 3 partitions", &o, "null_rr3", 2);
    /* ...and with --keep-sequential-samples the same as one partition. */
    outp(out, sizeof out, "null_seq3");
    o.keep_sequential_samples = true;
    run_case("null, 3 sequential partitions", &o, "null", 2);
    o.partitions = 2;
    o.workers = 4;
    run_case("null, 2 sequential partitions", &o, "null", 2);

    outp(out, sizeof out, "bytes");
    o = base_options(PFX "docs.jsonl", out, MC_TOKENIZER_BYTE);
    run_case("byte-level", &o, "bytes", 2);
    /* Partition files and partition datasets are gone; only the outputs remain. */
    char names[8192];
    CHECK(fu_list(g_tmp, names, sizeof names) > 0, "cannot list %s", g_tmp);
    CHECK(!strstr(names, "partition") && !strstr(names, "null_rr3_0") && !strstr(names, ".tmp"), "leftovers: %s",
          names);
}

static bool shared(const char *rel, char *buf, size_t n) {
    check_shared_path(rel, buf, n);
    if (fu_exists(buf)) return true;
    printf("SKIP (no shared data %s; set MC_SHARED_DIR)\n", buf);
    return false;
}

static void test_gpt2(void) {
    char vocab[512], merges[512], out[600];
    if (!shared("data/gpt2/gpt2-vocab.json", vocab, sizeof vocab) ||
        !shared("data/gpt2/gpt2-merges.txt", merges, sizeof merges))
        return;
    outp(out, sizeof out, "gpt2");
    mc_preprocess_options o = base_options(PFX "docs.jsonl", out, MC_TOKENIZER_GPT2BPE);
    o.tokenizer.vocab_file = vocab;
    o.tokenizer.merge_file = merges;
    run_case("GPT-2", &o, "gpt2", 2);
    o.workers = 1;
    run_case("GPT-2, 1 worker", &o, "gpt2", 2);
}

static void test_llama3(void) {
    char model[512], out[600];
    if (!shared("data/llama3/tokenizer.json", model, sizeof model)) return;
    outp(out, sizeof out, "llama3");
    mc_preprocess_options o = base_options(PFX "docs.jsonl", out, MC_TOKENIZER_HF);
    o.tokenizer.tokenizer_model = model;
    run_case("Llama 3", &o, "llama3", 2);
    mc_indexed_dataset *ds;
    mc_err err;
    char prefix[700];
    snprintf(prefix, sizeof prefix, "%s_text_document", out);
    CHECK(mc_indexed_dataset_open(&ds, prefix, &err) == MC_OK, "%s", err.msg);
    if (ds) {
        CHECK(ds->dtype == MC_IDX_DTYPE_INT32, "vocabulary >= 65500 -> int32");
        mc_indexed_dataset_close(ds);
    }
    /* --tokenizer-hf-no-include-special-tokens, without --append-eod: the empty text and
     * the empty list are documents of 0 tokens. */
    outp(out, sizeof out, "llama3_nospecial");
    o.output_prefix = out;
    o.njson_keys = 1;
    o.append_eod = false;
    o.tokenizer.hf_include_special_tokens = false;
    run_case("Llama 3 without special tokens", &o, "llama3_nospecial", 1);
}

static void test_gzip_input(void) {
#ifdef HAVE_ZLIB
    char gz[600], out[600];
    outp(gz, sizeof gz, "docs.jsonl.gz");
    size_t n;
    unsigned char *raw = fu_read(PFX "docs.jsonl", &n);
    gzFile g = raw ? gzopen(gz, "wb") : NULL;
    bool written = g && gzwrite(g, raw, (unsigned)n) == (int)n;
    if (g) written = gzclose(g) == Z_OK && written;
    free(raw);
    CHECK(written, "could not write %s", gz);
    if (!written) return;
    outp(out, sizeof out, "bytes_gz");
    mc_preprocess_options o = base_options(gz, out, MC_TOKENIZER_BYTE);
    run_case("byte-level from .jsonl.gz", &o, "bytes", 2);
    CHECK(mc_jsonl_have_gzip());
#else
    printf("SKIP gzip input: no zlib.h in this build\n");
#endif
}

/* Many batches, many workers: the output order is the input order. */
static void test_many_documents(void) {
    char in[600], out1[600], out8[600];
    outp(in, sizeof in, "many.jsonl");
    FILE *f = fopen(in, "w");
    int64_t total = 0;
    for (int i = 0; i < 20000; i++) {
        fprintf(f, "{\"text\": \"");
        int len = i % 37;
        for (int k = 0; k < len; k++) fprintf(f, k ? " %d" : "%d", (i * 31 + k * 7) % 997);
        total += len ? len + 1 : 0;
        fprintf(f, "\", \"title\": \"%d\"}\n", i % 998);
    }
    fclose(f);
    outp(out1, sizeof out1, "many1");
    outp(out8, sizeof out8, "many8");
    mc_preprocess_options o = base_options(in, out1, MC_TOKENIZER_NULL);
    o.log_interval = 5000;
    o.workers = 1;
    mc_preprocess_stats st;
    mc_err err;
    CHECK(mc_preprocess_run(&o, &st, &err) == MC_OK, "%s", err.msg);
    CHECK(st.documents == 20000 && st.tokens == total + 2 * 20000, "docs %lld tokens %lld", (long long)st.documents,
          (long long)st.tokens);
    o.output_prefix = out8;
    o.workers = 8;
    CHECK(mc_preprocess_run(&o, &st, &err) == MC_OK, "%s", err.msg);
    char a[700], b[700];
    for (int k = 0; k < 2; k++)
        for (int e = 0; e < 2; e++) {
            snprintf(a, sizeof a, "%s_%s_document.%s", out1, k ? "title" : "text", e ? "idx" : "bin");
            snprintf(b, sizeof b, "%s_%s_document.%s", out8, k ? "title" : "text", e ? "idx" : "bin");
            CHECK(fu_same_file(a, b), "8 workers differ from 1: %s", b);
        }
}

/* Progress lines every --log-interval documents, with rates and an ETA, and the summary. */
static void test_progress_lines(void) {
    char in[600], out[600], logp[600];
    outp(in, sizeof in, "progress.jsonl");
    outp(out, sizeof out, "progress");
    outp(logp, sizeof logp, "progress.log");
    FILE *f = fopen(in, "w");
    CHECK(f != NULL, "cannot write %s", in);
    if (!f) return;
    for (int i = 0; i < 12000; i++) fprintf(f, "{\"text\": \"%d %d\", \"title\": \"%d\"}\n", i % 997, i % 13, i % 7);
    CHECK(fclose(f) == 0);
    FILE *log = fopen(logp, "w+");
    CHECK(log != NULL, "cannot write %s", logp);
    if (!log) return;
    mc_preprocess_options o = base_options(in, out, MC_TOKENIZER_NULL);
    o.log_interval = 5000;
    o.log = log;
    mc_err err;
    CHECK(mc_preprocess_run(&o, NULL, &err) == MC_OK, "%s", err.msg);
    fclose(log);
    size_t n;
    char *text = (char *)fu_read(logp, &n);
    CHECK(text && strstr(text, "Processed 5000 documents") && strstr(text, "Processed 10000 documents") &&
              strstr(text, "MB/s") && strstr(text, "tokens/s") && strstr(text, "ETA") &&
              strstr(text, "Done: 12000 documents"),
          "progress lines: %s", text ? text : "(no log)");
    free(text);
}

/* ---- bad input ------------------------------------------------------------------------------ */

/* Runs preprocess on `content` in a fresh directory; expects failure with all needles in
 * the message, and nothing but the input left in the directory. */
static void expect_failure(const char *name, const char *content, mc_tokenizer_type type, const char *needle1,
                           const char *needle2) {
    char dir[600], in[700], out[700], names[4096];
    snprintf(dir, sizeof dir, "%s/bad_%s", g_tmp, name);
    mkdir(dir, 0755);
    snprintf(in, sizeof in, "%s/in.jsonl", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    fu_write_str(in, content);
    mc_preprocess_options o = base_options(in, out, type);
    mc_err err = {{0}};
    CHECK(mc_preprocess_run(&o, NULL, &err) == MC_ERR, "%s: accepted", name);
    CHECK(strstr(err.msg, needle1) && (!needle2 || strstr(err.msg, needle2)), "%s: \"%s\" lacks \"%s\" / \"%s\"",
          name, err.msg, needle1, needle2 ? needle2 : "");
    CHECK(!strchr(err.msg, '\n'), "%s: one line", name);
    CHECK(fu_list(dir, names, sizeof names) == 1, "%s: left behind: %s", name, names);
}

static void test_bad_input(void) {
    expect_failure("json", "{\"text\": \"1\", \"title\": \"2\"}\n{\"text\": \"3\", \"title\": \"4\"}\n{\"text\": 1 2}\n",
                   MC_TOKENIZER_NULL, "in.jsonl:3:", "invalid JSON");
    expect_failure("missing_key", "{\"text\": \"1\", \"title\": \"2\"}\n{\"text\": \"3\"}\n", MC_TOKENIZER_NULL,
                   ":2:", "missing key 'title'");
    expect_failure("utf8", "{\"text\": \"ok\", \"title\": \"ok\"}\n{\"text\": \"caf\xe9\", \"title\": \"x\"}\n",
                   MC_TOKENIZER_BYTE, ":2:", "invalid UTF-8");
    expect_failure("overlong", "{\"text\": \"\xc0\xaf\", \"title\": \"x\"}\n", MC_TOKENIZER_BYTE, ":1:",
                   "invalid UTF-8");
    expect_failure("surrogate", "{\"text\": \"a \\ud800 b\", \"title\": \"x\"}\n", MC_TOKENIZER_BYTE, ":1:",
                   "surrogate");
    expect_failure("number", "{\"text\": 5, \"title\": \"x\"}\n", MC_TOKENIZER_BYTE, ":1:", "number");
    expect_failure("list_of_numbers", "{\"text\": [\"a\", 5], \"title\": \"x\"}\n", MC_TOKENIZER_BYTE, ":1:",
                   "non-string");
    expect_failure("not_object", "[\"text\", \"title\"]\n", MC_TOKENIZER_BYTE, ":1:", "not an object");
    expect_failure("empty_line", "{\"text\": \"a\", \"title\": \"b\"}\n\n{\"text\": \"a\", \"title\": \"b\"}\n",
                   MC_TOKENIZER_BYTE, ":2:", "empty line");
    expect_failure("control_char", "{\"text\": \"a\tb\", \"title\": \"b\"}\n", MC_TOKENIZER_BYTE, ":1:",
                   "control character");
    expect_failure("trailing", "{\"text\": \"a\", \"title\": \"b\"} x\n", MC_TOKENIZER_BYTE, ":1:", "extra data");
    expect_failure("bom", "\xef\xbb\xbf{\"text\": \"a\", \"title\": \"b\"}\n", MC_TOKENIZER_BYTE, ":1:",
                   "byte order mark");
    expect_failure("null_tokens", "{\"text\": \"1 two 3\", \"title\": \"4\"}\n", MC_TOKENIZER_NULL, ":1:",
                   "not an integer");

    mc_err err;
    char out[600];
    outp(out, sizeof out, "nowhere/sub/out");
    mc_preprocess_options o = base_options(PFX "nulls.jsonl", out, MC_TOKENIZER_NULL);
    CHECK(mc_preprocess_run(&o, NULL, &err) == MC_ERR && strstr(err.msg, "does not exist"), "%s", err.msg);
    outp(out, sizeof out, "x");
    o = base_options("/nonexistent/in.jsonl", out, MC_TOKENIZER_NULL);
    CHECK(mc_preprocess_run(&o, NULL, &err) == MC_ERR && strstr(err.msg, "/nonexistent/in.jsonl"), "%s", err.msg);
    o = base_options(PFX "nulls.jsonl", out, MC_TOKENIZER_NULL);
    o.partitions = 2;
    o.workers = 3;
    CHECK(mc_preprocess_run(&o, NULL, &err) == MC_ERR && strstr(err.msg, "divisible"), "%s", err.msg);
    o = base_options(PFX "nulls.jsonl", out, MC_TOKENIZER_GPT2BPE);
    o.tokenizer.vocab_file = "/nonexistent/vocab.json";
    o.tokenizer.merge_file = "/nonexistent/merges.txt";
    CHECK(mc_preprocess_run(&o, NULL, &err) == MC_ERR && strstr(err.msg, "/nonexistent/"), "%s", err.msg);
    char names[4096];
    CHECK(fu_list(g_tmp, names, sizeof names) >= 0 && !strstr(names, " x_"), "no output for failed runs: %s", names);
}

static void test_skip_bad_lines_and_overwrite(void) {
    char dir[600], in[700], good[700], out[700], ref[700], names[4096];
    snprintf(dir, sizeof dir, "%s/skip", g_tmp);
    mkdir(dir, 0755);
    snprintf(in, sizeof in, "%s/in.jsonl", dir);
    snprintf(good, sizeof good, "%s/good.jsonl", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(ref, sizeof ref, "%s/ref", dir);
    fu_write_str(in, "{\"text\": \"1 2\", \"title\": \"3\"}\n{broken\n{\"text\": \"4\"}\n{\"text\": \"5 6\", \"title\": "
                     "\"7\"}\n\n");
    fu_write_str(good, "{\"text\": \"1 2\", \"title\": \"3\"}\n{\"text\": \"5 6\", \"title\": \"7\"}\n");
    mc_preprocess_options o = base_options(good, ref, MC_TOKENIZER_NULL);
    mc_err err;
    CHECK(mc_preprocess_run(&o, NULL, &err) == MC_OK, "%s", err.msg);

    /* Existing outputs are replaced (atomically) by a successful run... */
    char a[800], b[800];
    snprintf(a, sizeof a, "%s_text_document.bin", out);
    fu_write_str(a, "stale");
    o = base_options(in, out, MC_TOKENIZER_NULL);
    o.skip_bad_lines = true;
    mc_preprocess_stats st;
    CHECK(mc_preprocess_run(&o, &st, &err) == MC_OK, "%s", err.msg);
    CHECK(st.documents == 2 && st.bad_lines == 3, "documents %lld, bad %lld", (long long)st.documents,
          (long long)st.bad_lines);
    for (int k = 0; k < 2; k++)
        for (int e = 0; e < 2; e++) {
            snprintf(a, sizeof a, "%s_%s_document.%s", out, k ? "title" : "text", e ? "idx" : "bin");
            snprintf(b, sizeof b, "%s_%s_document.%s", ref, k ? "title" : "text", e ? "idx" : "bin");
            CHECK(fu_same_file(a, b), "skipping bad lines must equal a run without them: %s", a);
        }
    /* ...and left alone by a failing one. */
    snprintf(a, sizeof a, "%s_text_document.bin", out);
    size_t n1, n2;
    unsigned char *before = fu_read(a, &n1);
    o.skip_bad_lines = false;
    CHECK(mc_preprocess_run(&o, NULL, &err) == MC_ERR && strstr(err.msg, "in.jsonl:2:") &&
              strstr(err.msg, "--skip-bad-lines"),
          "%s", err.msg);
    unsigned char *after = fu_read(a, &n2);
    CHECK(before && after && n1 == n2 && !memcmp(before, after, n1), "a failed run changed the previous output");
    free(before);
    free(after);
    CHECK(fu_list(dir, names, sizeof names) == 10, "inputs and two datasets x 2 keys only: %s", names);
}

/* An empty string value is a part of length 0 that points into the scratch text (a fresh
 * scratch once gave NULL + 0). */
static void test_jsonl_empty_string(void) {
    const char *keys[1] = {"text"};
    mc_jsonl_scratch sc = {0};
    mc_jv v;
    mc_err err;
    const char *line = "{\"text\": \"\"}";
    CHECK(mc_jsonl_parse(line, strlen(line), 1, keys, &sc, &v, &err) == MC_OK, "%s", err.msg);
    CHECK(v.kind == MC_JV_STRING && v.nparts == 1);
    size_t len = 1;
    const char *text = v.kind == MC_JV_STRING ? mc_jv_part(&sc, &v, 0, &len) : NULL;
    CHECK(text != NULL && len == 0);
    mc_jsonl_scratch_free(&sc);
}

static void test_merge_datasets(void) {
    char out[600], dir[600], p[700];
    mc_err err;
    outp(out, sizeof out, "merged");
    const char *inputs[2] = {"tests/fixtures/data/idx_a", "tests/fixtures/data/idx_b"};
    CHECK(mc_merge_datasets(inputs, 2, out, g_log, &err) == MC_OK, "%s", err.msg);
    char a[700];
    snprintf(a, sizeof a, "%s.bin", out);
    CHECK(fu_same_file(a, "tests/fixtures/data/idx_ab.bin"));
    snprintf(a, sizeof a, "%s.idx", out);
    CHECK(fu_same_file(a, "tests/fixtures/data/idx_ab.idx"));
    /* A directory: every pair in it, sorted by name (merge_datasets.py --input DIR). */
    snprintf(dir, sizeof dir, "%s/merge_dir", g_tmp);
    mkdir(dir, 0755);
    const char *names[2] = {"b_first_alphabetically", "c_second"}; /* idx_a, then idx_b */
    for (int i = 0; i < 2; i++)
        for (int e = 0; e < 2; e++) {
            snprintf(p, sizeof p, "%s/%s.%s", dir, names[i], e ? "idx" : "bin");
            snprintf(a, sizeof a, "%s.%s", inputs[i], e ? "idx" : "bin");
            fu_copy(a, p);
        }
    outp(out, sizeof out, "merged_dir");
    const char *in1[1] = {dir};
    CHECK(mc_merge_datasets(in1, 1, out, g_log, &err) == MC_OK, "%s", err.msg);
    snprintf(a, sizeof a, "%s.idx", out);
    CHECK(fu_same_file(a, "tests/fixtures/data/idx_ab.idx"));
    /* Mixed dtypes, a missing pair, a missing dataset. */
    const char *mixed[2] = {"tests/fixtures/data/idx_a", "tests/fixtures/data/idx_c"};
    CHECK(mc_merge_datasets(mixed, 2, out, g_log, &err) == MC_ERR && strstr(err.msg, "dtype"), "%s", err.msg);
    snprintf(p, sizeof p, "%s/%s.bin", dir, names[0]);
    unlink(p);
    CHECK(mc_merge_datasets(in1, 1, out, g_log, &err) == MC_ERR && strstr(err.msg, "has no .bin"), "%s", err.msg);
    const char *missing[1] = {"tests/fixtures/data/nope"};
    CHECK(mc_merge_datasets(missing, 1, out, g_log, &err) == MC_ERR && strstr(err.msg, "nope"), "%s", err.msg);
}

int main(void) {
    g_tmp = fu_tmpdir("preprocess");
    char logp[600];
    snprintf(logp, sizeof logp, "%s.log", g_tmp);
    g_log = fopen(logp, "w+");
    if (!g_log) {
        perror(logp);
        return 1;
    }
    RUN(test_null_and_bytes);
    RUN(test_gpt2);
    RUN(test_llama3);
    RUN(test_gzip_input);
    RUN(test_many_documents);
    RUN(test_bad_input);
    RUN(test_skip_bad_lines_and_overwrite);
    RUN(test_merge_datasets);
    RUN(test_jsonl_empty_string);
    RUN(test_progress_lines);
    fclose(g_log);
    unlink(logp);
    fu_rmtree(g_tmp);
    free(g_tmp);
    return check_summary();
}
