#!/usr/bin/env python3
"""make_gpt2_special_cases.py: reference ids of GPT2BPETokenizer for text holding the literal
<|endoftext|>, for tests/test_tokenizer.c (tests/fixtures/tokenizer/gpt2_special_cases.jsonl).

Megatron's GPT2BPETokenizer is Hugging Face's GPT-2 tokenizer (megatron/core/tokenizers:
build_tokenizer -> MegatronHFTokenizer -> HuggingFaceTokenizer -> AutoTokenizer "gpt2" with
--vocab-file/--merge-file), and preprocess_data.py stores tokenizer.tokenize(text) =
tokenizer(text).input_ids. The ids below are that call, computed with the fast tokenizer
(Rust `tokenizers`) and the slow one (Python) from the shared gpt2-vocab.json and
gpt2-merges.txt; the script fails unless both agree.

    pip install 'transformers==4.57.1' 'tokenizers==0.22.1'   # no PyTorch needed
    python3 tools/reference/make_gpt2_special_cases.py          # reads ../shared/data

transformers 5 (GPT2Tokenizer.from_pretrained of a directory with vocab.json and merges.txt)
gives the same ids; the file records the version that wrote it."""
import json
import os
import shutil
import tempfile

import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("MC_SHARED_DIR", os.path.join(os.path.dirname(ROOT), "shared"))
VOCAB = os.path.join(SHARED, "data", "gpt2", "gpt2-vocab.json")
MERGES = os.path.join(SHARED, "data", "gpt2", "gpt2-merges.txt")
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "gpt2_special_cases.jsonl")

E = "<|endoftext|>"
TEXTS = [
    E, E + E, "Hello" + E + "world", "Hello " + E + " world", "a " + E + " b", " " + E + "  ", "  " + E,
    E + " leading", "trailing " + E, "word" + E + "word " + E + "\n\nnext", "x\n" + E + "\ny", "line\r\n" + E + "\r\n",
    "\t" + E + "\t", "caf\u00e9" + E + "\u4e2d\u6587", "don't" + E + "'s", "123" + E + "456", "..." + E + "!!!",
    E + "\n", "\n\n" + E + "\n\n", "foo" + E + E + "bar", "<|endoftext|", "|endoftext|>", "<|ENDOFTEXT|>",
    "<|endoftext|>>", "<<|endoftext|>", "<|endo" + E + "ftext|>", "<|endoftext |>",
    "Some text" + E + "more text", "   " + E + "   x   ", E + " " + E + " " + E,
]


def tokenizers_fast_slow():
    if int(transformers.__version__.split(".")[0]) < 5:
        from transformers import GPT2Tokenizer, GPT2TokenizerFast
        return (GPT2TokenizerFast(vocab_file=VOCAB, merges_file=MERGES),
                GPT2Tokenizer(vocab_file=VOCAB, merges_file=MERGES)), None
    from transformers import GPT2Tokenizer
    d = tempfile.mkdtemp()
    shutil.copy(VOCAB, os.path.join(d, "vocab.json"))
    shutil.copy(MERGES, os.path.join(d, "merges.txt"))
    tok = GPT2Tokenizer.from_pretrained(d)
    return (tok, tok), d


def main():
    (fast, slow), tmp = tokenizers_fast_slow()
    assert len(fast) == 50257 and fast.convert_tokens_to_ids(E) == 50256
    with open(OUT, "w") as f:
        for text in TEXTS:
            ids = fast(text).input_ids
            assert ids == slow(text).input_ids, text
            f.write(json.dumps({"text": text, "ids": ids,
                                "produced_by": "transformers %s GPT2TokenizerFast/GPT2Tokenizer(text).input_ids"
                                % transformers.__version__}) + "\n")
    if tmp:
        shutil.rmtree(tmp)
    print("wrote %d cases to %s" % (len(TEXTS), OUT))


if __name__ == "__main__":
    main()
