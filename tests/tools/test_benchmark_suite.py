"""The deep models and per-block columns of bench_hooks.py, bench_ddp.py and run_all.sh."""
import re

import pytest


def _table(stdout, names):
    """``{setting: [numbers]}`` of the rows whose first column is one of ``names``."""
    rows = {}
    for line in stdout.splitlines():
        for name in names:
            rest = line[len(name):] if line.startswith(name + ' ') else None
            if rest is not None and re.fullmatch(r'[-\d.\s]+', rest):
                rows[name] = [float(v) for v in rest.split()]
    return rows


@pytest.mark.slow
@pytest.mark.parametrize('args, description, blocks', [
    (['--depth', '164', '--base-channels', '4', '--img-size', '16'
      ], 'pre-activation ResNet-164 (base 4)', 54),
    (['--arch', 'vit', '--depth', '3', '--embed-dims', '12', '--img-size', '16'
      ], 'ViT (3 layers, width 12, 6 heads, patch 4)', 3),
])
def test_bench_hooks_deep_models_and_cost_per_block(run_tool, args, description, blocks):
    proc = run_tool('tools/benchmark/bench_hooks.py', *args, '--batch-size', '2', '--repeats', '1',
                    '--iters', '2', '--warmup', '1', '--only', '@1', '--log-interval', '2',
                    timeout=900)
    assert proc.stdout.startswith(description), proc.stdout[:200]
    assert f'; {blocks} blocks;' in proc.stdout
    timing = proc.stdout.split('peak (MiB)')[0]
    rows = _table(
        timing,
        ['no hook', 'StiffnessHook @1', 'FrequencyHook @1', 'FrequencyHook @1, no attention maps'])
    assert rows['no hook'][4:] == [0.0, 0.0, 1.0, 1.0]  # ... and its ratio in every repeat
    # the transformer alone gets the setting without attention maps
    assert ('FrequencyHook @1, no attention maps' in rows) == ('--arch' in args)
    for name in ('StiffnessHook @1', 'FrequencyHook @1'):
        _, ratio, in_hooks, _, extra, in_hooks_per_block, low, high = rows[name]
        assert low <= ratio <= high  # the median lies within the spread of the repeats
        # the per-block columns divide the per-iteration costs by the number of blocks (the
        # ratio is printed to 3 decimals, the iteration time in ms to 2: 5 µs; the time in
        # hooks in ms to 3: 0.5 µs, over `blocks`; the per-block columns to 0.1 µs)
        plain_us = rows['no hook'][0] * 1e3
        assert in_hooks_per_block == pytest.approx(in_hooks * 1e3 / blocks,
                                                   abs=0.5 / blocks + 0.05 + 1e-6)
        assert extra == pytest.approx((ratio - 1) * plain_us / blocks,
                                      abs=(0.0006 * plain_us + 5 * abs(ratio - 1)) / blocks + 0.1)


@pytest.mark.slow
def test_bench_hooks_times_a_compiled_model(run_tool):
    """--compile: the baseline runs the compiled graph, the recorded iterations run eagerly;
    no CPU peak memory table (the profiler misses a compiled graph's activations).

    Base width 8, not 4: with 4-channel convolutions torch 2.14's inductor CPU backward corrupts
    the heap (glibc aborts, pytorch/pytorch#181689, conv + norm under inductor), reproducibly."""
    proc = run_tool('tools/benchmark/bench_hooks.py', '--compile', '--base-channels', '8',
                    '--batch-size', '2', '--img-size', '16', '--repeats', '1', '--iters', '2',
                    '--warmup', '1', '--only', '@1', '--log-interval', '2', timeout=900)
    first = proc.stdout.splitlines()[0]
    assert first.startswith('compiled ResNet_CIFAR-18 (base 8)'), first
    assert first.endswith('peak memory: not measured (compiled, on the CPU)')
    assert 'peak (MiB)' not in proc.stdout
    rows = _table(proc.stdout, ['no hook', 'StiffnessHook @1', 'FrequencyHook @1'])
    assert set(rows) == {'no hook', 'StiffnessHook @1', 'FrequencyHook @1'}
    assert rows['no hook'][1] == 1.0 and rows['StiffnessHook @1'][2] > 0


@pytest.mark.slow
def test_bench_hooks_refuses_an_unknown_depth(run_tool):
    proc = run_tool('tools/benchmark/bench_hooks.py', '--depth', '20', check=False, timeout=300)
    assert proc.returncode != 0
    assert '--depth 20 is not supported with --arch cifar' in proc.stderr
    proc = run_tool('tools/benchmark/bench_hooks.py', '--device', 'cuda', '--clock', 'cpu',
                    check=False, timeout=300)
    assert proc.returncode != 0 and '--device cuda' in proc.stderr


@pytest.mark.slow
def test_bench_ddp_one_and_two_processes(run_tool):
    proc = run_tool('tools/benchmark/bench_ddp.py', '--base-channels', '4', '--batch-size', '2',
                    '--img-size', '16', '--iters', '100', '--repeats', '1', '--warmup', '1',
                    timeout=900)
    rows = {}
    for line in proc.stdout.splitlines():
        match = re.match(r'^\s+(\d)\s{2}(.+?)\s{2,}([-\d.\s]+)$', line)
        if match:
            rows[(int(match.group(1)), match.group(2))] = [float(v) for v in match.group(3).split()]
    settings = ('no hook', 'both @1', 'both @defaults')
    assert set(rows) == {(w, s) for w in (1, 2) for s in settings}
    for world in (1, 2):
        assert rows[(world, 'no hook')][1] == 1.0
    # one process: no all_reduce and nothing to wait for
    assert all(rows[(1, s)][2] == 0.0 and rows[(1, s)][4] == 0.0 for s in settings)
    assert rows[(2, 'both @1')][2] > 0  # two: one per write of the recorded iterations
    assert rows[(2, 'both @1')][4] >= 0  # the wait at the barrier before it, apart
    assert rows[(2, 'no hook')][2] == 0.0 and rows[(2, 'no hook')][4] == 0.0
    assert 'hooks @1, 2 processes against 1: time ratio' in proc.stdout


@pytest.mark.slow
def test_run_all_refuses_bad_arguments(run_tool):
    proc = run_tool('tools/benchmark/run_all.sh', '--frobnicate', check=False, timeout=120)
    assert proc.returncode == 2 and 'unknown argument --frobnicate' in proc.stderr
    proc = run_tool('tools/benchmark/run_all.sh', '--device', 'tpu', check=False, timeout=120)
    assert proc.returncode == 2 and '--device tpu is not supported' in proc.stderr
    # a step of the GPU run alone, asked of the CPU run: refused before anything runs
    proc = run_tool('tools/benchmark/run_all.sh', '--device', 'cpu', '--only',
                    'count_step_kernels,bench_step_resnet_cudagraphs', check=False, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ''
    assert ('--only bench_step_resnet_cudagraphs is not a step of --device cpu here; expected one '
            'of: bench_step_resnet count_step_kernels ') in proc.stderr


@pytest.mark.slow
def test_run_all_runs_the_chosen_steps_in_the_order_given(run_tool, tmp_path):
    proc = run_tool('tools/benchmark/run_all.sh', '--device', 'cpu', '--tiny', '--out',
                    str(tmp_path), '--only', 'tests_cuda,count_step_kernels', timeout=600)
    summary = (tmp_path / 'summary.txt').read_text().splitlines()
    assert [line.split()[0] for line in summary] == ['tests_cuda', 'count_step_kernels']
    assert all(' exit 0 ' in line for line in summary), summary
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        'count_step_kernels.txt', 'summary.txt', 'tests_cuda.txt'
    ]
    assert proc.stdout.rstrip().endswith('\n'.join(summary))
