#!/usr/bin/env bash
# GPU run 2: the full step sweep, then one case measured three more times (run-to-run spread).
RUN=run2
source benchmarks/scripts/common.sh
DB=$RES/step.db
S="python3 -m trainperf step --db $DB --batch 4 --warmup 5 --steps 10 --quiet"
timeout 200 $S --size small,medium,large,xl,2.7B --context 128,256,512,1024 --precision fp32,bf16 --compile off | tee "$RES/step_eager.txt"
timeout 330 $S --size small,medium,large,xl,2.7B --context 128,256,512,1024 --precision fp32,bf16 --compile on | tee "$RES/step_compiled.txt"
for i in 1 2 3; do
  timeout 20 $S --size medium --context 512 --precision bf16 --compile off --rerun | grep -E "medium" >> "$RES/step_repeat.txt"
done
tp export --db $DB --workload step --format csv -o "$RES/step.csv"
tp export --db $DB --workload step --format markdown -o "$RES/step.md"
