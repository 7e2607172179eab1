#!/usr/bin/env bash
# Builds the libFuzzer targets in build-fuzz/ (clang, coverage instrumentation, AddressSanitizer and
# UndefinedBehaviorSanitizer) and runs them on a corpus seeded from the test fixtures. fuzz/README.md lists
# the targets, what each covers, and what the runs found.
#
#   scripts/fuzz.sh                          every target for 60 seconds, one after the other
#   scripts/fuzz.sh fuzz_dataset 600         one target for 10 minutes
#   scripts/fuzz.sh all 600                  every target, 10 minutes each
#   scripts/fuzz.sh build                    only build
#
# The corpus grows in build-fuzz/corpus/<target>/ and is reused by later runs. A crash, hang or leak stops the
# target and is saved in build-fuzz/crashes/<target>/; replay it with `build-fuzz/fuzz/<target> FILE`. The
# script exits 1 when any target found something.
set -euo pipefail
cd "$(dirname "$0")/.."
which_target=${1:-all}
seconds=${2:-60}
targets=(fuzz_safetensors fuzz_config fuzz_tokenizer_json fuzz_tokenizer_encode fuzz_dataset fuzz_activation_file
         fuzz_probe_files fuzz_hub_responses fuzz_server_requests fuzz_request_framing fuzz_chat_template fuzz_chat_request
         fuzz_npz fuzz_sae_files)

cxx=${FUZZ_CXX:-clang++-14}
cc=${FUZZ_CC:-clang-14}
if ! command -v "$cxx" > /dev/null; then
  echo "$cxx not found: install clang-14 and libclang-rt-14-dev (libFuzzer), or set FUZZ_CXX and FUZZ_CC" >&2
  exit 2
fi
if [ "$which_target" = all ] || [ "$which_target" = build ]; then
  build_targets=("${targets[@]}")
else
  build_targets=("$which_target")
fi

cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER="$cc" \
  -DCMAKE_CXX_COMPILER="$cxx" -DPROBEKIT_FUZZ=ON -DPROBEKIT_BUILD_TESTS=OFF > build-fuzz.configure.log ||
  { cat build-fuzz.configure.log; exit 1; }
rm -f build-fuzz.configure.log
cmake --build build-fuzz --target "${build_targets[@]}"
[ "$which_target" = build ] && exit 0

python3 fuzz/make_seeds.py build-fuzz/seeds
# The targets that read files write them here; a memory-backed directory keeps that cheap.
scratch=$(mktemp -d "$( [ -w /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}" )/probekit-fuzz-XXXXXX")
trap 'rm -rf "$scratch"' EXIT

found=0
for target in "${build_targets[@]}"; do
  corpus=build-fuzz/corpus/$target
  crashes=build-fuzz/crashes/$target
  dictionary=build-fuzz/dicts/$target.dict
  mkdir -p "$corpus" "$crashes" build-fuzz/dicts
  cat fuzz/dicts/json.dict > "$dictionary"
  [ -f "fuzz/dicts/$target.dict" ] && cat "fuzz/dicts/$target.dict" >> "$dictionary"
  inputs=("$corpus" "build-fuzz/seeds/$target")
  [ -d "fuzz/regressions/$target" ] && inputs+=("fuzz/regressions/$target")
  echo "== $target for $seconds s"
  # -timeout: an input taking 10 s is a hang; -rss_limit_mb: one needing 2 GB is a memory blow-up.
  if ! TMPDIR=$scratch "build-fuzz/fuzz/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -dict="$dictionary" -artifact_prefix="$crashes/" -print_final_stats=1 "${inputs[@]}" \
      2>&1 | tee "build-fuzz/$target.log" | grep -E "^#[0-9]+[[:space:]]+DONE|^stat::number_of_executed_units|ERROR|FINDING|SUMMARY"; then
    :
  fi
  if ls "$crashes" | grep -q .; then
    echo "!! $target: findings in $crashes (full log: build-fuzz/$target.log)"
    found=1
  fi
done
exit $found
