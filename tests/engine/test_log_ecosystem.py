"""The diagnostics rows as the OpenMMLab tools and MMEngine's visualizer backends read them.

A tiny CIFAR-10 ResNet-18 trains through tools/train.py for two epochs of three iterations with
both hooks recording every iteration; its logs are then read as a user would: the rows' ``iter``
/ ``epoch`` / ``step``, mmpretrain's and mmdet's ``analyze_logs.py``, TensorBoard's event files.
W&B and MLflow are not installed: fake modules stand in for them and record the calls that
MMEngine's backends make.
"""
import glob
import math
import os
import os.path as osp
import sys
from unittest import mock

import pytest
from diagnostics_toy import ToyClassifier, read_json_lines, tiny_backbone, toy_loader
from mmengine.runner import Runner

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def analyze_logs(package):
    """The ``analyze_logs.py`` that ``package``'s wheel ships (``.mim/tools/analysis_tools``)."""
    import importlib.util
    root = osp.dirname(importlib.util.find_spec(package).origin)
    return osp.join(root, '.mim', 'tools', 'analysis_tools', 'analyze_logs.py')


PNG_MAGIC = b'\x89PNG\r\n\x1a\n'
NUM_TRAIN, BATCH, EPOCHS = 20, 8, 2  # the tiny CIFAR-10 set: 3 iterations per epoch
ITERS_PER_EPOCH = math.ceil(NUM_TRAIN / BATCH)
NAMESPACES = ('stiffness', 'freq')

EPOCH_CONFIG = '''
_base_ = {base!r}
train_dataloader = dict(batch_size={batch})
train_cfg = dict(_delete_=True, type='EpochBasedTrainLoop', max_epochs={epochs},
                 val_interval=1)
log_processor = dict(by_epoch=True)
default_hooks = dict(checkpoint=None)
'''


def _data_options(root, prefix=''):
    return [
        f'{loader}.dataset.data_root={root}{prefix}'
        for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader')
    ]


@pytest.fixture(scope='module')
def epoch_run(tmp_path_factory, tiny_data, run_tool):
    """``vis_data`` of the tiny diagnostics run, trained by epochs with validation each epoch."""
    root = tmp_path_factory.mktemp('epoch_run')
    config = root / 'config.py'
    config.write_text(
        EPOCH_CONFIG.format(
            base=osp.join(REPO, 'tests/data/configs/cifar10_resnet18_tiny_diagnostics.py'),
            batch=BATCH, epochs=EPOCHS))
    run_tool('tools/train.py', str(config), '--work-dir', str(root / 'work'), '--cfg-options',
             *_data_options(tiny_data('cifar10')))
    (vis_data, ) = glob.glob(str(root / 'work' / '*' / 'vis_data'))
    return vis_data


def _logs(vis_data):
    """``(json log, {namespace: hook log}, scalars.json)`` of a run's ``vis_data``."""
    (main, ) = [
        p for p in glob.glob(osp.join(vis_data, '*.json')) if osp.basename(p) != 'scalars.json'
        and not p.endswith(tuple(f'_{n}.json' for n in NAMESPACES))
    ]
    stamp = osp.basename(main)[:-len('.json')]
    hooks = {n: osp.join(vis_data, f'{stamp}_{n}.json') for n in NAMESPACES}
    return main, hooks, osp.join(vis_data, 'scalars.json')


def _is_diagnostic(row):
    return any(k.startswith(tuple(f'{n}/' for n in NAMESPACES)) for k in row)


@pytest.mark.slow
def test_rows_carry_iter_and_epoch(epoch_run):
    main, hooks, scalars = _logs(epoch_run)
    iters = list(range(1, EPOCHS * ITERS_PER_EPOCH + 1))
    epochs = [(i - 1) // ITERS_PER_EPOCH + 1 for i in iters]  # 1, 1, 1, 2, 2, 2
    # MMEngine's own training rows (LoggerHook at interval 1) give the same count, row by row
    train = [r for r in read_json_lines(main) if 'loss' in r]
    assert [(r['iter'], r['epoch'], r['step']) for r in train] == list(zip(iters, epochs, iters))
    all_rows = read_json_lines(scalars)
    for namespace, path in hooks.items():
        rows = read_json_lines(path)
        assert [(r['iter'], r['epoch'], r['step'])
                for r in rows] == list(zip(iters, epochs, iters)), namespace
        assert all(
            k.startswith(f'{namespace}/') for r in rows for k in r
            if k not in ('iter', 'epoch', 'step'))
        # scalars.json holds the same rows, with the same iter / epoch
        mirrored = [r for r in all_rows if any(k.startswith(f'{namespace}/') for k in r)]
        assert mirrored == rows, namespace
    # the run's JSON log keeps MMEngine's rows only
    assert not any(_is_diagnostic(r) for r in read_json_lines(main))
    assert sum(1 for r in read_json_lines(main) if 'accuracy/top1' in r) == EPOCHS


def _plot(tool, log, key, out, env=None):
    import subprocess
    proc = subprocess.run(
        [sys.executable, tool, 'plot_curve', log, '--keys', key, '--out',
         str(out)], capture_output=True, text=True, timeout=300,
        env=dict(os.environ, MPLBACKEND='Agg', **(env or {})))
    assert proc.returncode == 0, (key, proc.stdout[-2000:], proc.stderr[-3000:])
    with open(out, 'rb') as f:
        assert f.read(8) == PNG_MAGIC
    assert osp.getsize(out) > 5000, key  # a drawn figure


@pytest.mark.slow
@pytest.mark.parametrize('which, key', [('main', 'loss'), ('main', 'accuracy/top1'),
                                        ('stiffness', 'stiffness/nsi/layer1.0'),
                                        ('freq', 'freq/hf_ratio/layer1.0')])
def test_mmpretrain_analyze_logs_plots(epoch_run, which, key, tmp_path):
    main, hooks, _ = _logs(epoch_run)
    log = main if which == 'main' else hooks[which]
    _plot(analyze_logs('mmpretrain'), log, key, tmp_path / 'curve.png')


def _seaborn_stub(tmp_path):
    """mmdet's analyze_logs.py imports seaborn for ``set_style`` only; where seaborn is not
    installed, a module with a no-op ``set_style`` stands in for it (PYTHONPATH)."""
    import importlib.util
    if importlib.util.find_spec('seaborn') is not None:
        return {}
    stub = tmp_path / 'stub'
    stub.mkdir()
    (stub / 'seaborn.py').write_text('def set_style(*args, **kwargs):\n    pass\n')
    return {'PYTHONPATH': os.pathsep.join([str(stub), os.environ.get('PYTHONPATH', '')])}


@pytest.mark.slow
@pytest.mark.det
def test_mmdet_analyze_logs_plots_loss_and_map(tiny_data, run_tool, tmp_path):
    root = tiny_data('coco') + '/'
    config = tmp_path / 'det_config.py'
    base = osp.join(REPO, 'tests/data/configs/faster_rcnn_r50_fpn_tiny.py')
    config.write_text(f'_base_ = {base!r}\n'
                      "custom_hooks = [dict(type='mmstiff.StiffnessHook', interval=1),\n"
                      "                dict(type='mmstiff.FrequencyHook', interval=1)]\n"
                      "train_cfg = dict(val_interval=2)\n"
                      "default_hooks = dict(checkpoint=None)\n")
    work = tmp_path / 'work'
    run_tool('tools/train.py', str(config), '--work-dir', str(work), '--cfg-options',
             *_data_options(root),
             f'val_evaluator.ann_file={root}annotations/instances_val2017.json',
             f'test_evaluator.ann_file={root}annotations/instances_val2017.json')
    (vis_data, ) = glob.glob(str(work / '*' / 'vis_data'))
    main, hooks, scalars = _logs(vis_data)
    assert [r['iter'] for r in read_json_lines(hooks['stiffness'])] == [1, 2]
    env = _seaborn_stub(tmp_path)
    _plot(analyze_logs('mmdet'), main, 'loss', tmp_path / 'loss.png', env)
    _plot(analyze_logs('mmdet'), main, 'bbox_mAP', tmp_path / 'map.png', env)
    # scalars.json mixes every row: mmdet's reader still finds the loss there
    _plot(analyze_logs('mmdet'), scalars, 'loss', tmp_path / 'loss_all.png', env)


# ---------------------------------------------------------------- visualizer backends
MAX_ITERS, LOG_INTERVAL = 4, 2


def _toy_runner(work_dir, vis_backends):
    return Runner(
        model=ToyClassifier(tiny_backbone()),
        work_dir=str(work_dir),
        train_dataloader=toy_loader(batch_size=4),
        train_cfg=dict(by_epoch=False, max_iters=MAX_ITERS),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.01)),
        custom_hooks=[
            dict(type='mmstiff.StiffnessHook', interval=1),
            dict(type='mmstiff.FrequencyHook', interval=1)
        ],
        # the logger writes every other iteration: the hooks' rows still land at every one
        default_hooks=dict(logger=dict(type='LoggerHook', interval=LOG_INTERVAL), checkpoint=None),
        visualizer=dict(type='Visualizer', vis_backends=vis_backends),
        randomness=dict(seed=0),
        default_scope='mmengine',
        experiment_name=osp.basename(str(work_dir)),
        # as tools/train.py gives one: the Runner hands it to the backends (add_config)
        cfg=dict(work_dir=str(work_dir)))


def _local_rows(runner, namespace):
    path = osp.join(runner.log_dir, 'vis_data', f'{runner.timestamp}_{namespace}.json')
    return read_json_lines(path)


@pytest.mark.slow
def test_tensorboard_gets_every_row_at_its_iteration(tmp_path):
    pytest.importorskip('tensorboard', reason='tensorboard is not installed')
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    runner = _toy_runner(tmp_path / 'tb',
                         [dict(type='LocalVisBackend'),
                          dict(type='TensorboardVisBackend')])
    runner.train()
    runner.visualizer.close()
    (events, ) = {
        osp.dirname(p)
        for p in glob.glob(
            osp.join(runner.log_dir, 'vis_data', '**', 'events.out.tfevents.*'), recursive=True)
    }
    acc = EventAccumulator(events, size_guidance={'scalars': 0})
    acc.Reload()
    for namespace, key in (('stiffness', 'stiffness/nsi/layer1.0'), ('freq',
                                                                     'freq/hf_ratio/layer1.0')):
        rows = _local_rows(runner, namespace)
        events_of_key = acc.Scalars(key)
        assert [e.step for e in events_of_key] == list(range(1, MAX_ITERS + 1)), key
        for event, row in zip(events_of_key, rows):
            assert event.value == pytest.approx(row[key], rel=1e-6, abs=1e-7), key


@pytest.mark.slow
def test_wandb_plots_the_rows_against_iter(tmp_path, monkeypatch):
    wandb = mock.MagicMock(name='wandb')
    monkeypatch.setitem(sys.modules, 'wandb', wandb)
    step_metrics = [
        dict(name='iter', hidden=True),
        dict(name='stiffness/*', step_metric='iter'),
        dict(name='freq/*', step_metric='iter')
    ]
    runner = _toy_runner(tmp_path / 'wandb', [
        dict(type='LocalVisBackend'),
        dict(type='WandbVisBackend', define_metric_cfg=step_metrics)
    ])
    runner.train()
    assert [c.kwargs for c in wandb.define_metric.call_args_list] == step_metrics
    logged = [c.args[0] for c in wandb.log.call_args_list]
    for namespace in NAMESPACES:
        rows = [r for r in logged if any(k.startswith(f'{namespace}/') for k in r)]
        # every recorded iteration, logging iteration or not, with its iteration as 'iter'
        assert [r['iter'] for r in rows] == list(range(1, MAX_ITERS + 1)), namespace
        assert all(r['epoch'] == 1 for r in rows)  # an iteration-based loop: epoch 1
        local = _local_rows(runner, namespace)
        assert rows == [{k: v for k, v in r.items() if k != 'step'} for r in local]
    # MMEngine's own training rows carry 'iter' too, at the logging iterations
    assert [r['iter'] for r in logged if 'loss' in r] == [2, 4]
    # the run's dashboard, one panel with every step of every quantity, as an image
    assert any('dashboard' in r for r in logged)
    assert wandb.Image.call_args.args[0].ndim == 3  # the figure's RGB pixels


@pytest.mark.slow
def test_mlflow_gets_the_rows_at_their_iteration(tmp_path, monkeypatch):
    mlflow = mock.MagicMock(name='mlflow')
    monkeypatch.setitem(sys.modules, 'mlflow', mlflow)
    runner = _toy_runner(
        tmp_path / 'mlflow',
        [dict(type='LocalVisBackend'), dict(type='MLflowVisBackend')])
    runner.train()
    calls = [(c.args[0], c.args[1]) for c in mlflow.log_metrics.call_args_list]
    for namespace in NAMESPACES:
        rows = [(m, s) for m, s in calls if any(k.startswith(f'{namespace}/') for k in m)]
        assert [s for _, s in rows] == list(range(1, MAX_ITERS + 1)), namespace
        assert all(m['iter'] == s for m, s in rows)
        local = _local_rows(runner, namespace)
        assert [m for m, _ in rows] == [{k: v for k, v in r.items() if k != 'step'} for r in local]
    # the run's dashboard as an image
    assert 'dashboard' in [c.args[1] for c in mlflow.log_image.call_args_list]
