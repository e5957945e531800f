# . float8-parity-parts.sh: `trainperf parity` (2 layers, 100 AdamW steps, one run) of the float8
# MLP in the parts of the fp8-trainperf recipe one at a time (eager; with the chunked loss; with
# each decoder layer compiled) and of torchao's float8 eager, to find which part departs from stock.
python3 -c "
from trainperf.workloads.llama_sdpa import RECIPES
RECIPES.update({'t8': {'float8': 'trainperf'}, 't8-chunked': {'float8': 'trainperf', 'loss': 'chunked'},
                't8-layers': {'float8': 'trainperf', 'compile': 'layers'},
                'ao8': {'float8': 'torchao'}})
from trainperf.cli import app
app()" parity --recipe stock,t8,t8-chunked,t8-layers,ao8,fp8-trainperf --layers 2 --train-steps 100 \
  --repeats 1 --db /tmp/parts.db --out $OUT/parity-parts --quiet 2>&1 | grep -vi warn | tail -12
