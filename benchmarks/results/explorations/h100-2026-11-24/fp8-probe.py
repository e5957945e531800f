"""Probe: torchao float8 configurations in trainperf's float8 step, and `fast` with K/V heads
expanded, at the shapes given. usage: python3 fp8-probe.py DEADLINE_EPOCH SHAPE... [VARIANT...]

Each variant is one `measure_llama` case (5 warm-up, 20 timed iterations) of the `fp8` recipe's
setup with `peers.apply_float8` swapped for the variant's conversion; output in fp8-probe.txt.
"""

import sys
import time

import torch

from trainperf.models import peers
from trainperf.workloads import llama_sdpa


def convert(config_of, only_mlp: bool = False):  # noqa: ANN001, ANN201
    def apply(model: torch.nn.Module) -> None:
        from torchao.float8 import convert_to_float8_training

        def takes(module: torch.nn.Module, fqn: str) -> bool:
            return (isinstance(module, torch.nn.Linear) and "lm_head" not in fqn
                    and (not only_mlp or ".mlp." in fqn))

        convert_to_float8_training(model, config=config_of(), module_filter_fn=takes)
    return apply


def tensorwise():  # noqa: ANN201
    from torchao.float8 import Float8LinearConfig
    return Float8LinearConfig(round_scales_to_power_of_2=True)


def recipe(name: str):  # noqa: ANN201
    from torchao.float8 import Float8LinearConfig
    return lambda: Float8LinearConfig.from_recipe_name(name)


VARIANTS = {"tensorwise": ("fp8", convert(tensorwise)),
            "tensorwise-mlp": ("fp8", convert(tensorwise, only_mlp=True)),
            "rowwise": ("fp8", convert(recipe("rowwise"))),
            "rowwise-gw-hp": ("fp8", convert(recipe("rowwise_with_gw_hp"))),
            "fast": ("fast", None), "fast-kv-expanded": ("fast", None)}


def main() -> None:
    deadline = float(sys.argv[1])
    shapes = [tuple(map(int, s.split("x"))) for s in sys.argv[2:] if s not in VARIANTS]
    chosen = [s for s in sys.argv[2:] if s in VARIANTS] or list(VARIANTS)
    for batch, seq in shapes:
        for name in chosen:
            recipe_name, apply = VARIANTS[name]
            if time.time() > deadline:
                print("deadline reached", flush=True)
                return
            setup = llama_sdpa.recipe_setup(recipe_name, "cuda")
            if name.endswith("kv-expanded"):
                setup["kv_heads"] = "expanded"
            spec = llama_sdpa.setup_spec(setup, "CUDNN_ATTENTION", batch=batch, seq=seq, warmup=5, iters=20)
            if apply is not None:
                peers.apply_float8 = apply
            torch.cuda.reset_peak_memory_stats()
            start = time.time()
            try:
                m = llama_sdpa.measure_llama(spec)
            except Exception as exc:  # noqa: BLE001 - a probe reports and goes on
                print(f"{batch}x{seq} {name}: error {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                continue
            print(f"{batch}x{seq} {name:18s} {m['iter_s_mean']:.4f} s (median {m['iter_s_median']:.4f}, "
                  f"cv {m['iter_s_cv']:.3f}) peak {m['peak_mem_gb']:.2f} GiB, "
                  f"sm {m.get('sm_clock_mhz')} MHz, {m.get('power_w')} W, capped {m.get('power_capped')}, "
                  f"loss {m['loss']:.4f}, case took {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
