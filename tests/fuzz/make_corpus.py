#!/usr/bin/env python3
"""make_corpus.py: writes the seed corpus of the fuzz harnesses, tests/fuzz/corpus/<parser>/.

    python3 tests/fuzz/make_corpus.py BUILD_DIR    # BUILD_DIR holds megatron-c (for a checkpoint)

Seeds are small valid inputs (and a few near misses) from which libFuzzer mutates: the
test fixtures where they are small, hand-made files elsewhere. Standard library only."""
import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")
FIX = os.path.join(ROOT, "tests", "fixtures")


def put(parser, name, data):
    d = os.path.join(CORPUS, parser)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def read(path):
    with open(path, "rb") as f:
        return f.read()


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, raw bytes)] in data order."""
    header, off = {}, 0
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(t[3] for t in tensors)


def serve_api():
    """serve's request bodies: the first byte picks the API (0: PUT /api, 1: /v1/completions)."""
    put("serve_api", "megatron", "0" + json.dumps({
        "prompts": ["1 2 3", "4 5"], "tokens_to_generate": 4, "temperature": 0.5, "top_k": 3, "top_p": 0.9,
        "random_seed": 7, "add_BOS": True, "stop_on_eol": False, "stop_on_double_eol": True, "no_log": True,
        "logprobs": False, "top_p_decay": 0.0, "prevent_newline_after_colon": False}))
    put("serve_api", "megatron_bad", '0{"prompts": ["1 2", 3], "tokens_to_generate": "4", "beam_width": 2, "x": null}')
    put("serve_api", "completions", "1" + json.dumps({
        "model": "m", "prompt": ["1 2", [3, 4]], "max_tokens": 3, "temperature": 0, "top_p": 1, "top_k": 0,
        "seed": 1, "stop": [" 3", "\n"], "echo": True, "n": 1, "stream": False, "logprobs": None,
        "presence_penalty": 0, "frequency_penalty": 0, "user": "u"}))
    put("serve_api", "completions_ids", '1{"prompt": [[5, 6, 7], [299]], "max_tokens": 60, "stop": "\u00e9"}')
    put("serve_api", "malformed", '1{"prompt": "1 2", "max_tokens": 1e400, "stop": ["a", "b", "c", "d", "e"]')


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    shutil.rmtree(CORPUS, ignore_errors=True)

    put("safetensors", "f32_2x3", safetensors([("w", "F32", [2, 3], struct.pack("<6f", *range(6)))]))
    put("safetensors", "mixed_meta", safetensors(
        [("a.bias", "F64", [2], struct.pack("<2d", 1.5, -2)), ("a.weight", "BF16", [2, 2], b"\x80\x3f" * 4),
         ("n", "I64", [], struct.pack("<q", 7)), ("z", "F16", [0], b"")], {"format": "pt", "k": "v"}))
    put("safetensors", "empty", safetensors([]))

    for name in ("idx_a", "idx_c"):
        idx, bin_ = read(os.path.join(FIX, "data", name + ".idx")), read(os.path.join(FIX, "data", name + ".bin"))
        put("indexed_dataset", name, struct.pack("<I", len(idx)) + idx + bin_)

    cache = os.path.join(FIX, "data", "cache_single")
    for f in sorted(os.listdir(cache)):
        if f.endswith(".npy") and f.startswith("9708"):
            put("npy", f.split("-")[-1], read(os.path.join(cache, f)))

    put("hf_tokenizer", "flags-tokenizer.json", read(os.path.join(FIX, "tokenizer", "flags-tokenizer.json")))
    byte_vocab = {chr(c) if 33 <= c <= 126 else "\u0120" if c == 32 else "\u010a" if c == 10 else None: i
                  for i, c in enumerate(range(256))}
    byte_vocab.pop(None)
    vocab = dict(byte_vocab)
    for tok in ("\u0120t", "he", "\u0120the", "in", "<|endoftext|>"):
        vocab[tok] = len(vocab)
    merges = ["\u0120 t", "h e", "\u0120t he", "i n"]
    put("hf_tokenizer", "tiny_bytelevel.json", json.dumps({
        "version": "1.0",
        "added_tokens": [{"id": vocab["<|endoftext|>"], "content": "<|endoftext|>", "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}| ?\\p{L}+|\\s+"}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<|endoftext|>",
                           "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}], "pair": [],
                           "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>",
                                              "ids": [vocab["<|endoftext|>"]], "tokens": ["<|endoftext|>"]}}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges}}))
    spm_vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        spm_vocab["<0x%02X>" % b] = len(spm_vocab)
    for tok in ("\u2581", "a", "b", "\u2581a", "ab"):
        spm_vocab[tok] = len(spm_vocab)
    put("hf_tokenizer", "tiny_metaspace.json", json.dumps({
        "version": "1.0", "added_tokens": [], "pre_tokenizer": None,
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                           {"type": "Replace", "pattern": {"String": " "},
                                                            "content": "\u2581"}]},
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": spm_vocab, "merges": [["\u2581", "a"], ["a", "b"]]}}))

    put("gpt2", "tiny", json.dumps(vocab).encode() + b"\0" + ("#version: 0.2\n" + "\n".join(merges) + "\n").encode())
    put("gpt2", "no_bytes", b'{"a": 0, "<|endoftext|>": 1}\0#version: 0.2\n')

    put("spm", "small-bpe.model", read(os.path.join(FIX, "tokenizer", "small-bpe.model")))

    docs = read(os.path.join(FIX, "preprocess", "docs.jsonl"))
    put("jsonl", "docs.jsonl", docs)
    put("jsonl", "nulls.jsonl", read(os.path.join(FIX, "preprocess", "nulls.jsonl")))
    put("jsonl", "docs.jsonl.gz", gzip.compress(docs, mtime=0))
    put("jsonl", "edge.jsonl", '{"text": "", "title": ["a", "b\\u00e9\\ud83d\\ude00"]}\r\n{"text": 1e5, "title": null}\n'
                               '{"text": "x", "text": "dup", "title": {"k": [1, 2]}}')

    base = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
            "--micro-batch-size", "2", "--train-iters", "2", "--lr", "1e-3", "--mock-data", "--tokenizer-type",
            "NullTokenizer", "--vocab-size", "128", "--device", "cpu"]
    put("flags", "base", "\n".join(base))
    put("flags", "llama", "\n".join(base + [
        "--normalization", "RMSNorm", "--swiglu", "--position-embedding-type", "rope", "--use-rope-scaling",
        "--group-query-attention", "--num-query-groups", "2", "--untie-embeddings-and-output-weights",
        "--disable-bias-linear", "--bf16", "--lr-decay-style", "cosine", "--lr-warmup-fraction=0.1",
        "--split", "969,30,1", "--global-batch-size", "8", "--clip-grad", "1.0", "--seed", "7"]))
    put("flags", "errors", "\n".join(base + ["--num-layer", "3", "--hidden-dropout", "1.5", "--swiglu=1"]))

    serve_api()

    tmp = tempfile.mkdtemp()
    try:
        subprocess.run([os.path.join(build, "megatron-c"), "train", "--num-layers", "1", "--hidden-size", "32",
                        "--num-attention-heads", "2", "--seq-length", "16", "--max-position-embeddings", "16",
                        "--micro-batch-size", "1", "--global-batch-size", "1", "--train-iters", "1", "--lr", "1e-3",
                        "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "64", "--device", "cpu",
                        "--eval-iters", "0", "--save", os.path.join(tmp, "ck")],
                       check=True, stdout=subprocess.DEVNULL, env=dict(os.environ, OMP_NUM_THREADS="1"))
        put("ckpt_meta", "metadata.json", read(os.path.join(tmp, "ck", "iter_0000001", "metadata.json")))
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
