/* ckpt_internal.h: what the checkpoint's source files share.
 *   ckpt_layout.c   the slicing rule: a rank's local elements as boxes of global tensors
 *   ckpt_meta.c     metadata.json: writing it from the ranks' descriptions, reading and
 *                   validating it, the config and LR-schedule records
 *   ckpt_save.c     the writer: plan, snapshot, threads, checksums, publish, async
 *   ckpt_load.c     finding the newest valid checkpoint and loading it, resharded
 *   ckpt_inspect.c  megatron-c inspect-ckpt */
#ifndef MC_CKPT_INTERNAL_H
#define MC_CKPT_INTERNAL_H

#include <cjson/cJSON.h>
#include <stdatomic.h>

#include "ckpt/ckpt.h"

#define MC_CKPT_FORMAT "megatron-c-checkpoint"
#define MC_CKPT_VERSION 1
#define MC_CKPT_TRACKER "latest_checkpointed_iteration.txt"
#define MC_CKPT_METADATA "metadata.json"
/* Bytes a checksum covers: a reader verifies the blocks it reads. */
#define MC_CKPT_BLOCK_BYTES (16ll << 20)

/* The kinds of tensor a checkpoint holds per parameter, and their name prefixes. */
enum { CKPT_WEIGHTS = 0, CKPT_EXP_AVG, CKPT_EXP_AVG_SQ, CKPT_NKINDS };
extern const char *const mc_ckpt_kind_prefix[CKPT_NKINDS];

/* ---- the slicing rule (ckpt_layout.c) ---- */

/* A box of a global tensor [R, C] (a 1-D tensor is [R, 1]): rows [row, row + rows) x
 * columns [col, col + cols), which a rank holds contiguously, row after row, from element
 * `local` of its shard on. */
typedef struct mc_ckpt_box {
    int64_t row, col, rows, cols;
    int64_t local;
} mc_ckpt_box;

typedef struct mc_ckpt_boxes {
    mc_ckpt_box *v;
    int n, cap;
} mc_ckpt_boxes;

/* Appends the boxes of local elements [lo, hi) (row-major in the shard) of parameter p as
 * TP rank tp_rank holds it: a partial first row, runs of whole rows whose global rows are
 * consecutive, a partial last row. */
void mc_ckpt_boxes_of(const mc_model *m, const mc_param *p, int tp_rank, int64_t lo, int64_t hi, mc_ckpt_boxes *out);
void mc_ckpt_boxes_free(mc_ckpt_boxes *b);

/* The index of the parameter holding flat element `offset` (parameters are in offset order;
 * alignment padding belongs to the one before it). */
int mc_ckpt_param_at(const mc_model *m, int64_t offset);

/* ---- metadata (ckpt_meta.c) ---- */

typedef struct mc_ckpt_piece_meta {
    int file;
    char *key;
    int64_t row, col, rows, cols;
    int64_t begin, end; /* bytes in the file */
} mc_ckpt_piece_meta;

typedef struct mc_ckpt_tensor_meta {
    char *name;
    int ndim;
    int64_t shape[2]; /* [R, C]; C = 1 for 1-D */
    mc_ckpt_piece_meta *pieces;
    int npieces;
} mc_ckpt_tensor_meta;

typedef struct mc_ckpt_file_meta {
    char *name;
    int64_t bytes;
    uint32_t crc;
    int64_t block_bytes;
    uint32_t *block_crc;
    int64_t nblocks;
} mc_ckpt_file_meta;

typedef struct mc_ckpt_meta {
    cJSON *root;
    char *dir;            /* the iter_N directory */
    int64_t iteration;
    bool has_optim, has_rng;
    mc_ckpt_file_meta *files;
    int nfiles;
    mc_ckpt_tensor_meta *tensors; /* sorted by name */
    int ntensors;
} mc_ckpt_meta;

/* Reads and validates dir/metadata.json: its format and version, every field's type and
 * range, every piece inside its tensor and its file, and every file present with its
 * recorded size. The checksums are not read here (the loader verifies what it reads). */
int mc_ckpt_meta_read(const char *dir, mc_ckpt_meta *m, mc_err *err);
void mc_ckpt_meta_free(mc_ckpt_meta *m);
const mc_ckpt_tensor_meta *mc_ckpt_meta_find(const mc_ckpt_meta *m, const char *name);

/* The model config as stored ({"num_layers": 2, ...}), and its comparison with the
 * running one: the first field that differs is an error naming its flag and both values. */
cJSON *mc_ckpt_config_json(const mc_config *cfg);
int mc_ckpt_config_check(const cJSON *stored, const mc_config *cfg, const char *what, mc_err *err);
/* The stored model config into *m (the fields it holds; m's others untouched). */
int mc_ckpt_config_parse(const cJSON *stored, mc_model_config *m, const char *what, mc_err *err);
/* The LR scheduler as stored (Megatron's opt_param_scheduler state), and its restore under
 * a policy: check equality (naming the first value that differs), take the flags', or
 * take the checkpoint's. */
cJSON *mc_ckpt_sched_json(const mc_lr_schedule *s, int64_t num_steps);
int mc_ckpt_sched_restore(const cJSON *stored, mc_lr_schedule *s, mc_ckpt_sched_policy policy, const char *what,
                          mc_err *err);

/* One rank's part of the metadata, written by the rank beside its file
 * (iter_N.tmp/rank-00003.json) and merged by world rank 0. */
typedef struct mc_ckpt_rank_desc {
    cJSON *json;
} mc_ckpt_rank_desc;
/* Merges the ranks' descriptions and the common part into metadata.json's object. */
cJSON *mc_ckpt_meta_merge(cJSON *common, cJSON **ranks, int nranks, mc_err *err);

/* Re-reads file f of a checkpoint against its block and whole-file checksums (ckpt_inspect.c;
 * inspect-ckpt --verify, and the weights reader, which needs every byte anyway). */
int mc_ckpt_verify_file(const mc_ckpt_meta *m, int f, mc_err *err);

/* ---- finding checkpoints (ckpt_load.c) ---- */

/* The iterations of the iter_N directories in dir (not the .tmp ones), newest first
 * (malloc'd; NULL when there are none). */
int64_t *mc_ckpt_list_iterations(const char *dir, int *n);
/* The tracker's iteration: 1 when dir has a valid tracker, 0 when it has none, MC_ERR when
 * it holds something else (the error names the file). */
int mc_ckpt_read_tracker(const char *dir, int64_t *iteration, mc_err *err);

/* ---- shared helpers ---- */

/* Every rank ends with the first failing rank's status and message (MPI_MIN over ranks of
 * the failing rank, its message broadcast). */
int mc_ckpt_agree(mc_comm *c, int rc, mc_err *err);
/* The crc as 8 lower-case hex digits, and back. */
void mc_ckpt_crc_hex(uint32_t crc, char out[9]);
bool mc_ckpt_crc_parse(const char *s, uint32_t *crc);
/* "rank-00003-of-00008.safetensors" */
void mc_ckpt_file_name(int rank, int world, char *out, size_t cap);

#endif
