"""Streams through a running probe_server, client-side: one /v1/chat/completions stream alone, then N started
together (continuous batching), then /v1/generate alone on the same rendered prompt for the chat endpoint's
overhead. Each token's arrival time is taken as its server-sent event arrives. Prints one JSON object.

    python3 chat_streams_bench.py --port 8093 [--streams 16] [--tokens 128] [--runs 3]

Standard library only (the GPU machine's Python has no HTTP client packages to rely on)."""
import argparse
import http.client
import json
import statistics
import threading
import time
import urllib.request

WORDS = ("the day I saw a chance to learn from what had gone wrong and so we tried again with care "
         "river stone market window quiet answer simple letter").split()


def question(index):
    """A distinct user message per stream (about 40 words), so no two streams share a prompt."""
    words = [WORDS[(index * 7 + i * 3) % len(WORDS)] for i in range(40)]
    return f"Request {index}: tell me a story about " + " ".join(words) + "."


def read_events(response):
    """Yields (arrival time, event name, data) for each server-sent event of an HTTP response."""
    name, data = "message", []
    while True:
        line = response.readline()
        if not line:
            return
        line = line.decode("utf-8").rstrip("\r\n")
        if line == "":
            if data:
                yield time.perf_counter(), name, "\n".join(data)
            name, data = "message", []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())


def post_stream(port, path, body):
    """Token arrival times of one streamed request, with its start time and the tokens the server counted. The
    events are parsed after the stream ends: with 16 streams read by 16 threads, parsing each chunk as it came
    held the GIL while other threads' events waited, and their arrival times measured the client."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    start = time.perf_counter()
    connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    response = connection.getresponse()
    if response.status != 200:
        raise RuntimeError(f"POST {path}: HTTP {response.status}: {response.read()[:500]!r}")
    events = list(read_events(response))
    connection.close()
    arrivals, counted = [], None
    for arrival, name, data in events:
        if path == "/v1/generate":
            if name == "token":
                arrivals.append(arrival)
            elif name == "done":
                counted = json.loads(data).get("tokens", len(arrivals))
            elif name == "error":
                raise RuntimeError(f"generation failed: {data}")
        elif data != "[DONE]":
            chunk = json.loads(data)
            if chunk.get("usage"):
                counted = chunk["usage"]["completion_tokens"]
            elif chunk["choices"] and "probes" in chunk:
                arrivals.append(arrival)
    return {"start": start, "arrivals": arrivals, "counted": counted}


def chat_body(index, tokens):
    return {"model": "bench", "messages": [{"role": "user", "content": question(index)}], "max_tokens": tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}


def summary(streams):
    """Aggregate tokens/s over the span of all streams, time to first token and time per token (ms)."""
    first = min(s["start"] for s in streams)
    last = max(s["arrivals"][-1] for s in streams)
    tokens = sum(len(s["arrivals"]) for s in streams)
    gaps = [1e3 * (b - a) for s in streams for a, b in zip(s["arrivals"], s["arrivals"][1:])]
    gaps.sort()
    ttft = [1e3 * (s["arrivals"][0] - s["start"]) for s in streams]
    decode = [(len(s["arrivals"]) - 1) / (s["arrivals"][-1] - s["arrivals"][0]) for s in streams]
    return {"streams": len(streams), "tokens": tokens, "seconds": last - first, "tokens_per_s": tokens / (last - first),
            "decode_tokens_per_s_per_stream": statistics.mean(decode),
            "time_per_token_p50_ms": gaps[len(gaps) // 2], "time_per_token_p99_ms": gaps[int(0.99 * (len(gaps) - 1))],
            "ttft_p50_ms": statistics.median(ttft), "ttft_max_ms": max(ttft)}


def concurrent(port, count, tokens, offset, monitors=None):
    results, errors = [None] * count, []
    barrier = threading.Barrier(count)

    def client(i):
        try:
            barrier.wait()
            body = chat_body(offset + i, tokens)
            if monitors:
                body["monitors"] = monitors
            results[i] = post_stream(port, "/v1/chat/completions", body)
        except Exception as error:  # reported below: a failed stream fails the benchmark
            errors.append(f"stream {i}: {error}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError("; ".join(errors))
    return summary(results)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8093)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--prompt-file", help="question 0 as the chat template renders it (inspect_model "
                        "chat-template), for /v1/generate; a leading --bos text is dropped (generate adds BOS)")
    parser.add_argument("--bos", default="<bos>")
    parser.add_argument("--print-messages", action="store_true", help="print question 0's messages and exit")
    parser.add_argument("--one-stream", action="store_true", help="only one stream at a time (batch-1 decode), no "
                        "/v1/generate side: needs no --prompt-file")
    parser.add_argument("--monitored", action="store_true", help="only the streams, with and without a rolling flag "
                        "monitor on the server's first label each, alternating")
    args = parser.parse_args()
    if args.print_messages:
        return print(json.dumps(chat_body(0, args.tokens)["messages"]))
    if args.monitored:
        return monitored_runs(args)
    if args.one_stream:
        return one_stream_runs(args)
    prompt = open(args.prompt_file, encoding="utf-8").read()
    prompt = prompt[len(args.bos):] if prompt.startswith(args.bos) else prompt
    # Warm-up: the first batch of 16 and the first long stream allocate what later steps reuse.
    concurrent(args.port, args.streams, 32, 1000)
    concurrent(args.port, 1, 32, 2000)
    runs = []
    for run in range(args.runs):
        # Alternating, so drift on the machine touches all three alike.
        one = concurrent(args.port, 1, args.tokens, 100 * run)
        many = concurrent(args.port, args.streams, args.tokens, 100 * run + 1)
        generate = summary([post_stream(args.port, "/v1/generate", {
            "prompt": prompt, "max_new_tokens": args.tokens, "stop": False, "temperature": 0})])
        chat_same = concurrent_prompt_chat(args.port, args.tokens)
        runs.append({"one": one, "many": many, "generate": generate, "chat_same_prompt": chat_same})
    print(json.dumps({"tokens": args.tokens, "streams": args.streams, "runs": runs}, indent=1))


def monitored_runs(args):
    """16 streams plain and 16 with one rolling flag monitor each, alternating (the monitors' cost per token)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{args.port}/v1/info") as response:
        label = json.load(response)["labels"][0]
    monitors = [{"label": label, "aggregate": "rolling", "window": 16, "action": "flag"}]
    concurrent(args.port, args.streams, 32, 1000)
    concurrent(args.port, args.streams, 32, 1000, monitors)
    runs = []
    for run in range(args.runs):
        plain = concurrent(args.port, args.streams, args.tokens, 100 * run + 1)
        monitored = concurrent(args.port, args.streams, args.tokens, 100 * run + 1, monitors)
        runs.append({"many": plain, "monitored": monitored, "ratio": monitored["tokens_per_s"] / plain["tokens_per_s"]})
    print(json.dumps({"tokens": args.tokens, "streams": args.streams, "monitors": monitors, "runs": runs}, indent=1))


def one_stream_runs(args):
    """One chat stream at a time: batch-1 decode, as the SAE generation figure compares with and without --sae."""
    concurrent(args.port, 1, 32, 2000)
    runs = [{"one": concurrent(args.port, 1, args.tokens, 100 * run)} for run in range(args.runs)]
    print(json.dumps({"tokens": args.tokens, "streams": 1, "runs": runs}, indent=1))


def concurrent_prompt_chat(port, tokens):
    """The chat endpoint on the prompt /v1/generate gets (question 0), for the per-token overhead."""
    return summary([post_stream(port, "/v1/chat/completions", chat_body(0, tokens))])


if __name__ == "__main__":
    main()
