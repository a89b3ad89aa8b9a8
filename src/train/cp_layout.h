/* cp_layout.h: context parallelism's load-balanced sequence layout (issue 23), as pure
 * functions: which tokens a CP rank holds, where each of them sits in the full sequence,
 * the split and join of sequence-first arrays, and which attention blocks a rank computes
 * at each step of the K/V ring. No communication and no model code: the runtime splits
 * each micro-batch with these, feeds the positions to RoPE and the causal mask, and walks
 * the ring table while it passes K/V around.
 *
 * The layout is Megatron-Core's (_get_batch_on_this_cp_rank_per_sequence_balancing): the
 * sequence of S tokens is cut into 2 x CP equal chunks of S / (2 x CP) tokens, and CP rank
 * r keeps chunks r and 2 x CP - 1 - r, in that order, so it holds S / CP tokens. For CP 2,
 * rank 0 holds chunks (0, 3) and rank 1 (1, 2). CP 1 is the identity (any S).
 *
 * Why two chunks per rank: with causal attention, query chunk q attends to key chunks
 * 0..q, so the work grows with q. Contiguous slices (rank r keeping chunk r of CP) would
 * give the last rank CP times the first one's work. Pairing an early chunk with its mirror
 * makes each rank's pair see (r + 1) + (2 x CP - r) = 2 x CP + 1 key chunks, the same on
 * every rank (see mc_cp_ring_blocks for the per-step picture).
 *
 * Arrays are sequence-first: a micro-batch's token arrays are [S, B] (token s of sequence b
 * at s x B + b) and its hidden states [S, B, H]. One chunk is then S / (2 x CP) consecutive
 * rows of B x row bytes, contiguous in memory, so a rank's part is two contiguous copies.
 *
 * The loss: Megatron averages the per-token loss over every token of the CP group, i.e.
 * (sum over CP ranks of the local loss sums) / (sum over CP ranks of the local counted
 * tokens), not the mean of per-rank means (with a loss mask the counts differ between
 * ranks). The runtime all-reduces the (sum, count) pair over the CP group; no helper here. */
#ifndef MC_TRAIN_CP_LAYOUT_H
#define MC_TRAIN_CP_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* ---- validation ---- */

/* Checks the user's --context-parallel-size against --seq-length: cp >= 1, seq >= 1, and
 * with cp > 1 seq a multiple of 2 x cp (Megatron's arguments.py rule). The other functions
 * assume arguments that passed this check (and 0 <= rank < cp) and abort otherwise. */
int mc_cp_check(int64_t seq_length, int cp, mc_err *err);

/* ---- where the tokens are ---- */

/* Tokens per rank: S / CP. */
int64_t mc_cp_local_length(int64_t seq, int cp);

/* Tokens per chunk: S / (2 x CP); with CP 1, S / 2 rounded down (only the ring table
 * names chunks then; the layout itself is the identity). */
int64_t mc_cp_chunk_length(int64_t seq, int cp);

/* The global chunk ids rank holds, in local order: chunks[0] = rank (the first half of its
 * local sequence), chunks[1] = 2 x cp - 1 - rank (the second half). */
void mc_cp_rank_chunks(int cp, int rank, int chunks[2]);

/* Global position (0..S-1) of rank's local token i (0..S/CP-1): the position RoPE rotates
 * by and the causal mask compares. */
int64_t mc_cp_global_pos(int64_t seq, int cp, int rank, int64_t i);

/* The inverse: the rank holding global position pos, and (local, may be NULL) its index
 * there. */
int mc_cp_locate(int64_t seq, int cp, int64_t pos, int64_t *local);

/* ---- split and join of sequence-first arrays ---- */

/* Copies rank's S/CP rows of each of the batch's sequences: full [S, B, row] -> local
 * [S/CP, B, row], where row_bytes is the size of one (token, sequence) entry (4 for int32
 * token ids, H x 4 for fp32 hidden states). full and local must not overlap. */
void mc_cp_split(void *local, const void *full, int64_t seq, int64_t batch, size_t row_bytes, int cp, int rank);

/* The reverse for one rank's part: writes local [S/CP, B, row] into its rows of full
 * [S, B, row] and leaves the other rows alone. Joining every rank's part (what a gather
 * over the CP group, then a join per rank, gives) rebuilds the full array. */
void mc_cp_join(void *full, const void *local, int64_t seq, int64_t batch, size_t row_bytes, int cp, int rank);

/* ---- ring attention's blocks ---- */

/* A (query chunk, key/value chunk) block of causal attention, chunks by global id. */
typedef enum {
    MC_CP_BLOCK_SKIP = 0, /* kv chunk after the query chunk: every key is in the future */
    MC_CP_BLOCK_CAUSAL,   /* the diagonal: query j sees keys 0..j of the chunk (the usual mask) */
    MC_CP_BLOCK_FULL      /* kv chunk before the query chunk: every key is visible */
} mc_cp_block;

/* SKIP when kv_chunk > q_chunk, CAUSAL when equal, FULL when before. */
mc_cp_block mc_cp_block_kind(int q_chunk, int kv_chunk);

/* The rank whose K/V rank holds at ring step t (0..cp-1): (rank - t) mod cp. Each step
 * every rank sends what it holds to rank + 1 and receives from rank - 1 (Megatron/TE's
 * p2p ring, cp_comm_type=p2p); step 0 is its own K/V. */
int mc_cp_ring_source(int cp, int rank, int step);

/* The four blocks rank computes at ring step t: kinds[a][b] for its local query chunk a
 * (0: chunk rank, 1: chunk 2 x cp - 1 - rank) against the held K/V's chunk b (of the
 * source rank, same order). The pattern (Transformer Engine's three cases):
 *   - t 0 (own K/V): [CAUSAL, SKIP; FULL, CAUSAL];
 *   - source < rank: [FULL, SKIP; FULL, SKIP]: all queries against the first kv half;
 *   - source > rank: [SKIP, SKIP; FULL, FULL]: the second query half against all K/V.
 * Each step is thus two full blocks' work (a causal block being half of one), on every
 * rank: 2 x CP - 1 full and 2 causal blocks per rank over the ring, so no rank waits on
 * another at a step. */
void mc_cp_ring_blocks(int cp, int rank, int step, mc_cp_block kinds[2][2]);

#endif
