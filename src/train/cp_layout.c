/* cp_layout.c: the load-balanced context-parallel layout of cp_layout.h. */
#include "train/cp_layout.h"

#include <string.h>

int mc_cp_check(int64_t seq_length, int cp, mc_err *err) {
    if (cp < 1) return mc_err_set(err, "--context-parallel-size: must be at least 1, got %d", cp);
    if (seq_length < 1) return mc_err_set(err, "--seq-length: must be positive, got %lld", (long long)seq_length);
    if (cp > 1 && seq_length % (2 * (int64_t)cp) != 0)
        return mc_err_set(err,
                          "--seq-length %lld must be a multiple of 2 x --context-parallel-size (2 x %d = %lld) for "
                          "context parallelism's load-balanced chunks",
                          (long long)seq_length, cp, 2 * (long long)cp);
    return MC_OK;
}

static void assert_layout(int64_t seq, int cp) {
    MC_ASSERT(cp >= 1 && seq >= 1 && (cp == 1 || seq % (2 * (int64_t)cp) == 0),
              "seq %lld, cp %d: not checked by mc_cp_check", (long long)seq, cp);
}

int64_t mc_cp_local_length(int64_t seq, int cp) {
    assert_layout(seq, cp);
    return seq / cp;
}

int64_t mc_cp_chunk_length(int64_t seq, int cp) {
    assert_layout(seq, cp);
    return seq / (2 * (int64_t)cp);
}

void mc_cp_rank_chunks(int cp, int rank, int chunks[2]) {
    MC_ASSERT(cp >= 1 && rank >= 0 && rank < cp, "CP rank %d of %d", rank, cp);
    chunks[0] = rank;
    chunks[1] = 2 * cp - 1 - rank;
}

int64_t mc_cp_global_pos(int64_t seq, int cp, int rank, int64_t i) {
    assert_layout(seq, cp);
    MC_ASSERT(rank >= 0 && rank < cp && i >= 0 && i < seq / cp, "CP rank %d of %d, local token %lld of %lld", rank,
              cp, (long long)i, (long long)(seq / cp));
    if (cp == 1) return i; /* the identity, also for odd S */
    int64_t c = seq / (2 * (int64_t)cp);
    int chunks[2];
    mc_cp_rank_chunks(cp, rank, chunks);
    return chunks[i / c] * c + i % c;
}

int mc_cp_locate(int64_t seq, int cp, int64_t pos, int64_t *local) {
    assert_layout(seq, cp);
    MC_ASSERT(pos >= 0 && pos < seq, "position %lld of %lld", (long long)pos, (long long)seq);
    if (cp == 1) {
        if (local) *local = pos;
        return 0;
    }
    int64_t c = seq / (2 * (int64_t)cp);
    int chunk = (int)(pos / c);
    int first = chunk < cp; /* chunks 0..cp-1 are first halves, cp..2cp-1 mirror them */
    int rank = first ? chunk : 2 * cp - 1 - chunk;
    if (local) *local = (first ? 0 : c) + pos % c;
    return rank;
}

/* The copies of split and join: a rank's part is two runs of chunk x B rows, contiguous in
 * both arrays (CP 1: one run, the whole array). to_full picks the direction. */
static void copy_part(char *full, char *local, int64_t seq, int64_t batch, size_t row_bytes, int cp, int rank,
                      int to_full) {
    assert_layout(seq, cp);
    MC_ASSERT(batch >= 0 && rank >= 0 && rank < cp, "batch %lld, CP rank %d of %d", (long long)batch, rank, cp);
    size_t token_bytes = (size_t)batch * row_bytes; /* one token of every sequence */
    if (cp == 1) {
        size_t n = (size_t)seq * token_bytes;
        if (to_full)
            memcpy(full, local, n);
        else
            memcpy(local, full, n);
        return;
    }
    int64_t c = seq / (2 * (int64_t)cp);
    size_t run = (size_t)c * token_bytes;
    int chunks[2];
    mc_cp_rank_chunks(cp, rank, chunks);
    for (int h = 0; h < 2; h++) {
        char *f = full + (size_t)chunks[h] * run, *l = local + (size_t)h * run;
        if (to_full)
            memcpy(f, l, run);
        else
            memcpy(l, f, run);
    }
}

void mc_cp_split(void *local, const void *full, int64_t seq, int64_t batch, size_t row_bytes, int cp, int rank) {
    copy_part((char *)full, (char *)local, seq, batch, row_bytes, cp, rank, 0); /* full is only read */
}

void mc_cp_join(void *full, const void *local, int64_t seq, int64_t batch, size_t row_bytes, int cp, int rank) {
    copy_part((char *)full, (char *)local, seq, batch, row_bytes, cp, rank, 1); /* local is only read */
}

mc_cp_block mc_cp_block_kind(int q_chunk, int kv_chunk) {
    if (kv_chunk > q_chunk) return MC_CP_BLOCK_SKIP;
    return kv_chunk == q_chunk ? MC_CP_BLOCK_CAUSAL : MC_CP_BLOCK_FULL;
}

int mc_cp_ring_source(int cp, int rank, int step) {
    MC_ASSERT(cp >= 1 && rank >= 0 && rank < cp && step >= 0 && step < cp, "CP rank %d of %d, ring step %d", rank,
              cp, step);
    return ((rank - step) % cp + cp) % cp;
}

void mc_cp_ring_blocks(int cp, int rank, int step, mc_cp_block kinds[2][2]) {
    int q[2], kv[2];
    mc_cp_rank_chunks(cp, rank, q);
    mc_cp_rank_chunks(cp, mc_cp_ring_source(cp, rank, step), kv);
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) kinds[a][b] = mc_cp_block_kind(q[a], kv[b]);
}
