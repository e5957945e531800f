# . float8-parity-mlp-only.sh: `trainperf parity` (2 layers, 100 AdamW steps, one run each) of
# torchao's float8 on the MLPs' Linears only (ao8-mlp) beside trainperf's float8 MLP (t8) and
# torchao's float8 on every decoder Linear (ao8), all eager, at the suite's 8 x 1024 tokens and,
# for another draw of the same task, at 16 x 512.
run() {  # MLP_ONLY OUT_NAME ARGS...
  python3 -c "
import sys
from trainperf.models import peers
from trainperf.workloads.llama_sdpa import RECIPES
if sys.argv.pop(1) == 'mlp':
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    def mlps_only(model):
        convert_to_float8_training(model, config=Float8LinearConfig(round_scales_to_power_of_2=True),
                                   module_filter_fn=lambda m, fqn: '.mlp.' in f'.{fqn}.')
    peers.apply_float8 = mlps_only
RECIPES.update({'t8': {'float8': 'trainperf'}, 'ao8': {'float8': 'torchao'},
                'ao8-mlp': {'float8': 'torchao'}})
from trainperf.cli import app
app()" "$1" parity --layers 2 --train-steps 100 --repeats 1 --db /tmp/$2.db --out $OUT/$2 --quiet "${@:3}" \
    2>&1 | grep -E "FLAG|ok  "
}
run mlp mlp-only --recipe stock,ao8-mlp
run all seq512 --recipe stock,t8,ao8 --batch 16 --seq 512
