"""A fused LM-head loss for a model trainperf did not write: the loss taken from the decoder's last
hidden states and the output matrix by a kernel that never makes the [tokens, vocab] logits (and
their float32 copy and gradient) whole: trainperf's chunked loss (kernels/chunked_loss.py), or
Liger Kernel's fused linear cross-entropy.

It needs a transformers-style model (`get_decoder()`, `get_output_embeddings()`), and it is used
only where that model's logits are exactly those hidden states times that matrix: checked once
against the model's own forward on a small batch, in eval mode (no dropout) and with the output
matrix scaled up by an exact power of two for the check, so that the logits are large enough for a
soft cap to show (random weights give logits near 0, where tanh is the identity). Gemma 2's
soft-capped logits, a scaled or a biased head are not, and the recipe says so.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from trainperf.core.errors import Unsupported
from trainperf.kernels.chunked_loss import chunked_lm_loss
from trainperf.models.lm import lm_loss
from trainperf.models.source import logits_of, vocab_of

HeadLoss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (ids, targets) -> the mean loss
# (hidden [tokens, d], output matrix [vocab, d], targets [tokens]) -> the mean loss
Kernel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
CHECK_SHAPE = (2, 8)  # the batch the loss is checked on: token ids, [batch, seq]
CHECK_SCALE = 256.0  # the output matrix's scale while checking (module doc)


def chunked_head_loss(model: nn.Module) -> HeadLoss:
    """The next-token loss of `model` computed by trainperf's chunked loss (module doc);
    Unsupported naming why where it would not be the model's own."""
    return head_loss(model, chunked_lm_loss, "chunked loss")


def head_loss(model: nn.Module, kernel: Kernel, what: str) -> HeadLoss:
    """The next-token loss of `model` computed by `kernel` from its hidden states (module doc);
    Unsupported, `what` named, where it would not be the model's own."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    name = type(model).__name__
    if not isinstance(decoder, nn.Module) or not isinstance(head, nn.Linear):
        raise Unsupported(f"{what}: {name} has no get_decoder() and Linear get_output_embeddings() "
                          "(a transformers-style causal LM)")
    if head.bias is not None:
        raise Unsupported(f"{what}: {name}'s output layer has a bias")

    def loss(ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        out = decoder(input_ids=ids)
        hidden = out[0] if isinstance(out, (tuple, list)) else out.last_hidden_state
        weight = head.weight
        device = hidden.device.type
        if torch.is_autocast_enabled(device):  # the products in autocast's dtype, as the head's would be
            dtype = torch.get_autocast_dtype(device)
            hidden, weight = hidden.to(dtype), weight.to(dtype)
        return kernel(hidden.reshape(-1, hidden.shape[-1]), weight, targets.reshape(-1))

    theirs, ours = _both_losses(model, head, loss)
    if not torch.allclose(ours, theirs, rtol=1e-3, atol=1e-4):
        raise Unsupported(f"{what}: {name}'s logits are not its decoder's last hidden states times its "
                          f"output matrix (loss {theirs.item():.5g}, from those {ours.item():.5g}; "
                          "soft-capped or scaled logits?)")
    return loss


def _both_losses(model: nn.Module, head: nn.Linear, loss: HeadLoss) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's own loss and `loss` on a small batch (module doc), the model left as it was."""
    device = head.weight.device
    ids = torch.randint(0, vocab_of(model), (CHECK_SHAPE[0], CHECK_SHAPE[1] + 1), device=device,
                        generator=torch.Generator(device).manual_seed(0))
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            head.weight.mul_(CHECK_SCALE)  # a power of two: divided back exactly
            try:
                theirs = lm_loss(logits_of(model, ids[:, :-1]), ids[:, 1:]).float()
                ours = loss(ids[:, :-1], ids[:, 1:]).float()
            finally:
                head.weight.div_(CHECK_SCALE)
    finally:
        model.train(training)
    return theirs, ours
