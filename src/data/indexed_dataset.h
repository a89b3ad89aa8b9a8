/* indexed_dataset.h: Megatron's indexed dataset, PREFIX.bin + PREFIX.idx
 * (megatron/core/datasets/indexed_dataset.py), read through mmap and written atomically.
 *
 * .idx (little-endian, no padding):
 *     0   9 bytes   magic "MMIDIDX\0\0"
 *     9   uint64    version, 1
 *     17  uint8     dtype code of the tokens in .bin (MC_IDX_DTYPE_*)
 *     18  uint64    N, sequence count
 *     26  uint64    D, entries of document_indices (documents + 1)
 *     34  int32[N]  sequence_lengths (tokens)
 *         int64[N]  sequence_pointers (byte offset of each sequence in .bin)
 *         int64[D]  document_indices: document k is sequences [di[k], di[k+1])
 *         int8[N]   sequence_modes, multimodal datasets only (ignored here)
 * .bin: the tokens of all sequences, densely packed, in that dtype.
 *
 * The reader trusts nothing before checking it against the file sizes: magic, version,
 * dtype code, N and D against the .idx size, every length (non-negative) and pointer
 * (inside .bin, aligned to the token size), document indices (non-decreasing, ending at
 * N), and the .bin size against the tokens the .idx describes, so a truncated file, a
 * foreign file, or an .idx paired with a .bin of another dtype is a clear error, never a
 * wrong read. Lengths are copied into an aligned array (the GPT sample builder walks them
 * constantly); pointers and document indices stay in the map and are read with memcpy
 * (they are not 8-byte aligned: they start at 34 + 4N).
 *
 * The builder is Megatron's IndexedDatasetBuilder (add_item, end_document, add_document,
 * add_index, finalize), byte-identical in output, with two differences that only show on
 * failure or at scale: both files are written under temporary names in the target
 * directory, fsync'd and renamed into place by finalize (abort, or a failure, leaves no
 * file behind; an existing pair is replaced, as Megatron overwrites it), and the index
 * arrays are spilled to unlinked temporary files instead of Python lists, so building a
 * dataset of any size takes constant memory. */
#ifndef MC_DATA_INDEXED_DATASET_H
#define MC_DATA_INDEXED_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* DType codes of indexed_dataset.py. */
enum {
    MC_IDX_DTYPE_UINT8 = 1,
    MC_IDX_DTYPE_INT8 = 2,
    MC_IDX_DTYPE_INT16 = 3,
    MC_IDX_DTYPE_INT32 = 4,
    MC_IDX_DTYPE_INT64 = 5,
    MC_IDX_DTYPE_FLOAT64 = 6,
    MC_IDX_DTYPE_FLOAT32 = 7,
    MC_IDX_DTYPE_UINT16 = 8,
};

#define MC_IDX_HEADER_BYTES 34

/* Bytes per token of a dtype code, 0 for an unknown code. */
size_t mc_idx_dtype_size(int code);
/* "uint16", "int32", ... ("?" for an unknown code). */
const char *mc_idx_dtype_name(int code);
/* DType.optimal_dtype(vocab_size): uint16 below 65500 tokens, int32 from there. */
int mc_idx_optimal_dtype(int64_t vocab_size);

/* ---- reader ----------------------------------------------------------------------------- */

typedef struct mc_indexed_dataset {
    char *prefix;
    int dtype;                /* MC_IDX_DTYPE_*; integer types only */
    size_t itemsize;
    int64_t num_sequences;    /* N */
    int64_t num_doc_indices;  /* D (documents + 1) */
    int32_t *lengths;         /* (N,) aligned copy */
    int64_t num_tokens;       /* sum of lengths */
    const unsigned char *idx; /* the .idx map */
    size_t idx_size;
    const unsigned char *bin; /* the .bin map (NULL when empty) */
    size_t bin_size;
} mc_indexed_dataset;

/* Opens PREFIX.idx and PREFIX.bin. Errors name the file and what is wrong with it. */
int mc_indexed_dataset_open(mc_indexed_dataset **out, const char *prefix, mc_err *err);
void mc_indexed_dataset_close(mc_indexed_dataset *ds);

int64_t mc_indexed_dataset_pointer(const mc_indexed_dataset *ds, int64_t i);
int64_t mc_indexed_dataset_doc_index(const mc_indexed_dataset *ds, int64_t k);
/* Tokens [offset, offset + count) of sequence i, widened to int32 (the caller keeps
 * offset + count <= lengths[i]). Does not allocate. */
void mc_indexed_dataset_read(const mc_indexed_dataset *ds, int64_t i, int64_t offset, int64_t count, int32_t *out);
/* The ids a token of dtype `code` can hold, [*lo, *hi]. */
void mc_idx_dtype_range(int code, int64_t *lo, int64_t *hi);
/* The smallest and largest token id in the .bin (0 and -1 when it is empty): all of it
 * when it has at most max_scan_bytes, else max_scan_bytes read in evenly spaced windows
 * (a bound on the time a large file costs). Returns whether every token was read. */
bool mc_indexed_dataset_token_range(const mc_indexed_dataset *ds, size_t max_scan_bytes, int64_t *lo, int64_t *hi);

/* ---- builder ---------------------------------------------------------------------------- */

typedef struct mc_indexed_builder mc_indexed_builder;

/* Starts PREFIX.bin/.idx with token dtype `dtype` (MC_IDX_DTYPE_UINT16 or _INT32, or any
 * integer code). Nothing appears under the final names before finalize. Errors: the
 * directory does not exist or is not writable. */
int mc_indexed_builder_open(mc_indexed_builder **out, const char *prefix, int dtype, mc_err *err);
/* add_item: one sequence. Tokens outside the dtype's range are an error. */
int mc_indexed_builder_add_item(mc_indexed_builder *b, const int32_t *tokens, int64_t n, mc_err *err);
/* end_document: a document boundary after the sequences added so far. */
void mc_indexed_builder_end_document(mc_indexed_builder *b);
/* add_document: the tokens of one document, split into sequences of `lengths` (which must
 * sum to ntokens), then a boundary. nlengths 0 is an empty document (boundary only). */
int mc_indexed_builder_add_document(mc_indexed_builder *b, const int32_t *tokens, int64_t ntokens,
                                    const int32_t *lengths, int64_t nlengths, mc_err *err);
/* add_index: appends the dataset at `prefix` (same dtype required): its .bin bytes, its
 * lengths, and its document_indices[1:] shifted by the sequences already present. */
int mc_indexed_builder_add_index(mc_indexed_builder *b, const char *prefix, mc_err *err);
int64_t mc_indexed_builder_num_sequences(const mc_indexed_builder *b);
int64_t mc_indexed_builder_num_documents(const mc_indexed_builder *b);
/* Writes the .idx and publishes both files (fsync + rename); frees b in every case. */
int mc_indexed_builder_finalize(mc_indexed_builder *b, mc_err *err);
/* Removes the temporary files and frees b. */
void mc_indexed_builder_abort(mc_indexed_builder *b);

/* PREFIX.bin / PREFIX.idx into a malloc'd string. */
char *mc_indexed_path(const char *prefix, const char *ext);

#endif
