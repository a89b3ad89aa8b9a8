/* test_comm_layout.c: the rank layout and the groups, as pure arithmetic (no transport):
 * Megatron's parallel_state docstring example, context parallel, every group kind
 * partitioning the world, the divisibility errors, and misuse aborting with a message. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "comm/comm.h"

static void group_of(int world, int tp, int pp, int cp, const char *which, int rank, int *out, int *n) {
    mc_parallel_sizes s = {.tp = tp, .pp = pp, .cp = cp, .ep = 1, .dp = world / (tp * pp * cp)};
    *n = mc_layout_group_ranks(world, &s, which, rank, out, 64);
}

static bool same(const int *a, const int *b, int n) { return !memcmp(a, b, sizeof(int) * (size_t)n); }

/* parallel_state.initialize_model_parallel's docstring: 16 GPUs, TP 2, PP 4 (DP 2). */
static void test_megatron_docstring_example(void) {
    int r[64], n;
    int tp_groups[8][2] = {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}};
    for (int g = 0; g < 8; g++) {
        group_of(16, 2, 4, 1, "tp", tp_groups[g][1], r, &n);
        CHECK(n == 2 && same(r, tp_groups[g], 2), "tp group %d", g);
    }
    int dp_groups[8][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}};
    for (int g = 0; g < 8; g++) {
        group_of(16, 2, 4, 1, "dp", dp_groups[g][0], r, &n);
        CHECK(n == 2 && same(r, dp_groups[g], 2), "dp group %d: [%d %d]", g, r[0], r[1]);
    }
    int pp_groups[4][4] = {{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}};
    for (int g = 0; g < 4; g++) {
        group_of(16, 2, 4, 1, "pp", pp_groups[g][2], r, &n);
        CHECK(n == 4 && same(r, pp_groups[g], 4), "pp group %d: [%d %d %d %d]", g, r[0], r[1], r[2], r[3]);
    }
    /* Model parallel = tp x pp: rank 5's is {4, 5, 12, ...}: tp fastest, then pp. */
    group_of(16, 2, 4, 1, "mp", 5, r, &n);
    CHECK(n == 8 && r[0] == 0 && r[1] == 1 && r[2] == 4 && r[3] == 5 && r[6] == 12 && r[7] == 13, "mp group");
    mc_comm c;
    mc_err err;
    CHECK(mc_comm_init(&c, 16, 11, 3, 2, 4, 1, 1, &err) == MC_OK);
    /* rank 11 = tp 1 + 2 * (dp 1 + 2 * pp 2) */
    CHECK(c.sizes.dp == 2 && c.tp_rank == 1 && c.dp_rank == 1 && c.pp_rank == 2 && c.cp_rank == 0);
    CHECK(c.tp.size == 2 && c.tp.rank == 1 && c.dp.size == 2 && c.dp.rank == 1 && c.pp.size == 4 && c.pp.rank == 2);
    CHECK(c.cp.size == 1 && c.dp_cp.size == 2 && c.world.size == 16 && c.world.rank == 11 && c.mp.size == 8);
    CHECK(c.impl == NULL && c.local_rank == 3);
    mc_comm_free(&c);
}

/* Context parallel sits between tp and dp: rank = tp + TP*(cp + CP*(dp + DP*pp)). */
static void test_context_parallel(void) {
    int r[64], n;
    /* 8 ranks, TP 2, CP 2 (DP 2): cp groups [0,2],[1,3],[4,6],[5,7]; dp groups [0,4],...;
     * dp_cp groups (gradients) [0,2,4,6] and [1,3,5,7]. */
    group_of(8, 2, 1, 2, "cp", 3, r, &n);
    CHECK(n == 2 && r[0] == 1 && r[1] == 3, "cp group of 3: [%d %d]", r[0], r[1]);
    group_of(8, 2, 1, 2, "dp", 1, r, &n);
    CHECK(n == 2 && r[0] == 1 && r[1] == 5, "dp group of 1: [%d %d]", r[0], r[1]);
    group_of(8, 2, 1, 2, "dp_cp", 6, r, &n);
    CHECK(n == 4 && r[0] == 0 && r[1] == 2 && r[2] == 4 && r[3] == 6, "dp_cp group of 6");
    group_of(8, 2, 1, 2, "tp", 6, r, &n);
    CHECK(n == 2 && r[0] == 6 && r[1] == 7, "tp group of 6");
    /* 16 ranks, TP 2, CP 2, PP 2 (DP 2): rank 13 = tp 1 + 2*(cp 0 + 2*(dp 1 + 2*pp 1)). */
    mc_comm c;
    mc_err err;
    CHECK(mc_comm_init(&c, 16, 13, 0, 2, 2, 2, 1, &err) == MC_OK);
    CHECK(c.tp_rank == 1 && c.cp_rank == 0 && c.dp_rank == 1 && c.pp_rank == 1);
    CHECK(c.pp.size == 2 && c.pp.ranks[0] == 5 && c.pp.ranks[1] == 13, "pp group of 13: [%d %d]", c.pp.ranks[0],
          c.pp.ranks[1]);
    CHECK(c.dp_cp.size == 4 && c.dp_cp.ranks[0] == 9 && c.dp_cp.ranks[1] == 11 && c.dp_cp.ranks[2] == 13 &&
          c.dp_cp.ranks[3] == 15);
    mc_comm_free(&c);
}

/* For many layouts: each kind of group partitions the world, every member of a group sees
 * the same group in the same order, and the coordinates round-trip. */
static void test_groups_partition_the_world(void) {
    const char *kinds[] = {"world", "tp", "cp", "dp", "pp", "dp_cp", "mp"};
    int layouts[][4] = {{8, 2, 2, 1}, {8, 2, 1, 2}, {12, 2, 3, 1}, {16, 4, 2, 2}, {24, 3, 2, 2}, {6, 1, 1, 3}, {32, 2, 4, 2}};
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
        int W = layouts[l][0], tp = layouts[l][1], pp = layouts[l][2], cp = layouts[l][3];
        int dp = W / (tp * pp * cp);
        int expect[7] = {W, tp, cp, dp, pp, dp * cp, tp * pp};
        for (int k = 0; k < 7; k++) {
            int seen[64] = {0};
            for (int rank = 0; rank < W; rank++) {
                int r[64], n;
                group_of(W, tp, pp, cp, kinds[k], rank, r, &n);
                CHECK(n == expect[k], "W%d %s size %d vs %d", W, kinds[k], n, expect[k]);
                bool member = false;
                for (int i = 0; i < n; i++) {
                    member |= r[i] == rank;
                    if (i) CHECK(r[i] > r[i - 1], "W%d %s: not ascending", W, kinds[k]);
                    int r2[64], n2;
                    group_of(W, tp, pp, cp, kinds[k], r[i], r2, &n2);
                    CHECK(n2 == n && same(r, r2, n), "W%d %s: members disagree", W, kinds[k]);
                }
                CHECK(member, "W%d %s: rank %d not in its own group", W, kinds[k], rank);
                seen[r[0]]++;
            }
            /* Each group's first rank is named by each of its members: W / size groups. */
            int groups = 0;
            for (int i = 0; i < W; i++)
                if (seen[i]) {
                    groups++;
                    CHECK(seen[i] == expect[k], "W%d %s: group of %d named %d times", W, kinds[k], i, seen[i]);
                }
            CHECK(groups * expect[k] == W, "W%d %s: %d groups", W, kinds[k], groups);
        }
        for (int rank = 0; rank < W; rank++) {
            mc_comm c;
            mc_err err;
            CHECK(mc_comm_init(&c, W, rank, 0, tp, pp, cp, 1, &err) == MC_OK, "%s", err.msg);
            CHECK(c.tp_rank + tp * (c.cp_rank + cp * (c.dp_rank + dp * c.pp_rank)) == rank);
            CHECK(c.tp.rank == c.tp_rank && c.pp.rank == c.pp_rank && c.dp.rank == c.dp_rank && c.cp.rank == c.cp_rank);
            CHECK(c.dp_cp.rank == c.cp_rank + cp * c.dp_rank, "dp_cp rank");
            mc_comm_free(&c);
        }
    }
}

static void expect_error(int world, int tp, int pp, int cp, int ep, const char *needle) {
    mc_comm c;
    mc_err err = {{0}};
    int rc = mc_comm_init(&c, world, 0, 0, tp, pp, cp, ep, &err);
    CHECK(rc == MC_ERR && strstr(err.msg, needle), "world %d tp %d pp %d cp %d ep %d: rc %d '%s' lacks '%s'", world,
          tp, pp, cp, ep, rc, err.msg, needle);
    if (rc == MC_OK) mc_comm_free(&c);
}

static void test_divisibility_errors(void) {
    expect_error(8, 3, 1, 1, 1, "world size 8 is not divisible by --tensor-model-parallel-size 3 x --pipeline-model-parallel-size 1 x --context-parallel-size 1 = 3");
    expect_error(16, 2, 4, 3, 1, "= 24");
    expect_error(6, 2, 2, 1, 1, "not divisible");
    expect_error(8, 2, 1, 1, 3, "world size 8 is not divisible by the expert-tensor size 2 x --expert-model-parallel-size 3 x --pipeline-model-parallel-size 1");
    expect_error(4, 0, 1, 1, 1, "parallel sizes must be >= 1");
    expect_error(4, 1, -1, 1, 1, "pipeline -1");
    mc_err err;
    CHECK(mc_layout_check(16, 2, 2, 2, 4, &err) == MC_OK, "%s", err.msg);
    CHECK(mc_layout_check(0, 1, 1, 1, 1, &err) == MC_ERR);
}

/* Runs fn in a child with stderr captured; returns whether it died by a signal with the
 * message containing needle. */
static bool aborts_with(void (*fn)(void), const char *needle) {
    int p[2];
    if (pipe(p) != 0) return false;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 2);
        close(p[0]);
        fn();
        _exit(0);
    }
    close(p[1]);
    char buf[4096];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 && (r = read(p[0], buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
    buf[n] = 0;
    close(p[0]);
    int status;
    waitpid(pid, &status, 0);
    bool ok = WIFSIGNALED(status) && strstr(buf, needle);
    if (!ok) fprintf(stderr, "  child output: %s\n", buf);
    return ok;
}

static void uneven_reduce_scatter(void) {
    mc_comm c;
    mc_err err;
    mc_comm_init(&c, 4, 0, 0, 1, 1, 1, 1, &err);
    float in[10], out[2];
    mc_tensor ti = mc_tensor_1d(in, MC_F32, 10), to = mc_tensor_1d(out, MC_F32, 2);
    mc_comm_reduce_scatter(&c.dp, NULL, &to, &ti);
}

static void all_gather_wrong_size(void) {
    mc_comm c;
    mc_err err;
    mc_comm_init(&c, 4, 0, 0, 2, 1, 1, 1, &err);
    float in[3], out[5];
    mc_tensor ti = mc_tensor_1d(in, MC_F32, 3), to = mc_tensor_1d(out, MC_F32, 5);
    mc_comm_all_gather(&c.tp, NULL, &to, &ti);
}

static void no_transport(void) {
    mc_comm c;
    mc_err err;
    mc_comm_init(&c, 4, 0, 0, 2, 1, 1, 1, &err);
    float x[4];
    mc_tensor t = mc_tensor_1d(x, MC_F32, 4);
    mc_comm_all_reduce(&c.tp, NULL, &t, MC_REDUCE_SUM);
}

static void test_misuse_aborts_with_a_message(void) {
    CHECK(aborts_with(uneven_reduce_scatter, "reduce_scatter on group dp (size 4): numel(in) = 10 must split into 4 equal "
                                             "chunks of numel(out) = 2"));
    CHECK(aborts_with(all_gather_wrong_size, "all_gather on group tp (size 2): numel(out) = 5 must be size x numel(in)"));
    CHECK(aborts_with(no_transport, "all_reduce over group 'tp' of size 2 needs a transport"));
}

int main(void) {
    RUN(test_megatron_docstring_example);
    RUN(test_context_parallel);
    RUN(test_groups_partition_the_world);
    RUN(test_divisibility_errors);
    RUN(test_misuse_aborts_with_a_message);
    return check_summary();
}
