/* test_data_batch.c: tokens/labels/loss_mask/position_ids/seg_start of a batch row
 * against Megatron's _get_ltor_masks_and_position_ids (fixture, all 8 flag combinations),
 * the byte tokenizer and the text-file corpus. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data/batch.h"
#include "data/text_corpus.h"
#include "tokenizer/byte_tokenizer.h"

/* Parses up to max integers from s into v; returns the count. */
static int parse_ints(const char *s, long *v, int max) {
    int n = 0;
    char *end;
    while (n < max) {
        long x = strtol(s, &end, 10);
        if (end == s) break;
        v[n++] = x;
        s = end;
    }
    return n;
}

static void test_masks_fixture(void) {
    FILE *f = fopen("tests/fixtures/data/masks.txt", "r");
    CHECK(f != NULL, "missing tests/fixtures/data/masks.txt");
    if (!f) return;
    char line[1024];
    int rows = 0;
    mc_batch b;
    mc_batch_init(&b, 2, 12);
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        char *part[5];
        part[0] = strtok(line, "|");
        for (int i = 1; i < 5; i++) part[i] = strtok(NULL, "|");
        if (!part[4]) continue;
        long flags[3], tok[13], lm[12], pos[12], seg[12];
        CHECK(parse_ints(part[0], flags, 3) == 3);
        CHECK(parse_ints(part[1], tok, 12) == 12 && parse_ints(part[2], lm, 12) == 12 &&
              parse_ints(part[3], pos, 12) == 12 && parse_ints(part[4], seg, 12) == 12);
        int32_t sample[13];
        for (int i = 0; i < 12; i++) sample[i] = (int32_t)tok[i];
        sample[12] = 42; /* the extra token only feeds the last label */
        mc_batch_options opt = {.eod = 9,
                                .eod_mask_loss = flags[0],
                                .reset_position_ids = flags[1],
                                .reset_attention_mask = flags[2]};
        int row = rows % 2;
        mc_batch_set_row(&b, row, sample, &opt);
        const int32_t *t = b.tokens + row * 12, *l = b.labels + row * 12, *p = b.position_ids + row * 12,
                      *s = b.seg_start + row * 12;
        const float *m = b.loss_mask + row * 12;
        for (int i = 0; i < 12; i++) {
            CHECK(t[i] == sample[i] && l[i] == sample[i + 1], "row %d pos %d tokens/labels", rows, i);
            CHECK(m[i] == (float)lm[i], "row %d (flags %ld%ld%ld) loss_mask[%d] %g vs %ld", rows, flags[0], flags[1],
                  flags[2], i, m[i], lm[i]);
            CHECK(p[i] == pos[i], "row %d (flags %ld%ld%ld) position_ids[%d] %d vs %ld", rows, flags[0], flags[1],
                  flags[2], i, p[i], pos[i]);
            CHECK(s[i] == seg[i], "row %d (flags %ld%ld%ld) seg_start[%d] %d vs %ld", rows, flags[0], flags[1],
                  flags[2], i, s[i], seg[i]);
        }
        rows++;
    }
    fclose(f);
    mc_batch_free(&b);
    CHECK(rows == 32, "%d rows", rows);
}

static void test_byte_tokenizer(void) {
    const char *text = "h\xc3\xa9llo";
    int32_t ids[8];
    CHECK(mc_byte_tokenizer_encode(text, 6, ids) == 6);
    CHECK(ids[0] == 'h' && ids[1] == 0xc3 && ids[2] == 0xa9 && ids[5] == 'o');
    ids[6] = MC_BYTE_TOKENIZER_EOD;
    ids[7] = 300; /* a padded-vocabulary id: dropped */
    char out[32];
    CHECK(mc_byte_tokenizer_decode(ids, 8, out, sizeof out) == 8);
    CHECK(strcmp(out, "h\xc3\xa9llo\n\n") == 0, "\"%s\"", out);
    char small[4];
    CHECK(mc_byte_tokenizer_decode(ids, 8, small, sizeof small) == 8 && strcmp(small, "h\xc3\xa9") == 0);
}

static void test_text_corpus(void) {
    /* Blank lines (also whitespace-only and repeated) separate documents; CRLF == LF. */
    const char *text = "\n\nab\r\ncd\n \t\n\n\nxyz\n\n\nlast";
    int32_t *tok;
    int64_t *off, nt, nd;
    mc_err err;
    CHECK(mc_text_corpus_from_buffer(text, (int64_t)strlen(text), "t.txt", &tok, &nt, &off, &nd, &err) == MC_OK,
          "%s", err.msg);
    const int32_t E = MC_BYTE_TOKENIZER_EOD;
    const int32_t want[] = {'a', 'b', '\n', 'c', 'd', E, 'x', 'y', 'z', E, 'l', 'a', 's', 't', E};
    const int64_t want_off[] = {0, 6, 10, 15};
    CHECK(nd == 3 && nt == 15, "%lld docs %lld tokens", (long long)nd, (long long)nt);
    if (nd == 3 && nt == 15) {
        CHECK(memcmp(tok, want, sizeof want) == 0);
        CHECK(memcmp(off, want_off, sizeof want_off) == 0);
    }
    free(tok);
    free(off);

    CHECK(mc_text_corpus_from_buffer("", 0, "e.txt", &tok, &nt, &off, &nd, &err) == MC_ERR);
    CHECK(strstr(err.msg, "--text-data-path e.txt") && strstr(err.msg, "empty"), "%s", err.msg);
    CHECK(mc_text_corpus_from_buffer("\n \n\n", 4, "b.txt", &tok, &nt, &off, &nd, &err) == MC_ERR);
    CHECK(strstr(err.msg, "b.txt") && strstr(err.msg, "blank"), "%s", err.msg);
    CHECK(mc_text_corpus_load("/nonexistent/dir/x.txt", &tok, &nt, &off, &nd, &err) == MC_ERR);
    CHECK(strstr(err.msg, "--text-data-path /nonexistent/dir/x.txt: cannot open"), "%s", err.msg);
}

int main(void) {
    RUN(test_masks_fixture);
    RUN(test_byte_tokenizer);
    RUN(test_text_corpus);
    return check_summary();
}
