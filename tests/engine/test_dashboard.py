"""The run's dashboard: drawn by the diagnostics hooks into the work dir at every checkpoint and at
the end of training, sent to TensorBoard, and its panels read back from the file's own metadata
and from the figure's axes (never from its pixels)."""
import glob
import os.path as osp

import numpy as np
import pytest
import torch
from diagnostics_toy import ToyClassifier, tiny_backbone, toy_loader
from mmengine.evaluator import BaseMetric
from mmengine.hooks import Hook
from mmengine.runner import Runner

from mmstiff.analysis.quantities import BY_GROUP
from mmstiff.engine.hooks import DashboardHook, StiffnessHook
from mmstiff.engine.hooks.backend_layout import custom_scalars_layout, quantity_of
from mmstiff.visualization import dashboard as dash

# the strips' titles, as docs/diagnostics.md, "Logged quantities" declares them
NSI_PANEL = BY_GROUP['stiffness/nsi'].title
HF_PANEL = BY_GROUP['freq/hf_ratio'].title
GAIN_PANEL = BY_GROUP['stiffness/adjoint_gain'].title


class Accuracy(BaseMetric):

    def process(self, data_batch, data_samples):
        labels = data_batch[1]
        logits = torch.stack(list(data_samples))  # one row per sample
        self.results.append(float((logits.argmax(dim=1) == labels).float().mean()))

    def compute_metrics(self, results):
        return dict(accuracy=100.0 * sum(results) / len(results))


class SeesTheDashboard(Hook):
    """After the checkpoint of iteration 1 (the CheckpointHook runs before it): is it there?"""
    priority = 'LOWEST'

    def __init__(self):
        self.seen = {}

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        path = osp.join(runner.work_dir, 'dashboard.png')
        self.seen[runner.iter] = osp.isfile(path) and dash.read_panels(path)


@pytest.mark.slow
def test_a_two_iteration_run_draws_its_dashboard_at_each_checkpoint(tmp_path):
    torch.manual_seed(0)
    seer = SeesTheDashboard()
    runner = Runner(
        model=ToyClassifier(tiny_backbone(channels=4)), work_dir=str(tmp_path),
        train_dataloader=toy_loader(batch_size=4), val_dataloader=toy_loader(batch_size=8),
        val_evaluator=[Accuracy()], train_cfg=dict(by_epoch=False, max_iters=2, val_interval=2),
        val_cfg=dict(), optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.01)), custom_hooks=[
            dict(type='mmstiff.StiffnessHook', interval=1),
            dict(type='mmstiff.FrequencyHook', interval=1, num_samples=2), seer
        ], default_hooks=dict(
            logger=dict(type='LoggerHook', interval=1),
            checkpoint=dict(type='CheckpointHook', interval=1, by_epoch=False)), visualizer=dict(
                type='Visualizer',
                vis_backends=[dict(type='LocalVisBackend'),
                              dict(type='TensorboardVisBackend')]), randomness=dict(seed=0),
        default_scope='mmengine', experiment_name='dashboard')
    runner.train()

    png = tmp_path / 'dashboard.png'
    panels = dash.read_panels(str(png))  # the panels the figure was drawn with
    assert panels == [dash.LOSS_PANEL, dash.VAL_PANEL, NSI_PANEL, HF_PANEL, GAIN_PANEL]
    # drawn at the checkpoint of iteration 1 already (before any validation), and redrawn
    assert seer.seen[0] and NSI_PANEL in seer.seen[0]
    # what it shows: the run's rows, read again here and checked against the log's numbers
    log = osp.join(runner.log_dir, 'vis_data', 'scalars.json')
    data = dash.dashboard_data(dash.read_rows(log))
    strips = {s.group: s for s in data.strips}
    assert strips['stiffness/nsi'].iters == [1, 2]
    assert strips['stiffness/nsi'].steps[:2] == ['layer1.0', 'layer1.1']
    assert len(strips['stiffness/adjoint_gain'].steps) == 8  # every block's step
    assert np.isfinite(strips['stiffness/adjoint_gain'].values).all()
    assert strips['freq/hf_ratio'].steps[0] == 'input'
    assert list(data.val) == ['accuracy'] and data.loss['loss'][0] == [1, 2]

    # TensorBoard: one chart per quantity, and the dashboard as an image
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.custom_scalar import layout_pb2
    events = glob.glob(osp.join(runner.log_dir, 'vis_data', 'events.out.tfevents.*'))
    acc = EventAccumulator(events[0], size_guidance={'tensors': 0, 'images': 0})
    acc.Reload()
    layout = layout_pb2.Layout.FromString(
        acc.Tensors('custom_scalars__config__')[-1].tensor_proto.string_val[0])
    charts = {c.title: list(c.multiline.tag) for cat in layout.category for c in cat.chart}
    assert charts['stiffness/nsi'] == ['^stiffness/nsi/'] and 'freq/hf_ratio' in charts
    assert 'stiffness/adjoint_gain' in charts
    assert 'dashboard' in acc.Tags()['images']


def _rows(names, iters=(10, 20, 30)):
    rows = []
    for it in iters:
        rows.append(dict(loss=1.0 / it, lr=0.1, iter=it, step=it, epoch=1))
        rows.append({
            **{
                f'stiffness/nsi/{n}': 0.1 * (i + 1) + it / 100
                for i, n in enumerate(names)
            },
            **{
                f'stiffness/adjoint_gain/{n}': 1.0 + 0.01 * i
                for i, n in enumerate(names)
            }, 'iter': it,
            'step': it,
            'epoch': 1
        })
    rows.append({'accuracy/top1': 50.0, 'step': 30})
    return rows


def test_the_figure_reads_for_12_steps_and_for_200():
    plt = pytest.importorskip('matplotlib.pyplot')
    few = [f'layer{s}.{j}' for s in (1, 2, 3) for j in range(4)]
    many = [f'layers.{i}.{b}' for i in range(100) for b in ('msa', 'mlp')]
    for names in (few, many):
        data = dash.dashboard_data(_rows(names))
        fig, panels = dash.build_figure(data)
        by_label = {ax.get_label(): ax for ax in fig.axes}
        assert panels == [dash.LOSS_PANEL, dash.VAL_PANEL, NSI_PANEL, GAIN_PANEL]
        assert set(panels) <= set(by_label)
        nsi = by_label[NSI_PANEL]
        labels = [t.get_text() for t in nsi.get_yticklabels()]
        assert labels[0] == names[0] and len(labels) <= dash.MAX_STEP_LABELS + 4
        # the heat strip holds the logged numbers, steps down and iterations across
        (mesh, ) = nsi.collections
        values = np.asarray(mesh.get_array()).reshape(len(names), 3)
        assert values[1, 2] == pytest.approx(0.2 + 0.3)
        stage_lines = [line for line in nsi.get_lines() if line.get_ydata()[0] > 0]
        assert len(stage_lines) == (2 if names is few else 0)  # layer2, layer3 start
        plt.close(fig)
    assert dash.step_ticks(many)[:3] == [0, 9, 18]
    assert dash.stage_starts(few) == [(0, 'layer1'), (4, 'layer2'), (8, 'layer3')]


def test_svg_and_pdf_on_request_and_a_log_without_diagnostics(tmp_path):
    rows = [dict(loss=1.0, lr=0.1, iter=1, step=1, epoch=1)]
    data = dash.dashboard_data(rows)
    assert data.strips == []
    paths = dash.write_dashboard(data, str(tmp_path / 'run.png'), ('png', 'svg', 'pdf'))
    assert [osp.basename(p) for p in paths] == ['run.png', 'run.svg', 'run.pdf']
    assert dash.read_panels(paths[1]) == [dash.LOSS_PANEL, dash.VAL_PANEL]
    assert open(paths[2], 'rb').read(5) == b'%PDF-'
    with pytest.raises(ValueError, match='formats'):
        dash.write_dashboard(data, str(tmp_path / 'x'), ('jpg', ))


def test_the_layout_has_one_chart_per_quantity():
    assert quantity_of('stiffness/nsi/layers.3.msa') == 'stiffness/nsi'
    layout = custom_scalars_layout(['stiffness/nsi', 'freq/hf_ratio', 'stiffness/adjoint'])
    assert list(layout) == ['freq', 'stiffness']
    assert layout['stiffness']['stiffness/adjoint'] == ['Multiline', ['^stiffness/adjoint/']]


def test_one_hook_of_a_run_draws_the_dashboard():
    from types import SimpleNamespace

    from mmengine.hooks import LoggerHook
    model = ToyClassifier(tiny_backbone(channels=4))
    first, second = StiffnessHook(interval=1), StiffnessHook(interval=1, adjoint=False)
    off = StiffnessHook(interval=1, dashboard=False)
    for hooks, drawer in [([first, second], first), ([off, second], second),
                          ([first, DashboardHook()], None)]:
        runner = SimpleNamespace(model=model, hooks=[LoggerHook(), *hooks], max_iters=2)
        for hook in hooks:
            if isinstance(hook, StiffnessHook):
                hook.before_train(runner)
        assert [h for h in hooks
                if getattr(h, '_draws_dashboard', False)] == ([drawer] if drawer else [])
    with pytest.raises(ValueError, match='dashboard'):
        StiffnessHook(dashboard='yes')
    with pytest.raises(ValueError, match='formats'):
        DashboardHook(formats=['gif'])
