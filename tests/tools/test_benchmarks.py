"""The benchmark scripts run end to end at toy sizes and print their side-by-side tables."""
import ast
import collections
import math
import os.path as osp
import re

import pytest
import torch
import torch.nn as nn
from script_modules import REPO, load_script  # tests/

from mmstiff.apis.benchmark import StepMarked, compile_model
from mmstiff.utils.triton_launch import HAS_TRITON


def _rows(stdout, first_column):
    """``{setting: [numbers]}`` of the table rows whose setting starts with ``first_column``."""
    rows = {}
    for line in stdout.splitlines():
        match = re.match(r'^(\S.*?)\s{2,}([-\d.\s]+)$', line)
        if match and match.group(1).startswith(first_column):
            rows[match.group(1)] = [float(v) for v in match.group(2).split()]
    return rows


@pytest.mark.slow
def test_bench_hooks_prints_time_and_memory_ratios(run_tool):
    proc = run_tool('tools/benchmark/bench_hooks.py', '--base-channels', '4', '--batch-size', '4',
                    '--img-size', '16', '--repeats', '3', '--iters', '2', '--warmup', '1', '--only',
                    '@1', '--log-interval', '2', timeout=300)
    names = ('no hook', 'StiffnessHook', 'FrequencyHook', 'both')
    timing, memory = proc.stdout.split('peak (MiB)')
    times, peaks = _rows(timing, names), _rows(memory, names)
    assert set(times) == {
        'no hook', 'StiffnessHook @1', 'StiffnessHook @1, 8 samples', 'FrequencyHook @1',
        'StiffnessHook @1, no adjoint'
    }  # --only @1: no default-interval setting
    assert times['no hook'][1] == 1.0  # the baseline's time ratio to itself
    assert times['StiffnessHook @1'][2] > 0  # time measured inside the hook
    assert times['no hook'][-2:] == [1.0, 1.0]
    for name, row in times.items():  # the median of the three repeats within their spread
        assert row[-2] <= row[1] <= row[-1], (name, row)
    assert set(peaks) == {
        'no hook', 'StiffnessHook @1', 'FrequencyHook @1', 'both @1', 'StiffnessHook @1, no adjoint'
    }
    assert peaks['no hook'][1] == 1.0


@pytest.mark.slow
@pytest.mark.parametrize('arch', ['convnext', 'mobilenetv2'])
def test_bench_hooks_times_the_zoo_architectures(arch, run_tool):
    proc = run_tool('tools/benchmark/bench_hooks.py', '--arch', arch, '--batch-size', '2',
                    '--img-size', '32', '--repeats', '3', '--iters', '2', '--warmup', '1', '--only',
                    '@1', '--log-interval', '2', timeout=300)
    times = _rows(proc.stdout.split('peak (MiB)')[0], ('no hook', 'StiffnessHook'))
    assert times['no hook'][1] == 1.0 and times['StiffnessHook @1'][2] > 0
    refused = run_tool('tools/benchmark/bench_hooks.py', '--arch', arch, '--depth', '18',
                       check=False, timeout=300)
    assert refused.returncode != 0 and f'--depth 18 does not apply to --arch {arch}' in \
        refused.stderr


@pytest.mark.slow
def test_bench_hooks_refuses_blocks_that_cut_an_interval(run_tool):
    proc = run_tool('tools/benchmark/bench_hooks.py', '--iters', '30', check=False, timeout=300)
    assert proc.returncode != 0
    # StiffnessHook @50 records at 50 and writes at lcm(50, --log-interval 10) = 50
    assert '--iters 30 is not a multiple of 50' in proc.stderr


def _ratio_of(time, base):
    """The ratio the tables print for one repeat, and how far the printed times (0.1 ms
    rounding) let it be from ``time / base``."""
    return time / base, 5e-4 + time / base * (0.05 / time + 0.05 / base)


@pytest.mark.slow
@pytest.mark.parametrize('script, args, names, columns', [
    ('bench_step_resnet.py', ['--img-size', '32', '--batch-size', '2'],
     ['ResNet-50', 'SE-ResNet-50', 'StepNet-ResNet-50'], dict(time=1, ratio=2, mem_ratio=4)),
    ('bench_vit.py', ['--img-size', '32', '--batch-size', '2', '--fused', 'both'], [
        'mmpretrain DeiT-S', 'StepViT, no switch', '+AttnScale', '+AttnScale, layers', '+FeatScale',
        '+FeatScale, layers', '+AttnScale +FeatScale', '+AttnScale +FeatScale, layers'
    ], dict(time=0, ratio=2, infer_time=3, infer_ratio=5, mem=6, mem_ratio=7)),
])
def test_model_benchmarks_print_ratios(run_tool, script, args, names, columns):
    proc = run_tool(f'tools/benchmark/{script}', *args, '--repeats', '1', '--iters', '1',
                    timeout=600)
    rows = _rows(proc.stdout, tuple(names))
    assert list(rows) == names, proc.stdout  # every model, the baseline first
    base = rows[names[0]]
    for name, row in rows.items():
        # one repeat: each ratio is the model's time over the baseline's, as printed beside it
        for time, ratio in (('time', 'ratio'), ('infer_time', 'infer_ratio')):
            if time in columns:
                expected, slack = _ratio_of(row[columns[time]], base[columns[time]])
                assert abs(row[columns[ratio]] - expected) <= slack, (name, row, base)
    assert base[columns['ratio']] == 1.0
    if 'mem_ratio' in columns:
        assert base[columns['mem_ratio']] == 1.0
    if script == 'bench_step_resnet.py':
        # the adaptors keep each block's branch output for the backward pass of Δ ⊙ f
        assert all(rows[n][columns['mem_ratio']] > 1.0 for n in names[1:]), proc.stdout
        # params (M) of the 1000-class classifiers: torchvision's ResNet-50 has 25,557,032
        assert rows['ResNet-50'][0] == 25.56


@pytest.mark.slow
@pytest.mark.parametrize('script, args, header, names', [
    ('bench_step_resnet.py', ['--img-size', '32', '--batch-size', '2'], 'device=cpu threads=',
     ['ResNet-50', 'SE-ResNet-50', 'StepNet-ResNet-50']),
    ('bench_vit.py', ['--img-size', '32', '--batch-size', '2', '--variants', 'featscale'
                      ], 'DeiT-S, compiled (default), cpu', ['mmpretrain DeiT-S', '+FeatScale']),
])
def test_model_benchmarks_time_compiled_models(run_tool, script, args, header, names):
    proc = run_tool(f'tools/benchmark/{script}', *args, '--compile', '--repeats', '1', '--iters',
                    '1', timeout=900)
    first = proc.stdout.splitlines()[0]
    assert first.startswith(header) and 'compiled' in first, proc.stdout
    if script == 'bench_step_resnet.py':  # no CPU peak memory of a compiled graph
        assert 'peak memory: not measured for compiled CPU models' in first
        assert all(line.endswith('n/a        n/a') for line in proc.stdout.splitlines()[3:])
    rows = _rows(proc.stdout.replace('n/a', ''), tuple(names))
    assert list(rows) == names  # --variants: the baseline and the chosen model only
    # the third number of a row is the (train) time ratio to the baseline in both tables
    assert rows[names[0]][2] == 1.0
    assert all(row[2] > 0 for row in rows.values())


@pytest.mark.slow
def test_compiled_benchmark_refuses_no_warmup(run_tool):
    proc = run_tool('tools/benchmark/bench_step_resnet.py', '--compile', '--warmup', '0',
                    check=False, timeout=120)
    assert proc.returncode != 0
    assert '--warmup 0 is not supported with --compile' in proc.stderr


@pytest.mark.slow
def test_bench_alternet_prints_ratios_against_resnet50(run_tool):
    from mmpretrain.models.backbones import ResNet_CIFAR

    from mmstiff.models.backbones import AlterNet
    proc = run_tool('tools/benchmark/bench_alternet.py', '--stem', 'cifar', '--batch-size', '2',
                    '--repeats', '1', '--iters', '1', '--warmup', '0', timeout=600)
    rows = {}
    for line in proc.stdout.splitlines():
        match = re.match(r'^(\S.*?)\s{2,}([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$',
                         line)
        if match:
            rows[match.group(1)] = [float(v) for v in match.groups()[1:]]
    assert list(rows) == ['ResNet-50', 'pre-act ResNet-50 (3,4,6,4)', 'AlterNet-50']
    assert rows['ResNet-50'][2] == 1.0 and rows['ResNet-50'][4] == 1.0

    def params(backbone):  # the backbone and a 100-class linear head
        return (sum(p.numel() for p in backbone.parameters()) + 2048 * 100 + 100) / 1e6

    assert rows['ResNet-50'][0] == pytest.approx(params(ResNet_CIFAR(depth=50)), abs=0.006)
    assert rows['AlterNet-50'][0] == pytest.approx(
        params(AlterNet(50, stem='cifar', window_size=4)), abs=0.006)
    assert rows['pre-act ResNet-50 (3,4,6,4)'][0] == pytest.approx(
        params(AlterNet(50, stem='cifar', num_msa_blocks=(0, 0, 0, 0))), abs=0.006)
    # the ratios are each model's time and memory over ResNet-50's
    for values in rows.values():
        assert values[4] == pytest.approx(values[3] / rows['ResNet-50'][3], abs=0.002)


@pytest.mark.parametrize('argv, message', [
    (['--compile-mode', 'reduce-overhead'], '--compile-mode reduce-overhead needs --compile'),
    (['--compile', '--compile-mode', 'reduce-overhead'
      ], '--compile-mode reduce-overhead is not supported with --device cpu; expected cuda'),
    (['--base-channels', '0'], '--base-channels 0 is not supported; expected a positive integer'),
    (['--stand-in-kernels'], '--stand-in-kernels is supported with --device cpu, eager, and '
     '--fused on, both, all or every; got --device cpu --fused off'),
    (['--stand-in-kernels', '--fused', 'on', '--device', 'cuda'], 'got --device cuda --fused on'),
])
def test_bad_settings_are_refused_before_any_model_is_built(capsys, argv, message):
    bench = load_script('tools/benchmark/bench_step_resnet.py')
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    # CUDA graphs are a mode of the compiled models on CUDA
    args = bench.parse_args(['--device', 'cuda', '--compile', '--compile-mode', 'reduce-overhead'])
    assert (args.compile, args.compile_mode) == (True, 'reduce-overhead')
    # compiled, the fused rows are the fused step's PyTorch passes, compiled with the model
    assert bench.parse_args(['--compile', '--fused', 'all']).fused == 'all'


@pytest.mark.slow
def test_profile_step_lists_the_time_each_adaptor_adds(run_tool):
    proc = run_tool('tools/benchmark/profile_step.py', '--batch-size', '2', '--img-size', '32',
                    '--base-channels', '8', '--repeats', '1', '--iters', '1', '--warmup', '1',
                    '--fused', 'off', '--top', '3', timeout=600)
    lines = proc.stdout.splitlines()
    assert lines[0].startswith('device=cpu batch=2 img=32 base_channels=8 repeats=1 iters/timing=1')
    rows = _rows(proc.stdout.replace('n/a', ''), ('ResNet-50', 'SE-ResNet-50', 'StepNet'))
    assert list(rows) == ['ResNet-50', 'SE-ResNet-50', 'StepNet-ResNet-50']
    # no device time on the CPU: step (ms) and the operator calls per step
    assert all(len(row) == 2 and row[0] > 0 for row in rows.values())
    # the adaptors make more operator calls than the plain network
    assert rows['SE-ResNet-50'][1] > rows['ResNet-50'][1]
    assert rows['StepNet-ResNet-50'][1] > rows['ResNet-50'][1]
    # the plain network adds nothing to itself; each adaptor lists at most --top operators
    assert not any(line.startswith('ResNet-50:') for line in lines)
    for name in ('SE-ResNet-50', 'StepNet-ResNet-50'):
        start = lines.index(f"{name}: the operators (their own CPU time) with the most time per "
                            "step beyond ResNet-50's")
        listed = [line for line in lines[start + 1:start + 4] if line.startswith('  ')]
        assert 1 <= len(listed) <= 3 and all(' ms  aten::' in line for line in listed)


def test_compile_model_marks_each_step_only_under_cuda_graphs(monkeypatch):
    marks = []
    monkeypatch.setattr(torch.compiler, 'cudagraph_mark_step_begin', lambda: marks.append(1))
    net = nn.Linear(3, 2)
    assert not isinstance(compile_model(net), StepMarked)
    graphs = compile_model(net, 'reduce-overhead')
    assert isinstance(graphs, StepMarked)
    assert [id(p) for p in graphs.parameters()] == [id(p) for p in net.parameters()]
    graphs.model = net  # the eager model behind the wrapper: no compilation in this test
    x = torch.randn(4, 3)
    torch.testing.assert_close(graphs(x), net(x))
    graphs(x)
    assert marks == [1, 1]


def test_fused_all_times_the_fused_step_with_and_without_the_folded_bn(monkeypatch):
    from mmstiff.models.steps.fused.fold import NormMoments
    bench = load_script('tools/benchmark/bench_step_resnet.py')
    args = bench.parse_args(['--fused', 'all', '--base-channels', '2'])
    builders = bench.model_builders(args)
    torch.manual_seed(0)  # weights and images the same in every run: in train mode at width 2
    # the two steps' float32 roundings were up to about 1e-4 apart for some draws
    assert list(builders)[:3] == ['ResNet-50', 'ResNet-50 fused', 'ResNet-50 fused, BN unfolded'
                                  ] and len(builders) == 9
    unfolded = builders['StepNet-ResNet-50 fused, BN unfolded']().train()
    folded = builders['StepNet-ResNet-50 fused']().train()
    blocks = [m for m in unfolded.modules() if hasattr(type(m), 'fold_norm')]
    assert blocks and not any(b.fold_norm for b in blocks) and blocks[0].fused is True
    folded.load_state_dict(unfolded.state_dict())
    folds = []  # the folded step pools y's moments; the unfolded one never does
    apply = NormMoments.apply
    monkeypatch.setattr(NormMoments, 'apply', lambda *a: folds.append(1) or apply(*a))
    images = torch.randn(2, 3, 32, 32)
    expected = unfolded(images)
    assert folds == []
    torch.testing.assert_close(folded(images), expected, rtol=1e-4, atol=1e-4)
    assert len(folds) == 16  # every bottleneck of ResNet-50


def test_fused_every_adds_the_fused_step_on_pytorch_passes(monkeypatch):
    """The ``passes`` rows run the fused step on PyTorch's passes whatever kernels the device
    would take (here inside a forced Triton stand-in set, which they override), with the
    reference's values."""
    from mmstiff.models.steps import forced_step_kernels
    from mmstiff.models.steps.fused.torch_kernels import TorchStepKernels
    bench = load_script('tools/benchmark/bench_step_resnet.py')
    builders = bench.model_builders(bench.parse_args(['--fused', 'every', '--base-channels', '2']))
    assert len(builders) == 12 and list(builders)[3] == 'ResNet-50 fused, PyTorch passes'
    torch.manual_seed(0)
    reference = builders['StepNet-ResNet-50']().eval()
    passes = builders['StepNet-ResNet-50 fused, PyTorch passes']().eval()
    assert isinstance(passes, bench.OnKernels) and passes.kernels is TorchStepKernels
    passes.model.load_state_dict(reference.state_dict())
    steps = []
    step = TorchStepKernels.step
    monkeypatch.setattr(TorchStepKernels, 'step',
                        staticmethod(lambda *a, **k: steps.append(1) or step(*a, **k)))
    images = torch.randn(2, 3, 32, 32)
    with forced_step_kernels(bench.counting_kernels(bench.TritonStepKernels())):
        got = passes(images)
    assert len(steps) == 16  # every bottleneck on the PyTorch passes
    torch.testing.assert_close(got, reference(images), rtol=1e-5, atol=1e-5)


def test_stand_in_kernels_run_the_triton_set_without_computing():
    bench = load_script('tools/benchmark/bench_step_resnet.py')
    args = bench.parse_args(['--fused', 'both', '--base-channels', '2', '--stand-in-kernels'])
    assert 'fused-kernels=stand-ins' in bench.settings_line(args)
    builders = bench.model_builders(args)
    assert not isinstance(builders['StepNet-ResNet-50'](), bench.OnKernels)
    model = builders['StepNet-ResNet-50 fused']().train()
    assert isinstance(model, bench.OnKernels)
    images = torch.randn(2, 3, 32, 32)
    with torch.profiler.profile() as prof:  # no Triton driver on the CPU: nothing launches
        model(images).sum().backward()
    launched = collections.Counter(e.name for e in prof.events() if e.name.startswith('triton::'))
    # each of ResNet-50's 16 blocks: the moments, the fold, StepNet's pass, the step; backward
    # the step's, StepNet's and the fold's kernels and y's gradient
    for name in ('pool', 'fold', 'phi', 'step', 'step_backward', 'phi_backward', 'fold_backward',
                 'moments_backward'):
        assert launched[f'triton::{name}'] == 16, (name, launched)


def test_se_units_row_calls_the_units_the_plain_row_skips():
    bench = load_script('tools/benchmark/bench_step_resnet.py')
    builders = bench.model_builders(bench.parse_args(['--se-units', '--base-channels', '2']))
    assert list(builders)[-1] == 'SE-ResNet-50, units called' and len(builders) == 4
    torch.manual_seed(0)
    plain = builders['SE-ResNet-50']().eval()  # train mode's batch statistics of two samples
    called = builders['SE-ResNet-50, units called']().eval()  # amplify the last bits
    called.load_state_dict(plain.state_dict())
    calls = []  # counted by a wrapped forward, not a hook (a hooked unit is always called)
    for net, name in ((plain, 'plain'), (called, 'called')):
        for module in net.modules():
            if type(module).__name__ == 'SEAdaptor':
                conv = module.conv1.conv
                conv.forward = lambda x, inner=conv.forward, n=name: calls.append(n) or inner(x)
    images = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(called(images), plain(images), rtol=1e-5, atol=1e-5)
    assert calls == ['called'] * 16


def test_bench_launch_times_each_pass_on_each_kernel_set(capsys):
    bench = load_script('tools/benchmark/bench_launch.py')
    bench.main(['--calls', '2', '--repeats', '2', '--warmup', '1', '--channels', '8'])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith('device=cpu state=(2, 8, 8, 8) calls=2 repeats=2')
    assert lines[1].split()[0] == 'pass' and lines[1].endswith('Triton stand-ins')
    rows = {line[:32].strip(): line[32:].split() for line in lines[3:]}
    passes = [
        'pool (x_t and f)', 'moments (x_t and y)', 'step', 'step, folded BN', 'step backward',
        "moments backward (y's grad)", 'folded BN (B, C) forward', 'StepNet (B, C) forward',
        'SE (B, C) forward'
    ]
    assert list(rows) == ['aten add (one kernel)', 'aten mean (one reduction)', *passes]
    for name, cells in rows.items():
        torch_time, triton, stand_ins = cells
        assert float(torch_time) > 0 and triton == 'n/a'  # no Triton launch without CUDA
        assert stand_ins == 'n/a' if name.startswith('aten') else float(stand_ins) > 0


def test_bench_launch_interleaves_the_cells_and_calls_each_as_asked():
    bench = load_script('tools/benchmark/bench_launch.py')
    order, counts = [], collections.Counter()

    def cell(name):

        def call():
            counts[name] += 1
            order.append(name)

        return call

    cells = {name: cell(name) for name in 'abc'}
    times = bench.time_cells(cells, calls=4, repeats=3, warmup=2, device=torch.device('cpu'))
    assert counts == {'a': 14, 'b': 14, 'c': 14}  # 2 warm-up calls, then 4 per repeat
    assert all(len(values) == 3 and min(values) > 0 for values in times.values())
    timed = order[6:][::4]  # the first call of each timing, after the warm-up
    assert timed == list('abc') + list('bca') + list('cab')  # each repeat starts one later


def test_bench_launch_passes_run_on_the_pytorch_and_the_triton_launchers():
    """Each row calls its pass with the arguments the kernel sets take: the PyTorch passes give
    the reference step's values, the stand-in launchers outputs of the same shapes."""
    bench = load_script('tools/benchmark/bench_launch.py')
    device = torch.device('cpu')
    state = bench.make_state(2, 8, 4, device)
    passes = bench.passes(state)
    sets = bench.kernel_sets(device)
    out = passes['step'](sets['PyTorch passes'])
    expected = torch.relu(state['x'] + state['step'][:, :, None, None] * state['f'])
    torch.testing.assert_close(out, expected)
    if 'Triton stand-ins' in sets:
        for name, call in passes.items():
            torch_out, stand_in_out = (
                call(sets[c]) for c in ('PyTorch passes', 'Triton stand-ins'))
            torch_out = torch_out if isinstance(torch_out, tuple) else (torch_out, )
            stand_in_out = stand_in_out if isinstance(stand_in_out, tuple) else (stand_in_out, )
            assert [None if t is None else t.shape for t in torch_out
                    ] == [None if t is None else t.shape for t in stand_in_out], name


def test_bench_launch_refuses_a_batch_without_statistics(capsys):
    bench = load_script('tools/benchmark/bench_launch.py')
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(['--batch-size', '1'])
    assert exit_info.value.code == 2
    assert '--batch-size 1 is not supported; expected at least 2' in capsys.readouterr().err


KERNEL_PASSES = [
    'aten add', 'aten sum', 'pool (x_t and f)', 'moments (x_t and y)', 'step', 'step, folded BN',
    'measured step', 'step backward', 'step backward, folded BN', "moments backward (y's grad)",
    'NSI sums (x_t, x_t+1)'
]
FREQUENCY_PASS = 'frequency sums (x, twice)'


def _kernel_rows(out):
    """``[(state, pass, [cells])]`` of bench_kernels.py's table (the state carried down)."""
    lines = out.splitlines()
    assert lines[1].split()[:3] == ['state', 'pass', 'passes'], lines[1]
    rows, state = [], None
    for line in lines[3:]:
        state = line[:36].strip() or state
        rows.append((state, line[36:66].strip(), line[66:].split()))
    return lines[1], rows


def _bench_kernels(monkeypatch):
    monkeypatch.syspath_prepend(osp.join(REPO, 'tools', 'benchmark'))  # it imports bench_launch
    return load_script('tools/benchmark/bench_kernels.py')


def test_bench_kernels_times_every_full_size_pass_of_each_state(capsys, monkeypatch):
    bench = _bench_kernels(monkeypatch)
    bench.main([
        '--batch-size', '2', '--base-channels', '2', '--img-size', '32', '--calls', '1',
        '--repeats', '1'
    ])
    header, rows = _kernel_rows(capsys.readouterr().out)
    assert 'Triton' not in header  # no Triton run on CPU tensors outside the interpreter
    states = list(dict.fromkeys(state for state, _, _ in rows))
    assert states == [
        '(2, 8, 8, 8) contiguous', '(2, 8, 8, 8) channels-last', '(2, 16, 4, 4) contiguous',
        '(2, 16, 4, 4) channels-last', '(2, 32, 2, 2) contiguous', '(2, 32, 2, 2) channels-last',
        '(2, 64, 1, 1) contiguous', '(2, 64, 1, 1) channels-last', '(2, 5, 12) tokens'
    ]
    for state in states:
        mine = [(name, cells) for s, name, cells in rows if s == state]
        # the frequency sums: states with a square map (or grid of patches) over 1 × 1
        frequency = [] if '(2, 64, 1, 1)' in state else [FREQUENCY_PASS]
        assert [name for name, _ in mine] == KERNEL_PASSES + frequency
        passes = {name: int(cells[0]) for name, cells in mine}
        assert passes['aten add'] == 3 and passes['step backward'] == 5
        add_micros, _, add_share = (float(c) for c in mine[0][1][1:])
        assert add_micros > 0 and add_share == 1.0
        state_bytes = 4 * math.prod(ast.literal_eval(state.split(')')[0] + ')'))  # float32
        for name, cells in mine:
            micros, rate, share = (float(c) for c in cells[1:])
            # GB/s: the pass's full-size reads and writes over its time; the share: that over
            # add's (the printed figures are rounded)
            assert rate == pytest.approx(passes[name] * state_bytes / micros / 1e3, rel=0.01,
                                         abs=0.006), (state, name)
            expected = passes[name] / micros / (3 / add_micros)
            assert share == pytest.approx(expected, rel=0.05, abs=0.006), (state, name)


def test_bench_kernels_passes_compute_the_step_they_name(monkeypatch):
    """The rows call each pass with the arguments it takes: the PyTorch passes' step, step
    backward and NSI sums, checked against their formulas on the bench's own tensors."""
    bench = _bench_kernels(monkeypatch)
    sets = bench.kernel_sets(torch.device('cpu'))
    for label, layout, t in bench.states(2, 2, 32, torch.float32, torch.device('cpu')):
        rows = bench.passes(layout, t)
        step = t['step'][:, :, None, None] if layout == 'nchw' else t['step'][:, None, :]
        out = rows['step'][1](sets['PyTorch'])
        torch.testing.assert_close(out, torch.relu(t['x'] + step * t['f']))
        grad_x, grad_f, _ = rows['step backward'][1](sets['PyTorch'])
        masked = torch.where(t['out'] > 0, t['g'], torch.zeros_like(t['g']))
        torch.testing.assert_close(grad_x, masked)
        torch.testing.assert_close(grad_f, masked * step)
        state, slope = rows['NSI sums (x_t, x_t+1)'][1](sets['PyTorch'])
        torch.testing.assert_close(state, t['x'].flatten(1).norm(dim=1))
        torch.testing.assert_close(slope, (t['f'] - t['x']).flatten(1).norm(dim=1))
        if FREQUENCY_PASS in rows:  # the PyTorch path of the FrequencyHook's summary
            x = t['x']
            flat = x.flatten(2) if layout == 'nchw' else x.transpose(1, 2)
            centred = flat - flat.mean(dim=2, keepdim=True)
            ratio = centred.flatten(1).norm(dim=1) / flat.flatten(1).norm(dim=1)
            torch.testing.assert_close(rows[FREQUENCY_PASS][1](sets['PyTorch']).hf_ratio, ratio)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_TRITON, reason='needs triton (it ships with torch)')
def test_bench_kernels_times_the_triton_kernels_in_the_interpreter(run_tool):
    proc = run_tool('tools/benchmark/bench_kernels.py', '--batch-size', '2', '--base-channels', '2',
                    '--img-size', '16', '--calls', '1', '--repeats', '1', '--dtype', 'bf16',
                    '--tiles', '16x4', '--warps', '2', env=dict(TRITON_INTERPRET='1',
                                                                OMP_NUM_THREADS='1'), timeout=600)
    table, sweep = proc.stdout.split('\ntiles (BLOCK_N x BLOCK_C)')
    sweep, warps = sweep.split('\nwarps a program')
    header, rows = _kernel_rows(table)
    assert 'PyTorch µs' in header and 'Triton µs' in header
    for state, name, cells in rows:
        if name.startswith('aten'):
            assert len(cells) == 4, (state, name)  # no Triton cell: the same ATen call
        else:
            assert len(cells) == 7 and float(cells[4]) > 0, (state, name)
    lines = sweep.splitlines()
    assert lines[1].split() == ['state', 'pass', 'default', '16x4', 'fastest']
    swept = [(line[:36].strip(), line[36:66].strip(), line[66:].split()) for line in lines[3:]]
    # (at 16², the maps of the last two stages are 1 × 1 and the tokens have one patch: no
    # frequency sums)
    frequency = [[FREQUENCY_PASS]] * 4 + [[]] * 5
    assert [name for _, name, _ in swept] == sum((KERNEL_PASSES[2:] + f for f in frequency), [])
    for state, name, cells in swept:
        # every candidate gave the default tile's outputs, and was timed
        default, tile, *times, fastest = cells
        assert tile.startswith('(') and float(default) > 0 and len(times) == 1, (state, name)
        assert float(times[0]) > 0 and fastest in ('default', '16x4')
    lines = warps.splitlines()
    assert lines[1].split() == ['state', 'pass', 'default', '2w', 'fastest']
    swept_warps = [(line[36:66].strip(), line[66:].split()) for line in lines[3:]]
    assert [name for name, _ in swept_warps] == [name for _, name, _ in swept]
    for name, (default, warps, *times, fastest) in swept_warps:
        # the default: what tile_warps gives the tile state_blocks picks (4 at these sizes)
        assert warps == '(4w)' and float(default) > 0 and float(times[0]) > 0, name
        assert fastest in ('default', '2w')


def test_bench_kernels_tiles_are_checked_and_forced(monkeypatch):
    bench = _bench_kernels(monkeypatch)
    assert bench.parse_tiles('64x64, 256X16') == [(64, 64), (256, 16)]
    for bad in ('64', '64x48', '0x8', 'ax8', '256x128'):
        with pytest.raises(ValueError, match=f'--tiles {bad!r} is not supported'):
            bench.parse_tiles(bad)
    with pytest.raises(SystemExit):
        bench.parse_args(['--tiles', '64x48'])
    import mmstiff.analysis.triton_sums as sums
    import mmstiff.models.steps.fused.triton_step as step
    with bench.forced_tile((8, 32)):
        assert step.state_blocks(3136, 256, 1, 3136) == (8, 32)
        assert sums.state_blocks(49, 2048, 2048, 1) == (8, 32)
    assert step.state_blocks(3136, 256, 1, 3136) == (1024, 2)  # restored
    assert sums.state_blocks(49, 2048, 2048, 1) == (32, 64)  # TILE_VALUES: 2048
    import mmstiff.analysis.triton_spectrum as spectrum
    with bench.forced_tile((8, 32)):
        assert spectrum.state_blocks(49, 2048, 2048, 1) == (8, 32)
    assert spectrum.state_blocks(49, 2048, 2048, 1) == (32, 64)


def test_bench_kernels_warps_are_checked_and_forced(monkeypatch):
    bench = _bench_kernels(monkeypatch)
    assert bench.parse_warps('4, 8') == [4, 8]
    for bad in ('3', '0', '64', 'w4', ''):
        with pytest.raises(ValueError, match=f'--warps {bad!r} is not supported'):
            bench.parse_warps(bad)
    with pytest.raises(SystemExit):
        bench.parse_args(['--warps', '6'])
    import mmstiff.analysis.triton_spectrum as spectrum
    import mmstiff.analysis.triton_sums as sums
    import mmstiff.models.steps.fused.triton_step as step
    modules = (step, sums, spectrum)
    with bench.forced_warps(2):
        assert [m.tile_warps(1024, 2) for m in modules] == [2, 2, 2]
        # a launcher that asks for more warps on a full tile is forced too
        assert [m.tile_warps(1024, 2, full=16) for m in modules] == [2, 2, 2]
    assert [m.tile_warps(1024, 2) for m in modules] == [8, 8, 8]  # restored
    with bench.forced_warps(None):
        assert step.tile_warps(16, 4) == 4


def test_bench_kernels_refuses_a_sweep_without_the_triton_kernels(monkeypatch, capsys):
    """On the CPU without the interpreter there are no Triton kernels to sweep: refused before
    the first pass is timed."""
    bench = _bench_kernels(monkeypatch)
    monkeypatch.setattr(bench, 'kernel_sets', lambda device: {'PyTorch': object()})
    for option in (['--warps', '4,8'], ['--tiles', '64x16']):
        with pytest.raises(SystemExit, match=f'{option[0]} times the Triton kernels'):
            bench.main(option)
        assert capsys.readouterr().out == ''


def test_bench_kernels_compares_the_outputs_of_two_tiles(monkeypatch):
    bench = _bench_kernels(monkeypatch)
    a = torch.randn(4, 8)
    assert bench.same_outputs((a, None, (a * 2, )), (a + 1e-7, None, (a * 2, )))
    assert not bench.same_outputs((a, None), (a + 1e-2, None))
    assert not bench.same_outputs((a, ), (a, a))
    assert not bench.same_outputs(a.double(), a)  # a dtype that changed with the tile
    assert bench.same_outputs(a.bfloat16(), (a * (1 + 1e-3)).bfloat16())


def test_bench_hooks_busy_sums_the_cuda_kernels_only(monkeypatch):
    """``--busy``: the device time per iteration is the CUDA events' durations, summed and
    divided by the iterations; the host's events do not count. Refused without a GPU."""
    bench = load_script('tools/benchmark/bench_hooks.py')

    class Event:

        def __init__(self, device_type, micros):
            self.device_type = device_type
            self.time_range = type('Range', (), {'elapsed_us': lambda _: micros})()

    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    events = [Event(cuda, 30.0), Event(cpu, 500.0), Event(cuda, 12.5), Event(cuda, 7.5)]
    assert bench.kernel_microseconds(events, iters=2) == 25.0
    assert bench.kernel_microseconds([Event(cpu, 9.0)], iters=1) == 0.0
    with pytest.raises(SystemExit):
        bench.parse_args(['--busy'])  # the CPU: no kernels to profile


@pytest.mark.slow
def test_count_attention_kernels_counts_the_passes_the_fold_saves(run_tool):
    """Folded, each scale's backward pass adds one pass over the tokens to the plain layer's
    (the broadcast mean gradient added to v's or to a's); as layers, three or more."""
    # 64 x 17 tokens: more than the 384 columns of the weights the fold scales
    proc = run_tool('tools/benchmark/count_attention_kernels.py', '--img-size', '64',
                    '--batch-size', '64', timeout=300)
    rows = {}
    for line in proc.stdout.splitlines()[3:]:
        name, numbers = line[:24].strip(), line[24:].split()
        scales = numbers.pop(0) if numbers[0] in ('layers', 'folded') else ''
        assert numbers.pop() == 'n/a'  # no CUDA kernels on the CPU
        rows[name, scales] = dict(
            zip(('fwd', 'bwd', 'fwd_k', 'bwd_k', 'fwd_full', 'bwd_full'), map(int, numbers)))
    plain = rows['DeiT-S, no switch', '']
    for name, scales in (('+AttnScale', 1), ('+FeatScale', 1), ('+AttnScale +FeatScale', 2)):
        folded, layers = rows[name, 'folded'], rows[name, 'layers']
        assert folded['bwd_full'] == plain['bwd_full'] + scales, proc.stdout
        assert layers['bwd_full'] >= folded['bwd_full'] + 3 * scales, proc.stdout
        assert folded['fwd_full'] <= layers['fwd_full'], proc.stdout
    assert len(rows) == 7


@pytest.mark.slow
@pytest.mark.skipif(not HAS_TRITON, reason='counts the Triton launches with stand-ins')
def test_count_step_kernels_counts_what_the_hooks_add(run_tool):
    """Per block, the hook launches the sums kernel after a reference step and nothing for the
    norms; on the whole backbone the reference step's recorded iteration takes one sums kernel
    per block (16) more than the fused one, whose steps write their own sums."""
    proc = run_tool('tools/benchmark/count_step_kernels.py', '--img-size', '64', timeout=600)
    lines = proc.stdout.splitlines()
    assert lines[1].split()[-6:] == ['net', 'hook', 'kernels', 'net', 'freq', 'kernels']
    rows = {}
    for line in lines[3:]:
        match = re.match(r'^(\S+)\s+(reference|fused)\s+(.*)\s(\d+) \((\d+)\)\s+(\d+)\s+(\d+)$',
                         line)
        if match:
            rows[match.group(1), match.group(2)] = tuple(map(int, match.group(4, 5, 6, 7)))
    assert len(rows) == 6
    assert rows['ResNet-50', 'reference'][:2] == (1, 1)
    assert rows['ResNet-50', 'fused'][:2] == (0, 0)
    for name in ('ResNet-50', 'SE-ResNet-50', 'StepNet-ResNet-50'):
        # an adapted step's mean Δ per sample waits for compact() with its norms: nothing
        # per block on either path
        assert rows[name, 'fused'][0] == 0 and rows[name, 'reference'][:2] == (1, 1)
        assert rows[name, 'reference'][2] - rows[name, 'fused'][2] == 16
        if name != 'ResNet-50':
            # compact() per stage, with a step size: 7 kernels more than Δ_t = 1's 3 (the
            # sums' stack and square root, the steps' stack, the division, nan_to_num, the
            # norm, and the steps' mean), ResNet-50's 4 stages
            assert rows[name, 'fused'][2] - rows['ResNet-50', 'fused'][2] == 4 * 7
        # a FrequencyHook: the frequency sums kernel for each of the 17 states (the input and
        # the 16 blocks' outputs), and the recorder's ReLU of the 4 projected shortcuts
        assert rows[name, 'reference'][3] == rows[name, 'fused'][3] == 17 + 4


@pytest.mark.slow
@pytest.mark.skipif(not HAS_TRITON, reason='needs triton (it ships with torch on Linux)')
def test_kernel_resources_prints_each_launch_of_a_kernel(run_tool):
    proc = run_tool('tools/benchmark/kernel_resources.py', '--kernel', '_se_gate', '--batch-size',
                    '64', timeout=600)
    import triton
    assert proc.stdout.startswith(f'sm_90 dtype=float32 batches=[64] triton={triton.__version__}')
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith('_se_gate')]
    # the gate of ResNet-50's first and last stage and of ViT-S: (64, C/16) hidden layers
    assert sorted(row[1] for row in rows) == ['64x128', '64x16', '64x24']
    for row in rows:
        channels = {'64x16': 256, '64x128': 2048, '64x24': 384}[row[1]]
        programs, warps, registers, spill = map(int, row[2:6])
        assert programs == (64 // 16) * -(-channels // 64)  # 16 samples x 64 channels a program
        assert warps == 4 and 0 < registers <= 255 and spill == 0
    assert proc.stdout.rstrip().endswith(f'0 of {len(rows)} launches spill registers')


@pytest.mark.slow
def test_kernel_resources_refuses_bad_arguments(run_tool):
    proc = run_tool('tools/benchmark/kernel_resources.py', '--kernel', '_no_such', check=False,
                    timeout=300)
    assert proc.returncode != 0 and "--kernel '_no_such' names no kernel" in proc.stderr
    proc = run_tool('tools/benchmark/kernel_resources.py', '--batch-size', '0', check=False,
                    timeout=300)
    assert proc.returncode != 0 and '--batch-size 0 is not a batch' in proc.stderr


def test_resident_warps_follow_the_register_and_shared_memory_budget():
    resources = load_script('tools/benchmark/kernel_resources.py')
    # 255 registers round up to 256 a thread, 8192 a warp: 2 programs of 4 warps in 64K
    assert resources.resident_warps(255, 4, 0, 90) == 8
    # 32 registers: 16 programs of 4 warps by registers, the 64-warp cap
    assert resources.resident_warps(32, 4, 0, 90) == 64
    # 48.5 KiB of shared memory each (+1 KiB reserved): 4 programs in sm_90's 228 KiB
    assert resources.resident_warps(32, 4, 49664, 90) == 16
    # sm_80's 164 KiB: 3
    assert resources.resident_warps(32, 4, 49664, 80) == 12
