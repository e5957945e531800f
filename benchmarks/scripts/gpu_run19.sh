#!/usr/bin/env bash
# GPU run 19 (session 4): the fast step's decoder layers compiled plainly or replayed as CUDA
# graphs (torch.compile mode reduce-overhead), to remove launch gaps; is the cuDNN frontend here?
RUN=${RUN:-run19}
source benchmarks/scripts/common.sh
python3 -c "import cudnn; print('cudnn frontend', cudnn.__version__)" > "$RES/cudnn_frontend.txt" 2>&1
timeout 500 python3 -m trainperf llama --backend CUDNN_ATTENTION --compile layers,layers-graphs --loss chunked \
  --batch-seq 24x768,12x1024,1x16384 --iters 20 --warmup 5 --db "$RES/llama.db" --out "$RES/llama_graphs" \
  --quiet | tee "$RES/llama_graphs.txt"
