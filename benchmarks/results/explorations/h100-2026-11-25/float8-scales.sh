# . float8-scales.sh SETTING... : `trainperf parity --recipe stock,fp8-trainperf` (2 layers, 100
# AdamW steps, one run) with the float8 MLP's scales set each way in turn: HISTORY:MARGIN (the
# amax history's length and the scale's margin), or `dynamic` (every cast scaled from its own
# current amax, as torchao does, by leaving each tensor uncalibrated).
for s in "$@"; do
  python3 -c "
import sys
import trainperf.kernels.float8_mlp as f
setting = sys.argv.pop(1)
if setting == 'dynamic':
    calibrate = f.ScaleState.next
    def dynamic(self, role, dtype, current=None):
        calibrate(self, role, dtype, current)
        self.calibrated[role] = False
    f.ScaleState.next = dynamic
    f.HISTORY = 1  # the scale from this amax alone
else:
    f.HISTORY, f.MARGIN = map(int, setting.split(':'))
from trainperf.cli import app
app()" "$s" parity --recipe stock,fp8-trainperf --layers 2 --train-steps 100 --repeats 1 \
    --db /tmp/scales-$s.db --out $OUT/scales-${s/:/-} --quiet 2>&1 | grep -E "FLAG|ok  " | head -4
  echo "setting $s done"
done
