#!/usr/bin/env python3
"""make_data_golden.py: reference fixtures for Megatron-C's data order (tests/test_data_*.c).

A numpy re-statement of the Megatron-LM algorithms that decide which tokens a training step
sees, written from their description (nothing is imported from Megatron):

  - blended_megatron_dataset_config.py  parse_and_normalize_split, split matrix
  - blended_megatron_dataset_builder.py int(round(lo * N)) split ranges
  - gpt_dataset.py                      GPTDataset indices, MockGPTLowLevelDataset,
                                        _get_ltor_masks_and_position_ids
  - helpers.cpp                         build_sample_idx, build_blending_indices,
                                        build_exhaustive_blending_indices
  - indexed_dataset.py                  the .bin/.idx writer (IndexedDatasetBuilder,
                                        _IndexWriter), add_index
  - megatron_dataset.py, blended_dataset.py
                                        unique_identifiers -> json.dumps(indent=4) -> md5,
                                        and the index cache files written with numpy.save
  - blended_megatron_dataset_builder.py  blends: per-dataset sizes with the 0.5% surplus,
                                        unweighted blends, per-split blends

The random streams are numpy's own (RandomState and default_rng), as in Megatron, so the
fixtures pin the exact permutations numpy produces.

Output (tests/fixtures/data/, ~200 KB): small text files for tables, raw little-endian
int32/int64 arrays (*.i32, *.i64) for index arrays. Checksums are
    cs(a) = sum_i (i + 1) * a[i]   (mod 2^64, a flattened row-major and read as uint64)
which tests/test_data_*.c recompute.

Usage: python3 tools/reference/make_data_golden.py [outdir]
"""
import functools
import hashlib
import json
import math
import os
import re
import shutil
import struct
import sys
from collections import OrderedDict

import numpy as np

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "data")


def cs(a):
    a = np.ascontiguousarray(a).reshape(-1).astype(np.int64).view(np.uint64)
    w = np.arange(1, a.size + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return int((w * a).sum(dtype=np.uint64))


def path(name):
    return os.path.join(OUT, name)


def write_bin(name, arr, dtype):
    np.ascontiguousarray(arr, dtype=dtype).tofile(path(name))


def write_text(name, lines):
    with open(path(name), "w") as f:
        f.write("\n".join(lines) + "\n")


# ---- Megatron re-statements -----------------------------------------------------------

def parse_and_normalize_split(split):
    vals = list(map(float, re.findall(r"[.0-9]+", split)))
    vals = vals + [0.0 for _ in range(3 - len(vals))]
    assert len(vals) == 3 and all(v >= 0.0 for v in vals)
    w = np.array(vals, dtype=np.float64)
    return (w / np.sum(w)).tolist()


def split_matrix(vec):
    expansion = functools.reduce(lambda a, b: a + [a[len(a) - 1] + b], [[0], *vec])
    bookends = list(zip(expansion[:-1], expansion[1:]))
    return [None if hi <= lo else (lo, hi) for lo, hi in bookends]


def split_ranges(split, n):
    out = []
    for se in split_matrix(parse_and_normalize_split(split)):
        out.append(None if se is None else (int(round(se[0] * float(n))), int(round(se[1] * float(n)))))
    return out


def build_document_index(documents, num_epochs, rs, separate_final_epoch):
    if not separate_final_epoch or num_epochs == 1:
        di = np.mgrid[0:num_epochs, 0:len(documents)][1]
        di[:] = documents
        di = di.reshape(-1).astype(np.int32)
        rs.shuffle(di)
        return di
    first = build_document_index(documents, num_epochs - 1, rs, False)
    last = build_document_index(documents, 1, rs, False)
    return np.concatenate((first, last))


def build_sample_idx(sizes, doc_idx, seq_length, num_epochs, tokens_per_epoch, extra=1):
    num_samples = (num_epochs * tokens_per_epoch - extra) // seq_length
    out = np.zeros((num_samples + 1, 2), dtype=np.int64)
    sizes = sizes.tolist()
    doc_idx_l = doc_idx.tolist()
    pos, off = 0, 0
    s = 1
    while s <= num_samples:
        remaining = seq_length + extra
        while remaining != 0:
            dl = sizes[doc_idx_l[pos]] - off
            remaining -= dl
            if remaining <= 0:
                off += remaining + dl - extra
                remaining = 0
            else:
                if pos == len(doc_idx_l) - 1:
                    assert s == num_samples
                    off = sizes[doc_idx_l[pos]] - extra
                    break
                pos += 1
                off = 0
        out[s] = (pos, off)
        s += 1
    return out


def build_shuffle_index(num_samples, total_size, rs):
    dtype = np.uint32 if total_size < np.iinfo(np.uint32).max - 1 else np.int64
    first = np.arange(0, num_samples, dtype=dtype)
    rs.shuffle(first)
    if num_samples == total_size:
        return first
    last = np.arange(num_samples, total_size, dtype=dtype)
    rs.shuffle(last)
    return np.concatenate((first, last))


class GPTIndices:
    """The three GPTDataset indices for sequences `indices` of a dataset with `sizes`."""

    def __init__(self, sizes, indices, num_samples, seq_length, seed):
        self.sizes = sizes
        tokens = int(np.sum(sizes[indices]))
        epochs = 1
        if num_samples is not None:
            need, have = num_samples * seq_length + 1, tokens
            while have < need:
                epochs += 1
                have += tokens
        self.tokens_per_epoch, self.num_epochs = tokens, epochs
        self.separate = False
        if epochs > 1:
            sans = ((epochs - 1) * tokens - 1) // seq_length
            from_final = num_samples - sans
            per_epoch = (tokens - 1) // seq_length
            assert 0 <= from_final <= per_epoch + 1
            self.separate = from_final < int(0.80 * per_epoch)
            self.sans = sans
        rs = np.random.RandomState(seed)
        self.document_index = build_document_index(indices, epochs, rs, self.separate)
        self.sample_index = build_sample_idx(sizes, self.document_index, seq_length, epochs, tokens)
        n = self.sample_index.shape[0] - 1
        self.shuffle_index = build_shuffle_index(self.sans if self.separate else n, n, rs)
        self.len = n

    def get(self, idx, read):
        """read(seq, offset, length or None) -> tokens, as LowLevelDataset.get."""
        j = self.shuffle_index[idx]
        b, bo = self.sample_index[j]
        e, eo = self.sample_index[j + 1]
        if b == e:
            parts = [read(self.document_index[b], bo, eo - bo + 1)]
        else:
            parts = []
            for i in range(b, e + 1):
                off = 0 if i > b else bo
                length = None if i < e else eo + 1
                parts.append(read(self.document_index[i], off, length))
        return np.concatenate(parts).astype(np.int64)


def mock_lengths():
    rng = np.random.default_rng(seed=0)
    return rng.integers(low=1, high=4096, size=100000, dtype=np.int32)


def mock_reader(lengths, vocab_size, eod):
    def read(idx, offset, length):
        n = lengths[idx]
        sample = np.int64(np.concatenate([(np.arange(n - 1) + 1) % vocab_size, [eod]]))
        if length is None:
            length = n - offset
        return sample[offset:offset + length]
    return read


def ltor_masks(tokens, eod, reset_position_ids, reset_attention_mask, eod_mask_loss):
    """_get_ltor_masks_and_position_ids (the per-EOD masking form) on one row."""
    s = tokens.size
    mask = np.tril(np.ones((s, s)))
    loss_mask = np.ones(s, dtype=np.float32)
    if eod_mask_loss:
        loss_mask[tokens == eod] = 0.0
    pos = np.arange(s, dtype=np.int64)
    if reset_position_ids or reset_attention_mask:
        eod_index = pos[tokens == eod].copy()
        prev = 0
        for i in eod_index:
            if reset_attention_mask:
                mask[(i + 1):, :(i + 1)] = 0
            if reset_position_ids:
                pos[(i + 1):] -= i + 1 - prev
                prev = i + 1
    # Megatron-C's form of the mask: query q may use keys [seg_start[q], q].
    seg = np.zeros(s, dtype=np.int64)
    for q in range(s):
        allowed = np.nonzero(mask[q])[0]
        assert allowed[-1] == q and np.all(np.diff(allowed) == 1)
        seg[q] = allowed[0]
    return loss_mask, pos, seg


# ---- fixtures -------------------------------------------------------------------------

def fx_mt19937():
    lines = ["# seed n_draws checksum first16 (RandomState(seed) raw 32-bit draws)"]
    for seed in [0, 1, 1234, 5489, 2**32 - 1]:
        d = np.random.RandomState(seed).randint(0, 2**32, size=1300, dtype=np.uint32)
        lines.append(" ".join(map(str, [seed, d.size, cs(d)] + d[:16].tolist())))
    write_text("mt19937_raw.txt", lines)

    # random_interval above 2^32-1 draws 64-bit values (high word first); legacy randint
    # uses the same masked 64-bit rejection, so it pins the order.
    lines = ["# seed max n values (random_interval(max) == legacy randint(0, max+1, int64))"]
    for seed, mx in [(1234, 2**40 - 1), (7, 2**33 + 12345), (0, 2**63 - 1)]:
        v = np.random.RandomState(seed).randint(0, mx + 1, size=24, dtype=np.int64)
        lines.append(" ".join(map(str, [seed, mx, v.size] + v.tolist())))
    write_text("mt19937_interval.txt", lines)

    lines = ["# seed n checksum first16 (legacy RandomState(seed).shuffle(arange(n)))"]
    for seed in [0, 1234, 2**32 - 1]:
        for n in [0, 1, 2, 3, 10, 1000, 65537, 100003]:
            perms = []
            for dt in (np.int32, np.uint32, np.int64):
                a = np.arange(n, dtype=dt)
                np.random.RandomState(seed).shuffle(a)
                perms.append(a.astype(np.int64))
            assert all(np.array_equal(perms[0], p) for p in perms), "dtype changed the permutation"
            lines.append(" ".join(map(str, [seed, n, cs(perms[0])] + perms[0][:16].tolist())))
    # Two shuffles from one state (GPTDataset's separated-final-epoch path).
    rs = np.random.RandomState(99)
    a, b = np.arange(10, dtype=np.int64), np.arange(10, 17, dtype=np.int64)
    rs.shuffle(a)
    rs.shuffle(b)
    lines.append("twice 99 " + " ".join(map(str, a.tolist() + b.tolist())))
    write_text("mt19937_shuffle.txt", lines)


def fx_pcg64():
    def words(x):
        w = []
        if x == 0:
            w.append(0)
        while x > 0:
            w.append(x & 0xFFFFFFFF)
            x >>= 32
        return w

    cases = [
        (0, [(1, 4096, 3), (1, 4096, 5), (0, 10, 7), (1, 4096, 1)]),
        (1, [(1, 4096, 16)]),
        (42, [(-5, 7, 11), (0, 2**31, 9), (-2**31, 2**31, 5), (3, 4, 4), (0, 1000, 13)]),
        (1234, [(0, 2, 33), (-100, 100, 9)]),
        (2**63 + 5, [(1, 4096, 10)]),
        (2**64 - 1, [(1, 4096, 10)]),
        (0x0123456789ABCDEF_FEDCBA9876543210_1122334455667788_99AABBCCDD, [(1, 4096, 12), (0, 7, 5)]),
    ]
    lines = ["# case <n_words> <words...> / call <low> <high> <size> <values...> / end"]
    for seed, calls in cases:
        g = np.random.default_rng(seed)
        w = words(seed)
        lines.append("case " + " ".join(map(str, [len(w)] + w)))
        for low, high, size in calls:
            v = g.integers(low, high, size=size, dtype=np.int32)
            lines.append("call " + " ".join(map(str, [low, high, size] + v.tolist())))
        lines.append("end")
    write_text("pcg64_integers.txt", lines)


def fx_mock():
    lengths = mock_lengths()
    write_bin("mock_lengths_first1000.i32", lengths[:1000], "<i4")
    write_text("mock_lengths_summary.txt", [
        "# n sum checksum (default_rng(0).integers(1, 4096, 100000, int32))",
        f"{lengths.size} {int(lengths.astype(np.int64).sum())} {cs(lengths)}"])

    # Mock train and valid splits: seed 1234, seq 64, vocab 1000 (eod 999).
    vocab, eod, seq, seed = 1000, 999, 64, 1234
    read = mock_reader(lengths, vocab, eod)
    ranges = split_ranges("1,1,1", lengths.size)
    lines = ["# split begin end requested tokens_per_epoch num_epochs separate len "
             "cs(document_index) cs(sample_index) cs(shuffle_index) cs(first 200 samples)"]
    for name, k, requested in [("train", 0, 1_500_000), ("valid", 1, 5000), ("test", 2, None)]:
        b, e = ranges[k]
        g = GPTIndices(lengths, np.arange(b, e, dtype=np.int32), requested, seq, seed)
        samples = np.stack([g.get(i, read) for i in range(200)])
        assert samples.shape == (200, seq + 1)
        lines.append(" ".join(map(str, [name, b, e, -1 if requested is None else requested, g.tokens_per_epoch,
                                        g.num_epochs, int(g.separate), g.len, cs(g.document_index),
                                        cs(g.sample_index), cs(g.shuffle_index), cs(samples)])))
        if name == "train":
            assert g.num_epochs == 2 and g.separate
            write_bin("mock_train_samples200.i32", samples, "<i4")
            write_bin("mock_train_document_index_first1000.i32", g.document_index[:1000], "<i4")
            write_bin("mock_train_sample_index_first1000.i64", g.sample_index[:1000], "<i8")
            write_bin("mock_train_shuffle_index_first1000.i64", g.shuffle_index[:1000], "<i8")
    write_text("mock_gpt.txt", lines)


def fx_corpus():
    """A small in-memory corpus: 37 documents, tokens in [0, 48], each ending in eod 49."""
    rs = np.random.RandomState(7)
    lengths = rs.randint(1, 40, size=37).astype(np.int32)
    tokens, offsets = [], [0]
    for d, n in enumerate(lengths):
        body = [(d * 7 + k) % 49 for k in range(n - 1)]
        tokens += body + [49]
        offsets.append(len(tokens))
    tokens = np.array(tokens, dtype=np.int32)
    write_bin("corpus_tokens.i32", tokens, "<i4")
    write_bin("corpus_offsets.i64", offsets, "<i8")

    def read(idx, offset, length):
        seq = tokens[offsets[idx]:offsets[idx + 1]]
        if length is None:
            length = len(seq) - offset
        return seq[offset:offset + length]

    seq, seed = 16, 1234
    begin, end = 3, 34
    indices = np.arange(begin, end, dtype=np.int32)
    tokens_per_epoch = int(lengths[begin:end].sum())
    per_epoch = (tokens_per_epoch - 1) // seq
    sans2 = (2 * tokens_per_epoch - 1) // seq  # samples of the first two epochs
    cases = [
        ("one_epoch", None, 1, False),
        ("separate", sans2 + max(1, int(0.8 * per_epoch) // 2), 3, True),
        ("joined", sans2 + int(0.8 * per_epoch) + 1, 3, False),
        ("exact", per_epoch, 1, False),
    ]
    lines = ["# name begin end seq seed requested tokens_per_epoch num_epochs separate len"]
    for name, requested, want_epochs, want_sep in cases:
        g = GPTIndices(lengths, indices, requested, seq, seed)
        assert g.num_epochs == want_epochs and g.separate == want_sep, (name, g.num_epochs, g.separate)
        lines.append(" ".join(map(str, [name, begin, end, seq, seed, -1 if requested is None else requested,
                                        g.tokens_per_epoch, g.num_epochs, int(g.separate), g.len])))
        write_bin(f"corpus_{name}_document_index.i32", g.document_index, "<i4")
        write_bin(f"corpus_{name}_sample_index.i64", g.sample_index, "<i8")
        write_bin(f"corpus_{name}_shuffle_index.i64", g.shuffle_index, "<i8")
        write_bin(f"corpus_{name}_samples.i32", np.stack([g.get(i, read) for i in range(g.len)]), "<i4")
    write_text("corpus_gpt.txt", lines)


def fx_splits():
    cases = [("969,30,1", 1000), ("969,30,1", 100000), ("969,30,1", 7), ("969,30,1", 37), ("1,1,1", 100000),
             ("1,1,1", 37), ("99,1,0", 1000), ("949,50,1", 12345), ("1", 10), ("0.5 0.3 0.2", 10), (" 80, 20", 3),
             ("0,1,0", 5), ("2,2,1", 5), ("1,1,2", 6), ("1,2,1", 2), ("3,3,2", 4), ("98:1:1", 1001), ("1.,.5,0", 9),
             ("1,1,1", 1), ("0,0,1", 4)]
    lines = ["# split<TAB>n<TAB>present begin end (x3; absent: 0 0 0)"]
    for split, n in cases:
        r = split_ranges(split, n)
        vals = []
        for x in r:
            vals += [0, 0, 0] if x is None else [1, x[0], x[1]]
        lines.append(f"{split}\t{n}\t" + " ".join(map(str, vals)))
    write_text("splits.txt", lines)


def fx_masks():
    eod = 9
    rows = [
        [1, 2, 3, 9, 4, 5, 9, 9, 6, 7, 8, 1],   # EODs inside, two in a row
        [9, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 9],   # EOD first and last
        [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4],   # no EOD
        [9, 9, 9, 1, 9, 2, 2, 2, 2, 9, 3, 3],
    ]
    lines = ["# eod_mask_loss reset_position_ids reset_attention_mask | tokens | loss_mask | position_ids | seg_start"]
    for ml in (0, 1):
        for rp in (0, 1):
            for ra in (0, 1):
                for r in rows:
                    t = np.array(r, dtype=np.int64)
                    lm, pos, seg = ltor_masks(t, eod, rp, ra, ml)
                    lines.append(f"{ml} {rp} {ra} | " + " ".join(map(str, r)) + " | " +
                                 " ".join(str(int(x)) for x in lm) + " | " + " ".join(map(str, pos.tolist())) +
                                 " | " + " ".join(map(str, seg.tolist())))
    write_text("masks.txt", lines)


# ---- indexed datasets, blends and the index cache ----------------------------------------

_DTYPE_CODE = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5, np.float64: 6, np.float32: 7,
               np.uint16: 8}


def write_indexed(prefix, dtype, docs):
    """IndexedDatasetBuilder: docs is a list of documents, each a list of sequences."""
    lengths, doc_idx = [], [0]
    with open(prefix + ".bin", "wb") as f:
        for doc in docs:
            for seq in doc:
                arr = np.array(seq, dtype=dtype)
                f.write(arr.tobytes(order="C"))
                lengths.append(arr.size)
            doc_idx.append(len(lengths))
    write_idx(prefix + ".idx", dtype, lengths, doc_idx)


def write_idx(path, dtype, lengths, doc_idx):
    """_IndexWriter: header, lengths, pointers (running int64 byte offsets), document indices."""
    itemsize = np.dtype(dtype).itemsize
    ptrs, cur = [], 0
    for n in lengths:
        ptrs.append(cur)
        cur += n * itemsize
    with open(path, "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", _DTYPE_CODE[dtype]))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(np.array(lengths, dtype=np.int32).tobytes(order="C"))
        f.write(np.array(ptrs, dtype=np.int64).tobytes(order="C"))
        f.write(np.array(doc_idx, dtype=np.int64).tobytes(order="C"))


def read_indexed(prefix):
    with open(prefix + ".idx", "rb") as f:
        buf = f.read()
    assert buf[:9] == b"MMIDIDX\x00\x00"
    code = buf[17]
    dtype = {v: k for k, v in _DTYPE_CODE.items()}[code]
    n, d = struct.unpack("<QQ", buf[18:34])
    lengths = np.frombuffer(buf, np.int32, n, 34)
    ptrs = np.frombuffer(buf, np.int64, n, 34 + 4 * n)
    doc_idx = np.frombuffer(buf, np.int64, d, 34 + 12 * n)
    tokens = np.fromfile(prefix + ".bin", dtype=dtype)
    return dtype, lengths, ptrs, doc_idx, tokens


def merge_indexed(prefixes, out):
    """IndexedDatasetBuilder.add_index over prefixes, then finalize."""
    dtype = read_indexed(prefixes[0])[0]
    lengths, doc_idx = [], [0]
    with open(out + ".bin", "wb") as f:
        for p in prefixes:
            dt, ln, _, di, _ = read_indexed(p)
            assert dt == dtype
            offset = len(lengths)
            lengths.extend(ln.tolist())
            doc_idx.extend((offset + di)[1:].tolist())
            with open(p + ".bin", "rb") as g:
                shutil.copyfileobj(g, f)
    write_idx(out + ".idx", dtype, lengths, doc_idx)


def indexed_reader(prefix):
    dtype, lengths, ptrs, _, _ = read_indexed(prefix)
    itemsize = np.dtype(dtype).itemsize
    data = np.fromfile(prefix + ".bin", dtype=np.uint8)

    def read(idx, offset, length):
        if length is None:
            length = int(lengths[idx]) - offset
        start = int(ptrs[idx]) + offset * itemsize
        return np.frombuffer(data[start:start + length * itemsize].tobytes(), dtype=dtype).astype(np.int64)
    return read, lengths


def normalize(weights):
    w = np.array(weights, dtype=np.float64)
    return (w / np.sum(w)).tolist()


def size_per_dataset(weights, target, surplus=0.0):
    return [int(math.ceil(math.ceil(target * w) * (1 + surplus))) for w in weights]


def build_blending_indices(weights, size):
    di = np.zeros(size, dtype=np.int16)
    dsi = np.zeros(size, dtype=np.int64)
    cur = [0] * len(weights)
    for s in range(size):
        sd = max(float(s), 1.0)
        best, best_err = 0, weights[0] * sd - float(cur[0])
        for i in range(1, len(weights)):
            e = weights[i] * sd - float(cur[i])
            if e > best_err:
                best, best_err = i, e
        di[s] = best
        dsi[s] = cur[best]
        cur[best] += 1
    return di, dsi


def build_exhaustive_blending_indices(sizes):
    total = sum(sizes)
    weights = [x / float(total) for x in sizes]
    di = np.zeros(total, dtype=np.int16)
    dsi = np.zeros(total, dtype=np.int64)
    cur = [0] * len(sizes)
    unspent = [i for i in range(len(sizes)) if sizes[i] > 0]
    s = 0
    while unspent:
        sd = max(float(s), 1.0)
        best, best_err = -1, -sys.float_info.max
        for i in unspent:
            e = weights[i] * sd - float(cur[i])
            if e > best_err:
                best, best_err = i, e
        di[s] = best
        dsi[s] = cur[best]
        cur[best] += 1
        if sizes[best] - float(cur[best]) == 0:
            unspent.remove(best)
        s += 1
    return di, dsi


class NullTokenizerIdentity:
    """What the legacy _NullTokenizer records: MegatronLegacyTokenizer(None, vocab_size=V)."""

    def __init__(self, vocab_size):
        self.unique_identifiers = OrderedDict()
        self.unique_identifiers["class"] = "_NullTokenizer"
        self.unique_identifiers["tokenizer_path"] = [None]
        self.unique_identifiers["vocab_size"] = str(vocab_size)


SPLIT_NAMES = ["train", "valid", "test"]


def gpt_identifiers(path, num_samples, k, seed, seq, split, tok):
    u = OrderedDict()
    u["class"] = "GPTDataset"
    u["dataset_path"] = path
    u["num_samples"] = num_samples
    u["index_split"] = SPLIT_NAMES[k]
    u["random_seed"] = seed
    u["sequence_length"] = seq
    u["split"] = split
    u["split_matrix"] = None if split is None else split_matrix(parse_and_normalize_split(split))
    u["tokenizer"] = tok
    return u


def dumps(u):
    return json.dumps(u, indent=4, default=lambda obj: obj.unique_identifiers)


def md5(text):
    return hashlib.md5(text.encode("utf-8")).hexdigest()


def save_gpt_cache(dirname, desc, k, g):
    base = os.path.join(dirname, f"{md5(desc)}-GPTDataset-{SPLIT_NAMES[k]}-")
    with open(base + "description.txt", "wt") as w:
        w.write(desc)
    sample_index = g.sample_index
    if max(g.document_index.shape[0], int(g.sizes.max())) <= np.iinfo(np.int32).max:
        sample_index = sample_index.astype(np.int32)
    np.save(base + "document_index.npy", g.document_index, allow_pickle=True)
    np.save(base + "sample_index.npy", sample_index, allow_pickle=True)
    np.save(base + "shuffle_index.npy", g.shuffle_index, allow_pickle=True)


def save_blend_cache(dirname, desc, k, di, dsi):
    base = os.path.join(dirname, f"{md5(desc)}-BlendedDataset-{SPLIT_NAMES[k]}-")
    with open(base + "description.txt", "wt") as w:
        w.write(desc)
    np.save(base + "dataset_index.npy", di, allow_pickle=True)
    np.save(base + "dataset_sample_index.npy", dsi, allow_pickle=True)


IDX_SEQ, IDX_SEED, IDX_VOCAB = 32, 1234, 1000
IDX_REL = "tests/fixtures/data/"  # dataset paths as the tests pass them (from the repo root)


def fx_indexed():
    """Two small uint16 datasets (NullTokenizer, vocab 1000, eod 999), one int32, a merge."""
    rs = np.random.RandomState(11)

    def make_docs(ndocs, lo, hi, seed_mul, empty_every=0):
        docs = []
        for d in range(ndocs):
            if empty_every and d % empty_every == empty_every - 1:
                docs.append([])  # an empty document: a document_indices entry, no sequence
                continue
            n = int(rs.randint(lo, hi))
            docs.append([[(d * seed_mul + 3 * t) % 999 for t in range(n - 1)] + [999]])
        return docs

    docs_a = make_docs(60, 1, 70, 7, empty_every=13)
    docs_b = make_docs(30, 20, 200, 11)
    write_indexed(path("idx_a"), np.uint16, docs_a)
    write_indexed(path("idx_b"), np.uint16, docs_b)
    # A multi-sequence document (sentences) and an int32 dataset with ids >= 65536.
    docs_c = [[[1, 2, 3], [70000, 5]], [], [[6, 99999, 8, 9]], [[10]]]
    write_indexed(path("idx_c"), np.int32, docs_c)
    merge_indexed([path("idx_a"), path("idx_b")], path("idx_ab"))
    lines = ["# name dtype_code sequences doc_indices tokens"]
    for name in ("idx_a", "idx_b", "idx_c", "idx_ab"):
        dt, ln, _, di, tok = read_indexed(path(name))
        lines.append(f"{name} {_DTYPE_CODE[dt]} {ln.size} {di.size} {int(ln.astype(np.int64).sum())}")
    write_text("idx_datasets.txt", lines)


def gpt_over(prefix_rel, k, split, num_samples):
    read, lengths = indexed_reader(os.path.join(OUT, os.path.basename(prefix_rel)))
    n = lengths.size
    if split is None:
        b, e = 0, n
    else:
        b, e = split_ranges(split, n)[k]
    g = GPTIndices(lengths.astype(np.int32), np.arange(b, e, dtype=np.int32), num_samples, IDX_SEQ, IDX_SEED)
    g.sizes = lengths
    return g, read


def fx_bin_gpt():
    """GPTDataset over .bin/.idx, single prefix and blends, with their cache files."""
    tok = NullTokenizerIdentity(IDX_VOCAB)
    lines = ["# case split k len cs(samples of the whole split or the first 200)"]

    def record(case, k, get, n, full_name=None):
        m = min(n, 200)
        samples = np.stack([get(i) for i in range(m)]) if m else np.zeros((0, IDX_SEQ + 1), np.int64)
        lines.append(f"{case} {SPLIT_NAMES[k]} {n} {cs(samples)}")
        if full_name:
            write_bin(full_name, samples, "<i4")

    # 1) One prefix, Megatron's legacy default split text, a multi-epoch train split.
    a = IDX_REL + "idx_a"
    split = "969, 30, 1"
    cache = path("cache_single")
    shutil.rmtree(cache, ignore_errors=True)
    os.makedirs(cache)
    wants = {0: None, 1: 10}
    g0, read = gpt_over(a, 0, split, 1)
    per_epoch = (g0.tokens_per_epoch - 1) // IDX_SEQ
    # A request whose final epoch is separated: 5 full epochs plus a little.
    wants[0] = ((5 * g0.tokens_per_epoch - 1) // IDX_SEQ) + max(1, int(0.8 * per_epoch) // 3)
    for k in (0, 1):
        g, read = gpt_over(a, k, split, wants[k])
        if k == 0:
            assert g.num_epochs == 6 and g.separate, (g.num_epochs, g.separate)
        desc = dumps(gpt_identifiers(a, wants[k], k, IDX_SEED, IDX_SEQ, split, tok))
        save_gpt_cache(cache, desc, k, g)
        record("single", k, lambda i: g.get(i, read), g.len, "idx_single_train_samples200.i32" if k == 0 else None)
    write_text("idx_single.txt", [f"want {wants[0]} {wants[1]}"])

    # 2) A weighted blend, cached (blends are cached only with --data-cache-path).
    b = IDX_REL + "idx_b"
    split = "90,10,0"
    cache = path("cache_blend")
    shutil.rmtree(cache, ignore_errors=True)
    os.makedirs(cache)
    raw_w, target = [0.3, 0.7], {0: 300, 1: 20}
    weights = normalize(raw_w)
    for k in (0, 1):
        buffer_sizes = size_per_dataset(weights, target[k], 0.005)
        size = sum(size_per_dataset(weights, target[k]))
        comps, ids = [], []
        for prefix, ns in zip((a, b), buffer_sizes):
            g, read = gpt_over(prefix, k, split, ns)
            u = gpt_identifiers(prefix, ns, k, IDX_SEED, IDX_SEQ, split, tok)
            save_gpt_cache(cache, dumps(u), k, g)
            comps.append((g, read))
            ids.append(u)
        bw = normalize(weights)  # BlendedDataset normalizes once more
        di, dsi = build_blending_indices(bw, size)
        for i in range(2):
            assert np.all(dsi[di == i] < comps[i][0].len), "oversampled"
        bu = OrderedDict()
        bu["class"] = "BlendedDataset"
        bu["datasets"] = ids
        bu["split"] = SPLIT_NAMES[k]
        bu["weights"] = bw
        bu["size"] = size
        save_blend_cache(cache, dumps(bu), k, di, dsi)
        record("blend", k, lambda i: comps[di[i]][0].get(int(dsi[i]), comps[di[i]][1]), size,
               "idx_blend_train_samples200.i32" if k == 0 else None)
        if k == 0:
            write_bin("idx_blend_train_dataset_index.i16", di, "<i2")
            write_bin("idx_blend_train_dataset_sample_index.i64", dsi, "<i8")

    # 3) An unweighted blend: one epoch of each (num_samples None), weights = their lengths
    #    (normalized, since the size is given), size = min(want, sum).
    split = "1,0,0"
    want = 50
    cache = path("cache_unweighted")
    shutil.rmtree(cache, ignore_errors=True)
    os.makedirs(cache)
    comps = [gpt_over(p, 0, split, None) for p in (a, b)]
    ids = [gpt_identifiers(p, None, 0, IDX_SEED, IDX_SEQ, split, tok) for p in (a, b)]
    for (g, _), u in zip(comps, ids):
        save_gpt_cache(cache, dumps(u), 0, g)
    lens = [c[0].len for c in comps]
    size = min(want, sum(lens))
    bw = normalize(lens)
    di, dsi = build_blending_indices(bw, size)
    bu = OrderedDict([("class", "BlendedDataset"), ("datasets", ids), ("split", "train"), ("weights", bw),
                      ("size", size)])
    save_blend_cache(cache, dumps(bu), 0, di, dsi)
    record("unweighted", 0, lambda i: comps[di[i]][0].get(int(dsi[i]), comps[di[i]][1]), size)
    write_bin("idx_unweighted_dataset_index.i16", di, "<i2")

    # 4) Per-split blends: train = idx_a whole (no split: "split" and "split_matrix" are
    #    null), valid = 0.5 a 0.5 b.
    cache = path("cache_per_split")
    shutil.rmtree(cache, ignore_errors=True)
    os.makedirs(cache)
    g, read = gpt_over(a, 0, None, 100)
    save_gpt_cache(cache, dumps(gpt_identifiers(a, 100, 0, IDX_SEED, IDX_SEQ, None, tok)), 0, g)
    record("per_split", 0, lambda i: g.get(i, read), g.len)
    ws = normalize([0.5, 0.5])
    buffer_sizes = size_per_dataset(ws, 20, 0.005)
    size = sum(size_per_dataset(ws, 20))
    comps = [gpt_over(p, 1, None, ns) for p, ns in zip((a, b), buffer_sizes)]
    ids = [gpt_identifiers(p, ns, 1, IDX_SEED, IDX_SEQ, None, tok) for p, ns in zip((a, b), buffer_sizes)]
    for (gg, _), u in zip(comps, ids):
        save_gpt_cache(cache, dumps(u), 1, gg)
    bw = normalize(ws)
    di, dsi = build_blending_indices(bw, size)
    bu = OrderedDict([("class", "BlendedDataset"), ("datasets", ids), ("split", "valid"), ("weights", bw),
                      ("size", size)])
    save_blend_cache(cache, dumps(bu), 1, di, dsi)
    record("per_split", 1, lambda i: comps[di[i]][0].get(int(dsi[i]), comps[di[i]][1]), size)

    # 5) Exhaustive blending (size None) on made-up sizes.
    di, dsi = build_exhaustive_blending_indices([7, 3, 11])
    write_bin("exhaustive_7_3_11_dataset_index.i16", di, "<i2")
    write_bin("exhaustive_7_3_11_dataset_sample_index.i64", dsi, "<i8")
    write_text("idx_gpt.txt", lines)


def fx_desc_misc():
    """Python's float repr, json string escaping and md5, which the cache file names rest on."""
    floats = [0.969, 0.999, 1.0, 0.3, 0.7, 1 / 3, 2 / 3, 0.1 + 0.2, 1e-05, 0.0001, 1e16, 1e15, 123456789.125,
              5e-324, 1.7976931348623157e308, 0.5, 100.0, 2.5e-7, 0.30000000000000004, 1 / 7]
    lines = ["# value.hex() repr"]
    for x in floats:
        lines.append(f"{x.hex()} {json.dumps(x)}")
    write_text("float_repr.txt", lines)
    strings = ["plain", "tab\tnew\nline", "quote\" back\\", "caf\u00e9", "\u4e2d\u6587", "emoji \U0001F600",
               "ctl \x01\x7f", ""]
    lines = ["# json.dumps(s) <TAB> md5(json.dumps(s))"]
    for t in strings:
        d = json.dumps(t)
        lines.append(f"{d}\t{md5(d)}")
    write_text("json_strings.txt", lines)


def main():
    os.makedirs(OUT, exist_ok=True)
    fx_mt19937()
    fx_pcg64()
    fx_splits()
    fx_masks()
    fx_corpus()
    fx_mock()
    fx_indexed()
    fx_bin_gpt()
    fx_desc_misc()
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(OUT) for f in fs)
    print(f"wrote {len(os.listdir(OUT))} files, {total} bytes, to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()
