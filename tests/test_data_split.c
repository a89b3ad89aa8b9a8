/* test_data_split.c: --split parsing and ranges against Megatron's Python (fixture), the
 * parse errors, and the number of samples requested per split. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data/split.h"
#include "megatron.h"

static void test_ranges_fixture(void) {
    FILE *f = fopen("tests/fixtures/data/splits.txt", "r");
    CHECK(f != NULL, "missing tests/fixtures/data/splits.txt");
    if (!f) return;
    char line[512];
    int cases = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        char *tab1 = strchr(line, '\t'), *tab2 = tab1 ? strchr(tab1 + 1, '\t') : NULL;
        if (!tab2) continue;
        *tab1 = 0;
        long long n = strtoll(tab1 + 1, NULL, 10);
        char *p = tab2 + 1;
        mc_split s;
        mc_err err;
        CHECK(mc_split_parse(line, &s, &err) == MC_OK, "\"%s\": %s", line, err.msg);
        for (int k = 0; k < MC_NUM_SPLITS; k++) {
            int present = (int)strtol(p, &p, 10);
            long long b = strtoll(p, &p, 10), e = strtoll(p, &p, 10);
            int64_t gb, ge;
            mc_split_range(&s, k, n, &gb, &ge);
            CHECK(s.present[k] == present, "\"%s\" split %d presence", line, k);
            if (present) CHECK(gb == b && ge == e, "\"%s\" N=%lld split %d: [%lld, %lld) vs [%lld, %lld)", line, n, k,
                               (long long)gb, (long long)ge, b, e);
        }
        cases++;
    }
    fclose(f);
    CHECK(cases == 20, "%d cases", cases);
}

static void expect_error(const char *text, const char *needle) {
    mc_split s;
    mc_err err = {{0}};
    CHECK(mc_split_parse(text, &s, &err) == MC_ERR, "\"%s\" should fail", text);
    CHECK(strstr(err.msg, "--split") && strstr(err.msg, needle), "\"%s\": message \"%s\" lacks \"%s\"", text, err.msg,
          needle);
    CHECK(!strchr(err.msg, '\n'), "one line");
}

static void test_parse_errors(void) {
    expect_error("", "no numbers");
    expect_error("train,valid", "no numbers");
    expect_error("1.2.3", "not a number");
    expect_error("1,.,1", "not a number");
    expect_error("1,2,3,4", "at most 3");
    expect_error("-1,2,3", "negative");
    expect_error("0,0,0", "positive");
    /* NULL means Megatron's default 969,30,1 */
    mc_split s;
    mc_err err;
    CHECK(mc_split_parse(NULL, &s, &err) == MC_OK && s.present[2]);
}

static void test_requested_samples(void) {
    mc_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.train.micro_batch_size = 2;
    cfg.train.global_batch_size = 8;
    cfg.train.train_iters = 2500;
    cfg.train.eval_interval = 1000;
    cfg.train.eval_iters = 10;
    int64_t n[3];
    mc_split_requested_samples(&cfg, n);
    CHECK(n[0] == 20000 && n[1] == (2500 / 1000 + 1) * 10 * 8 && n[2] == 80, "%lld %lld %lld", (long long)n[0],
          (long long)n[1], (long long)n[2]);
    /* Sample-based training: train_iters = train_samples // gbs for the valid count. */
    cfg.train.train_iters = 0;
    cfg.train.train_samples = 16004;
    mc_split_requested_samples(&cfg, n);
    CHECK(n[0] == 16004 && n[1] == (2000 / 1000 + 1) * 10 * 8, "%lld %lld", (long long)n[0], (long long)n[1]);
    /* No periodic evaluation: only the final one. */
    cfg.train.eval_interval = 0;
    mc_split_requested_samples(&cfg, n);
    CHECK(n[1] == 80 && n[2] == 80);
    cfg.train.eval_iters = 0;
    mc_split_requested_samples(&cfg, n);
    CHECK(n[1] == 0 && n[2] == 0);
}

int main(void) {
    RUN(test_ranges_fixture);
    RUN(test_parse_errors);
    RUN(test_requested_samples);
    return check_summary();
}
