"""Probe: FSDP2 xl 8x2048 on two GPUs; timings, host times, overlap, and gzipped traces per rank."""
import gc, gzip, os, shutil, sys, time
from pathlib import Path
import torch, torch.distributed as dist
sys.path.insert(0, "src")
from trainperf.workloads.sharded import ShardSpec, ShardedStep
from trainperf.core.timing import PhaseTimer
from trainperf.core.stats import summarize
from trainperf.profiling.overlap import communication_overlap
from trainperf.profiling.torch_prof import profile_steps

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
torch.cuda.set_device(dev)
dist.init_process_group("nccl", device_id=dev)
out = Path(os.environ["OUTDIR"]); out.mkdir(parents=True, exist_ok=True)
CONFIGS = [c.split(":") for c in os.environ.get("CONFIGS", "eager-off:0:0,comp-off:1:0,comp-on:1:1").split(",")]
SAVE = set(os.environ.get("SAVE", "eager-off,comp-off").split(","))
for name, comp, reshard in CONFIGS:
    t_start = time.time()
    spec = ShardSpec(model=os.environ.get("MODEL", "xl"), world_size=world, shard="full", checkpoint="full",
                     seq=2048, batch=int(os.environ.get("BATCH", "8")), optimizer="adamw-fused",
                     compile=comp == "1", reshard_after_forward=reshard == "1")
    step = ShardedStep(spec, rank, world, dev)
    for _ in range(3):
        step()
    timer = PhaseTimer(dev)
    times = []
    for _ in range(6):
        torch.cuda.synchronize(); dist.barrier()
        t0 = time.perf_counter()
        with timer.phase("step"):
            step(timer.phase)
        h = (time.perf_counter() - t0) * 1e3
        torch.cuda.synchronize()
        times.append(((time.perf_counter() - t0) * 1e3, h))
    gpu = {k: round(summarize(v)["median"], 1) for k, v in timer.samples().items()}
    host = {k: round(summarize(v)["median"], 1) for k, v in timer.host_samples().items()}
    tp = out / f"{name}-rank{rank}.json"
    torch.cuda.synchronize(); dist.barrier()
    t0 = time.perf_counter()
    tr = profile_steps(step, dev, trace_path=tp)
    prof_ms = (time.perf_counter() - t0) * 1e3
    ov = communication_overlap(tr.kernels, tr.launches)
    wall = sorted(t for t, _ in times)[len(times) // 2]
    print(f"[{name} rank{rank}] step {wall:.1f} ms (all {[round(t) for t, _ in times]}), host launch of step "
          f"{sorted(h for _, h in times)[len(times)//2]:.1f}; gpu {gpu}; host {host}; profiled step {prof_ms:.0f} ms; "
          f"comm {ov['comm']/1e3:.1f} exposed {ov['exposed']/1e3:.1f} host-late {ov['exposed_host']/1e3:.1f} "
          f"hidden {ov['hidden_share']:.2f}; peak {torch.cuda.max_memory_allocated()/2**30:.1f} GiB; "
          f"case {time.time()-t_start:.0f} s", flush=True)
    if name in SAVE:
        with open(tp, "rb") as f, gzip.open(str(tp) + ".gz", "wb", compresslevel=6) as g:
            shutil.copyfileobj(f, g)
    tp.unlink()
    del step, tr
    gc.collect(); torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
dist.destroy_process_group()
