"""Copies stdin to stdout, each line prefixed with the seconds since START (a `date +%s.%N` value): the time
profile of a tool's -v log, for bench/gpu_benchmarks.sh."""
import sys
import time

start = float(sys.argv[1])
for line in sys.stdin:
    sys.stdout.write(f"{time.time() - start:7.3f}  {line}")
    sys.stdout.flush()
