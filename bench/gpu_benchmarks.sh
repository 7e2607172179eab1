#!/usr/bin/env bash
# Reproduces the GPU figures of bench/results/ with one command on the GPU machine (PROTOCOL.md of the
# project's shared benchmarks): builds the project (scripts/gpu/build.sh), writes the Gemma-3-4B-shaped
# random checkpoint with bench/python/make_bench_model.py and the 4,500-example dataset with make_example,
# (texts of 250-520 characters: about 94 tokens each with the prompt suffix, the protocol's shape), then
# measures, side by side in the same run:
#   1. capture throughput: capture_activations vs bench/python/python_baseline.py (twice each, alternating);
#   1b. the same capture on every GPU of the machine (--devices), when it has several;
#   1f. split: the same capture with the model's layers split over GPUs 0 and 1 (--placement layers), when it
#      has two, to compare with 1 (a split should keep at least 0.9x of one GPU's examples/s);
#   2. probe training: train_binary_probes on the captured layer 33 (45 labels, 20 epochs, no early stop) vs
#      bench/python/reference_trainer_baseline.py (the reference's trainer: 8 threads, bf16), twice each;
#   3. cold start: multi_probe_inference --text as a whole process with the 45 probes, page cache dropped and
#      warm, and the reference's start-up (bench/python/coldstart_baseline.py) likewise; then the weights' upload
#      by its routes, warm and cold (bench/upload_bench);
#   1c. profile: the 4-layer capture under LibTorch's Kineto profiler (bench/capture_profile_bench), its GPU
#      time split by bench/python/summarize_trace.py (products, attention, element-wise, copies, idle);
#   1d. alllayers: all 34 layers (1.5 GB of HDF5) beside the 4-layer capture, with a profile of its GPU idle time;
#   1e. spread: 900 texts of 25-2,000 tokens (make_example --min-chars 60 --max-chars 9000), 4 layers, with the
#      padding the batches computed;
#   5. generate: multi_probe_inference --generate (batch 1, 128 new tokens, the 45 probes of step 2 scoring every
#      token) beside transformers' generate (bench/python/generate_baseline.py), decode tokens/s;
#   6. server: probe_server with the model and the 45 probes, bench/server_bench: a warm /v1/rank of one
#      100-word text (p50, p99) and 32 clients at once;
#   7. steer: multi_probe_inference --generate with one steering vector at layer 17 (a mean difference of the captured
#      activations, make_steering_vectors) beside the same generation unsteered, alternating, and transformers'
#      generate with the vector added by a forward hook (bench/python/steered_generate_baseline.py);
#   8. sweep: steering_sweep over the 45 labels x 5 coefficients x 8 prompts x 48 tokens at layer 33, beside cells run
#      one by one in transformers (a sample of SWEEP_SAMPLE cells, 40 by default, timed as cells/s);
#   9. previous: the 4-layer capture by the tree in .gpu/old_src.tar.gz (an earlier commit, built into /tmp/build_old)
#      alternating with this tree's, to compare two commits in one sitting;
#   10. python_api: the Python package's model.capture (bench/python/python_api_capture.py, the extension module
#      built into /tmp/build) alternating with capture_activations on the same texts and layers, with the host memory
#      the call's rows take;
#   11. chat: probe_server with the 45 probes of step 2 (trained here if absent) and the Gemma 3 chat template:
#      /v1/chat/completions streams of 128 tokens, one alone and 16 started together, and /v1/generate on the same
#      rendered prompt, alternating (bench/python/chat_streams_bench.py), beside the GPU's copy bandwidth and the
#      decode rate it bounds (bench/python/hbm_bandwidth.py);
#   12. hybrid: a Qwen3.5-shaped hybrid (Gated DeltaNet and full attention, about 4 B; bench/python/
#      make_hybrid_bench_model.py) with the real Qwen 3 tokenizer, captured at layers 8/16/24/31 by capture_activations
#      vs transformers' batched forward (bench/python/moe_baseline.py), alternating, on the same dataset;
#   13. attention: the 4,500 texts captured at every token (--position all) at layer 33, then
#      train_binary_probes --model-type attention (45 labels, 20 epochs, no early stop) timed as a whole process
#      (attention_probe_train_s) beside bench/python/torch_attention_probe.py training the same architecture one label
#      at a time in PyTorch (torch_attention_probe_train_s: its training alone; its whole process beside), with both
#      mean test AUROCs;
#   14. oss: a gpt-oss-20b-shaped checkpoint in MXFP4 (bench/python/make_oss_bench_model.py, about 13.7 GB) with the
#      real Qwen 3 tokenizer, captured at layers 6,12,18,23 by capture_activations (its experts kept packed; the GPU's
#      memory sampled every 200 ms beside it for the peak) vs transformers' batched forward (moe_baseline.py: as
#      installed there, it dequantizes the experts to bf16 when it lacks the MXFP4 kernels), alternating;
#   15. fp8: a Qwen3-8B-shaped checkpoint in bf16 and its fine-grained FP8 copy (bench/python/make_fp8_bench_model.py:
#      128x128 blocks, as the Qwen3-*-FP8 releases), each captured at layers 9,18,27,35 by capture_activations,
#      alternating, with the GPU's memory sampled every 200 ms beside it for the peak: the FP8 copy with its products
#      in FP8 (--fp8-products fp8) and decoded (the default), then the two captures' agreement
#      (bench/python/compare_captures.py);
#   16. monitor: the chat step's 16 streams with and without one rolling flag monitor each ("monitors" on
#      /v1/chat/completions), alternating in one sitting (monitored_16_streams_tokens_per_s vs
#      server_16_streams_tokens_per_s; bench/python/chat_streams_bench.py --monitored);
#   17. multimax: as 13 with --model-type multimax (8 heads; multimax_train_s) beside torch_attention_probe.py
#      --kind multimax (torch_multimax_train_s);
#   18. masked: the 4,500 texts as one-turn conversations with the Gemma 3 template (the text as the user's message,
#      a fixed 20-word reply; bench/python/masked_dataset.py) captured with --mask assistant, alternating with the
#      same rendered strings captured as plain texts (masked_capture_examples_per_s vs the plain one);
#   4. MoE capture: a Qwen3-30B-A3B-shaped random checkpoint (bench/python/make_moe_bench_model.py, MOE_LAYERS
#      layers, 24 by default: one 80 GB GPU) with the real Qwen 3 tokenizer, captured at layers n/4, n/2, 3n/4,
#      n-1 (6,12,18,23) by capture_activations vs transformers' batched forward (bench/python/moe_baseline.py),
#      alternating, on the same dataset, then a profile of the capture as in 1c.
#   19. patching: a 32-token clean/corrupted pair (found by bench/python/patching_baseline.py), the resid_post grid
#      over all 34 layers x 32 positions and its attribution estimate by bench/patching_bench (model loaded and
#      warm), beside transformers with one forward hook per cell (patching_baseline.py), alternating, RUNS each;
#   20. sae: the 4-layer capture beside the same texts read through a 16,384-wide JumpReLU SAE at layer 17 (random
#      weights in Gemma Scope 2's layout, bench/python/make_bench_sae.py) stored as top-64 latents, and layer 17
#      captured plainly (the same pass without the SAE), alternating (sae_capture_examples_per_s vs both);
#   21. saegen: one chat stream at a time (chat_streams_bench.py --one-stream) from a server without and with that SAE
#      (--sae: each token's top latents in every chunk; sae_generation_tokens_per_s vs the plain server);
#   22. streams64: the chat step's streams at 16 and at 64 on one server started with --max-streams 64
#      (server_1_stream, server_16_streams and server_64_streams_tokens_per_s with their p99 in one sitting), then
#      transformers' generate on the same rendered prompt with its static cache compiled (generate_baseline.py
#      --compiled: hf_compiled_generate_tokens_per_s, its compile time apart);
#   23. split32b (two GPUs or more) / split70b (four or more): a Qwen3-32B-shaped (65.5 GB) / Llama-3.3-70B-shaped
#      (141 GB) random checkpoint (bench/python/make_split_bench_model.py) captured at layers 16/32/48/63 /
#      20/40/60/79 with --devices 0,1 / 0,1,2,3 --placement layers beside transformers with device_map="auto" on the
#      same GPUs (moe_baseline.py --device-map auto), on the first SPLIT_TEXTS (1,500) of the dataset, then 45 probes
#      of the last of those layers generating 128 tokens through the split model (issue 51's split figures);
# Usage: bash bench/gpu_benchmarks.sh OUT_DIR [STEP...]
#   steps: build model capture profile alllayers spread multigpu split train generate server coldstart moe steer sweep
#          previous python_api chat hybrid attention oss fp8 monitor multimax masked patching sae saegen streams64
#          split32b split70b
#          (default: all but previous, python_api, chat, hybrid, attention, oss, fp8, monitor, multimax, masked,
#          patching, sae, saegen, streams64, split32b and split70b)
# RUNS (default 2) sets the runs of each side; PYTHON_RUNS (default RUNS) those of the Python side, whose
# capture and training take minutes a run.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?output directory}
shift
steps=${*:-build model capture profile alllayers spread multigpu split train generate server coldstart moe steer sweep}
mkdir -p "$out"
python=$(command -v python3)
[ -x /opt/torch/.venv/bin/python3 ] && python=/opt/torch/.venv/bin/python3
export LD_LIBRARY_PATH="/tmp/deps/usr/lib/x86_64-linux-gnu:/tmp/deps/usr/lib/x86_64-linux-gnu/hdf5/serial:${LD_LIBRARY_PATH:-}"
tools=/tmp/build/tools
model=/tmp/bench_model
dataset=/tmp/bench_dataset.jsonl
layers=8,17,25,33
runs=${RUNS:-2}
python_runs=${PYTHON_RUNS:-$runs}
has() { [[ " $steps " == *" $1 "* ]]; }
seconds() { date +%s.%N; }

if has build; then
  bash scripts/gpu/build.sh capture_activations train_binary_probes multi_probe_inference make_example train_probes_bench \
    capture_profile_bench upload_bench probe_server server_bench make_steering_vectors steering_sweep inspect_model
fi
# start_server PORT [FLAGS...]: probe_server on the chat step's probes in the background ($server), once it answers.
start_server() {
  "$tools/probe_server" --probes-dir /tmp/probes_1 --model "$model" --port "$1" "${@:2}" -q &
  server=$!
  # A failed step must not leave the server holding the run's output open (the device call would wait its limit).
  trap 'kill $server 2>/dev/null || true' EXIT
  for _ in $(seq 120); do
    "$python" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$1/healthz')" 2>/dev/null && break
    sleep 0.5
  done
}
# The 45 probes of layer 33 that the chat and monitor steps serve.
chat_probes() {
  if [ ! -s /tmp/probes_1/aggregate_metrics.json ]; then
    [ -s /tmp/capture_1/layer_33_activations.h5 ] || "$tools/capture_activations" --model "$model" --dataset "$dataset" \
      --output-dir /tmp/capture_1 --layers $layers --overwrite -q
    "$tools/train_binary_probes" --activations /tmp/capture_1/layer_33_activations.h5 --output-dir /tmp/probes_1 \
      --overwrite --epochs 20 --early-stopping-patience -1 --device cuda -q
  fi
}
make_dataset() {
  "$tools/make_example" -q dataset --overwrite --output "$dataset" --labels 45 --per-label 100 --min-chars 250 --max-chars 520 --seed 7
}
if has model; then
  [ -s /tmp/gemma3_tokenizer.json ] || gunzip -c .gpu/gemma3_tokenizer.json.gz > /tmp/gemma3_tokenizer.json
  [ -s "$model/config.json" ] || "$python" bench/python/make_bench_model.py "$model" /tmp/gemma3_tokenizer.json
  make_dataset
  # The new 7.8 GB checkpoint is written back to disk 30 s later (vm.dirty_expire_centisecs); a capture running
  # then waited on its own writes for up to 0.5 s a window and lost a fifth of its speed. Written back first.
  sync
fi
if has capture; then
  for run in $(seq "$runs"); do
    "$tools/capture_activations" --model "$model" --dataset "$dataset" --output-dir "/tmp/capture_$run" --layers $layers \
      --overwrite --json -q > "$out/capture_probekit_$run.json"
    [ "$run" -gt "$python_runs" ] || PYTHONUNBUFFERED=1 "$python" bench/python/python_baseline.py "$model" "$dataset" \
      --layers 8 17 25 33 > "$out/capture_python_$run.json"
  done
  cat "$out"/capture_*.json
fi
if has profile; then
  /tmp/build/bench/capture_profile_bench --model "$model" --dataset "$dataset" --output-dir /tmp/capture_profile \
    --layers $layers --overwrite -q --trace /tmp/capture_trace.json > "$out/profile_capture.json"
  "$python" bench/python/summarize_trace.py /tmp/capture_trace.json --json "$out/profile_summary.json" | tee "$out/profile.md"
fi
if has alllayers; then
  for run in $(seq "$runs"); do
    "$tools/capture_activations" --model "$model" --dataset "$dataset" --output-dir "/tmp/capture_all_$run" --layers all \
      --overwrite --json -q > "$out/capture_all_layers_$run.json"
    grep -h examples_per_second "$out/capture_all_layers_$run.json"
  done
  /tmp/build/bench/capture_profile_bench --model "$model" --dataset "$dataset" --output-dir /tmp/capture_all_profile \
    --layers all --overwrite -q --trace /tmp/capture_all_trace.json > /dev/null
  "$python" bench/python/summarize_trace.py /tmp/capture_all_trace.json --top 5 | tee "$out/profile_all_layers.md"
  rm -rf /tmp/capture_all_* /tmp/capture_all_trace.json
fi
if has spread; then
  spread=/tmp/bench_spread.jsonl
  "$tools/make_example" -q dataset --overwrite --output "$spread" --labels 45 --per-label 20 --min-chars 60 --max-chars 9000 --seed 7
  for run in $(seq "$runs"); do
    "$tools/capture_activations" --model "$model" --dataset "$spread" --output-dir "/tmp/capture_spread_$run" --layers $layers \
      --overwrite --json -q > "$out/capture_spread_$run.json"
    grep -h -E "examples_per_second|tokens|padding" "$out/capture_spread_$run.json"
  done
fi
if has multigpu; then
  gpus=$(nvidia-smi -L | wc -l)
  if [ "$gpus" -ge 2 ]; then
    devices=$(seq -s, 0 $((gpus - 1)))
    for run in 1 2; do
      "$tools/capture_activations" --model "$model" --dataset "$dataset" --output-dir "/tmp/capture_gpus_$run" --layers $layers \
        --devices "$devices" --overwrite --json -q > "$out/capture_probekit_${gpus}gpus_$run.json"
    done
    grep -h examples_per_second "$out"/capture_probekit_*gpus_*.json
  fi
fi
if has split && [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  for run in 1 2; do
    "$tools/capture_activations" --model "$model" --dataset "$dataset" --output-dir "/tmp/capture_split_$run" --layers $layers \
      --devices 0,1 --placement layers --overwrite --json -q > "$out/capture_probekit_split_$run.json"
  done
  grep -h examples_per_second "$out"/capture_probekit_split_*.json
fi
if has train; then
  activations=/tmp/capture_1/layer_33_activations.h5
  [ -s "$activations" ] || "$tools/capture_activations" --model "$model" --dataset "$dataset" --output-dir /tmp/capture_1 \
    --layers $layers --overwrite -q
  for run in $(seq "$runs"); do
    start=$(seconds)
    "$tools/train_binary_probes" --activations "$activations" --output-dir "/tmp/probes_$run" --overwrite --epochs 20 \
      --early-stopping-patience -1 --device cuda --json -q > "$out/train_probekit_$run.json"
    echo "{\"run\": $run, \"process_seconds\": $(awk "BEGIN{print $(seconds) - $start}")}" | tee -a "$out/train_process.jsonl"
    "$python" -c "import json, sys; a = json.load(open(sys.argv[1])); print({k: a[k] for k in a if k.startswith('average')})" \
      "/tmp/probes_$run/aggregate_metrics.json" | tee "$out/train_probekit_metrics_$run.txt"
    [ "$run" -gt "$python_runs" ] ||
      "$python" bench/python/reference_trainer_baseline.py "$activations" --epochs 20 | tee "$out/train_python_$run.json"
  done
  /tmp/build/bench/train_probes_bench --device cuda --repeats 2 -q | tee "$out/train_bench_synthetic.json"
fi
prompt="I kept asking myself whether the data really supported the conclusion everyone repeated, so I"
if has generate; then
  for run in $(seq "$runs"); do
    start=$(seconds)
    "$tools/multi_probe_inference" --probes-dir /tmp/probes_1 --model "$model" --generate --text "$prompt" \
      --max-new-tokens 128 --no-stop --json -q | "$python" bench/python/timestamp_lines.py "$start" > "$out/generate_$run.txt"
    "$python" bench/python/generation_rate.py "$out/generate_$run.txt" | tee "$out/generate_probekit_$run.json"
  done
  "$python" bench/python/generate_baseline.py "$model" "$prompt" --new-tokens 128 | tee "$out/generate_python.json"
fi
if has server; then
  start_server 8093
  /tmp/build/bench/server_bench --port 8093 | tee "$out/server_bench.json"
  kill "$server"; wait "$server" || true
fi
if has chat; then
  chat_probes
  cp tests/fixtures/models/gemma3_text/chat_template.jinja "$model/"
  "$python" bench/python/hbm_bandwidth.py "$model" | tee "$out/hbm_bandwidth.json"
  "$python" bench/python/chat_streams_bench.py --print-messages > /tmp/chat_messages.json
  "$tools/inspect_model" chat-template --model "$model" --messages /tmp/chat_messages.json > /tmp/chat_prompt.txt
  start_server 8094 --max-streams 32 --http-threads 40
  "$python" bench/python/chat_streams_bench.py --port 8094 --prompt-file /tmp/chat_prompt.txt --streams 16 --tokens 128 \
    --runs "$runs" | tee "$out/chat_streams.json"
  kill "$server"; wait "$server" || true
fi
if has streams64; then
  # The chat step's streams at 16 and at 64 on one server started for 64 (issue 51's server_64_streams figure).
  chat_probes
  cp tests/fixtures/models/gemma3_text/chat_template.jinja "$model/"
  "$python" bench/python/chat_streams_bench.py --print-messages > /tmp/chat_messages.json
  "$tools/inspect_model" chat-template --model "$model" --messages /tmp/chat_messages.json > /tmp/chat_prompt.txt
  start_server 8097 --max-streams 64 --http-threads 80
  for streams in 16 64; do
    "$python" bench/python/chat_streams_bench.py --port 8097 --prompt-file /tmp/chat_prompt.txt --streams "$streams" \
      --tokens 128 --runs "$runs" > "$out/chat_streams_$streams.json"
  done
  kill "$server"; wait "$server" || true
  "$python" bench/python/generate_baseline.py "$model" "$(cat /tmp/chat_prompt.txt)" --new-tokens 128 --compiled \
    > "$out/generate_compiled.json"
fi
# split_bench NAME SHAPE TOKENIZER DEVICES LAYERS: step 23's capture, baseline, probes and generation for one shape.
split_bench() {
  local name=$1 shape=$2 tokenizer=$3 devices=$4 split_layers=$5
  local big=/tmp/bench_model_$name last=${5##*,}
  [ -s "$big/config.json" ] || "$python" bench/python/make_split_bench_model.py "$big" "$tokenizer" --shape "$shape"
  [ -s "$dataset" ] || make_dataset
  head -n "${SPLIT_TEXTS:-1500}" "$dataset" > /tmp/split_dataset.jsonl
  sync
  for run in $(seq "$runs"); do
    start=$(seconds)
    "$tools/capture_activations" --model "$big" --dataset /tmp/split_dataset.jsonl --output-dir "/tmp/capture_${name}_$run" \
      --layers "$split_layers" --devices "$devices" --placement layers --overwrite --json -q > "$out/${name}_probekit_$run.json"
    echo "{\"run\": $run, \"process_seconds\": $(awk "BEGIN{print $(seconds) - $start}")}" >> "$out/${name}_process.jsonl"
  done
  CUDA_VISIBLE_DEVICES=$devices "$python" bench/python/moe_baseline.py "$big" /tmp/split_dataset.jsonl \
    --layers ${split_layers//,/ } --device-map auto > "$out/${name}_python.json"
  "$tools/train_binary_probes" --activations "/tmp/capture_${name}_1/layer_${last}_activations.h5" \
    --output-dir "/tmp/probes_$name" --overwrite --epochs 20 --early-stopping-patience -1 --device cuda -q
  start=$(seconds)
  "$tools/multi_probe_inference" --probes-dir "/tmp/probes_$name" --model "$big" --devices "$devices" --placement layers \
    --generate --text "I kept asking myself whether the data really supported the conclusion everyone repeated, so I" \
    --max-new-tokens 128 --no-stop --json -q | "$python" bench/python/timestamp_lines.py "$start" > "$out/${name}_generate.txt"
  "$python" bench/python/generation_rate.py "$out/${name}_generate.txt" > "$out/${name}_generate.json"
}
if has split32b && [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  [ -s /tmp/qwen3_tokenizer.json ] || gunzip -c .gpu/qwen3_tokenizer.json.gz > /tmp/qwen3_tokenizer.json
  split_bench split32b qwen3_32b /tmp/qwen3_tokenizer.json 0,1 16,32,48,63
fi
if has split70b && [ "$(nvidia-smi -L | wc -l)" -ge 4 ]; then
  [ -s /tmp/llama3_tokenizer.json ] || gunzip -c .gpu/llama3_tokenizer.json.gz > /tmp/llama3_tokenizer.json
  split_bench split70b llama3_70b /tmp/llama3_tokenizer.json 0,1,2,3 20,40,60,79
fi
if has coldstart; then
  chat_probes
  text="I kept asking myself whether the data really supported the conclusion everyone repeated."
  sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null && echo "page cache dropped" || echo "page cache could not be dropped"
  # Each run's -v log with the time of each line (the profile), then the process's end: one cold run, then RUNS warm
  # ones (at least two: the warm figure varies by a few tenths of a second from run to run on one host).
  warm_runs="warm"
  for run in $(seq 2 "$(( runs > 2 ? runs : 2 ))"); do warm_runs="$warm_runs warm$run"; done
  for run in cold $warm_runs; do
    start=$(seconds)
    "$tools/multi_probe_inference" --probes-dir /tmp/probes_1 --model "$model" --text "$text" -v \
      > "$out/coldstart_$run.txt" 2> >("$python" bench/python/timestamp_lines.py "$start" > "$out/coldstart_${run}_profile.txt")
    end=$(seconds)
    sleep 0.2
    echo "$(awk "BEGIN{printf \"%7.3f\", $end - $start}")  process ended" >> "$out/coldstart_${run}_profile.txt"
    echo "{\"run\": \"$run\", \"seconds\": $(awk "BEGIN{print $end - $start}")}" | tee -a "$out/coldstart.jsonl"
  done
  cat "$out/coldstart_warm.txt" "$out"/coldstart_*_profile.txt
  /tmp/build/bench/upload_bench --model "$model" --repeats 3 -q | tee "$out/upload_warm.jsonl"
  /tmp/build/bench/upload_bench --model "$model" --repeats 2 --cold -q | tee "$out/upload_cold.jsonl"
  # The Python side, as a whole process too: imports, from_pretrained, the tokenizer, the text.
  for run in python_cold python_warm; do
    [ "$run" = python_cold ] && { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }
    start=$(seconds)
    "$python" bench/python/coldstart_baseline.py "$model" "$text" > "$out/coldstart_$run.json" 2> /dev/null
    echo "{\"run\": \"$run\", \"seconds\": $(awk "BEGIN{print $(seconds) - $start}"), \"steps\": $(cat "$out/coldstart_$run.json")}" |
      tee -a "$out/coldstart.jsonl"
  done
fi
if has moe; then
  moe_model=/tmp/moe_bench_model
  moe_layer_count=${MOE_LAYERS:-24}
  [ -s /tmp/qwen3_tokenizer.json ] || gunzip -c .gpu/qwen3_tokenizer.json.gz > /tmp/qwen3_tokenizer.json
  [ -s "$moe_model/config.json" ] ||
    "$python" bench/python/make_moe_bench_model.py "$moe_model" /tmp/qwen3_tokenizer.json --layers "$moe_layer_count"
  [ -s "$dataset" ] || make_dataset
  n=$moe_layer_count
  moe_layers="$((n / 4)) $((n / 2)) $((3 * n / 4)) $((n - 1))"
  for run in $(seq "$runs"); do
    "$tools/capture_activations" --model "$moe_model" --dataset "$dataset" --output-dir "/tmp/moe_capture_$run" \
      --layers "${moe_layers// /,}" --overwrite --json -q > "$out/moe_capture_probekit_$run.json"
    [ "$run" -gt "$python_runs" ] || PYTHONUNBUFFERED=1 "$python" bench/python/moe_baseline.py "$moe_model" "$dataset" \
      --layers $moe_layers > "$out/moe_capture_python_$run.json"
  done
  cat "$out"/moe_capture_*.json
  /tmp/build/bench/capture_profile_bench --model "$moe_model" --dataset "$dataset" --output-dir /tmp/moe_capture_profile \
    --layers "${moe_layers// /,}" --overwrite -q --trace /tmp/moe_trace.json > /dev/null
  "$python" bench/python/summarize_trace.py /tmp/moe_trace.json | tee "$out/profile_moe.md"
fi
if has hybrid; then
  hybrid_model=/tmp/hybrid_bench_model
  [ -s /tmp/qwen3_tokenizer.json ] || gunzip -c .gpu/qwen3_tokenizer.json.gz > /tmp/qwen3_tokenizer.json
  [ -s "$hybrid_model/config.json" ] || "$python" bench/python/make_hybrid_bench_model.py "$hybrid_model" /tmp/qwen3_tokenizer.json
  [ -s "$dataset" ] || make_dataset
  for run in $(seq "$runs"); do
    "$tools/capture_activations" --model "$hybrid_model" --dataset "$dataset" --output-dir "/tmp/hybrid_capture_$run" \
      --layers 8,16,24,31 --overwrite --json -q > "$out/hybrid_capture_probekit_$run.json"
    [ "$run" -gt "$python_runs" ] || PYTHONUNBUFFERED=1 "$python" bench/python/moe_baseline.py "$hybrid_model" "$dataset" \
      --layers 8 16 24 31 > "$out/hybrid_capture_python_$run.json"
  done
  grep -h -E "examples_per_s" "$out"/hybrid_capture_*.json
fi
if has previous; then
  if [ ! -x /tmp/build_old/tools/capture_activations ]; then
    rm -rf /tmp/old_src /tmp/build_old && mkdir -p /tmp/old_src && tar -xzf .gpu/old_src.tar.gz -C /tmp/old_src
    # The archive holds the sources, not the tests, which its CMakeLists.txt adds: an empty folder stands in.
    mkdir -p /tmp/old_src/tests && touch /tmp/old_src/tests/CMakeLists.txt
    PROBEKIT_SOURCE=/tmp/old_src PROBEKIT_BUILD=/tmp/build_old bash scripts/gpu/build.sh capture_activations
  fi
  for run in $(seq "$runs"); do
    for side in old new; do
      bin=$tools/capture_activations
      [ "$side" = old ] && bin=/tmp/build_old/tools/capture_activations
      "$bin" --model "$model" --dataset "$dataset" --output-dir "/tmp/capture_$side" --layers $layers --overwrite --json -q \
        > "$out/capture_${side}_$run.json"
      echo "$side $run $(grep -h examples_per_second "$out/capture_${side}_$run.json")"
    done
  done
fi
if has python_api; then
  PROBEKIT_CMAKE_ARGS="-DPROBEKIT_BUILD_PYTHON=ON -DPython3_EXECUTABLE=$python" bash scripts/gpu/build.sh _native capture_activations
  cp python/probekit/*.py /tmp/build/python/probekit/
  for run in $(seq "$runs"); do
    "$tools/capture_activations" --model "$model" --dataset "$dataset" --output-dir "/tmp/capture_api_$run" --layers $layers \
      --overwrite --json -q > "$out/capture_cli_$run.json"
    grep -h examples_per_second "$out/capture_cli_$run.json"
    PYTHONPATH=/tmp/build/python "$python" bench/python/python_api_capture.py "$model" "$dataset" --layers $layers --runs 1 \
      | tee "$out/capture_python_api_$run.json"
  done
fi
if has steer; then
  [ -s /tmp/capture_1/layer_17_activations.h5 ] || "$tools/capture_activations" --model "$model" --dataset "$dataset" \
    --output-dir /tmp/capture_1 --layers $layers --overwrite -q
  "$tools/make_steering_vectors" --activations /tmp/capture_1 --label reframing --layers 17 --output /tmp/steer17.safetensors \
    --overwrite -q | tee "$out/steer_vector.txt"
  for run in $(seq "$runs"); do
    for side in plain steered; do
      extra=""
      [ "$side" = steered ] && extra="--steer-vector /tmp/steer17.safetensors=4"
      start=$(seconds)
      "$tools/multi_probe_inference" --probes-dir /tmp/probes_1 --model "$model" --generate --text "$prompt" \
        --max-new-tokens 128 --no-stop --json -q $extra | "$python" bench/python/timestamp_lines.py "$start" > "$out/steer_${side}_$run.txt"
      "$python" bench/python/generation_rate.py "$out/steer_${side}_$run.txt" | tee "$out/steer_${side}_$run.json"
    done
  done
  "$python" bench/python/steered_generate_baseline.py "$model" /tmp/steer17.safetensors "$prompt" --coefficient 4 \
    --new-tokens 128 | tee "$out/steer_python.json"
fi
if has sweep; then
  prompts=/tmp/sweep_prompts.txt
  printf '%s\n' "I kept asking myself whether the data really supported the conclusion" \
    "Let me step back and look at the bigger picture" "When the plan failed I wrote down what I could change" \
    "She noticed the small crack in the window before anyone else" "We compared the two options side by side" \
    "Instead of seeing the rejection as a failure" "I wondered what would happen if we tried the opposite" \
    "The meeting ran long, and by the end" > "$prompts"
  "$tools/steering_sweep" --probes-dir /tmp/probes_1 --model "$model" --layer 33 --coefficients=-8,-4,0,4,8 \
    --file "$prompts" --max-new-tokens 48 --no-stop --rows-per-batch ${SWEEP_ROWS:-128} --output-dir /tmp/sweep --overwrite -q \
    | tail -1 | tee "$out/sweep_probekit.txt"
  cp /tmp/sweep/sweep.json "$out/sweep.json"
  "$python" bench/python/steered_generate_baseline.py "$model" /tmp/steer17.safetensors --sweep-cells "${SWEEP_SAMPLE:-40}" \
    --prompts "$prompts" --new-tokens 48 | tee "$out/sweep_python.json"
fi
every_token=/tmp/capture_every_token/layer_33_activations.h5
if has attention || has multimax; then
  [ -s "$every_token" ] || "$tools/capture_activations" --model "$model" --dataset "$dataset" \
    --output-dir /tmp/capture_every_token --layers 33 --position all --overwrite -q
fi
# every_token_runs KIND OURS_KEY TORCH_KEY [TORCH_FLAGS...]: train_binary_probes --model-type KIND on the every-token
# capture (45 labels, 20 epochs, no early stop) timed as a whole process (OURS_KEY), beside torch_attention_probe.py
# with TORCH_FLAGS (its "seconds" the training alone; TORCH_KEY its whole process, as ours), alternating.
every_token_runs() {
  local kind=$1 ours=$2 theirs=$3
  for run in $(seq "$runs"); do
    start=$(seconds)
    "$tools/train_binary_probes" --activations "$every_token" --output-dir "/tmp/${kind}_probes_$run" --overwrite \
      --model-type "$kind" --epochs 20 --early-stopping-patience -1 --device cuda --json -q \
      > "$out/${kind}_probekit_$run.json"
    echo "{\"run\": $run, \"$ours\": $(awk "BEGIN{print $(seconds) - $start}")}" | tee -a "$out/${kind}_process.jsonl"
    "$python" -c "import json, sys; a = json.load(open(sys.argv[1])); print({k: a[k] for k in a if k.startswith('average')})" \
      "/tmp/${kind}_probes_$run/aggregate_metrics.json" | tee "$out/${kind}_probekit_metrics_$run.txt"
    [ "$run" -gt "$python_runs" ] && continue
    start=$(seconds)
    "$python" bench/python/torch_attention_probe.py "$every_token" --epochs 20 "${@:4}" | tee "$out/${kind}_torch_$run.json"
    echo "{\"run\": $run, \"$theirs\": $(awk "BEGIN{print $(seconds) - $start}")}" | tee -a "$out/${kind}_process.jsonl"
  done
}
if has attention; then
  every_token_runs attention attention_probe_train_s torch_attention_probe_process_s
fi
if has multimax; then
  every_token_runs multimax multimax_train_s torch_multimax_process_s --kind multimax --heads 8
fi
if has monitor; then
  cp tests/fixtures/models/gemma3_text/chat_template.jinja "$model/"
  chat_probes
  start_server 8095 --max-streams 32 --http-threads 40
  "$python" bench/python/chat_streams_bench.py --port 8095 --streams 16 --tokens 128 --runs "$runs" --monitored \
    | tee "$out/monitored_streams.json"
  kill "$server"; wait "$server" || true
fi
if has masked; then
  cp tests/fixtures/models/gemma3_text/chat_template.jinja "$model/"
  "$python" bench/python/masked_dataset.py "$dataset" "$model" /tmp/masked_chats.jsonl /tmp/masked_plain.jsonl
  for run in $(seq "$runs"); do
    for kind in chats plain; do
      flags=(--mask assistant)
      [ "$kind" = plain ] && flags=(--prompt-suffix "")
      "$tools/capture_activations" --model "$model" --dataset "/tmp/masked_$kind.jsonl" --output-dir "/tmp/masked_capture_$kind" \
        --layers $layers --overwrite --json -q "${flags[@]}" > "$out/masked_capture_${kind}_$run.json"
    done
  done
fi
# Batch-1 chat decode with the 45 probes, without and with the bench SAE's largest latents per token (--sae); one
# completion's latents kept beside the figures.
if has saegen; then
  cp tests/fixtures/models/gemma3_text/chat_template.jinja "$model/"
  chat_probes
  sae_dir=$("$python" bench/python/make_bench_sae.py "$model" /tmp/bench_sae)
  for kind in plain sae; do
    flags=()
    [ "$kind" = sae ] && flags=(--sae "res=$sae_dir")
    start_server 8096 "${flags[@]}"
    "$python" bench/python/chat_streams_bench.py --port 8096 --one-stream --tokens 128 --runs "$runs" \
      | tee "$out/sae_generation_$kind.json"
    [ "$kind" = sae ] && "$python" -c "import json, urllib.request
body = json.dumps({'messages': [{'role': 'user', 'content': 'Tell me about rivers.'}], 'max_tokens': 4}).encode()
request = urllib.request.Request('http://127.0.0.1:8096/v1/chat/completions', body, {'Content-Type': 'application/json'})
print(json.dumps(json.load(urllib.request.urlopen(request))['probes'][0]['latents']))" > "$out/sae_generation_latents.json"
    kill "$server"; wait "$server" || true
  done
fi
# capture_with_peak NAME MODEL LAYERS RUN [FLAGS...]: capture_activations on the dataset with nvidia-smi's memory
# reading beside it.
capture_with_peak() {
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > "$out/$1_gpu_memory_mib_$4.txt" &
  local sampler=$!
  "$tools/capture_activations" --model "$2" --dataset "$dataset" --output-dir "/tmp/$1_capture_$4" --layers "$3" \
    --overwrite --json -q "${@:5}" > "$out/$1_capture_probekit_$4.json"
  kill "$sampler"
  grep -h examples_per_second "$out/$1_capture_probekit_$4.json"
  echo "$1 peak GPU memory (MiB): $(sort -n "$out/$1_gpu_memory_mib_$4.txt" | tail -1)"
}
if has fp8; then
  [ -s /tmp/qwen3_tokenizer.json ] || gunzip -c .gpu/qwen3_tokenizer.json.gz > /tmp/qwen3_tokenizer.json
  [ -s /tmp/fp8_bench_model/config.json ] ||
    "$python" bench/python/make_fp8_bench_model.py /tmp/bf16_bench_model /tmp/fp8_bench_model /tmp/qwen3_tokenizer.json
  [ -s "$dataset" ] || make_dataset
  sync
  du -sb /tmp/bf16_bench_model /tmp/fp8_bench_model | tee "$out/fp8_model_bytes.txt"
  for run in $(seq "$runs"); do
    capture_with_peak bf16 /tmp/bf16_bench_model 9,18,27,35 "$run"
    capture_with_peak fp8 /tmp/fp8_bench_model 9,18,27,35 "$run" --fp8-products fp8
    capture_with_peak fp8_decoded /tmp/fp8_bench_model 9,18,27,35 "$run"
  done
  "$python" bench/python/compare_captures.py /tmp/fp8_capture_1 /tmp/fp8_decoded_capture_1 | tee "$out/fp8_agreement.jsonl"
fi
if has oss; then
  oss_model=/tmp/oss_bench_model
  [ -s /tmp/qwen3_tokenizer.json ] || gunzip -c .gpu/qwen3_tokenizer.json.gz > /tmp/qwen3_tokenizer.json
  [ -s "$oss_model/config.json" ] || "$python" bench/python/make_oss_bench_model.py "$oss_model" /tmp/qwen3_tokenizer.json
  [ -s "$dataset" ] || make_dataset
  sync
  du -sb "$oss_model" | tee "$out/oss_model_bytes.txt"
  for run in $(seq "$runs"); do
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > "$out/oss_gpu_memory_mib_$run.txt" &
    sampler=$!
    "$tools/capture_activations" --model "$oss_model" --dataset "$dataset" --output-dir "/tmp/oss_capture_$run" \
      --layers 6,12,18,23 --overwrite --json -q > "$out/oss_capture_probekit_$run.json"
    kill "$sampler"
    grep -h examples_per_second "$out/oss_capture_probekit_$run.json"
    echo "peak GPU memory (MiB): $(sort -n "$out/oss_gpu_memory_mib_$run.txt" | tail -1)"
    [ "$run" -gt "$python_runs" ] || PYTHONUNBUFFERED=1 "$python" bench/python/moe_baseline.py "$oss_model" "$dataset" \
      --layers 6 12 18 23 | tee "$out/oss_capture_python_$run.json"
  done
fi
if has patching; then
  [ -s /tmp/gemma3_tokenizer.json ] || gunzip -c .gpu/gemma3_tokenizer.json.gz > /tmp/gemma3_tokenizer.json
  [ -s "$model/config.json" ] || "$python" bench/python/make_bench_model.py "$model" /tmp/gemma3_tokenizer.json
  for run in $(seq "$runs"); do
    "$python" bench/python/patching_baseline.py "$model" --tokens 32 --pair-out /tmp/patching_pair.json \
      --sample "${PATCHING_SAMPLE:-0}" | tee "$out/patching_python_$run.json"
    /tmp/build/bench/patching_bench --model "$model" --device cuda --dtype bf16 --repeats 5 -q \
      --clean "$("$python" -c 'import json; print(json.load(open("/tmp/patching_pair.json"))["clean"])')" \
      --corrupted "$("$python" -c 'import json; print(json.load(open("/tmp/patching_pair.json"))["corrupted"])')" \
      | tee "$out/patching_probekit_$run.json"
  done
fi
if has sae; then
  [ -s /tmp/gemma3_tokenizer.json ] || gunzip -c .gpu/gemma3_tokenizer.json.gz > /tmp/gemma3_tokenizer.json
  [ -s "$model/config.json" ] || "$python" bench/python/make_bench_model.py "$model" /tmp/gemma3_tokenizer.json
  make_dataset
  sae_dir=$("$python" bench/python/make_bench_sae.py "$model" /tmp/bench_sae)
  for run in $(seq "$runs"); do
    "$tools/capture_activations" --model "$model" --dataset "$dataset" --output-dir "/tmp/sae_plain_$run" --layers $layers \
      --overwrite --json -q > "$out/sae_capture_plain_$run.json"
    "$tools/capture_activations" --model "$model" --dataset "$dataset" --output-dir "/tmp/sae_layer17_$run" --layers 17 \
      --overwrite --json -q > "$out/sae_capture_layer17_$run.json"
    "$tools/capture_activations" --model "$model" --dataset "$dataset" --output-dir "/tmp/sae_latents_$run" \
      --sae "res=$sae_dir" --site sae:res --sae-top-k 64 --overwrite --json -q > "$out/sae_capture_latents_$run.json"
  done
  grep -h examples_per_second "$out"/sae_capture_*.json
fi

