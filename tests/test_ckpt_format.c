/* The checkpoint format's pieces: CRC-32C (known answers, the SSE4.2 and table paths
 * alike, incremental and combined), the slicing rule (every local element of every shard,
 * cut into boxes at any boundaries, lands on its global coordinate; with the unique
 * prefixes every global element is stored by exactly one tensor-parallel rank, for QKV
 * with fewer groups than ranks, SwiGLU, row and column splits), and metadata.json's
 * validation: a checkpoint saved through the library, its metadata then damaged in each of
 * the ways a reader must catch. */
#include <cjson/cJSON.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "base/file.h"
#include "check.h"
#include "ckpt/ckpt_internal.h"
#include "megatron.h"
#include "model/model.h"
#include "train/model_options.h"
#include "tiny_llama.h"

static uint64_t g_rng = 88172645463325252ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)g_rng;
}

static void test_crc32c_known_answers(void) {
    unsigned char zeros[32] = {0}, ones[32], inc[32];
    memset(ones, 0xff, sizeof ones);
    for (int i = 0; i < 32; i++) inc[i] = (unsigned char)i;
    CHECK(mc_crc32c(0, "123456789", 9) == 0xE3069283u, "check value %08x", mc_crc32c(0, "123456789", 9));
    CHECK(mc_crc32c(0, "", 0) == 0);
    /* RFC 3720 (iSCSI) B.4 */
    CHECK(mc_crc32c(0, zeros, 32) == 0x8A9136AAu);
    CHECK(mc_crc32c(0, ones, 32) == 0x62A8AB43u);
    CHECK(mc_crc32c(0, inc, 32) == 0x46DD794Eu);
    CHECK(mc_crc32c_portable(0, inc, 32) == 0x46DD794Eu);
}

static void test_crc32c_paths_incremental_combine(void) {
    size_t n = 1 << 20;
    unsigned char *buf = malloc(n + 8);
    for (size_t i = 0; i < n + 8; i++) buf[i] = (unsigned char)rnd();
    for (int trial = 0; trial < 50; trial++) {
        size_t off = rnd() % 8, len = rnd() % (n - 16), cut = len ? rnd() % len : 0;
        const unsigned char *p = buf + off; /* every alignment */
        uint32_t whole = mc_crc32c(0, p, len);
        CHECK(whole == mc_crc32c_portable(0, p, len), "hardware and table differ at length %zu", len);
        uint32_t a = mc_crc32c(0, p, cut), b = mc_crc32c(0, p + cut, len - cut);
        CHECK(mc_crc32c(a, p + cut, len - cut) == whole, "incremental at %zu/%zu", cut, len);
        CHECK(mc_crc32c_combine(a, b, len - cut) == whole, "combine at %zu/%zu", cut, len);
    }
    CHECK(mc_crc32c_combine(0x12345678u, 0, 0) == 0x12345678u, "appending nothing");
    free(buf);
}

/* Builds the model of `cfg` as tensor-parallel rank `rank` of `tp` (layout only, no MPI). */
static int build(mc_model *m, mc_comm *comm, mc_backend *be, mc_config *cfg, int tp, int rank) {
    mc_err err;
    cfg->parallel.tensor_model_parallel_size = tp;
    CHECK(mc_config_validate(cfg, tp, &err) == MC_OK, "%s", err.msg);
    CHECK(mc_comm_init(comm, tp, rank, 0, tp, 1, 1, 1, &err) == MC_OK, "%s", err.msg);
    mc_model_options mo = mc_model_options_from_config(cfg, 1, MC_F32, MC_F32, MC_F32, 1, NULL);
    int rc = mc_model_create(m, &mo, be, comm, &err);
    CHECK(rc == MC_OK, "%s", err.msg);
    return rc;
}

static void slicing_case(const char *what, void (*setup)(mc_config *), int tp) {
    mc_backend *be = mc_backend_cpu_create();
    mc_config cfg;
    setup(&cfg);
    mc_model models[8];
    mc_comm comms[8];
    for (int r = 0; r < tp; r++)
        if (build(&models[r], &comms[r], be, &cfg, tp, r) != MC_OK) return;
    mc_ckpt_boxes boxes = {0};
    for (int i = 0; i < models[0].nparams; i++) {
        const mc_param *p0 = &models[0].params[i];
        int64_t R = p0->global_shape[0], C = p0->global_shape[1];
        unsigned char *seen = calloc((size_t)(R * C), 1);
        for (int r = 0; r < tp; r++) {
            const mc_model *m = &models[r];
            const mc_param *p = &m->params[i];
            int64_t unique = mc_model_unique_prefix(m, p);
            /* random cut points: boxes of each range, checked element by element */
            for (int64_t lo = 0; lo < p->numel;) {
                int64_t hi = lo + 1 + rnd() % (p->numel / 3 + 2);
                if (hi > p->numel) hi = p->numel;
                boxes.n = 0;
                mc_ckpt_boxes_of(m, p, r, lo, hi, &boxes);
                int64_t covered = 0;
                for (int k = 0; k < boxes.n; k++) {
                    const mc_ckpt_box *b = &boxes.v[k];
                    for (int64_t e = 0; e < b->rows * b->cols; e++) {
                        int64_t local = b->local + e, grow, gcol;
                        int64_t row = b->row + e / b->cols, col = b->col + e % b->cols;
                        mc_model_local_to_global_on(m, p, r, local / p->shape[1], local % p->shape[1], &grow, &gcol);
                        if (grow != row || gcol != col) {
                            CHECK(false, "%s: %s rank %d local %lld: box says (%lld, %lld), the model (%lld, %lld)", what,
                                  p->name, r, (long long)local, (long long)row, (long long)col, (long long)grow,
                                  (long long)gcol);
                            goto next;
                        }
                        if (local < unique) seen[row * C + col]++;
                    }
                    covered += b->rows * b->cols;
                }
                CHECK(covered == hi - lo, "%s: %s [%lld, %lld) covered by %lld", what, p->name, (long long)lo,
                      (long long)hi, (long long)covered);
                lo = hi;
            }
        }
        for (int64_t e = 0; e < R * C; e++)
            if (seen[e] != 1) {
                CHECK(false, "%s: %s element (%lld, %lld) stored %d times", what, p0->name, (long long)(e / C),
                      (long long)(e % C), seen[e]);
                break;
            }
    next:
        free(seen);
    }
    mc_ckpt_boxes_free(&boxes);
    for (int r = 0; r < tp; r++) {
        mc_model_free(&models[r]);
        mc_comm_free(&comms[r]);
    }
    be->destroy(be);
}

static void llama_gqa2(mc_config *c) {
    tiny_llama_base(c);
    c->model.seq_length = 16;
    c->train.micro_batch_size = 1;
    c->train.train_iters = 1;
    c->model.make_vocab_size_divisible_by = 16;
}

static void gpt2_like(mc_config *c) {
    mc_config_init(c);
    c->model.num_layers = 2;
    c->model.hidden_size = 32;
    c->model.num_attention_heads = 4;
    c->model.seq_length = 16;
    c->model.vocab_size = 100;
    c->model.make_vocab_size_divisible_by = 8;
    c->data.mock_data = true;
    c->data.tokenizer_type = MC_TOKENIZER_NULL;
    c->optim.lr = 1e-3;
    c->train.micro_batch_size = 1;
    c->train.train_iters = 1;
    c->train.eval_iters = 0;
}

static void test_slicing_rule(void) {
    for (int tp = 1; tp <= 4; tp *= 2) {
        char what[64];
        snprintf(what, sizeof what, "llama gqa2 tp%d", tp);
        slicing_case(what, llama_gqa2, tp);
        snprintf(what, sizeof what, "gpt2 tp%d", tp);
        slicing_case(what, gpt2_like, tp);
    }
}

/* ---- metadata.json validation ---- */

static char g_dir[256], g_iter[300];
static char *g_meta; /* the good metadata.json */

static void save_one(void) {
    mc_config cfg;
    tiny_llama_base(&cfg);
    cfg.model.seq_length = 16;
    cfg.train.micro_batch_size = 2;
    cfg.train.train_iters = 2;
    cfg.train.device = MC_DEVICE_CPU_ONLY;
    cfg.ckpt.save = g_dir;
    mc_err err;
    mc_trainer *t = mc_trainer_create(&cfg, &err);
    CHECK(t, "%s", t ? "" : err.msg);
    if (!t) return;
    mc_step_stats st;
    CHECK(mc_trainer_step(t, &st, &err) == MC_OK, "%s", err.msg);
    CHECK(mc_trainer_save_checkpoint(t, &err) == MC_OK, "%s", err.msg);
    mc_trainer_free(t);
    cfg.ckpt.save = NULL;
    snprintf(g_iter, sizeof g_iter, "%s/iter_0000001", g_dir);
    char path[400];
    snprintf(path, sizeof path, "%s/metadata.json", g_iter);
    g_meta = check_read_file(path, NULL);
    CHECK(g_meta != NULL, "no %s", path);
}

/* Writes the good metadata changed by `edit`, reads it, and expects an error with `want`. */
static void expect_rejected(const char *name, void (*edit)(cJSON *), const char *want) {
    cJSON *root = cJSON_Parse(g_meta);
    edit(root);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    char path[400];
    snprintf(path, sizeof path, "%s/metadata.json", g_iter);
    mc_err err;
    CHECK(mc_write_file_atomic(path, text, strlen(text), &err) == MC_OK, "%s", err.msg);
    free(text);
    mc_ckpt_meta m;
    int rc = mc_ckpt_meta_read(g_iter, &m, &err);
    CHECK(rc != MC_OK, "%s: accepted", name);
    CHECK(rc == MC_OK || strstr(err.msg, want), "%s: '%s' does not say '%s'", name, err.msg, want);
    mc_ckpt_meta_free(&m);
}

static cJSON *first_piece(cJSON *root, const char *tensor) {
    return cJSON_GetArrayItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "tensors"), tensor), "pieces"), 0);
}
#define QKV "decoder.layers.0.self_attention.linear_qkv.weight"
static void e_format(cJSON *r) { cJSON_ReplaceItemInObject(r, "format", cJSON_CreateString("torch_dist")); }
static void e_version(cJSON *r) { cJSON_ReplaceItemInObject(r, "version", cJSON_CreateNumber(99)); }
static void e_outside(cJSON *r) {
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(first_piece(r, QKV), "offset"), 0, cJSON_CreateNumber(1000));
}
static void e_dtype(cJSON *r) {
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "tensors"), QKV), "dtype",
                              cJSON_CreateString("BF16"));
}
static void e_span(cJSON *r) {
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(first_piece(r, QKV), "data_offsets"), 1, cJSON_CreateNumber(1e12));
}
static void e_gap(cJSON *r) { /* a piece gone: the tensor is not covered */
    cJSON_DeleteItemFromArray(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "tensors"), QKV), "pieces"), 0);
}
static void e_overlap(cJSON *r) { /* a piece twice */
    cJSON *pieces = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "tensors"), QKV), "pieces");
    cJSON_AddItemToArray(pieces, cJSON_Duplicate(cJSON_GetArrayItem(pieces, 0), true));
}
static void e_crc(cJSON *r) {
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(cJSON_GetObjectItem(r, "files"), 0), "crc32c", cJSON_CreateString("xyz"));
}
static void e_blocks(cJSON *r) {
    cJSON_DeleteItemFromArray(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(r, "files"), 0), "block_crc32c"), 0);
}
static void e_file_name(cJSON *r) {
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(cJSON_GetObjectItem(r, "files"), 0), "name",
                              cJSON_CreateString("../../etc/passwd"));
}
static void e_file_index(cJSON *r) { cJSON_ReplaceItemInObject(first_piece(r, QKV), "file", cJSON_CreateNumber(3)); }

static void test_metadata_validation(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/mc_ckpt_format_XXXXXX");
    CHECK(mkdtemp(g_dir) != NULL);
    save_one();
    if (!g_meta) return;
    mc_ckpt_meta m;
    mc_err err;
    CHECK(mc_ckpt_meta_read(g_iter, &m, &err) == MC_OK, "the good metadata: %s", err.msg);
    CHECK(m.iteration == 1 && m.has_optim && m.has_rng && m.nfiles == 1 && m.ntensors > 3);
    mc_ckpt_meta_free(&m);
    expect_rejected("format", e_format, "not a Megatron-C checkpoint");
    expect_rejected("version", e_version, "newer than this megatron-c reads");
    expect_rejected("piece outside", e_outside, "lies outside the tensor");
    expect_rejected("dtype", e_dtype, "dtype should be F32");
    expect_rejected("data span", e_span, "do not fit its shape");
    expect_rejected("gap", e_gap, "its pieces cover");
    expect_rejected("overlap", e_overlap, "overlap");
    expect_rejected("crc", e_crc, "bad crc32c");
    expect_rejected("blocks", e_blocks, "block_crc32c should list");
    expect_rejected("file name", e_file_name, "has no valid name");
    expect_rejected("file index", e_file_index, "'file' is");
    mc_err e2;
    mc_remove_tree(g_dir, &e2);
    free(g_meta);
}

int main(void) {
    RUN(test_crc32c_known_answers);
    RUN(test_crc32c_paths_incremental_combine);
    RUN(test_slicing_rule);
    RUN(test_metadata_validation);
    return check_summary();
}
