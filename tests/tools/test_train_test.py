"""tools/train.py, tools/test.py and tools/dist_train.sh end to end, as a user runs them."""
import json
import pickle

import pytest
import torch

from mmstiff.utils.checkpoint import load_checkpoint_file

CLS_CONFIG = 'tests/data/configs/cifar10_resnet18_tiny.py'
DIAG_CONFIG = 'tests/data/configs/cifar10_resnet18_tiny_diagnostics.py'
DET_CONFIG = 'tests/data/configs/faster_rcnn_r50_fpn_tiny.py'


def cifar_options(root):
    return [
        f'{loader}.dataset.data_root={root}'
        for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader')
    ]


def load(path):
    """A checkpoint the tools wrote, loaded weights-only as the tools load it."""
    return load_checkpoint_file(str(path))


@pytest.mark.slow
def test_train_then_test_classifier(tiny_data, run_tool, tmp_path):
    root = tiny_data('cifar10')
    work = tmp_path / 'work'
    run_tool('tools/train.py', CLS_CONFIG, '--work-dir', str(work), '--cfg-options',
             *cifar_options(root))
    ckpt = work / 'iter_2.pth'
    assert ckpt.is_file()
    assert load(ckpt)['meta']['iter'] == 2

    out = tmp_path / 'metrics.json'
    proc = run_tool('tools/test.py', CLS_CONFIG, str(ckpt), '--work-dir', str(work), '--out',
                    str(out), '--cfg-options', *cifar_options(root))
    metrics = json.loads(out.read_text())
    assert 0.0 <= metrics['accuracy/top1'] <= 100.0
    assert 'accuracy/top1' in proc.stdout + proc.stderr

    preds = tmp_path / 'preds.pkl'
    run_tool('tools/test.py', CLS_CONFIG, str(ckpt), '--work-dir', str(work), '--out', str(preds),
             '--cfg-options', *cifar_options(root))
    with open(preds, 'rb') as f:
        dumped = pickle.load(f)
    assert len(dumped) == 10  # one prediction per test image of the tiny set


@pytest.mark.slow
def test_resume_equals_uninterrupted_training(tiny_data, run_tool, tmp_path):
    """2 iterations + --resume to 4 gives the weights and optimizer state of 4 straight."""
    opts = cifar_options(tiny_data('cifar10'))
    straight, resumed = tmp_path / 'straight', tmp_path / 'resumed'
    run_tool('tools/train.py', CLS_CONFIG, '--work-dir', str(straight), '--cfg-options',
             'train_cfg.max_iters=4', *opts)
    run_tool('tools/train.py', CLS_CONFIG, '--work-dir', str(resumed), '--cfg-options', *opts)
    proc = run_tool('tools/train.py', CLS_CONFIG, '--work-dir', str(resumed), '--resume',
                    '--cfg-options', 'train_cfg.max_iters=4', *opts)
    assert 'resumed' in (proc.stdout + proc.stderr).lower()

    a, b = load(straight / 'iter_4.pth'), load(resumed / 'iter_4.pth')
    assert b['meta']['iter'] == 4
    for key, value in a['state_dict'].items():
        torch.testing.assert_close(b['state_dict'][key], value, rtol=1e-5, atol=1e-6, msg=key)
    momenta_a = [s['momentum_buffer'] for s in a['optimizer']['state'].values()]
    momenta_b = [s['momentum_buffer'] for s in b['optimizer']['state'].values()]
    assert len(momenta_a) == len(momenta_b) > 0
    for x, y in zip(momenta_a, momenta_b):
        torch.testing.assert_close(y, x, rtol=1e-5, atol=1e-6)

    # An explicit checkpoint path resumes too, and the checkpoints already written are kept.
    proc = run_tool('tools/train.py', CLS_CONFIG, '--work-dir', str(resumed), '--resume',
                    str(resumed / 'iter_2.pth'), '--cfg-options', 'train_cfg.max_iters=4', *opts)
    assert (resumed / 'iter_2.pth').is_file()
    assert load(resumed / 'iter_4.pth')['meta']['iter'] == 4


@pytest.mark.slow
def test_dist_train_two_cpu_processes(tiny_data, run_tool, tmp_path):
    root = tiny_data('cifar10')
    work = tmp_path / 'dist'
    proc = run_tool('tools/dist_train.sh', DIAG_CONFIG, '2', '--work-dir', str(work),
                    '--cfg-options', *cifar_options(root), env={'PORT': '29631'})
    log = proc.stdout + proc.stderr
    # mmengine's environment report: a real 2-process DDP run on the gloo backend.
    assert 'Distributed training: True' in log and 'GPU number: 2' in log, log[-3000:]
    assert "dist_cfg: {'backend': 'gloo'}" in log
    checkpoints = sorted(p.name for p in work.glob('*.pth'))
    assert checkpoints == ['iter_2.pth']
    # the diagnostics hooks wrote one line per hook and iteration, from rank 0 only
    scalars = next(work.glob('*/vis_data/scalars.json'))
    lines = [json.loads(line) for line in scalars.read_text().splitlines()]
    for prefix in ('stiffness/', 'freq/'):
        steps = [line['step'] for line in lines if any(k.startswith(prefix) for k in line)]
        assert steps == [1, 2], (prefix, steps)
    assert 'stiffness/nsi/layer1.0' in scalars.read_text()
    # Each rank saw a batch of 2 per iteration: the sampler split the data between ranks.
    ckpt = load(work / 'iter_2.pth')
    assert ckpt['meta']['iter'] == 2
    out = tmp_path / 'metrics.json'
    run_tool('tools/test.py', CLS_CONFIG, str(work / 'iter_2.pth'), '--work-dir', str(work),
             '--out', str(out), '--cfg-options', *cifar_options(root))
    single = json.loads(out.read_text())

    # The same evaluation split over two processes gathers every prediction: same accuracy.
    dist_out = tmp_path / 'dist_metrics.json'
    run_tool('tools/dist_test.sh', CLS_CONFIG, str(work / 'iter_2.pth'),
             '2', '--work-dir', str(work), '--out', str(dist_out), '--cfg-options',
             *cifar_options(root), env={'PORT': '29632'})
    assert json.loads(dist_out.read_text()) == pytest.approx(single)


@pytest.mark.slow
@pytest.mark.parametrize(
    'config, extra',
    [
        (DET_CONFIG, []),
        # the StepNet detector as users run it, with only the data settings (and the unreachable
        # torchvision checkpoint) changed on the command line
        ('configs/faster_rcnn_r50_stepnet_coco.py', [
            'model.backbone.init_cfg=None', 'model.test_cfg.rcnn.score_thr=0.0',
            'train_dataloader.dataset.pipeline.2.scale=(160,128)',
            'val_dataloader.dataset.pipeline.1.scale=(160,128)',
            'test_dataloader.dataset.pipeline.1.scale=(160,128)', 'train_dataloader.batch_size=2',
            'train_dataloader.num_workers=0', 'train_dataloader.persistent_workers=False',
            'val_dataloader.num_workers=0', 'val_dataloader.persistent_workers=False',
            'test_dataloader.num_workers=0', 'test_dataloader.persistent_workers=False',
            'train_cfg.max_epochs=1', 'train_cfg.val_interval=100'
        ]),  # 6 images: 3 iterations
    ],
    ids=['mmdet-faster-rcnn', 'faster-rcnn-stepnet'])
def test_faster_rcnn_trains_and_reports_coco_map(config, extra, tiny_data, run_tool, tmp_path):
    root = tiny_data('coco') + '/'
    opts = [
        f'train_dataloader.dataset.data_root={root}', f'val_dataloader.dataset.data_root={root}',
        f'test_dataloader.dataset.data_root={root}',
        f'val_evaluator.ann_file={root}annotations/instances_val2017.json',
        f'test_evaluator.ann_file={root}annotations/instances_val2017.json'
    ] + extra
    work = tmp_path / 'det'
    run_tool('tools/train.py', config, '--work-dir', str(work), '--cfg-options', *opts)
    out = tmp_path / 'det_metrics.json'
    checkpoint = (work / 'last_checkpoint').read_text().strip()
    run_tool('tools/test.py', config, checkpoint, '--work-dir', str(work), '--out', str(out),
             '--cfg-options', *opts)
    metrics = json.loads(out.read_text())
    assert 'coco/bbox_mAP' in metrics
    assert -1.0 <= metrics['coco/bbox_mAP'] <= 1.0
