"""StiffnessHook and FrequencyHook through a real MMEngine Runner on a tiny model."""
import glob
import math
import os.path as osp
from collections import OrderedDict

import pytest
import torch
from diagnostics_toy import ToyClassifier, read_json_lines, tiny_backbone, toy_dataset, toy_loader
from mmengine.runner import Runner

from mmstiff.analysis import high_frequency_ratio, neural_stiffness_index, total_neural_stiffness
from mmstiff.engine.hooks import FrequencyHook, StiffnessHook
from mmstiff.engine.hooks.diagnostic_hook import HISTORY_LENGTH, TRAJECTORY
from mmstiff.engine.hooks.step_stiffness import StepStiffness

BATCH = 4


def _runner(work_dir, model, hooks, max_iters=6, images=None, log_interval=1):
    loader = toy_loader(batch_size=BATCH)
    if images is not None:
        loader.dataset.tensors = (images, loader.dataset.tensors[1])
    return Runner(
        model=model,
        work_dir=str(work_dir),
        train_dataloader=loader,
        train_cfg=dict(by_epoch=False, max_iters=max_iters),
        # lr 0: the weights stay as built, so a test can recompute the logged values
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.0)),
        custom_hooks=hooks,
        default_hooks=dict(logger=dict(type='LoggerHook', interval=log_interval), checkpoint=None),
        randomness=dict(seed=0),
        default_scope='mmengine',
        # unique per test: runners built within one second would otherwise share the
        # timestamped logger instance, and with it the first runner's log file
        experiment_name=osp.basename(str(work_dir)))


def _scalar_lines(runner, prefix):
    paths = glob.glob(osp.join(runner.log_dir, 'vis_data', 'scalars.json'))
    merged = {}
    for line in read_json_lines(paths[0]):
        if any(k.startswith(prefix) for k in line):
            merged.setdefault(line['step'], {}).update(line)
    return merged


def _hook_count(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def _outputs(recorders):
    """A recorded iteration's outputs as a hook keeps them: ``{role: recorder outputs}``."""
    return {role: recorder.outputs for role, recorder in recorders.items()}


def _record_once(model, images, recorders):
    """One forward pass of ``model`` with every recorder on, as a hook's recorded iteration."""
    with torch.no_grad():
        for recorder in recorders:
            recorder.start()
        model(images)
        for recorder in recorders:
            recorder.stop()


def _trajectory_nsi(backbone, images):
    """NSI of every block of an mmpretrain ResNet_CIFAR, recomputed block by block."""
    backbone.train()
    with torch.no_grad():
        x = backbone.relu(backbone.norm1(backbone.conv1(images)))
        columns = {}
        for i in range(1, 5):
            for j, block in enumerate(getattr(backbone, f'layer{i}')):
                x_t = x if block.downsample is None else block.relu(block.downsample(x))
                x = block(x)
                columns[f'layer{i}.{j}'] = (x - x_t).flatten(1).norm(dim=1) / \
                    x_t.flatten(1).norm(dim=1)
    return columns, x


@pytest.mark.slow
def test_stiffness_hook_logs_per_block_values_at_its_interval(tmp_path):
    torch.manual_seed(0)
    model = ToyClassifier(tiny_backbone())
    runner = _runner(tmp_path, model, [dict(type='mmstiff.StiffnessHook', interval=2)])
    runner.train()
    lines = _scalar_lines(runner, 'stiffness/')
    assert sorted(lines) == [2, 4, 6]
    line = lines[2]
    names = [f'layer{i}.{j}' for i in range(1, 5) for j in range(2)]
    assert all(f'stiffness/nsi/{n}' in line for n in names)
    assert {'stiffness/mu/network', 'stiffness/ratio/layer1', 'stiffness/tns/network'} <= set(line)
    assert not any(k.startswith('stiffness/step/') for k in line)  # no adaptor: Δ = 1

    # iteration 2 trained on samples 4..7; recompute its NSI with the (unchanged) weights
    images = toy_dataset().tensors[0][BATCH:2 * BATCH]
    columns, _ = _trajectory_nsi(model.backbone, images)
    for name in ('layer1.0', 'layer2.0', 'layer4.1'):
        assert line[f'stiffness/nsi/{name}'] == pytest.approx(float(columns[name].mean()), rel=1e-4)
    zeta = torch.stack([columns[n] for n in names], dim=1)
    assert line['stiffness/tns/network'] == pytest.approx(total_neural_stiffness(zeta), rel=1e-4)
    assert line['stiffness/mu/network'] > 0.05 and line['stiffness/tns/network'] > 0
    for stage in ('layer1', 'layer3'):  # each stage is a trajectory of its own
        sub = torch.stack([columns[f'{stage}.{j}'] for j in range(2)], dim=1).double()
        mu = sub.mean(dim=1)
        assert line[f'stiffness/mu/{stage}'] == pytest.approx(float(mu.mean()), rel=1e-4)
        assert line[f'stiffness/ratio/{stage}'] == pytest.approx(
            float((sub.max(dim=1).values / mu).mean()), rel=1e-4)
        assert line[f'stiffness/tns/{stage}'] == pytest.approx(
            total_neural_stiffness(sub), rel=1e-4, abs=1e-9)

    # the hook's own JSON log has them too, and the MessageHub keeps the latest values
    timestamp_log = osp.join(runner.log_dir, 'vis_data', f'{runner.timestamp}_stiffness.json')
    assert any('stiffness/nsi/layer1.0' in entry for entry in read_json_lines(timestamp_log))
    history = runner.message_hub.get_scalar('stiffness/nsi/layer1.0')
    assert history.current() == pytest.approx(lines[6]['stiffness/nsi/layer1.0'])
    assert history.max_length == HISTORY_LENGTH  # bounded, in memory and in checkpoints
    assert _hook_count(model) == 0


@pytest.mark.slow
def test_stiffness_hook_logs_step_sizes_of_adaptors(tmp_path):
    torch.manual_seed(0)
    model = ToyClassifier(tiny_backbone(adaptor=dict(type='mmstiff.ConstantStep', step=0.5)))
    runner = _runner(tmp_path, model, [dict(type='mmstiff.StiffnessHook', interval=3)], max_iters=3)
    runner.train()
    line = _scalar_lines(runner, 'stiffness/')[3]
    assert line['stiffness/step/layer1.0'] == pytest.approx(0.5)
    # a constant step has no correlation with NSI: undefined, not logged
    assert not any(k.startswith('stiffness/nsi_step_corr/') for k in line)
    # NSI divides the displacement by the step: ||(x_{t+1} - x_t) / 0.5|| / ||x_t||
    images = toy_dataset().tensors[0][2 * BATCH:3 * BATCH]
    model.backbone.train()
    with torch.no_grad():
        b = model.backbone
        x = b.relu(b.norm1(b.conv1(images)))
        block = b.layer1[0]
        expected = neural_stiffness_index(x, block(x), 0.5).mean()
        manual = ((block(x) - x) / 0.5).flatten(1).norm(dim=1) / x.flatten(1).norm(dim=1)
    assert float(expected) == pytest.approx(float(manual.mean()), rel=1e-5)
    assert line['stiffness/nsi/layer1.0'] == pytest.approx(float(expected), rel=1e-4)


def test_stiffness_summary_of_a_stepnet_backbone_against_its_records():
    import numpy as np

    from mmstiff.analysis import TrajectoryRecorder, mean_step_size
    torch.manual_seed(0)
    backbone = tiny_backbone(adaptor=dict(type='mmstiff.StepNetAdaptor'))
    backbone.train()
    with torch.no_grad():  # StepNet starts at Δ ≡ sigmoid(-1): make it depend on the sample
        for name, p in backbone.named_parameters():
            if 'adaptor' in name:
                p.add_(torch.randn_like(p))
    images = torch.randn(6, 3, 16, 16)
    hook = StiffnessHook(interval=1)
    recorders = hook.build_recorders(backbone)
    kept = TrajectoryRecorder(backbone)  # the records themselves, for an independent summary
    _record_once(backbone, images, list(recorders.values()) + [kept])
    scalars = hook.summarise(_outputs(recorders))
    subset = StiffnessHook(interval=1, num_samples=2)
    sub_recorders = subset.build_recorders(backbone)
    _record_once(backbone, images, sub_recorders.values())
    sub_scalars = subset.summarise(_outputs(sub_recorders))
    correlations = 0
    for name, calls in kept.outputs.items():
        record = calls[0]
        nsi = neural_stiffness_index(record.x_t, record.x_next, record.step)
        step = mean_step_size(record.step, 6)
        assert scalars[f'nsi/{name}'] == pytest.approx(float(nsi.mean()), rel=1e-5)
        assert scalars[f'step/{name}'] == pytest.approx(float(step.mean()), rel=1e-5)
        # num_samples=2: the same per-sample values, of the first two samples only
        assert sub_scalars[f'nsi/{name}'] == pytest.approx(float(nsi[:2].mean()), rel=1e-5)
        assert sub_scalars[f'step/{name}'] == pytest.approx(float(step[:2].mean()), rel=1e-5)
        expected = np.corrcoef(nsi.double().numpy(), step.double().numpy())[0, 1]
        if np.isfinite(expected):
            correlations += 1
            assert scalars[f'nsi_step_corr/{name}'] == pytest.approx(float(expected), abs=1e-6)
    assert correlations == len(kept.outputs)  # StepNet's Δ varies over the samples


def test_stiffness_hook_frees_its_difference_buffer_when_the_forward_pass_ends():
    """The buffer that holds x_{t+1} - x_t serves every block of the pass and is not held
    through the backward pass; the logged NSI equals the block-by-block formula."""
    torch.manual_seed(0)
    backbone = tiny_backbone()
    backbone.train()
    images = torch.randn(5, 3, 16, 16)
    hook = StiffnessHook(interval=1)
    recorders = hook.build_recorders(backbone)
    held = []  # the buffer's size once each residual block has been reduced
    blocks = [b.module for b in recorders[TRAJECTORY].blocks]
    with torch.no_grad():
        for recorder in recorders.values():
            recorder.start()
        # registered after the recorder's: each runs once the block's step is reduced
        handles = [
            block.register_forward_hook(lambda *_: held.append(hook._scratch.nbytes))
            for block in blocks
        ]
        backbone(images)
        for recorder in recorders.values():
            recorder.stop()
    for handle in handles:
        handle.remove()
    assert len(held) == len(blocks) and all(n > 0 for n in held)
    assert hook._scratch.nbytes == 0  # freed at the end of the pass
    columns, _ = _trajectory_nsi(backbone, images)
    scalars = hook.summarise(_outputs(recorders))
    for name, nsi in columns.items():
        assert scalars[f'nsi/{name}'] == pytest.approx(float(nsi.mean()), rel=1e-5)


def test_console_summary_follows_the_logger_interval(tmp_path):
    # recorded (and written to the JSON log) every iteration, printed every 2nd: the logger's
    model = ToyClassifier(tiny_backbone(depth=18, channels=4))
    runner = _runner(tmp_path, model, [dict(type='mmstiff.StiffnessHook', interval=1)], max_iters=4,
                     log_interval=2)
    runner.train()
    assert sorted(_scalar_lines(runner, 'stiffness/')) == [1, 2, 3, 4]
    log = open(glob.glob(osp.join(runner.log_dir, '*.log'))[0]).read()
    printed = [k for k in range(1, 5) if f'Iter(train) [{k}] stiffness/mu/' in log]
    assert printed == [2, 4]


@pytest.mark.slow
def test_recorded_iterations_are_written_in_batches_at_the_logger_interval(tmp_path):
    from mmengine.hooks import Hook

    class Probe(Hook):
        """Runs after the diagnostics hook: how many rows has it written so far."""
        priority = 'LOWEST'

        def __init__(self):
            self.written = []

        def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
            history = runner.message_hub.log_scalars.get('stiffness/nsi/layer1.0')
            self.written.append(0 if history is None else len(history.data[0]))

    torch.manual_seed(0)
    model = ToyClassifier(tiny_backbone(depth=18, channels=4))
    probe = Probe()
    runner = _runner(tmp_path, model, [dict(type='mmstiff.StiffnessHook', interval=1), probe],
                     max_iters=6, log_interval=4)
    runner.train()
    # recorded at every iteration, written at iteration 4 (1-4) and at the end (5-6)
    assert probe.written == [0, 0, 0, 4, 4, 4]
    lines = _scalar_lines(runner, 'stiffness/')
    assert sorted(lines) == [1, 2, 3, 4, 5, 6]
    history = runner.message_hub.get_scalar('stiffness/nsi/layer1.0').data[0]
    assert list(history) == pytest.approx([lines[k]['stiffness/nsi/layer1.0'] for k in range(1, 7)])
    # each row holds its own iteration's batch (samples 4k-4 .. 4k-1 of the unshuffled 16)
    for step in (3, 5):
        start = (step - 1) * BATCH % 16
        columns, _ = _trajectory_nsi(model.backbone, toy_dataset().tensors[0][start:start + BATCH])
        assert lines[step]['stiffness/nsi/layer2.1'] == pytest.approx(
            float(columns['layer2.1'].mean()), rel=1e-4)


def _recorded_rows(hook, iterations=3):
    """``iterations`` recorded iterations of a tiny ResNet as ``hook`` keeps them."""
    torch.manual_seed(0)
    backbone = tiny_backbone(depth=18, channels=4)
    backbone.train()
    rows = []
    for seed in range(iterations):
        recorders = hook.build_recorders(backbone)
        _record_once(backbone,
                     torch.randn(5, 3, 16, 16, generator=torch.Generator().manual_seed(seed)),
                     recorders.values())
        rows.append(_outputs(recorders))
    return rows


def test_stiffness_rows_summarised_together_equal_one_at_a_time():
    hook = StiffnessHook(interval=1)
    rows = _recorded_rows(hook)
    together = hook.summarise_rows(rows)
    assert len(together) == 3 and together[0] != together[1]
    for joint, outputs in zip(together, rows):
        alone = hook.summarise(outputs)
        assert list(joint) == list(alone)
        assert list(joint.values()) == pytest.approx(list(alone.values()), rel=1e-12)


def test_stiffness_summary_of_blocks_seen_a_different_number_of_times():
    # block 'b' ran twice in the iteration (two calls): its samples are pooled, and with
    # steps of unequal sample counts there is no common trajectory (no μ / ratio / TNS)
    one = StepStiffness(torch.tensor([1.0, 3.0]), torch.tensor([2.0, 2.0]), None, False)
    two = StepStiffness(torch.tensor([2.0, 2.0]), torch.tensor([1.0, 4.0]), None, False)
    outputs = OrderedDict([('s.a', [one]), ('s.b', [one, two])])
    expected = {
        'nsi/s.a': pytest.approx((0.5 + 1.5) / 2),
        'nsi/s.b': pytest.approx((0.5 + 1.5 + 2.0 + 0.5) / 4)
    }
    assert StiffnessHook().summarise({TRAJECTORY: outputs}) == expected
    # in a batch of rows, next to an iteration that has a trajectory (ζ = (0.5, 1.5) at s.a
    # and (2.0, 0.5) at s.b: μ per sample 1.25 and 1.0, ζ* 2.0 and 1.5)
    whole = OrderedDict([('s.a', [one]), ('s.b', [two])])
    rows = StiffnessHook().summarise_rows([{
        TRAJECTORY: whole
    }, {
        TRAJECTORY: outputs
    }, {
        TRAJECTORY: whole
    }])
    assert rows[1] == expected
    assert rows[0] == rows[2]
    assert rows[0]['nsi/s.b'] == pytest.approx(1.25)
    assert rows[0]['mu/s'] == pytest.approx((1.25 + 1.0) / 2)
    assert rows[0]['ratio/s'] == pytest.approx((2.0 / 1.25 + 1.5 / 1.0) / 2)
    assert rows[0]['tns/network'] == pytest.approx(
        ((2.0 / 1.25 - 1) * 2.0 + (1.5 / 1.0 - 1) * 1.5) / 2)


def test_extend_history_equals_bounded_updates_one_by_one(monkeypatch):
    from mmengine.logging import HistoryBuffer, MessageHub

    from mmstiff.engine.hooks import diagnostic_hook
    monkeypatch.setattr(diagnostic_hook, 'HISTORY_LENGTH', 5)
    batched = MessageHub(name='extend_history_batched')
    one_by_one = MessageHub(name='extend_history_one_by_one')
    one_by_one.log_scalars['x'] = HistoryBuffer(max_length=5)
    for values in ([1.0], [2.0, 3.0], [4.0, 5.0, 6.0, 7.0]):
        diagnostic_hook.extend_history(batched, 'x', values)
        for value in values:
            one_by_one.update_scalar('x', value)
        got, expected = batched.get_scalar('x'), one_by_one.get_scalar('x')
        assert got.data[0].tolist() == expected.data[0].tolist()
        assert got.data[1].tolist() == expected.data[1].tolist()
        assert got.max_length == 5
    assert batched.get_scalar('x').data[0].tolist() == [3.0, 4.0, 5.0, 6.0, 7.0]
    # kept with checkpoints like a scalar the hub updated itself
    assert batched.state_dict()['log_scalars'].keys() == {'x'}


@pytest.mark.slow
def test_non_finite_values_are_skipped_with_one_warning(tmp_path):
    # all-zero images give all-zero states: NSI = 0 / 0 at every block
    model = ToyClassifier(tiny_backbone())
    zeros = torch.zeros(16, 3, 16, 16)
    runner = _runner(tmp_path, model, [dict(type='mmstiff.StiffnessHook', interval=1)], max_iters=3,
                     images=zeros)
    runner.train()  # does not crash
    log = open(glob.glob(osp.join(runner.log_dir, '*.log'))[0]).read()
    assert log.count('non-finite values') == 1
    for line in _scalar_lines(runner, 'stiffness/').values():
        assert all(math.isfinite(v) for k, v in line.items() if k.startswith('stiffness/'))


@pytest.mark.slow
def test_frequency_hook_on_a_cnn(tmp_path):
    torch.manual_seed(0)
    model = ToyClassifier(tiny_backbone())
    runner = _runner(tmp_path, model, [dict(type='mmstiff.FrequencyHook', interval=3)])
    runner.train()
    lines = _scalar_lines(runner, 'freq/')
    assert sorted(lines) == [3, 6]
    line = lines[3]
    assert {'freq/hf_ratio/input', 'freq/hf_ratio/layer4.1', 'freq/dlogamp/layer1.0'} <= set(line)
    assert not any(k.startswith('freq/token_cos') for k in line)  # feature maps, not tokens
    images = toy_dataset().tensors[0][2 * BATCH:3 * BATCH]
    _, out = _trajectory_nsi(model.backbone, images)
    assert line['freq/hf_ratio/layer4.1'] == pytest.approx(
        float(high_frequency_ratio(out).mean()), rel=1e-4)
    assert _hook_count(model) == 0


def _end_bins(row):
    return [
        m.end_bins for calls in row[TRAJECTORY].values() for call in calls for m in call.values()
    ]


def test_frequency_hook_computes_waiting_amplitudes_once_over_its_bound(monkeypatch):
    """The recorded iterations keep their spectrum ends for the write while they hold at most
    PENDING_BINS_BYTES; the call that exceeds it computes the Δ log amplitudes of all of them.
    Either way the rows written are the same."""
    from mmstiff.engine.hooks import frequency_hook
    kept = FrequencyHook(interval=1, num_samples=2)
    rows = _recorded_rows(kept)
    one_row_bytes = sum(b.nelement() * b.element_size() for b in _end_bins(rows[0])
                        if b is not None)
    assert one_row_bytes > 0
    monkeypatch.setattr(frequency_hook, 'PENDING_BINS_BYTES', 2 * one_row_bytes)
    for row in rows[:2]:
        kept.compact(row)
        assert any(b is not None for b in _end_bins(row))  # within the bound: kept
    kept.compact(rows[2])  # over it: all three computed at once
    for row in rows:
        assert all(b is None for b in _end_bins(row))
    assert kept._uncompacted == [] and kept._uncompacted_bytes == 0
    compacted = kept.summarise_rows(rows)

    waiting = FrequencyHook(interval=1, num_samples=2)
    rows = _recorded_rows(waiting)
    monkeypatch.setattr(frequency_hook, 'PENDING_BINS_BYTES', 1 << 40)
    written = waiting.summarise_rows([waiting.compact(row) for row in rows])
    assert waiting._uncompacted == []  # the write lets go of the waiting iterations
    assert [list(r) for r in written] == [list(r) for r in compacted]
    assert any(k.startswith('dlogamp/') for k in written[0])
    for got, expected in zip(written, compacted):
        assert list(got.values()) == pytest.approx(list(expected.values()), rel=1e-12, nan_ok=True)


@pytest.mark.slow
def test_frequency_hook_on_a_vit_logs_cosine_similarities(tmp_path):
    from mmpretrain.models.backbones import VisionTransformer
    torch.manual_seed(0)
    vit = VisionTransformer(
        arch=dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=32), img_size=16,
        patch_size=4, out_type='featmap')
    model = ToyClassifier(vit)
    runner = _runner(tmp_path, model, [
        dict(type='mmstiff.FrequencyHook', interval=2),
        dict(type='mmstiff.StiffnessHook', interval=2)
    ], max_iters=2)
    runner.train()
    line = _scalar_lines(runner, ('freq/', 'stiffness/'))[2]
    for key in ('freq/token_cos/layers.0.msa', 'freq/token_cos/layers.1.mlp',
                'freq/attn_cos/layers.0', 'freq/attn_cos/layers.1', 'freq/dlogamp/layers.1.msa',
                'stiffness/nsi/layers.0.msa', 'stiffness/nsi/layers.0.mlp'):
        assert key in line, key
        assert math.isfinite(line[key])
    assert 0 <= line['freq/attn_cos/layers.0'] <= 1
    assert _hook_count(model) == 0


def test_hooks_on_swin_blocks_and_window_attention():
    from mmstiff.analysis import (TrajectoryRecorder, attention_column_cosine_similarity,
                                  token_cosine_similarity)
    from mmstiff.models.backbones import StepSwin
    torch.manual_seed(0)
    swin = StepSwin(
        arch=dict(embed_dims=16, depths=(2, 2), num_heads=(2, 4)), img_size=32, window_size=4,
        out_indices=(0, 1), attn_scale_layers='all')
    swin.eval()
    images = torch.randn(3, 3, 32, 32)
    freq, stiff = FrequencyHook(interval=1, num_samples=2), StiffnessHook(interval=1)
    f_recorders, s_recorders = freq.build_recorders(swin), stiff.build_recorders(swin)
    assert list(f_recorders) == ['trajectory', 'attention'] and list(s_recorders) == [TRAJECTORY]
    kept = TrajectoryRecorder(swin, level='branch')
    _record_once(swin, images, [*f_recorders.values(), *s_recorders.values(), kept])
    f_scalars = freq.summarise(_outputs(f_recorders))
    s_scalars = stiff.summarise(_outputs(s_recorders))
    blocks = [f'stages.{i}.blocks.{j}' for i in range(2) for j in range(2)]
    assert {f'nsi/{b}.{branch}' for b in blocks for branch in ('msa', 'mlp')} <= set(s_scalars)
    assert {'mu/stages.0.blocks', 'mu/stages.1.blocks', 'tns/network'} <= set(s_scalars)
    last = kept.outputs['stages.1.blocks.1.mlp'][0].x_next[:2]  # (2, 4 * 4 tokens, 32)
    assert f_scalars['hf_ratio/stages.1.blocks.1.mlp'] == pytest.approx(
        float(high_frequency_ratio(last).mean()), rel=1e-5)
    assert f_scalars['token_cos/stages.1.blocks.1.mlp'] == pytest.approx(
        float(token_cosine_similarity(last).mean()), rel=1e-5)
    assert math.isfinite(f_scalars['dlogamp/stages.0.blocks.0.msa'])  # 8 x 8 token maps
    # M_attn of each block's window maps (batch · windows, heads, 16, 16), here read back
    # through StepSwin's own attention-map recording
    from mmstiff.models.layers import record_attention_maps
    with torch.no_grad(), record_attention_maps(swin) as maps:
        swin(images)
    for block in ('stages.0.blocks.1', 'stages.1.blocks.0'):
        window_maps = maps[f'{block}.attn.w_msa']
        assert window_maps.shape[0] == 3 * (4 if block.startswith('stages.0') else 1)
        assert f_scalars[f'attn_cos/{block}'] == pytest.approx(
            float(attention_column_cosine_similarity(window_maps).mean()), rel=1e-5)
    assert _hook_count(swin) == 0


def test_hook_arguments_fail_early():
    with pytest.raises(ValueError, match='interval=0'):
        StiffnessHook(interval=0)
    with pytest.raises(ValueError, match='blocks=5'):
        StiffnessHook(blocks=5)
    with pytest.raises(ValueError, match="level='layer'"):
        FrequencyHook(level='layer')
    with pytest.raises(ValueError, match='num_samples=0'):
        FrequencyHook(num_samples=0)
    with pytest.raises(ValueError, match="num_samples='8'"):
        StiffnessHook(num_samples='8')
    with pytest.raises(ValueError, match='num_extra_tokens=-1'):
        FrequencyHook(num_extra_tokens=-1)


def test_reduce_scalars_single_process_drops_non_finite():
    from mmstiff.engine.hooks import reduce_scalars_across_ranks
    means, counts = reduce_scalars_across_ranks({'b': 2.5, 'a': float('nan'), 'c': float('inf')})
    assert dict(means) == {'b': 2.5}
    assert counts == {'a': 0, 'b': 1, 'c': 0}
