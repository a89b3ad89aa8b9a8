"""The records of a kernel_trace.c CSV and their kernel names, as the trace summaries print
them: demangled with c++filt where it is installed, cuBLASLt's many GEMM kernels as one name
(our own GEMV apart), arguments and template parameters left out (trace_summary.py,
decode_trace_summary.py)."""
import csv
import re
import shutil
import subprocess


def read_records(path, kinds=None):
    """(start_ns, end_ns, kind, name) of the trace's records, by start; only `kinds` if given."""
    with open(path, newline="") as f:
        rows = [(int(r["start_ns"]), int(r["end_ns"]), r["kind"], r["name"]) for r in csv.DictReader(f)
                if kinds is None or r["kind"] in kinds]
    return sorted(rows)


def demangler(names):
    """A function from a mangled name to its demangled form (itself without c++filt)."""
    names = sorted(set(names))
    pretty = dict(zip(names, names))
    if shutil.which("c++filt"):
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
        pretty.update((n, d) for n, d in zip(names, out) if d)
    return lambda n: pretty.get(n, n)


def short(demangled):
    """The name a kernel is grouped under, from its demangled name."""
    low = demangled.lower()
    if "::gemv_kernel<" in demangled:  # ours (backend/cuda/gemv.cu), not cuBLAS's gemv
        return "gemv_kernel<...> (ours)"
    if any(x in low for x in ("gemm", "gemv", "nvjet", "sm90_", "cutlass", "cublas")):
        return "cuBLASLt GEMM kernels"
    d = re.sub(r"\(.*", "", demangled.replace("(anonymous namespace)::", ""))
    return re.sub(r"<.*", "", d)[:70] + ("<...>" if "<" in d else "")
