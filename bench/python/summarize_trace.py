"""Where the GPU time of a Kineto Chrome trace goes (capture_profile_bench --trace): the kernels' busy time by
kind (matrix products, attention, element-wise, copies), the GPU's idle time between the first matrix product
(the model's load before it is left out) and the last kernel, and the kernels that take the most time. Prints a Markdown table; --json writes the same figures.

Usage: python3 summarize_trace.py TRACE.json [--json OUT.json] [--top 15]
"""
import argparse
import json
from collections import defaultdict

KINDS = [  # the first kind whose needle is in a kernel's name (attention kernels are built on CUTLASS too)
    ("attention", ("flash", "fmha", "attention", "sdpa")),
    ("products", ("gemm", "cutlass", "xmma", "nvjet", "cublas", "grouped_mm", "sm90_", "sm80_", "ampere_")),
    ("copies", ("copy", "catarray", "memcpy", "memset", "index_elementwise", "gather", "scatter")),
]


def kind_of(name):
    lowered = name.lower()
    for kind, needles in KINDS:
        if any(needle in lowered for needle in needles):
            return kind
    return "element-wise"


def union_length(intervals):
    total, end = 0.0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def summarize(trace_path, top):
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e]
    # The trace starts with the model's load (weight copies, no matrix product): the forward passes begin at the
    # first product kernel, and only what follows it is counted.
    first_product = min(e["ts"] for e in gpu if e["cat"] == "kernel" and kind_of(e["name"]) == "products")
    gpu = [e for e in gpu if e["ts"] >= first_product]
    by_kind, by_name, intervals = defaultdict(float), defaultdict(lambda: [0.0, 0]), []
    for e in gpu:
        kind = "copies" if e["cat"] != "kernel" else kind_of(e["name"])
        by_kind[kind] += e["dur"]
        by_name[e["name"]][0] += e["dur"]
        by_name[e["name"]][1] += 1
        intervals.append((e["ts"], e["ts"] + e["dur"]))
    first = min(start for start, _ in intervals)
    last = max(stop for _, stop in intervals)
    busy = union_length(intervals)
    summary = {
        "span_s": (last - first) / 1e6,
        "busy_s": busy / 1e6,
        "idle_s": (last - first - busy) / 1e6,
        "kernels": len(gpu),
        "by_kind_s": {k: v / 1e6 for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "top_kernels": [
            {"name": name[:120], "seconds": seconds / 1e6, "calls": calls, "kind": kind_of(name)}
            for name, (seconds, calls) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]
        ],
    }
    return summary


def print_markdown(s):
    span = s["span_s"]
    print(f"GPU span {span:.3f} s (first matrix product to last kernel), busy {s['busy_s']:.3f} s, {s['kernels']} kernels\n")
    print("| where | seconds | share of span |\n|---|---|---|")
    for kind, seconds in s["by_kind_s"].items():
        print(f"| {kind} | {seconds:.3f} | {100 * seconds / span:.1f}% |")
    print(f"| idle | {s['idle_s']:.3f} | {100 * s['idle_s'] / span:.1f}% |\n")
    print("| kernel | kind | calls | seconds |\n|---|---|---|---|")
    for k in s["top_kernels"]:
        print(f"| `{k['name']}` | {k['kind']} | {k['calls']} | {k['seconds']:.3f} |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("trace")
    parser.add_argument("--json")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    summary = summarize(args.trace, args.top)
    print_markdown(summary)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
