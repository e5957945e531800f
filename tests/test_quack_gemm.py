"""quack's tuned GEMMs (`--gemm quack`): how products are named and picks looked up, the cuBLAS
fallback's numerics, the projections' op and its gradients, the unsupported row without picks
(test_quack_mlp.py has those without the package or off Hopper), the shipped table's schema, and
on a Hopper GPU every shipped pick against float64."""

import json
import re

import pytest
import torch

from trainperf.core.errors import Unsupported
from trainperf.kernels import quack_gemm, quack_mlp
from trainperf.kernels.chunked_loss import chunked_lm_loss
from trainperf.models import hf_llama

KEY = re.compile(r"^\d+x\d+x\d+ A:[km] B:[nk]( \+=)?$")


def test_a_product_is_named_by_its_sizes_operand_layouts_and_accumulation():
    a, w = torch.empty(6, 4), torch.empty(5, 4)
    assert quack_gemm.product_key(a, w.t()) == "6x5x4 A:k B:k"  # x @ wᵀ: B is w's transposed view
    assert quack_gemm.product_key(a.t().contiguous().t(), torch.empty(4, 5)) == "6x5x4 A:m B:n"
    assert quack_gemm.product_key(a, torch.empty(4, 5), accumulate=True) == "6x5x4 A:k B:n +="


def _write(path, table):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table))


def test_picks_merge_shipped_and_user_tables_and_keep_only_those_that_beat_cublas(tmp_path, monkeypatch):
    gpu = "GPU X | quack-kernels 9"
    shipped, user = tmp_path / "shipped.json", tmp_path / "cache" / "quack_gemm_configs.json"
    pick = {"config": {"tile_m": 128}, "dynamic_scheduler": False}
    _write(shipped, {gpu: {"a": {**pick, "quack_ms": 1.0, "cublas_ms": 2.0},
                           "b": {**pick, "quack_ms": 1.0, "cublas_ms": 2.0},
                           "slower": {**pick, "quack_ms": 2.0, "cublas_ms": 1.0}},
                     "GPU Y | quack-kernels 9": {"c": {**pick, "quack_ms": 1.0, "cublas_ms": 2.0}}})
    _write(user, {gpu: {"b": {**pick, "config": {"tile_m": 256}, "quack_ms": 1.0, "cublas_ms": 3.0}}})
    monkeypatch.setattr(quack_gemm, "SHIPPED", shipped)
    monkeypatch.setenv("TRAINPERF_CACHE_DIR", str(tmp_path / "cache"))
    quack_gemm.picks.cache_clear()
    found = quack_gemm.picks(gpu)
    assert set(found) == {"a", "b"}  # the slower pick is dropped, the other GPU's ignored
    assert found["b"]["config"] == {"tile_m": 256}  # the user's own wins
    user.write_text("{not json")
    quack_gemm.picks.cache_clear()
    assert set(quack_gemm.picks(gpu)) == {"a", "b"}  # a damaged file counts as empty
    quack_gemm.picks.cache_clear()


def test_without_a_pick_products_run_on_pytorch_and_accumulate_where_asked():
    a, b = torch.randn(7, 5, dtype=torch.float64), torch.randn(5, 3, dtype=torch.float64)
    out = torch.full((7, 3), float("nan"), dtype=torch.float64)
    quack_gemm.mm_into(a, b, out)
    torch.testing.assert_close(out, a @ b, rtol=1e-14, atol=0)
    quack_gemm.mm_into(a, b, out, accumulate=True)
    torch.testing.assert_close(out, 2 * (a @ b), rtol=1e-14, atol=0)
    assert quack_gemm.pick_for(a.float(), b.float()) is None  # off the GPU there is none


def test_the_tuned_linear_op_registers_its_fake_and_autograd_and_matches_linear_in_float64():
    x = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, 8, dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(quack_gemm.tuned_linear, (x, w), test_utils=(
        "test_schema", "test_faketensor", "test_autograd_registration", "test_aot_dispatch_dynamic"))
    dy = torch.randn(2, 3, 5, dtype=torch.float64)
    y = quack_gemm.tuned_linear(x, w)
    y.backward(dy)
    x64, w64 = (t.detach().clone().requires_grad_() for t in (x, w))
    torch.nn.functional.linear(x64, w64).backward(dy)
    torch.testing.assert_close(y, torch.nn.functional.linear(x64, w64), rtol=1e-14, atol=0)
    torch.testing.assert_close(x.grad, x64.grad, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(w.grad, w64.grad, rtol=1e-14, atol=1e-14)


def test_tuned_projections_keep_the_model_s_loss_and_gradients_and_compile_without_breaks(monkeypatch):
    torch.manual_seed(0)
    model = hf_llama.build_model(hf_llama.load_config("tiny"), torch.float64, torch.device("cpu"))
    ids = torch.randint(0, 100, (2, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    ref = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    called = []
    own = quack_gemm.tuned_linear
    monkeypatch.setattr(quack_gemm, "tuned_linear", lambda x, w: called.append(w) or own(x, w))
    hf_llama.tune_projections(model)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    assert len(called) == 4 * len(model.model.layers)  # q, k, v and o of every layer
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, ref[name], rtol=1e-12, atol=1e-14, msg=name)
    monkeypatch.setattr(quack_gemm, "tuned_linear", own)
    layer = model.model.layers[0]
    hidden = torch.randn(2, 16, model.config.hidden_size, dtype=torch.float64)
    position = model.model.rotary_emb(hidden, torch.arange(16)[None])
    explained = torch._dynamo.explain(layer)(hidden, position_embeddings=position)
    assert explained.graph_break_count == 0


def test_the_chunked_loss_is_the_same_with_tuned_products_where_none_is_known():
    h = torch.randn(20, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(24, 16, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 24, (20,))
    plain = chunked_lm_loss(h, w, t, chunk=8)
    grads = torch.autograd.grad(plain, (h, w))
    tuned = chunked_lm_loss(h, w, t, chunk=8, tuned=True)
    assert torch.equal(tuned, plain)
    for g, ref in zip(torch.autograd.grad(tuned, (h, w)), grads, strict=True):
        assert torch.equal(g, ref)


def test_gemm_quack_is_unsupported_on_a_gpu_without_picks_naming_the_tuning_tool(monkeypatch):
    model = hf_llama.build_model(hf_llama.load_config("tiny"), torch.float32, torch.device("cpu"))
    monkeypatch.setattr(quack_mlp, "_INSTALLED", True)
    monkeypatch.setattr(quack_mlp, "quack_runs", lambda device: True)
    monkeypatch.setattr(quack_gemm, "gpu_key", lambda device: "GPU Z | quack-kernels 9")
    with pytest.raises(Unsupported, match="no configuration tuned for GPU Z.*tools/tune_quack_gemms.py"):
        hf_llama.apply_swaps(model, gemm="quack")


def _shipped() -> dict:
    return json.loads(quack_gemm.SHIPPED.read_text())


def test_the_shipped_table_names_each_product_and_holds_a_config_and_both_times():
    fields = {"tile_m", "tile_n", "cluster_m", "cluster_n", "pingpong", "is_dynamic_persistent", "split_k",
              "swap_ab", "device_capacity"}
    table = _shipped()
    assert table, "no GPU in the shipped table"
    for gpu, products in table.items():
        assert re.match(r"^.+ \| quack-kernels \S+$", gpu)
        for key, pick in products.items():
            assert KEY.match(key), key
            assert fields <= set(pick["config"]), key
            assert isinstance(pick["dynamic_scheduler"], bool)
            assert pick["quack_ms"] > 0 and pick["cublas_ms"] > 0
            assert pick["error"] < 1e-2


@pytest.mark.gpu
def test_every_shipped_pick_for_this_gpu_matches_float64():
    device = torch.device("cuda")
    if not torch.cuda.is_available() or not quack_gemm.tuned_here(device):
        pytest.skip("needs quack-kernels on a GPU with shipped picks")
    torch.manual_seed(0)
    for key in quack_gemm.picks(quack_gemm.gpu_key(device)):
        sizes, a_major, b_major, *acc = key.replace("A:", "").replace("B:", "").split()
        m, n, k = map(int, sizes.split("x"))
        a = torch.randn(m, k, device=device, dtype=torch.bfloat16) / 8
        b = torch.randn(k, n, device=device, dtype=torch.bfloat16) / 8
        a = a if a_major == "k" else a.t().contiguous().t()
        b = b if b_major == "n" else b.t().contiguous().t()
        assert quack_gemm.product_key(a, b, bool(acc)) == key
        start = torch.randn(m, n, device=device, dtype=torch.bfloat16)
        out = start.clone()
        quack_gemm.mm_into(a, b, out, accumulate=bool(acc))
        ref = a.double() @ b.double() + (start.double() if acc else 0)
        assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2, key



def test_the_tuning_tool_tunes_exactly_the_products_the_step_asks_for(monkeypatch):
    """A pick is found only under the key the step asks with: the tool's operands must have the
    step's shapes and layouts."""
    import importlib.util
    from pathlib import Path

    pytest.importorskip("triton")
    path = Path(__file__).parents[1] / "tools" / "tune_quack_gemms.py"
    spec = importlib.util.spec_from_file_location("tune_quack_gemms", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    asked = set()

    def record(a, b, accumulate=False):
        asked.add(quack_gemm.product_key(a, b, accumulate))

    monkeypatch.setattr(quack_gemm, "pick_for", record)
    cfg = hf_llama.load_config("tiny")
    torch.manual_seed(0)
    model = hf_llama.build_model(cfg, torch.float32, torch.device("cpu"))
    hf_llama.tune_projections(model)
    batch, seq, rows = 2, 20, 16  # 40 tokens: blocks of 16, 16 and 8 rows
    hidden = model.model(inputs_embeds=torch.randn(batch, seq, cfg.hidden_size)).last_hidden_state
    loss = chunked_lm_loss(hidden.flatten(0, 1), model.lm_head.weight,
                           torch.randint(0, cfg.vocab_size, (batch * seq,)), chunk=rows, tuned=True)
    loss.backward()
    tuned = {quack_gemm.product_key(tool.operand(*a, device="meta"), tool.operand(*b, device="meta"), acc)
             for _, a, b, acc, _ in tool.products(cfg, batch * seq, rows)}
    assert tuned == asked
