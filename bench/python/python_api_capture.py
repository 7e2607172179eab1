"""The Python package's capture (model.capture, issue 35's benchmark): the dataset's texts at the given layers, position
last, kept in memory, timed around the call (the model loaded before, as capture_activations' examples/s counts
only its capture). Prints one JSON line per run: examples/s, the rows' bytes, and how far the process's resident
memory grew during the call (sampled every 5 ms) beside them."""

import json
import os
import threading
import time

import probekit
from baselines import capture_arguments, read_texts

PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE


class PeakResident:
    def __init__(self):
        self.peak = resident_bytes()
        self.running = True
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()

    def sample(self):
        while self.running:
            self.peak = max(self.peak, resident_bytes())
            time.sleep(0.005)

    def stop(self):
        self.running = False
        self.thread.join()
        return max(self.peak, resident_bytes())


def main():
    parser = capture_arguments([8, 17, 25, 33])
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    texts = read_texts(args.dataset, args.text_field)
    model = probekit.load_model(args.model, device="cuda")
    for run in range(1, args.runs + 1):
        before = resident_bytes()
        peak = PeakResident()
        start = time.perf_counter()
        rows = model.capture(texts, layers=args.layers, position="last", progress=False)
        seconds = time.perf_counter() - start
        peak_bytes = peak.stop()
        row_bytes = sum(tensor.numel() * tensor.element_size() for tensor in rows.values())
        print(json.dumps({"run": run, "examples": len(texts), "seconds": seconds,
                          "examples_per_second": len(texts) / seconds, "row_bytes": row_bytes,
                          "resident_growth_bytes": resident_bytes() - before,
                          "peak_resident_growth_bytes": peak_bytes - before,
                          "peak_growth_over_rows": (peak_bytes - before) / row_bytes}), flush=True)
        del rows


if __name__ == "__main__":
    main()
