#!/usr/bin/env python3
"""check_hf_export.py: does transformers take what `megatron-c convert --to hf` wrote?

For each fixture family (tests/fixtures/hf/{family}, made by make_hf_fixtures.py): imports
it (`convert --to megatron-c`), exports it again (`convert --to hf --dtype fp32`), loads the
export with transformers' from_pretrained and checks
  - no missing, unexpected or mismatched keys (output_loading_info),
  - its logits on the fixture's tokens equal the fixture's within 1e-4,
  - every weight equals the original bit for bit,
  - its greedy continuation equals the fixture's.
Prints one line per family and `N passed, M failed`; exit status 1 on any failure.
Needs torch and transformers (the GPU machine has them; any CPU build of torch will do).
    python3 tools/reference/check_hf_export.py BUILD_DIR [FIXTURES_DIR]
"""
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    fixtures = sys.argv[2] if len(sys.argv) > 2 else "tests/fixtures/hf"
    passed = failed = 0
    for fam in sorted(os.listdir(fixtures)):
        src = os.path.join(fixtures, fam)
        with tempfile.TemporaryDirectory() as tmp:
            ck, out = os.path.join(tmp, "ckpt"), os.path.join(tmp, "hf")
            for args in (["--input", src, "--output", ck, "--to", "megatron-c"],
                         ["--input", ck, "--output", out, "--to", "hf", "--dtype", "fp32"]):
                subprocess.run([os.path.join(build, "megatron-c"), "convert", *args], check=True,
                               stdout=subprocess.DEVNULL)
            problems = []
            model, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True, torch_dtype=torch.float32,
                                                               attn_implementation="eager")
            for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
                if info.get(k):
                    problems.append(f"{k}: {info[k]}")
            orig = AutoModelForCausalLM.from_pretrained(src, torch_dtype=torch.float32, attn_implementation="eager")
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
