#!/usr/bin/env python3
"""check_hf_export.py: does transformers take what `megatron-c convert --to hf` wrote?

For each fixture family (tests/fixtures/hf/{family}, made by make_hf_fixtures.py): imports
it (`convert --to megatron-c`), exports it again (`convert --to hf --dtype fp32`), loads the
export with transformers' from_pretrained and checks
  - no missing, unexpected or mismatched keys (output_loading_info),
  - its logits on the fixture's tokens equal the fixture's within 1e-4,
  - every weight equals the original bit for bit,
  - its greedy continuation equals the fixture's.
With --checkpoint DIR (a model we trained, e.g. the `make run` demo's with --save): exports
it, and checks that transformers' greedy continuation of --prompt (its bytes as token ids:
the demo's byte-level tokenizer) equals `megatron-c generate`'s, token for token.
Prints one line per check and `N passed, M failed`; exit status 1 on any failure.
Needs torch and transformers (the GPU machine has them; any CPU build of torch will do).
    python3 tools/reference/check_hf_export.py BUILD_DIR [FIXTURES_DIR] [--checkpoint DIR --prompt TEXT]
        [--device cuda: the trained model's check on the GPU, ours and transformers' alike]
"""
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def check_trained(build, ckpt, prompt, new=64, device="cpu"):
    """Our greedy continuation of a model we trained against transformers' on its export."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "hf")
        subprocess.run([os.path.join(build, "megatron-c"), "convert", "--input", ckpt, "--output", out, "--to", "hf",
                        "--dtype", "fp32"], check=True, stdout=subprocess.DEVNULL)
        model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager")
        model = model.to(device).eval()
        ids = list(prompt.encode())
        vocab = model.config.vocab_size
        ours = subprocess.run([os.path.join(build, "megatron-c"), "generate", "--load", ckpt, "--prompt-ids",
                               " ".join(map(str, ids)), "--max-new-tokens", str(new), "--tokenizer-type",
                               "NullTokenizer", "--vocab-size", str(vocab), "--device", device],
                              check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        ours = [int(x) for x in ours.split()]
        with torch.no_grad():
            p = torch.tensor([ids], device=device)
            theirs = model.generate(p, attention_mask=torch.ones_like(p), do_sample=False, max_new_tokens=new,
                                    min_new_tokens=new, pad_token_id=0, eos_token_id=None)[0, len(ids):].tolist()
        same = ours == theirs[:len(ours)] and len(ours) > 0
        text = bytes(t for t in theirs if t < 256).decode(errors="replace")
        print(f"{'ok  ' if same else 'FAIL'} trained {ckpt}: {len(ours)} greedy tokens {'equal' if same else 'differ'}"
              f" (transformers: {prompt!r} -> {text!r})")
        return same


def main():
    args = sys.argv[1:]
    ckpt = prompt = None
    if "--checkpoint" in args:
        i = args.index("--checkpoint")
        ckpt = args[i + 1]
        del args[i:i + 2]
    if "--prompt" in args:
        i = args.index("--prompt")
        prompt = args[i + 1]
        del args[i:i + 2]
    device = "cpu"
    if "--device" in args:
        i = args.index("--device")
        device = args[i + 1]
        del args[i:i + 2]
    build = args[0] if args else "build"
    fixtures = args[1] if len(args) > 1 else "tests/fixtures/hf"
    passed = failed = 0
    if ckpt:
        ok = check_trained(build, ckpt, prompt or "A hacker is ", device=device)
        passed, failed = passed + ok, failed + (not ok)
    for fam in sorted(os.listdir(fixtures)):
        src = os.path.join(fixtures, fam)
        with tempfile.TemporaryDirectory() as tmp:
            ck, out = os.path.join(tmp, "ckpt"), os.path.join(tmp, "hf")
            for args in (["--input", src, "--output", ck, "--to", "megatron-c"],
                         ["--input", ck, "--output", out, "--to", "hf", "--dtype", "fp32"]):
                subprocess.run([os.path.join(build, "megatron-c"), "convert", *args], check=True,
                               stdout=subprocess.DEVNULL)
            problems = []
            model, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True, dtype=torch.float32,
                                                               attn_implementation="eager")
            for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
                if info.get(k):
                    problems.append(f"{k}: {info[k]}")
            orig = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32, attn_implementation="eager")
            a, b = orig.state_dict(), model.state_dict()
            for name, t in a.items():
                if name not in b or not torch.equal(t, b[name]):
                    problems.append(f"weight {name} differs")
            ref = load_file(os.path.join(src, "reference.safetensors"))
            with torch.no_grad():
                logits = model.eval()(ref["tokens"].long()).logits.float()
                diff = (logits - ref["logits"]).abs().max().item()
                prompt = ref["tokens"][:, :8].long()
                greedy = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                        max_new_tokens=ref["greedy"].shape[1], min_new_tokens=ref["greedy"].shape[1],
                                        pad_token_id=0, eos_token_id=None)[:, 8:]
            if diff > 1e-4:
                problems.append(f"logits differ by {diff:.3g}")
            if not torch.equal(greedy.to(torch.int32), ref["greedy"]):
                problems.append("greedy continuation differs")
            print(f"{'ok  ' if not problems else 'FAIL'} {fam}: {type(model).__name__}, max |logit diff| {diff:.3g}"
                  + ("".join("; " + p for p in problems[:5])))
            passed, failed = passed + (not problems), failed + bool(problems)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
