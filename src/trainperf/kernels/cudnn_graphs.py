"""What every cuDNN-frontend graph in trainperf shares: the optional package check, one handle per
device on the current stream, building a graph once per shape and dtype, and running it.

The frontend (`pip install 'trainperf[cudnn]'`, package nvidia-cudnn-frontend) is imported only
when a graph is built, so importing trainperf never needs it; without it every cuDNN choice is an
`unsupported` row naming the install command.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.util import find_spec
from typing import Any

import torch

from trainperf.core.errors import Unsupported

INSTALL_CUDNN = "pip install 'trainperf[cudnn]' (the nvidia-cudnn-frontend package)"


_INSTALLED = find_spec("cudnn") is not None  # looked up once: torch.compile cannot trace find_spec


def cudnn_installed() -> bool:
    """Whether the cuDNN frontend's Python package is importable."""
    return _INSTALLED


def require_cudnn(device: torch.device, what: str) -> None:
    """Unsupported (naming the install command, or the GPU it needs) unless cuDNN graphs run here."""
    if not cudnn_installed():
        raise Unsupported(f"{what} needs the cuDNN frontend: {INSTALL_CUDNN}")
    if device.type != "cuda":
        raise Unsupported(f"{what} needs a CUDA GPU")


def io_type(dtype: torch.dtype) -> Any:
    """The cuDNN data type of a torch dtype (fp32, bf16, fp16, float8 e4m3 or e5m2); Unsupported
    for others."""
    import cudnn

    types = {torch.float32: cudnn.data_type.FLOAT, torch.bfloat16: cudnn.data_type.BFLOAT16,
             torch.float16: cudnn.data_type.HALF, torch.float8_e4m3fn: cudnn.data_type.FP8_E4M3,
             torch.float8_e5m2: cudnn.data_type.FP8_E5M2}
    if dtype not in types:
        raise Unsupported(f"cuDNN graphs take fp32, bf16, fp16 or float8 (e4m3, e5m2), not {dtype}")
    return types[dtype]


def layout(t: torch.Tensor) -> tuple:
    """What a built graph depends on: shape, strides and dtype."""
    return tuple(t.shape), tuple(t.stride()), t.dtype


_handles: dict[torch.device, Any] = {}
_graphs: dict[tuple, tuple[Any, int]] = {}


def handle(device: torch.device) -> Any:
    """This device's cuDNN handle, pointed at PyTorch's current stream."""
    import cudnn

    if device not in _handles:
        with torch.cuda.device(device):
            _handles[device] = cudnn.create_handle()
    cudnn.set_stream(handle=_handles[device], stream=torch.cuda.current_stream(device).cuda_stream)
    return _handles[device]


def new_graph(device: torch.device, dtype: torch.dtype) -> Any:
    """An empty graph with `dtype` in and out and float32 inside."""
    import cudnn

    return cudnn.pygraph(handle=handle(device), io_data_type=io_type(dtype),
                         intermediate_data_type=cudnn.data_type.FLOAT,
                         compute_data_type=cudnn.data_type.FLOAT)


def cached_graph(key: tuple, build: Callable[[], Any]) -> tuple[Any, int]:
    """The graph `build()` declares, finalised (plans chosen by heuristics) once per `key`; with
    its workspace size."""
    if key not in _graphs:
        import cudnn

        graph = build()
        graph.validate()
        graph.build_operation_graph()
        graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        graph.check_support()
        graph.build_plans()
        _graphs[key] = graph, graph.get_workspace_size()
    return _graphs[key]


def execute(graph_and_workspace: tuple[Any, int], buffers: dict[int, torch.Tensor],
            device: torch.device) -> None:
    """Run a built graph on `buffers` (tensor uid → tensor) on the current stream."""
    graph, workspace_size = graph_and_workspace
    workspace = torch.empty(max(workspace_size, 1), dtype=torch.uint8, device=device)
    graph.execute(buffers, workspace, handle=handle(device))


def declare(graph: Any, uid: int, name: str, t: torch.Tensor) -> Any:
    """A graph tensor shaped, strided and typed like `t`, with a fixed uid."""
    return graph.tensor(name=name, dim=list(t.shape), stride=list(t.stride()), uid=uid,
                        data_type=io_type(t.dtype))
