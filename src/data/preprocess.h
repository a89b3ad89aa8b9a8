/* preprocess.h: Megatron's tools/preprocess_data.py and tools/merge_datasets.py in C.
 *
 * JSON Lines in, one indexed dataset per --json-keys key out:
 * PREFIX_{key}_document.bin/.idx, byte-identical to preprocess_data.py's output for the
 * same input and tokenizer:
 *   - token dtype uint16 when the tokenizer's vocabulary is below 65500, else int32;
 *   - each line is one document per key; a string value is one sequence, a list of
 *     strings is one sequence per element, elements that tokenize to nothing dropped;
 *   - --append-eod appends the tokenizer's EOD to a document with at least one token (it
 *     counts towards the last sequence);
 *   - a document without tokens adds no sequence but still a document_indices entry.
 *
 * Pipeline: a reader thread cuts the input into batches of lines, --workers threads parse
 * and tokenize batches (each with its own tokenizer scratch), and the calling thread
 * appends finished batches to the builders strictly in input order. A fixed pool of batch
 * buffers bounds what is in flight, and the builders spill their index arrays to disk, so
 * memory stays constant whatever the input size. A progress line goes to `log` every
 * --log-interval documents (documents, docs/s, MB/s, tokens/s, and an ETA when the input
 * size is known).
 *
 * --partitions P (like Megatron): the input (a glob pattern when P > 1) is split into P
 * temporary JSONL files, round-robin by line or, with --keep-sequential-samples, in P
 * consecutive runs of ceil(lines / P); each is processed by workers / P threads into
 * PREFIX_{i}_{key}_document, and those are merged in order into PREFIX_{key}_document
 * (with --keep-sequential-samples the result equals the single-partition output). The
 * partition files and partition datasets are removed afterwards (Megatron leaves them and
 * reuses partition files it finds, which can silently feed stale data); progress lines
 * then follow partition 0. Unlike Megatron (whose process_json_file finalizes only the
 * last key's .idx), every --json-keys key gets its .idx.
 *
 * Bad input (decided here, Megatron simply crashes on it): a malformed JSON line, invalid
 * UTF-8, a missing key, a value that is not a string or a list of strings, or text the
 * tokenizer rejects is an error naming the line; with skip_bad_lines the line is counted,
 * reported (the first few), and contributes no document to any key. On any error no
 * output file is created or changed: results are written under temporary names and only
 * renamed over PREFIX_* at the end. */
#ifndef MC_DATA_PREPROCESS_H
#define MC_DATA_PREPROCESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/error.h"
#include "tokenizer/tokenizer.h"

#define MC_PREPROCESS_MAX_KEYS 16

typedef struct mc_preprocess_options {
    const char *input;
    const char *output_prefix;
    int njson_keys;                /* 0: {"text"} */
    const char *json_keys[MC_PREPROCESS_MAX_KEYS];
    bool append_eod;
    int workers;                   /* >= 1 */
    int partitions;                /* >= 1; workers % partitions == 0 */
    int64_t log_interval;          /* documents between progress lines; 0: none */
    bool keep_sequential_samples;
    bool skip_bad_lines;
    mc_tokenizer_options tokenizer;
    FILE *log;                     /* progress and summary; NULL: stderr */
} mc_preprocess_options;

typedef struct mc_preprocess_stats {
    int64_t documents;   /* lines written as documents */
    int64_t bad_lines;   /* lines skipped with skip_bad_lines */
    int64_t tokens;      /* tokens written, all keys */
    int64_t input_bytes; /* bytes of the lines read (uncompressed) */
    double seconds;
} mc_preprocess_stats;

int mc_preprocess_run(const mc_preprocess_options *opt, mc_preprocess_stats *stats, mc_err *err);

/* The output prefix of key k: "{output_prefix}_{key}_document" (malloc'd). */
char *mc_preprocess_key_prefix(const char *output_prefix, const char *key);

/* tools/merge_datasets.py: concatenates datasets (same dtype) into OUT.bin/.idx with
 * IndexedDatasetBuilder.add_index, in the order given. An input that is a directory
 * stands for every PREFIX.bin/.idx pair in it, sorted by name (merge_datasets.py's
 * --input DIR). */
int mc_merge_datasets(const char *const *inputs, int n, const char *output_prefix, FILE *log, mc_err *err);

#endif
