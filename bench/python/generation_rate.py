"""Decode tokens/s of `multi_probe_inference --generate --json` from its timestamped output (timestamp_lines.py):
(generated tokens - 1) / (time of the last token line - time of the first), so the load and the prompt's pass
are left out, as generate_baseline.py leaves them out. Prints JSON.

Usage: python3 generation_rate.py TIMESTAMPED_OUTPUT
"""
import json
import sys

times = []
with open(sys.argv[1]) as f:
    for line in f:
        stamp, _, rest = line.strip().partition("  ")
        if rest.startswith("{") and "\"done\"" not in rest:
            times.append(float(stamp))
print(json.dumps({"generated_tokens": len(times), "decode_tokens_per_s": (len(times) - 1) / (times[-1] - times[0])}))
