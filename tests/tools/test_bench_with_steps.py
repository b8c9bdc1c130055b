"""bench_with_steps.py runs end to end at a toy size and prints each pair's ratios beside the
reference pair's (StepResNet-18 over ResNet-18)."""
import re

import pytest


@pytest.mark.slow
def test_bench_with_steps_prints_ratios_against_the_hand_built_step(run_tool):
    proc = run_tool('tools/benchmark/bench_with_steps.py', '--img-size', '32', '--batch-size', '2',
                    '--repeats', '1', '--iters', '1', '--warmup', '1', timeout=600)
    rows = {}
    for line in proc.stdout.splitlines():
        match = re.match(r'^(\S.*?\))\s+([-+\d.\s]+)$', line)
        if match:
            rows[match.group(1)] = [float(v) for v in match.group(2).split()]
    assert list(rows) == [
        'ConvNeXt-atto (WithSteps)', 'MobileNetV2 (WithSteps)', 'ResNet-18 (StepResNet)'
    ], proc.stdout
    reference = rows['ResNet-18 (StepResNet)']
    for name, (plain, stepped, ratio, minus, mem, mem_minus) in rows.items():
        # one repeat: the ratio is the printed times' ratio (to their rounding)
        assert abs(ratio - stepped / plain) <= 0.06 * ratio + 0.002, (name, rows[name])
        assert abs(minus - (ratio - reference[2])) <= 0.0015, (name, rows[name])
        assert abs(mem_minus - (mem - reference[4])) <= 0.0015, (name, rows[name])
        assert mem > 1.0  # the adaptors keep f for the backward of Δ ⊙ f
    assert reference[3] == 0.0 and reference[5] == 0.0
