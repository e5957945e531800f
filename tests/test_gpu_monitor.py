"""GpuMonitor: clocks and power sampled through NVML across a measured window (a fake NVML here)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
import types

import pytest
import torch

from trainperf.core import gpu_monitor
from trainperf.core.gpu_monitor import GpuMonitor


class FakeNvml(types.SimpleNamespace):
    """Scripted readings; keeps what it returned, so the test can check the summary against it."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1

    def __init__(self, event_name: str = "nvmlDeviceGetCurrentClocksEventReasons", fail_init: bool = False):
        super().__init__()
        self.sm, self.watts, self.capped, self.inits, self.shutdowns = [], [], [], 0, 0
        self.fail_init = fail_init
        setattr(self, event_name, self._reasons)

    def nvmlInit(self) -> None:  # noqa: N802 - NVML's names
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")
        self.inits += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shutdowns += 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:  # noqa: N802
        return f"gpu{index}"

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:  # noqa: N802
        return f"gpu{NVML_INDEX_OF[uuid]}"

    def nvmlDeviceGetClockInfo(self, handle: str, kind: int) -> int:  # noqa: N802
        if kind == self.NVML_CLOCK_MEM:
            return 2619
        self.sm.append(1500 + 75 * (len(self.sm) % 4))  # 1500, 1575, 1650, 1725, ...
        return self.sm[-1]

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:  # noqa: N802 - milliwatts
        self.watts.append(690.0 + len(self.watts) % 3)
        return int(self.watts[-1] * 1000)

    def with_instant_power(self) -> FakeNvml:
        """Bindings and a driver with the instantaneous power field (NVML_FI_DEV_POWER_INSTANT)."""
        self.NVML_FI_DEV_POWER_INSTANT, self.instant = 186, []

        def field_values(handle: str, fields: list[int]) -> list[types.SimpleNamespace]:
            assert fields == [186]
            self.instant.append(300.0 + len(self.instant) % 5)
            value = types.SimpleNamespace(uiVal=int(self.instant[-1] * 1000))
            return [types.SimpleNamespace(nvmlReturn=0, value=value)]
        self.nvmlDeviceGetFieldValues = field_values
        return self

    def with_energy_counter(self) -> FakeNvml:
        """A GPU with NVML's energy counter (mJ since the driver loaded), 7.5 J more at each read."""
        self.energy_reads = []

        def energy(handle: str) -> int:
            self.energy_reads.append(9_000_000 + 7_500 * len(self.energy_reads))
            return self.energy_reads[-1]
        self.nvmlDeviceGetTotalEnergyConsumption = energy
        return self

    def _reasons(self, handle: str) -> int:
        self.capped.append(len(self.capped) % 3 == 0)
        return 0x4 | 0x1 if self.capped[-1] else 0x1  # power cap (and idle) / idle only


# A machine of four GPUs, of which the process sees the third alone (CUDA_VISIBLE_DEVICES=2):
# torch's cuda:0 is NVML's GPU 2.
NVML_INDEX_OF = {f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd": i for i in range(4)}
VISIBLE = ["00000002-aaaa-bbbb-cccc-dddddddddddd"]  # torch's cuda:N is VISIBLE[N] (no prefix)


@pytest.fixture(autouse=True)
def one_visible_gpu(request, monkeypatch):
    """torch's view of the fake machine, for every test but those on a real GPU."""
    if request.node.get_closest_marker("gpu") is None:
        monkeypatch.setattr(torch.cuda, "get_device_properties",
                            lambda index: types.SimpleNamespace(uuid=VISIBLE[index]))


@pytest.fixture
def fake_nvml(monkeypatch):
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


def test_the_monitor_reads_the_gpu_torch_uses_where_only_some_are_visible(fake_nvml):
    handles = []
    fake_nvml.nvmlDeviceGetPowerUsage = lambda handle: handles.append(handle) or 700_000
    with GpuMonitor(torch.device("cuda", 0)):
        pass
    assert handles and set(handles) == {"gpu2"}  # NVML's index 0 is another process's GPU


def test_the_window_is_summarised_by_medians_and_the_power_capped_share(fake_nvml):
    with GpuMonitor(torch.device("cuda", 0)) as gpu:
        time.sleep(30 * gpu_monitor.SAMPLE_S)
    m = gpu.metrics()
    assert len(fake_nvml.sm) >= 5
    assert m["sm_clock_mhz"] == statistics.median(fake_nvml.sm)
    assert m["mem_clock_mhz"] == 2619
    assert m["power_w"] == pytest.approx(statistics.median(fake_nvml.watts), abs=0.05)
    assert m["power_capped"] == pytest.approx(sum(fake_nvml.capped) / len(fake_nvml.capped))
    assert 0 < m["power_capped"] < 1
    share = sum(fake_nvml.capped) / len(fake_nvml.capped)
    assert m["clock_reasons"] == f"idle 100%, power cap {share:.0%}"
    assert fake_nvml.inits == fake_nvml.shutdowns == 1


@pytest.mark.parametrize("samples, named", [
    ([0x4, 0x4, 0x4, 0x24], "power cap 100%, software thermal 25%"),
    ([0x0, 0x0, 0x80, 0x88], "power brake 50%, hardware slowdown 25%"),
    ([0x2, 0x2], "application clocks 100%"),
    ([0x0, 0x1000], "0x1000 50%"),  # a bit NVML names after this list
    ([0x0, 0x0], "none"),
])
def test_every_reason_the_clock_was_held_down_is_named_with_its_share(samples, named):
    """A clock below its maximum with the power-cap flag unset has another cause, named here."""
    assert gpu_monitor.clock_reasons(samples) == named


def test_sampling_stops_with_the_window(fake_nvml):
    gpu = GpuMonitor(torch.device("cuda", 0))
    gpu.start()
    gpu.stop()
    taken = len(gpu.samples)
    time.sleep(5 * gpu_monitor.SAMPLE_S)
    assert len(gpu.samples) == taken >= 2  # one at the start, one at the end, however short


def test_older_nvml_bindings_name_the_reasons_throttle_reasons(monkeypatch):
    fake = FakeNvml(event_name="nvmlDeviceGetCurrentClocksThrottleReasons")
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with GpuMonitor(torch.device("cuda", 0)) as gpu:
        pass
    assert gpu.metrics()["power_capped"] == pytest.approx(sum(fake.capped) / len(fake.capped))


@pytest.mark.parametrize("device, nvml", [(torch.device("cpu"), FakeNvml()),
                                          (torch.device("cuda", 0), FakeNvml(fail_init=True)),
                                          (torch.device("cuda", 0), None)])
def test_nothing_is_reported_without_a_gpu_or_nvml(monkeypatch, device, nvml):
    monkeypatch.setitem(sys.modules, "pynvml", nvml)  # None: the import fails
    with GpuMonitor(device) as gpu:
        pass
    assert gpu.metrics() == {}
    assert gpu.samples == []


@pytest.mark.gpu
def test_a_gpu_case_records_the_clock_and_power_of_its_window():
    """On a real GPU: an attention case long enough for several samples carries plausible values."""
    pytest.importorskip("pynvml")
    from trainperf.workloads.attention import AttentionSpec, measure_attention
    spec = AttentionSpec("sdpa-math", 4, 16, 2048, 64, "bf16", "forward-backward", True, "cuda", warmup=3,
                         iters=30)
    m = measure_attention(spec)
    assert 100 < m["sm_clock_mhz"] <= 4000
    assert 10 < m["power_w"] < 2000
    assert 0 <= m["power_capped"] <= 1
    assert m["clock_reasons"]  # a name with a share, or "none"


def test_power_is_the_instantaneous_reading_where_the_driver_has_one(monkeypatch):
    """NVML's default power reading is a one-second average, which lags a short window."""
    fake = FakeNvml().with_instant_power()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with GpuMonitor(torch.device("cuda", 0)) as gpu:
        time.sleep(5 * gpu_monitor.SAMPLE_S)
    assert fake.watts == []  # the average was never read
    assert gpu.metrics()["power_w"] == pytest.approx(statistics.median(fake.instant[1:]), abs=0.05)


def test_a_reading_nvml_refuses_is_left_out_and_the_window_goes_on(fake_nvml, monkeypatch):
    calls = []

    def flaky_power(handle: str) -> int:
        calls.append(1)
        if len(calls) % 2:
            raise RuntimeError("NVML_ERROR_UNKNOWN")
        return 500_000
    monkeypatch.setattr(fake_nvml, "nvmlDeviceGetPowerUsage", flaky_power)
    with GpuMonitor(torch.device("cuda", 0)) as gpu:
        time.sleep(30 * gpu_monitor.SAMPLE_S)
    assert len(calls) >= 4  # sampling went on past the refused readings
    assert 2 <= len(gpu.samples) < len(calls)
    assert gpu.metrics()["power_w"] == 500.0


def test_the_window_energy_is_the_counter_difference_between_its_ends(monkeypatch):
    fake = FakeNvml().with_energy_counter()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with GpuMonitor(torch.device("cuda", 0)) as gpu:
        time.sleep(5 * gpu_monitor.SAMPLE_S)
    assert len(fake.energy_reads) == 2  # read at the ends only, not with every sample
    assert gpu.metrics()["energy_j"] == pytest.approx(7.5)


def test_no_energy_is_reported_without_the_counter(fake_nvml):
    with GpuMonitor(torch.device("cuda", 0)) as gpu:
        pass
    assert "energy_j" not in gpu.metrics()
    assert "power_w" in gpu.metrics()


def test_monitored_calls_reports_seconds_and_joules_per_call(monkeypatch):
    """The window's CUDA-event time and NVML energy, divided by the calls made between them."""
    fake = FakeNvml().with_energy_counter()
    monkeypatch.setitem(sys.modules, "pynvml", fake)

    class Event:  # the window between the two records is 400 ms
        def __init__(self, enable_timing: bool) -> None:
            assert enable_timing

        def record(self) -> None:
            pass

        def elapsed_time(self, end: Event) -> float:
            return 400.0

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    calls = []
    got = gpu_monitor.monitored_calls(lambda: calls.append(1), 8, torch.device("cuda", 0))
    assert len(calls) == 8
    assert got["s"] == pytest.approx(0.05)
    assert got["j"] == pytest.approx(7.5 / 8)
    assert got["energy_j"] == pytest.approx(7.5) and "power_w" in got


def test_heat_or_the_hardware_holding_the_clock_is_flagged_in_the_table(monkeypatch):
    """The power cap is how the GPU is run; thermal or hardware slowdowns disturb a measurement."""
    from trainperf.core import report
    from trainperf.core.record import Record

    fake = FakeNvml()
    fake.nvmlDeviceGetCurrentClocksEventReasons = lambda handle: 0x4 | 0x20  # cap and thermal, always
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with GpuMonitor(torch.device("cuda", 0)) as gpu:
        pass
    m = gpu.metrics()
    assert m["clock_reasons"] == "power cap 100%, software thermal 100%"
    assert m["clock_throttled"] == "software thermal 100%"
    assert report.notes(Record("llama", {}, "ok", {**m, "notes": "noisy"})) == \
        "noisy; clock throttled: software thermal 100%"


def test_the_power_cap_alone_flags_nothing(fake_nvml):
    from trainperf.core import report
    from trainperf.core.record import Record

    with GpuMonitor(torch.device("cuda", 0)) as gpu:
        pass
    assert "clock_throttled" not in gpu.metrics()
    assert report.notes(Record("llama", {}, "ok", gpu.metrics())) == ""


def _listed(*held: tuple[int, int | None]) -> list[types.SimpleNamespace]:
    return [types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in held]


def test_a_process_that_is_not_this_one_nor_its_own_is_named_as_sharing_the_gpu(fake_nvml):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])  # a compile worker, say
    other = 2**22 + 17  # above Linux's default pid_max: no process of this machine
    try:
        lists = iter([_listed((os.getpid(), 2**30), (child.pid, 2**29)),  # at the window's start, then end
                      _listed((os.getpid(), 2**30), (child.pid, 2**29), (other, 2**31), (other + 1, None))])
        fake_nvml.nvmlDeviceGetComputeRunningProcesses = lambda handle: next(lists)
        with GpuMonitor(torch.device("cuda", 0)) as gpu:
            pass
    finally:
        child.kill()
        child.wait()
    assert gpu.metrics()["gpu_shared_with"] == f"pid {other} (2.0 GB), pid {other + 1}"


@pytest.mark.parametrize("listed", [
    _listed((os.getpid(), 2**30)),  # this process alone
    _listed((2**22 + 5, 2**30), (2**22 + 6, 2**30)),  # pids of another namespace: whose is whose is unknown
])
def test_nothing_is_named_where_the_gpu_is_this_process_s_alone_or_nvml_counts_other_pids(fake_nvml, listed):
    fake_nvml.nvmlDeviceGetComputeRunningProcesses = lambda handle: listed
    with GpuMonitor(torch.device("cuda", 0)) as gpu:
        pass
    assert "gpu_shared_with" not in gpu.metrics()


def test_a_shared_gpu_is_a_note_on_the_case():
    from trainperf.core.runner import measure_case

    record = measure_case("t", {"i": 1}, lambda spec: {"gpu_shared_with": "pid 4242 (2.0 GB)"}, {})
    assert record.status == "ok"
    assert record.metrics["notes"] == "another process held this GPU while timing: pid 4242 (2.0 GB)"


@pytest.mark.gpu
def test_a_step_beside_another_process_on_its_gpu_says_so_and_one_alone_does_not():
    """On a real GPU: a process started apart from this one (its parent gone) holding the GPU."""
    pytest.importorskip("pynvml")
    from trainperf.workloads.attention import AttentionSpec, measure_attention

    spec = AttentionSpec("sdpa-math", 2, 8, 512, 64, "bf16", "forward-backward", True, "cuda", warmup=1,
                         iters=5)
    assert "gpu_shared_with" not in measure_attention(spec)
    loop = ("import torch, time; x = torch.ones(2**28, device='cuda'); end = time.time() + 60\n"
            "while time.time() < end: x.mul_(1.0)")
    started = subprocess.run(["bash", "-c", f'{sys.executable} -c "{loop}" >/dev/null 2>&1 & echo $!'],
                             capture_output=True, text=True, check=True)
    other = int(started.stdout.split()[-1])
    try:
        time.sleep(10)  # its CUDA context is up
        assert f"pid {other}" in measure_attention(spec)["gpu_shared_with"]
    finally:
        subprocess.run(["kill", str(other)], check=False)


FAMILY = """
import json, os, subprocess, sys
sibling = subprocess.Popen(["sleep", "30"])
ask = ("import json; from trainperf.core.gpu_monitor import own_processes; "
       "print(json.dumps(sorted(own_processes())))")
seen = subprocess.run([sys.executable, "-c", ask], capture_output=True, text=True, check=True).stdout
print(json.dumps({"parent": os.getpid(), "sibling": sibling.pid, "seen": json.loads(seen)}))
sibling.kill()
"""


@pytest.mark.parametrize("parent_argv, shared", [("trainperf-supervisor", True), ("a-user-script", False)])
def test_the_processes_of_one_trainperf_run_are_its_own_and_a_command_beside_it_is_not(parent_argv, shared):
    """A rank's siblings under trainperf's supervisor are the run's own; a command started beside
    this one, by a shell or a script, is another process on the GPU."""
    import json

    src = str(__import__("pathlib").Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-", parent_argv], input=FAMILY, capture_output=True, text=True,
                         check=True, env=env)  # the script on stdin: only `parent_argv` names the parent
    got = json.loads(out.stdout)
    assert (got["parent"] in got["seen"]) is shared and (got["sibling"] in got["seen"]) is shared
