"""RMSNorm as cuDNN-frontend graphs: one forward graph (training phase, saving 1/rms per row) and
one backward graph, each built once per shape and dtype, as PyTorch custom ops with autograd and
fake (shape-only) implementations, so they run eagerly, under torch.compile and in CUDA graphs.

Rows are the leading dimensions flattened; cuDNN sees x as (rows, hidden, 1, 1) and the weight
as (1, hidden, 1, 1), both in x's dtype. The reference is `kernels.rmsnorm.rmsnorm_reference`.
"""

from __future__ import annotations

import torch

from trainperf.kernels import cudnn_graphs as cg

X, SCALE, EPS, Y, INV_RMS, DY, DX, DSCALE = range(1, 9)


def _as_4d(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1, t.shape[-1], 1, 1)


def _forward_graph(x: torch.Tensor, w: torch.Tensor):
    import cudnn

    g = cg.new_graph(x.device, x.dtype)
    eps = g.tensor(name="eps", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], uid=EPS,
                   data_type=cudnn.data_type.FLOAT, is_pass_by_value=True)
    y, inv_rms = g.rmsnorm(name="rmsnorm", norm_forward_phase=cudnn.norm_forward_phase.TRAINING,
                           input=cg.declare(g, X, "x", x), scale=cg.declare(g, SCALE, "scale", w),
                           epsilon=eps)
    y.set_uid(Y).set_output(True).set_data_type(cg.io_type(x.dtype))
    inv_rms.set_uid(INV_RMS).set_output(True).set_data_type(cudnn.data_type.FLOAT)
    return g


def _backward_graph(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, inv_rms: torch.Tensor):
    g = cg.new_graph(x.device, x.dtype)
    dx, dscale, _ = g.rmsnorm_backward(name="rmsnorm_bwd", grad=cg.declare(g, DY, "dy", dy),
                                       input=cg.declare(g, X, "x", x), scale=cg.declare(g, SCALE, "scale", w),
                                       inv_variance=cg.declare(g, INV_RMS, "inv_rms", inv_rms),
                                       has_dbias=False)
    dx.set_uid(DX).set_output(True).set_data_type(cg.io_type(x.dtype))
    dscale.set_uid(DSCALE).set_output(True).set_data_type(cg.io_type(x.dtype))
    return g


@torch.library.custom_op("trainperf::cudnn_rms_norm", mutates_args=())
def cudnn_rms_norm_op(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """y and 1/rms (float32, one per row) of x (..., hidden) with weight (hidden,) in x's dtype."""
    x4, w4 = _as_4d(x.contiguous()), weight.reshape(1, -1, 1, 1).contiguous()
    graph = cg.cached_graph(("rmsnorm", cg.layout(x4), cg.layout(w4), x.device),
                            lambda: _forward_graph(x4, w4))
    y = torch.empty_like(x4)
    inv_rms = torch.empty(x4.shape[0], 1, 1, 1, dtype=torch.float32, device=x.device)
    cg.execute(graph, {X: x4, SCALE: w4, EPS: torch.full((1, 1, 1, 1), eps, dtype=torch.float32),
                       Y: y, INV_RMS: inv_rms}, x.device)
    return y.view(x.shape), inv_rms.view(x.shape[:-1])


@cudnn_rms_norm_op.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x, memory_format=torch.contiguous_format), x.new_empty(x.shape[:-1],
                                                                                   dtype=torch.float32)


@torch.library.custom_op("trainperf::cudnn_rms_norm_backward", mutates_args=())
def cudnn_rms_norm_backward_op(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                               inv_rms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """dx and dweight of the RMSNorm above, from its saved 1/rms."""
    dy4, x4 = _as_4d(dy.contiguous()), _as_4d(x.contiguous())
    w4, r4 = weight.reshape(1, -1, 1, 1).contiguous(), inv_rms.reshape(-1, 1, 1, 1).contiguous()
    graph = cg.cached_graph(("rmsnorm_bwd", cg.layout(dy4), cg.layout(x4), cg.layout(w4), cg.layout(r4),
                             x.device), lambda: _backward_graph(dy4, x4, w4, r4))
    dx, dw = torch.empty_like(x4), torch.empty_like(w4)
    cg.execute(graph, {DY: dy4, X: x4, SCALE: w4, INV_RMS: r4, DX: dx, DSCALE: dw}, x.device)
    return dx.view(x.shape), dw.view(weight.shape)


@cudnn_rms_norm_backward_op.register_fake
def _(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
      inv_rms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty_like(x, memory_format=torch.contiguous_format), torch.empty_like(weight)


def _setup(ctx, inputs, output) -> None:  # noqa: ANN001
    x, weight, _eps = inputs
    ctx.save_for_backward(x, weight, output[1])
    ctx.mark_non_differentiable(output[1])


def _backward(ctx, dy, _d_inv_rms):  # noqa: ANN001, ANN202
    x, weight, inv_rms = ctx.saved_tensors
    dx, dw = cudnn_rms_norm_backward_op(dy, x, weight, inv_rms)
    return dx, dw, None


cudnn_rms_norm_op.register_autograd(_backward, setup_context=_setup)


def rmsnorm_cudnn(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm of x over its last dimension through cuDNN (the weight is used in x's dtype)."""
    return cudnn_rms_norm_op(x, weight.to(x.dtype), eps)[0]
