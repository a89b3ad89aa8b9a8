#!/usr/bin/env python3
"""make_preprocess_golden.py: expected outputs of Megatron's tools/preprocess_data.py for the
JSONL fixtures of tests/test_preprocess.c.

A restatement, written from the description of preprocess_data.py and indexed_dataset.py
(nothing is imported from Megatron):

  - the input is read in text mode (UTF-8, universal newlines); each line is json.loads'd;
  - Encoder.encode: for every --json-keys key, the value is a string (one sentence) or a
    list of strings (sentences); each sentence is tokenized and kept only if it has tokens;
    with --append-eod the tokenizer's eod is appended to a document that has at least one
    token and counts towards its last sentence;
  - IndexedDatasetBuilder(dtype=DType.optimal_dtype(tokenizer.vocab_size)): uint16 below
    65500, else int32; add_document(ids, lens) per line; finalize writes the .idx;
  - --partitions P without --keep-sequential-samples sends line i to partition i % P and
    merges the partition datasets in order with add_index.

Tokenizers (the libraries Megatron's tokenizers wrap):
  - GPT2BPETokenizer: BPE from gpt2-vocab.json / gpt2-merges.txt with GPT-2's byte-level
    pre-tokenizer and <|endoftext|> as a special added token, through Hugging Face
    `tokenizers` (Megatron's GPT2BPETokenizer is HF's GPT-2 tokenizer, whose
    tokenizer(text).input_ids split the literal <|endoftext|> out of the text: see
    make_gpt2_special_cases.py); eod = <|endoftext|> = 50256; vocab 50257 -> uint16.
  - HuggingFaceTokenizer (Llama 3): tokenizers.Tokenizer.from_file(tokenizer.json)
    .encode(text).ids, which includes the post-processor's <|begin_of_text|> as Megatron's
    `tokenizer(text).input_ids` does; eod = eos = <|end_of_text|> = 128001; vocab
    len(tokenizer) = 128256 -> int32. Also without special tokens
    (--tokenizer-hf-no-include-special-tokens): encode(text, add_special_tokens=False).
  - NullTokenizer --vocab-size 1000 (Megatron-C's, as Megatron's HEAD null tokenizer with
    space-separated ids): [int(x) for x in text.split(' ')], blank text -> no ids;
    eod = 999; vocab 1000 -> uint16.
  - ByteLevelTokenizer (Megatron-C): the UTF-8 bytes; eod 256; vocab 257 -> uint16.

Usage: pip install tokenizers==0.23.2
       python3 tools/reference/make_preprocess_golden.py [--shared ../shared]
Writes tests/fixtures/preprocess/{docs.jsonl, nulls.jsonl, expected/*}.
"""
import argparse
import json
import os
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "fixtures", "preprocess"))

# ---- the fixture inputs --------------------------------------------------------------------

AUSTEN = ("It is a truth universally acknowledged, that a single man in possession of a good fortune, "
          "must be in want of a wife.\n\nHowever little known the feelings or views of such a man may be on his "
          "first entering a neighbourhood, this truth is so well fixed in the minds of the surrounding families, "
          "that he is considered the rightful property of some one or other of their daughters.\n\n"
          "\u201cMy dear Mr. Bennet,\u201d said his lady to him one day, \u201chave you heard that Netherfield Park "
          "is let at last?\u201d\n\nMr. Bennet replied that he had not.   ")

DOC_LINES = [
    # (raw JSON text of the line, line ending)
    (json.dumps({"text": "Hello world. The quick brown fox jumps over the lazy dog.", "title": "Greeting"}), "\n"),
    (json.dumps({"title": "Empty text", "text": ""}), "\n"),
    (json.dumps({"text": "\u00dcn\u00efc\u00f6d\u00e9 \u2014 na\u00efve caf\u00e9, \u4e2d\u6587\u5b57\u7b26, "
                         "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8, \U0001F916\U0001F389, "
                         "\u05e2\u05d1\u05e8\u05d9\u05ea, \ufb01 ligature, e\u0301 combining",
                 "title": "Unicode \u2713"}, ensure_ascii=False), "\n"),
    # JSON escapes, including a surrogate pair and \/ , written by hand.
    ('{"text": "Line one\\nLine two\\ttabbed \\"quoted\\" back\\\\slash \\u00e9 \\ud83d\\ude00 pair \\/ slash",'
     ' "title": "esc"}', "\n"),
    (json.dumps({"text": ["First sentence.", "", "Second sentence here."], "title": "list"}), "\n"),
    (json.dumps({"text": [], "title": "empty list"}), "\n"),
    (json.dumps({"text": AUSTEN, "title": "Pride and Prejudice"}), "\n"),
    (json.dumps({"text": "   \n\n  ", "title": " "}), "\n"),
    (json.dumps({"text": "Numbers 1234567 and 3.14159, punctuation!?... (parens) [brackets] {braces} $100 "
                         "@user #tag don't we'll I'M", "title": "123"}), "\r\n"),  # a CRLF line
    # A repeated key (the last one wins), extra keys, NaN and nesting.
    ('{"text": "first", "meta": {"a": [1, 2.5e3, {"b": null}], "c": NaN}, "text": "second wins", '
     '"title": "dup"}', "\n"),
    (json.dumps({"text": "<|endoftext|> and <|end_of_text|> as text", "title": "specials"}), "\n"),
    (json.dumps({"text": "a word<|endoftext|>inside, beside spaces <|endoftext|> and\n<|endoftext|>\nnewlines",
                 "title": "end<|endoftext|>"}), "\n"),
    (json.dumps({"title": "no trailing newline", "text": "The end."}), ""),
]

NULL_LINES = [
    '{"text": "1 2 3", "title": "7"}',
    '{"text": "4 5", "title": "8 9"}',
    '{"text": [], "title": "10"}',
    '{"text": ["11", "", "12 13"], "title": ""}',
    '{"text": "998", "title": "0 0 0"}',
    '{"text": "14", "title": "15 16 17 18"}',
    '{"text": "19 20 21 22 23", "title": "24"}',
]

# ---- Megatron's writer ----------------------------------------------------------------------

CODES = {np.uint16: 8, np.int32: 4}


def optimal_dtype(vocab_size):
    return np.uint16 if vocab_size < 65500 else np.int32


class Builder:
    """IndexedDatasetBuilder + _IndexWriter."""

    def __init__(self, dtype):
        self.dtype = dtype
        self.data = bytearray()
        self.lengths, self.doc_idx = [], [0]

    def add_document(self, ids, lens):
        self.data += np.array(ids, dtype=self.dtype).tobytes(order="C")
        self.lengths.extend(lens)
        self.doc_idx.append(len(self.lengths))

    def add_index(self, other):
        offset = len(self.lengths)
        self.lengths.extend(other.lengths)
        self.doc_idx.extend(offset + d for d in other.doc_idx[1:])
        self.data += other.data

    def finalize(self, prefix):
        with open(prefix + ".bin", "wb") as f:
            f.write(bytes(self.data))
        itemsize = np.dtype(self.dtype).itemsize
        ptrs, cur = [], 0
        for n in self.lengths:
            ptrs.append(cur)
            cur += n * itemsize
        with open(prefix + ".idx", "wb") as f:
            f.write(b"MMIDIDX\x00\x00")
            f.write(struct.pack("<Q", 1))
            f.write(struct.pack("<B", CODES[self.dtype]))
            f.write(struct.pack("<Q", len(self.lengths)))
            f.write(struct.pack("<Q", len(self.doc_idx)))
            f.write(np.array(self.lengths, dtype=np.int32).tobytes(order="C"))
            f.write(np.array(ptrs, dtype=np.int64).tobytes(order="C"))
            f.write(np.array(self.doc_idx, dtype=np.int64).tobytes(order="C"))


def encode(line, keys, tokenize, eod, append_eod):
    """Encoder.encode."""
    data = json.loads(line)
    ids, lens = {}, {}
    for key in keys:
        text = data[key]
        sentences = text if isinstance(text, list) else [text]
        doc_ids, sentence_lens = [], []
        for sentence in sentences:
            sentence_ids = tokenize(sentence)
            if len(sentence_ids) > 0:
                doc_ids.extend(sentence_ids)
                sentence_lens.append(len(sentence_ids))
        if len(doc_ids) > 0 and append_eod:
            doc_ids.append(eod)
            sentence_lens[-1] += 1
        ids[key] = doc_ids
        lens[key] = sentence_lens
    return ids, lens


def preprocess(input_path, out_prefix, keys, tokenize, eod, vocab_size, append_eod, partitions=1):
    with open(input_path, "r", encoding="utf-8") as f:
        lines = list(f)
    dtype = optimal_dtype(vocab_size)
    parts = [lines[i::partitions] for i in range(partitions)]  # round-robin
    for key in keys:
        merged = Builder(dtype)
        for part in parts:
            b = Builder(dtype)
            for line in part:
                ids, lens = encode(line, keys, tokenize, eod, append_eod)
                b.add_document(ids[key], lens[key])
            merged.add_index(b)
        merged.finalize(f"{out_prefix}_{key}_document")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.environ.get("MC_SHARED_DIR", os.path.join(HERE, "..", "..", "..", "shared")))
    args = ap.parse_args()
    data = os.path.join(args.shared, "data")
    exp = os.path.join(OUT, "expected")
    os.makedirs(exp, exist_ok=True)
    docs = os.path.join(OUT, "docs.jsonl")
    with open(docs, "w", encoding="utf-8", newline="") as f:
        for text, end in DOC_LINES:
            f.write(text + end)
    nulls = os.path.join(OUT, "nulls.jsonl")
    with open(nulls, "w", encoding="utf-8") as f:
        f.write("\n".join(NULL_LINES) + "\n")
    keys = ["text", "title"]

    def null_tok(text):
        return [] if text.strip() == "" else [int(x) for x in text.split(" ")]

    preprocess(nulls, os.path.join(exp, "null"), keys, null_tok, 999, 1000, True)
    preprocess(nulls, os.path.join(exp, "null_rr3"), keys, null_tok, 999, 1000, True, partitions=3)
    preprocess(docs, os.path.join(exp, "bytes"), keys, lambda t: list(t.encode("utf-8")), 256, 257, True)

    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import BPE
    gpt2 = Tokenizer(BPE.from_file(os.path.join(data, "gpt2", "gpt2-vocab.json"),
                                   os.path.join(data, "gpt2", "gpt2-merges.txt")))
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    gpt2.add_special_tokens(["<|endoftext|>"])
    preprocess(docs, os.path.join(exp, "gpt2"), keys, lambda t: gpt2.encode(t).ids, 50256, 50257, True)

    llama3 = Tokenizer.from_file(os.path.join(data, "llama3", "tokenizer.json"))
    assert llama3.get_vocab_size(with_added_tokens=True) == 128256
    eos = llama3.token_to_id("<|end_of_text|>")
    preprocess(docs, os.path.join(exp, "llama3"), keys, lambda t: llama3.encode(t).ids, eos, 128256, True)
    preprocess(docs, os.path.join(exp, "llama3_nospecial"), ["text"],
               lambda t: llama3.encode(t, add_special_tokens=False).ids, eos, 128256, False)
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(OUT) for f in fs)
    print(f"wrote {OUT}: {total} bytes")


if __name__ == "__main__":
    main()
