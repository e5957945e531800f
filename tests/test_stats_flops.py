import math
import statistics

import pytest

from trainperf.core.flops import peak_tflops, transformer_flops
from trainperf.core.stats import is_noisy, ratio_se, summarize, t_quantile_975


def test_summary_matches_statistics_module():
    xs = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
    s = summarize(xs)
    assert s["n"] == 8
    assert s["mean"] == pytest.approx(statistics.fmean(xs))
    assert s["std"] == pytest.approx(statistics.stdev(xs))
    assert s["median"] == pytest.approx(3.5)
    assert s["min"] == 1.0 and s["max"] == 9.0
    assert s["iqr"] == pytest.approx(5.25 - 1.75)
    assert s["ci95"] == pytest.approx(2.365 * statistics.stdev(xs) / math.sqrt(8))


def test_single_sample_has_no_spread():
    s = summarize([2.0])
    assert s["std"] == 0 and s["median"] == 2.0 and math.isnan(s["ci95"])


def test_empty_sample_is_an_error():
    with pytest.raises(ValueError):
        summarize([])


def test_noise_flag():
    assert not is_noisy(summarize([10.0, 10.1, 9.9, 10.0]))
    assert is_noisy(summarize([10.0, 12.0, 8.0, 10.0]))


def test_the_standard_error_of_a_speed_up_matches_its_spread_over_many_draws():
    import random

    rng = random.Random(0)
    peer, mine, n = (0.30, 0.009), (0.25, 0.006), 10
    ratios, errors = [], []
    for _ in range(4000):
        a = summarize([rng.gauss(*peer) for _ in range(n)])
        b = summarize([rng.gauss(*mine) for _ in range(n)])
        ratios.append(a["mean"] / b["mean"])
        errors.append(ratio_se((a["mean"], a["std"], n), (b["mean"], b["std"], n)))
    assert statistics.fmean(errors) == pytest.approx(statistics.stdev(ratios), rel=0.1)
    four_times = ratio_se((0.3, 0.009, 40), (0.25, 0.006, 40))  # four times the iterations: half the error
    assert four_times == pytest.approx(ratio_se((0.3, 0.009, 10), (0.25, 0.006, 10)) / 2)


def test_a_speed_up_of_single_samples_or_unknown_counts_has_no_standard_error():
    assert math.isnan(ratio_se((0.3, 0.0, 1), (0.25, 0.0, 1)))
    assert math.isnan(ratio_se((0.3, 0.01, float("nan")), (0.25, 0.01, 10)))


def test_t_quantile_tends_to_normal():
    assert t_quantile_975(1) == pytest.approx(12.706)
    assert t_quantile_975(1000) == 1.96


def test_training_flops_are_six_n_plus_causal_attention():
    n, layers, d, seq, tokens = 1000, 2, 8, 16, 64
    dense = 6 * n * tokens
    attention = 3 * 4 * layers * seq * d * tokens / 2
    assert transformer_flops(n, layers, d, seq, tokens) == dense + attention
    assert transformer_flops(n, layers, d, seq, tokens, causal=False) == dense + 2 * attention
    assert transformer_flops(n, layers, d, seq, tokens, mode="forward") == (dense + attention) / 3


def test_peak_table():
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == pytest.approx(989.4)
    assert peak_tflops("NVIDIA H100 PCIe", "bf16") == pytest.approx(756.0)
    assert peak_tflops("NVIDIA H100 80GB HBM3", "fp32", tf32=False) == pytest.approx(66.9)
    assert peak_tflops("Mystery GPU", "bf16") is None
    assert peak_tflops(None, "bf16") is None


def test_limits_scale_the_peak_by_the_measured_clock_and_count_recompute_and_float8():
    from trainperf.core.flops import limits

    # an H200 at 1485 MHz under its power cap: 989.4 x 1485 / 1980 = 742.05 TFLOP/s
    got = limits(500.0, 989.4, "NVIDIA H200", 1485.0, recompute_share=0.25, float8=True)
    assert got["peak_at_clock_tflops"] == pytest.approx(742.05)
    assert got["mfu_at_clock"] == pytest.approx(500.0 / 742.05)
    assert got["hfu"] == pytest.approx(625.0 / 989.4)
    assert got["fp8_peak_share"] == pytest.approx(500.0 / 1978.8)
    assert limits(500.0, 989.4, "NVIDIA H200", None) == {}  # no clock sampled: nothing to scale by
    assert limits(500.0, None, "some GPU", 1500.0) == {}  # no known peak
    assert "mfu_at_clock" not in limits(500.0, 989.4, "an unknown GPU", 1500.0)
