/* test_cp_layout.c: context parallelism's load-balanced layout (train/cp_layout.h) as pure
 * arithmetic: local-to-global positions against the chunk definition (and written out by
 * hand for CP 2 and 4), every position held once across the CP group, the inverse, split
 * then join giving back the original bytes, the ring's block kinds with equal work on
 * every rank, and the errors. CP 1 is the identity throughout. */
#include <stdbool.h>
#include <stdint.h>

#include "check.h"
#include "train/cp_layout.h"

static const int k_cps[] = {1, 2, 4, 8};
#define N_CPS ((int)(sizeof k_cps / sizeof k_cps[0]))

/* Sequence lengths valid for cp: a few multiples of 2 x cp (and odd ones for CP 1). */
static int seq_lengths(int cp, int64_t out[4]) {
    int n = 0;
    out[n++] = 2 * cp;
    out[n++] = 6 * cp;
    out[n++] = 2 * cp * 5;
    if (cp == 1) out[n++] = 7;
    return n;
}

/* ---- positions ---- */

/* The definition, built independently of the library: walk the 2 x CP chunks in order;
 * chunk k belongs to rank k (k < CP) or to its mirror rank 2 x CP - 1 - k, which appends
 * the chunk's positions to its local sequence (a rank's two chunks come in increasing
 * order, so this is its local order). pos: (cp, seq / cp). */
static void reference_positions(int64_t seq, int cp, int64_t *pos) {
    int64_t local_len = seq / cp, c = seq / (2 * cp);
    int64_t *filled = calloc((size_t)cp, sizeof(int64_t));
    if (cp == 1) {
        for (int64_t s = 0; s < seq; s++) pos[s] = s;
    } else {
        for (int k = 0; k < 2 * cp; k++) {
            int owner = k < cp ? k : 2 * cp - 1 - k;
            for (int64_t j = 0; j < c; j++) pos[owner * local_len + filled[owner]++] = k * c + j;
        }
    }
    free(filled);
}

static void test_positions_definition(void) {
    for (int ci = 0; ci < N_CPS; ci++) {
        int cp = k_cps[ci];
        int64_t seqs[4];
        int ns = seq_lengths(cp, seqs);
        for (int si = 0; si < ns; si++) {
            int64_t seq = seqs[si], local_len = seq / cp;
            CHECK(mc_cp_local_length(seq, cp) == local_len, "CP %d S %lld", cp, (long long)seq);
            if (cp > 1)
                CHECK(mc_cp_chunk_length(seq, cp) == seq / (2 * cp), "CP %d S %lld", cp, (long long)seq);
            int64_t *want = malloc((size_t)seq * sizeof(int64_t));
            reference_positions(seq, cp, want);
            for (int r = 0; r < cp; r++)
                for (int64_t i = 0; i < local_len; i++) {
                    int64_t got = mc_cp_global_pos(seq, cp, r, i);
                    CHECK(got == want[r * local_len + i], "CP %d S %lld rank %d local %lld: %lld, want %lld", cp,
                          (long long)seq, r, (long long)i, (long long)got, (long long)want[r * local_len + i]);
                }
            free(want);
        }
    }
}

static void expect_positions(int64_t seq, int cp, int rank, const int64_t *want) {
    for (int64_t i = 0; i < seq / cp; i++)
        CHECK(mc_cp_global_pos(seq, cp, rank, i) == want[i], "CP %d S %lld rank %d local %lld: %lld, want %lld", cp,
              (long long)seq, rank, (long long)i, (long long)mc_cp_global_pos(seq, cp, rank, i), (long long)want[i]);
}

/* Written out by hand: CP 2 holds chunks (0, 3) and (1, 2); CP 4 (0, 7), (1, 6), (2, 5),
 * (3, 4). */
static void test_positions_hand_worked(void) {
    expect_positions(8, 2, 0, (const int64_t[]){0, 1, 6, 7});
    expect_positions(8, 2, 1, (const int64_t[]){2, 3, 4, 5});
    expect_positions(4, 2, 0, (const int64_t[]){0, 3});
    expect_positions(4, 2, 1, (const int64_t[]){1, 2});
    expect_positions(16, 4, 0, (const int64_t[]){0, 1, 14, 15});
    expect_positions(16, 4, 1, (const int64_t[]){2, 3, 12, 13});
    expect_positions(16, 4, 2, (const int64_t[]){4, 5, 10, 11});
    expect_positions(16, 4, 3, (const int64_t[]){6, 7, 8, 9});
    int chunks[2];
    mc_cp_rank_chunks(2, 0, chunks);
    CHECK(chunks[0] == 0 && chunks[1] == 3, "CP 2 rank 0: (%d, %d)", chunks[0], chunks[1]);
    mc_cp_rank_chunks(2, 1, chunks);
    CHECK(chunks[0] == 1 && chunks[1] == 2, "CP 2 rank 1: (%d, %d)", chunks[0], chunks[1]);
    mc_cp_rank_chunks(8, 5, chunks);
    CHECK(chunks[0] == 5 && chunks[1] == 10, "CP 8 rank 5: (%d, %d)", chunks[0], chunks[1]);
}

static void test_cp1_identity(void) {
    for (int64_t seq = 1; seq <= 9; seq++) {
        CHECK(mc_cp_local_length(seq, 1) == seq, "S %lld", (long long)seq);
        for (int64_t i = 0; i < seq; i++) {
            int64_t local = -1;
            CHECK(mc_cp_global_pos(seq, 1, 0, i) == i, "S %lld local %lld", (long long)seq, (long long)i);
            CHECK(mc_cp_locate(seq, 1, i, &local) == 0 && local == i, "S %lld pos %lld", (long long)seq,
                  (long long)i);
        }
    }
}

static void test_each_position_once(void) {
    for (int ci = 0; ci < N_CPS; ci++) {
        int cp = k_cps[ci];
        int64_t seqs[4];
        int ns = seq_lengths(cp, seqs);
        for (int si = 0; si < ns; si++) {
            int64_t seq = seqs[si];
            int *held = calloc((size_t)seq, sizeof(int));
            for (int r = 0; r < cp; r++)
                for (int64_t i = 0; i < seq / cp; i++) {
                    int64_t p = mc_cp_global_pos(seq, cp, r, i);
                    if (p < 0 || p >= seq) {
                        CHECK(0, "CP %d S %lld rank %d local %lld: position %lld out of range", cp, (long long)seq, r,
                              (long long)i, (long long)p);
                        continue;
                    }
                    held[p]++;
                }
            for (int64_t p = 0; p < seq; p++)
                CHECK(held[p] == 1, "CP %d S %lld: position %lld held %d times", cp, (long long)seq, (long long)p,
                      held[p]);
            free(held);
        }
    }
}

/* ---- the inverse ---- */

static void test_locate(void) {
    for (int ci = 0; ci < N_CPS; ci++) {
        int cp = k_cps[ci];
        int64_t seqs[4];
        int ns = seq_lengths(cp, seqs);
        for (int si = 0; si < ns; si++) {
            int64_t seq = seqs[si];
            for (int64_t p = 0; p < seq; p++) { /* global -> (rank, local) -> global */
                int64_t local = -1;
                int r = mc_cp_locate(seq, cp, p, &local);
                CHECK(r >= 0 && r < cp && local >= 0 && local < seq / cp, "CP %d S %lld pos %lld: rank %d local %lld",
                      cp, (long long)seq, (long long)p, r, (long long)local);
                if (r >= 0 && r < cp && local >= 0 && local < seq / cp)
                    CHECK(mc_cp_global_pos(seq, cp, r, local) == p, "CP %d S %lld pos %lld", cp, (long long)seq,
                          (long long)p);
                CHECK(mc_cp_locate(seq, cp, p, NULL) == r, "CP %d S %lld pos %lld: local optional", cp,
                      (long long)seq, (long long)p);
            }
            for (int r = 0; r < cp; r++) /* (rank, local) -> global -> (rank, local) */
                for (int64_t i = 0; i < seq / cp; i++) {
                    int64_t local = -1;
                    int got = mc_cp_locate(seq, cp, mc_cp_global_pos(seq, cp, r, i), &local);
                    CHECK(got == r && local == i, "CP %d S %lld rank %d local %lld: back to rank %d local %lld", cp,
                          (long long)seq, r, (long long)i, got, (long long)local);
                }
        }
    }
    int64_t local = -1; /* by hand: CP 2, S 8, position 6 is rank 0's third token */
    CHECK(mc_cp_locate(8, 2, 6, &local) == 0 && local == 2, "local %lld", (long long)local);
    CHECK(mc_cp_locate(8, 2, 4, &local) == 1 && local == 2, "local %lld", (long long)local);
}

/* ---- split and join ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint8_t rng_byte(void) { /* xorshift64 */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint8_t)(rng_state >> 24);
}

static void check_split_join(int64_t seq, int cp, int64_t batch, size_t row_bytes) {
    size_t token_bytes = (size_t)batch * row_bytes, full_bytes = (size_t)seq * token_bytes;
    size_t local_bytes = full_bytes / (size_t)cp;
    uint8_t *full = malloc(full_bytes), *rebuilt = malloc(full_bytes), *local = malloc(local_bytes);
    for (size_t j = 0; j < full_bytes; j++) full[j] = rng_byte();
    memset(rebuilt, 0xA5, full_bytes);
    for (int r = 0; r < cp; r++) {
        memset(local, 0x5A, local_bytes);
        mc_cp_split(local, full, seq, batch, row_bytes, cp, r);
        /* local token i of sequence b is full token global_pos(i) of sequence b */
        for (int64_t i = 0; i < seq / cp; i++) {
            int64_t p = mc_cp_global_pos(seq, cp, r, i);
            for (int64_t b = 0; b < batch; b++) {
                const uint8_t *want = full + ((size_t)p * (size_t)batch + (size_t)b) * row_bytes;
                const uint8_t *got = local + ((size_t)i * (size_t)batch + (size_t)b) * row_bytes;
                CHECK(memcmp(got, want, row_bytes) == 0, "S %lld CP %d B %lld row %zu rank %d: local %lld seq %lld",
                      (long long)seq, cp, (long long)batch, row_bytes, r, (long long)i, (long long)b);
            }
        }
        mc_cp_join(rebuilt, local, seq, batch, row_bytes, cp, r);
        /* after ranks 0..r, exactly their rows are written */
        for (int64_t p = 0; p < seq; p++) {
            bool joined = mc_cp_locate(seq, cp, p, NULL) <= r;
            const uint8_t *row = rebuilt + (size_t)p * token_bytes;
            bool untouched = true;
            for (size_t j = 0; j < token_bytes; j++) untouched &= row[j] == 0xA5;
            if (joined)
                CHECK(memcmp(row, full + (size_t)p * token_bytes, token_bytes) == 0,
                      "S %lld CP %d B %lld row %zu: position %lld after joining ranks 0..%d", (long long)seq, cp,
                      (long long)batch, row_bytes, (long long)p, r);
            else if (token_bytes > 0)
                CHECK(untouched, "S %lld CP %d B %lld row %zu: position %lld written by ranks 0..%d", (long long)seq,
                      cp, (long long)batch, row_bytes, (long long)p, r);
        }
    }
    CHECK(memcmp(rebuilt, full, full_bytes) == 0, "S %lld CP %d B %lld row %zu: join of all ranks", (long long)seq, cp,
          (long long)batch, row_bytes);
    free(full);
    free(rebuilt);
    free(local);
}

static void test_split_join(void) {
    static const size_t rows[] = {1, 2, 4, 12, 64 * 4}; /* bytes, int16, int32 ids, 3 floats, H 64 fp32 */
    static const int64_t batches[] = {1, 3};
    for (int ci = 0; ci < N_CPS; ci++) {
        int cp = k_cps[ci];
        int64_t seqs[4];
        int ns = seq_lengths(cp, seqs);
        for (int si = 0; si < ns; si++)
            for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++)
                for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++)
                    check_split_join(seqs[si], cp, batches[bi], rows[ri]);
    }
}

/* Typed view, by hand: CP 2, S 4, B 3, int32 ids 100 x s + b. Rank 1 holds tokens 1, 2. */
static void test_split_hand_worked(void) {
    int32_t full[4 * 3], local[2 * 3];
    for (int s = 0; s < 4; s++)
        for (int b = 0; b < 3; b++) full[s * 3 + b] = 100 * s + b;
    mc_cp_split(local, full, 4, 3, sizeof(int32_t), 2, 1);
    static const int32_t want1[] = {100, 101, 102, 200, 201, 202};
    CHECK(memcmp(local, want1, sizeof want1) == 0, "rank 1: %d %d %d %d %d %d", local[0], local[1], local[2],
          local[3], local[4], local[5]);
    mc_cp_split(local, full, 4, 3, sizeof(int32_t), 2, 0);
    static const int32_t want0[] = {0, 1, 2, 300, 301, 302};
    CHECK(memcmp(local, want0, sizeof want0) == 0, "rank 0: %d %d %d %d %d %d", local[0], local[1], local[2],
          local[3], local[4], local[5]);
}

/* ---- ring attention's blocks ---- */

static void test_block_kinds(void) {
    CHECK(mc_cp_block_kind(3, 1) == MC_CP_BLOCK_FULL, "kv before q");
    CHECK(mc_cp_block_kind(3, 3) == MC_CP_BLOCK_CAUSAL, "diagonal");
    CHECK(mc_cp_block_kind(1, 3) == MC_CP_BLOCK_SKIP, "kv after q");
    CHECK(mc_cp_block_kind(0, 0) == MC_CP_BLOCK_CAUSAL, "first diagonal");
    /* agrees with the token-level causal mask: a block is FULL when every (query, key) of it
     * is visible, SKIP when none is, CAUSAL otherwise (chunks of 3 tokens, 4 chunks) */
    int c = 3;
    for (int q = 0; q < 4; q++)
        for (int k = 0; k < 4; k++) {
            int visible = 0;
            for (int i = 0; i < c; i++)
                for (int j = 0; j < c; j++) visible += k * c + j <= q * c + i;
            mc_cp_block want = visible == 0       ? MC_CP_BLOCK_SKIP
                               : visible == c * c ? MC_CP_BLOCK_FULL
                                                  : MC_CP_BLOCK_CAUSAL;
            CHECK(mc_cp_block_kind(q, k) == want, "q %d kv %d: %d visible of %d", q, k, visible, c * c);
        }
}

static void test_ring_sources(void) {
    for (int cp = 1; cp <= 8; cp++)
        for (int r = 0; r < cp; r++) {
            int *seen = calloc((size_t)cp, sizeof(int));
            CHECK(mc_cp_ring_source(cp, r, 0) == r, "CP %d rank %d: step 0 is its own K/V", cp, r);
            for (int t = 0; t < cp; t++) {
                int src = mc_cp_ring_source(cp, r, t);
                CHECK(src >= 0 && src < cp, "CP %d rank %d step %d: source %d", cp, r, t, src);
                if (src >= 0 && src < cp) seen[src]++;
                /* what rank r holds at step t + 1 is what rank r - 1 held at step t */
                if (t + 1 < cp)
                    CHECK(mc_cp_ring_source(cp, r, t + 1) == mc_cp_ring_source(cp, (r - 1 + cp) % cp, t),
                          "CP %d rank %d step %d: not passed along the ring", cp, r, t);
            }
            for (int s = 0; s < cp; s++)
                CHECK(seen[s] == 1, "CP %d rank %d: K/V of rank %d held %d times", cp, r, s, seen[s]);
            free(seen);
        }
}

static bool blocks_equal(mc_cp_block got[2][2], mc_cp_block a, mc_cp_block b, mc_cp_block c, mc_cp_block d) {
    return got[0][0] == a && got[0][1] == b && got[1][0] == c && got[1][1] == d;
}

/* CP 2: rank 0 holds (0, 3), rank 1 (1, 2). */
static void test_ring_blocks_hand_worked(void) {
    const mc_cp_block S = MC_CP_BLOCK_SKIP, C = MC_CP_BLOCK_CAUSAL, F = MC_CP_BLOCK_FULL;
    mc_cp_block k[2][2];
    mc_cp_ring_blocks(2, 0, 0, k); /* q (0, 3) x kv (0, 3) */
    CHECK(blocks_equal(k, C, S, F, C), "CP 2 rank 0 step 0");
    mc_cp_ring_blocks(2, 0, 1, k); /* q (0, 3) x kv (1, 2): source 1 > rank 0 */
    CHECK(blocks_equal(k, S, S, F, F), "CP 2 rank 0 step 1");
    mc_cp_ring_blocks(2, 1, 0, k); /* q (1, 2) x kv (1, 2) */
    CHECK(blocks_equal(k, C, S, F, C), "CP 2 rank 1 step 0");
    mc_cp_ring_blocks(2, 1, 1, k); /* q (1, 2) x kv (0, 3): source 0 < rank 1 */
    CHECK(blocks_equal(k, F, S, F, S), "CP 2 rank 1 step 1");
    mc_cp_ring_blocks(1, 0, 0, k); /* CP 1: plain causal attention, cut in two halves */
    CHECK(blocks_equal(k, C, S, F, C), "CP 1");
}

/* The load-balancing property: work in half blocks (a causal block is half of a full one).
 * Every rank does 2 full blocks' work at every step (so none waits at a step's exchange),
 * 2 x CP - 1 full and 2 causal blocks over the ring; all ranks together compute each block
 * of the causal (2 x CP) x (2 x CP) chunk grid exactly once. Contiguous slices (rank r
 * keeping the r-th of CP chunks), computed alongside, are unequal for CP > 1. */
static void test_ring_equal_work(void) {
    const mc_cp_block S = MC_CP_BLOCK_SKIP, C = MC_CP_BLOCK_CAUSAL, F = MC_CP_BLOCK_FULL;
    for (int cp = 1; cp <= 8; cp++) {
        int n = 2 * cp;
        int *grid = calloc((size_t)(n * n), sizeof(int)); /* (q chunk, kv chunk) times computed */
        for (int r = 0; r < cp; r++) {
            int full = 0, causal = 0, q[2];
            mc_cp_rank_chunks(cp, r, q);
            for (int t = 0; t < cp; t++) {
                mc_cp_block k[2][2];
                int kv[2], step_half_blocks = 0;
                mc_cp_ring_blocks(cp, r, t, k);
                mc_cp_rank_chunks(cp, mc_cp_ring_source(cp, r, t), kv);
                for (int a = 0; a < 2; a++)
                    for (int b = 0; b < 2; b++) {
                        CHECK(k[a][b] == mc_cp_block_kind(q[a], kv[b]), "CP %d rank %d step %d block %d %d", cp, r,
                              t, a, b);
                        if (k[a][b] == S) continue;
                        grid[q[a] * n + kv[b]]++;
                        full += k[a][b] == F;
                        causal += k[a][b] == C;
                        step_half_blocks += k[a][b] == F ? 2 : 1;
                    }
                CHECK(step_half_blocks == 4, "CP %d rank %d step %d: %d half blocks of work, want 4", cp, r, t,
                      step_half_blocks);
                if (t == 0)
                    CHECK(blocks_equal(k, C, S, F, C), "CP %d rank %d step 0", cp, r);
                else if (mc_cp_ring_source(cp, r, t) < r)
                    CHECK(blocks_equal(k, F, S, F, S), "CP %d rank %d step %d: source before", cp, r, t);
                else
                    CHECK(blocks_equal(k, S, S, F, F), "CP %d rank %d step %d: source after", cp, r, t);
            }
            CHECK(full == 2 * cp - 1 && causal == 2, "CP %d rank %d: %d full and %d causal blocks, want %d and 2", cp,
                  r, full, causal, 2 * cp - 1);
        }
        for (int qc = 0; qc < n; qc++)
            for (int kc = 0; kc < n; kc++)
                CHECK(grid[qc * n + kc] == (kc <= qc), "CP %d: block (q %d, kv %d) computed %d times", cp, qc, kc,
                      grid[qc * n + kc]);
        free(grid);
        /* contiguous slices: rank r's one chunk r (of CP) against every chunk: r full blocks
         * and 1 causal, so the last rank does 2 x CP - 1 times the first one's work */
        int work_first = 0, work_last = 0;
        for (int kc = 0; kc < cp; kc++) {
            mc_cp_block first = mc_cp_block_kind(0, kc), last = mc_cp_block_kind(cp - 1, kc);
            work_first += first == F ? 2 : first == C ? 1 : 0;
            work_last += last == F ? 2 : last == C ? 1 : 0;
        }
        CHECK(work_first == 1 && work_last == 2 * cp - 1, "CP %d contiguous: %d and %d half blocks", cp, work_first,
              work_last);
    }
}

/* ---- errors ---- */

static void expect_error(int64_t seq, int cp, const char *want) {
    mc_err err = {{0}};
    int rc = mc_cp_check(seq, cp, &err);
    CHECK(rc == MC_ERR && strstr(err.msg, want), "S %lld CP %d: wanted '%s', got: %s", (long long)seq, cp, want,
          err.msg);
}

static void test_errors(void) {
    expect_error(100, 4,
                 "--seq-length 100 must be a multiple of 2 x --context-parallel-size (2 x 4 = 8) for context "
                 "parallelism's load-balanced chunks");
    expect_error(6, 2, "--seq-length 6 must be a multiple of 2 x --context-parallel-size (2 x 2 = 4)");
    expect_error(8, 8, "(2 x 8 = 16)");
    expect_error(4096, 0, "--context-parallel-size: must be at least 1, got 0");
    expect_error(4096, -2, "--context-parallel-size: must be at least 1, got -2");
    expect_error(0, 2, "--seq-length: must be positive, got 0");
    mc_err err = {{0}};
    CHECK(mc_cp_check(4096, 8, &err) == MC_OK, "%s", err.msg);
    CHECK(mc_cp_check(16, 8, &err) == MC_OK, "%s", err.msg);
    CHECK(mc_cp_check(7, 1, &err) == MC_OK, "CP 1 takes any length: %s", err.msg);
    CHECK(mc_cp_check(100, 2, &err) == MC_OK, "%s", err.msg);
}

int main(void) {
    RUN(test_positions_definition);
    RUN(test_positions_hand_worked);
    RUN(test_cp1_identity);
    RUN(test_each_position_once);
    RUN(test_locate);
    RUN(test_split_join);
    RUN(test_split_hand_worked);
    RUN(test_block_kinds);
    RUN(test_ring_sources);
    RUN(test_ring_blocks_hand_worked);
    RUN(test_ring_equal_work);
    RUN(test_errors);
    return check_summary();
}
