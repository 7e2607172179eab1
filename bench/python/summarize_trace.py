"""Where the GPU time of a Kineto Chrome trace goes (capture_profile_bench --trace): the kernels' busy time by
kind (matrix products, attention, element-wise, copies), the GPU's idle time between the first matrix product
(the model's load before it is left out) and the last kernel with its longest gaps (the kernels around each, the longest host call during it), and the
kernels that take the most time; with several GPUs, each device's first and last kernel, busy time and idle
gaps over 1 ms (where replicas or pipeline stages wait). Prints Markdown tables; --json writes the same figures.

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


def longest_gaps(gpu, events, first_product, top):
    """The GPU's idle stretches between kernels, longest first, with what ran around and during each."""
    kernels = sorted(gpu, key=lambda e: e["ts"])
    gaps, end, before = [], None, None
    for e in kernels:
        if end is not None and e["ts"] > end:
            gaps.append((e["ts"] - end, end, before["name"], e["name"]))
        if end is None or e["ts"] + e["dur"] > end:
            end, before = e["ts"] + e["dur"], e
    host = [e for e in events if e.get("cat") in ("cpu_op", "cuda_runtime") and "dur" in e and e["ts"] >= first_product]
    result = []
    for length, start, before_name, after_name in sorted(gaps, reverse=True)[:top]:
        during = [e for e in host if e["ts"] < start + length and e["ts"] + e["dur"] > start]
        longest = max(during, key=lambda e: e["dur"])["name"] if during else ""
        calls = sorted(during, key=lambda e: -e["dur"])[:12]
        result.append({"ms": length / 1e3, "at_s": (start - first_product) / 1e6, "after": before_name[:60],
                       "before": after_name[:60], "host": longest[:60],
                       "host_calls": [f"{e['name'][:50]} (thread {e.get('tid')}, {e['dur'] / 1e3:.2f} ms, "
                                      f"from {(e['ts'] - start) / 1e3:+.2f} ms)" for e in calls]})
    over_ms = [g for g in gaps if g[0] > 1e3]
    return {"count": len(gaps), "over_1ms": len(over_ms), "over_1ms_s": sum(g[0] for g in over_ms) / 1e6, "longest": result}


def per_device(gpu, first_product):
    """Each device's share of the span: when it starts and ends, how long it is busy, its gaps over 1 ms."""
    devices = defaultdict(list)
    for e in gpu:
        devices[e.get("args", {}).get("device", 0)].append((e["ts"], e["ts"] + e["dur"]))
    result = {}
    for device, intervals in sorted(devices.items()):
        intervals.sort()
        gaps, end = [], None
        for start, stop in intervals:
            if end is not None and start - end > 1e3:
                gaps.append((start - end, end))
            end = stop if end is None else max(end, stop)
        first, last = intervals[0][0], max(stop for _, stop in intervals)
        result[str(device)] = {
            "first_s": (first - first_product) / 1e6, "last_s": (last - first_product) / 1e6,
            "busy_s": union_length(intervals) / 1e6, "gaps_over_1ms": len(gaps),
            "gaps_over_1ms_s": sum(g for g, _ in gaps) / 1e6,
            "longest_gaps": [{"ms": g / 1e3, "at_s": (at - first_product) / 1e6} for g, at in sorted(gaps, reverse=True)[:5]],
        }
    return result


def summarize(trace_path, top):
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e]
    # The trace starts with the model's load (weight copies, no matrix product) and the warm-up: the timed loop
    # begins at the first product kernel after the host entered the capture's "capture loop" scope (the first
    # product at all in a trace without it), and only what follows is counted.
    loop = [e["ts"] for e in events if e.get("name") == "capture loop" and "dur" in e]
    loop_start = min(loop) if loop else 0
    first_product = min(e["ts"] for e in gpu if e["cat"] == "kernel" and kind_of(e["name"]) == "products"
                        and e["ts"] >= loop_start)
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
    summary["gaps"] = longest_gaps(gpu, events, first_product, top)
    summary["devices"] = per_device(gpu, first_product)
    cpu = defaultdict(lambda: [0.0, 0])
    for e in events:
        if e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver") and "dur" in e and e["ts"] >= first_product:
            cpu[e["name"]][0] += e["dur"]
            cpu[e["name"]][1] += 1
    summary["top_host_calls"] = [
        {"name": name[:120], "seconds": seconds / 1e6, "calls": calls}
        for name, (seconds, calls) in sorted(cpu.items(), key=lambda kv: -kv[1][0])[:top]
    ]
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
    g = s["gaps"]
    print(f"\n{g['count']} gaps; {g['over_1ms']} over 1 ms, {g['over_1ms_s']:.3f} s in all\n")
    print("| gap, ms | at, s | after kernel | before kernel | longest host call during it |\n|---|---|---|---|---|")
    for k in g["longest"]:
        print(f"| {k['ms']:.2f} | {k['at_s']:.3f} | `{k['after']}` | `{k['before']}` | `{k['host']}` |")
    if len(s["devices"]) > 1:
        print("\n| device | first kernel, s | last kernel, s | busy, s | gaps over 1 ms | their s | longest (ms at s) |")
        print("|---|---|---|---|---|---|---|")
        for device, d in s["devices"].items():
            longest = ", ".join(f"{g['ms']:.1f} at {g['at_s']:.3f}" for g in d["longest_gaps"])
            print(f"| {device} | {d['first_s']:.3f} | {d['last_s']:.3f} | {d['busy_s']:.3f} | {d['gaps_over_1ms']} | "
                  f"{d['gaps_over_1ms_s']:.3f} | {longest} |")
    if s.get("gap_detail"):
        for k in g["longest"][: s["gap_detail"]]:
            print(f"\nhost calls during the {k['ms']:.2f} ms gap at {k['at_s']:.3f} s:")
            for call in k["host_calls"]:
                print(f"- {call}")
    print("\n| host call (ops include their children) | calls | seconds |\n|---|---|---|")
    for k in s["top_host_calls"]:
        print(f"| `{k['name']}` | {k['calls']} | {k['seconds']:.3f} |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("trace")
    parser.add_argument("--json")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--gap-detail", type=int, default=0, help="list the host calls during the N longest gaps")
    args = parser.parse_args()
    summary = summarize(args.trace, args.top)
    summary["gap_detail"] = args.gap_detail
    print_markdown(summary)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
