#!/usr/bin/env bash
# `make demo`: compile the shipped example bot model, inspect it, and score sample requests,
# printing what edgescore decides for each. (Later: the whole system — Envoy, filter, Ray.)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/edgescore}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
threshold=${EDGESCORE_DEMO_THRESHOLD:-0.5}

echo "== compile"
"$bin" compile models/example/bot_small.json -o "$work/bot.esm" --name bot --version "$(date +%F)"
echo
echo "== inspect"
"$bin" inspect "$work/bot.esm" | head -14
echo
echo "== score models/example/sample.csv (threshold $threshold)"
"$bin" score "$work/bot.esm" --csv models/example/sample.csv > "$work/scores.txt"
printf '%-4s %-8s %-5s %-13s %-8s %-10s %s\n' row method ua_len req_per_min_ip P\(bot\) decision "(truth)"
paste -d, <(tail -n +2 models/example/sample.csv) "$work/scores.txt" models/example/sample_labels.txt \
  | awk -F, -v t="$threshold" '
      NR==1 { }
      { n = NF; score = $(n-1); truth = $n; decision = (score >= t) ? "block" : "allow";
        printf "%-4d %-8s %-5s %-13s %-8.4f %-10s %s\n", NR, $25, $3, $11, score, decision, truth }'
