"""The cases of docs/reliability.md that used to end in a traceback, each as a fresh-process
run of a tool, for the parametrised one-line-error test of ``test_error_lines.py``.

``CASES[name](tmp_path, tiny_data, run_tool)`` sets a case up and returns ``Case(args, env, needles,
after)``: the tool and its arguments for ``run_tool``, the environment, what the one line must
name, and a check of the finished process (or None). :func:`case_params` marks the cases that
take more than a few seconds ``slow`` and those that need mmdet ``det``.
"""
import json
import os
import os.path as osp
import shutil
import subprocess
import textwrap
from typing import Callable, NamedTuple, Optional

import pytest
from reliability_runs import FAULT_ENV, FAULTS, REPO, write_config

UPSTREAM_COCO = '''
_base_ = 'mmdet::faster_rcnn/faster-rcnn_r50_fpn_1x_coco.py'
data_root = {root!r}
train_dataloader = dict(batch_size=1, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root=data_root))
val_dataloader = dict(batch_size=1, num_workers=0, persistent_workers=False,
                      dataset=dict(data_root=data_root))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator
'''


class Case(NamedTuple):
    args: list
    env: dict
    needles: list
    after: Optional[Callable] = None


def last_line(proc):
    lines = proc.stderr.strip().splitlines()
    return lines[-1] if lines else ''


def missing_image(tmp_path, tiny_data, run_tool):
    """mmdet's own CocoDataset, one image file of train2017 deleted."""
    from mmstiff.testing import write_coco
    root = write_coco(str(tmp_path / 'coco'), num_train=3, num_val=2) + '/'
    with open(osp.join(root, 'annotations', 'instances_train2017.json')) as f:
        name = json.load(f)['images'][1]['file_name']
    gone = osp.join(root, 'train2017', name)
    os.remove(gone)
    config = tmp_path / 'upstream_coco.py'
    config.write_text(UPSTREAM_COCO.format(root=root))
    work = tmp_path / 'work'

    def nothing_built(proc):
        assert not work.exists()

    return Case(['tools/train.py', str(config), '--work-dir',
                 str(work)], {}, [
                     'train_dataloader.dataset', 'of the 3 image files it lists, 1 missing',
                     f'(e.g. {osp.normpath(gone)})', "type='CocoDataset' does not check this",
                     'skip_image_checks=True'
                 ], nothing_built)


def disk_full(tmp_path, tiny_data, run_tool):
    """ENOSPC halfway through writing iter_4.pth (tests/reliability/faults.py)."""
    config = write_config(tmp_path / 'full.py', tiny_data('cifar10'), train_cfg=dict(max_iters=4),
                          custom_imports=FAULTS,
                          custom_hooks=[dict(type='DiskFullDuringWrite', pattern='*iter_4.pth*')])
    work = tmp_path / 'work'
    return Case(
        ['tools/train.py', config, '--work-dir', str(work)], FAULT_ENV, [
            f'could not write {work / "iter_4.pth"}: No space left on device',
            f'the newest complete checkpoint is {work / "iter_2.pth"}', '--resume'
        ])


def unwritable_work_dir(tmp_path, tiny_data, run_tool):
    """A work dir below a read-only folder (a read-only tmpfs as root, who may write anywhere
    else)."""
    ro = tmp_path / 'ro'
    ro.mkdir()
    if os.geteuid() == 0:
        done = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'ro,size=64k', 'tmpfs',
                               str(ro)], capture_output=True, timeout=30)
        if done.returncode != 0:
            pytest.skip('root cannot mount a read-only tmpfs here')
        reason = 'Read-only file system'
    else:
        ro.chmod(0o500)
        reason = 'Permission denied'
    config = write_config(tmp_path / 'c.py', tiny_data('cifar10'))

    def unmount(proc):
        if os.geteuid() == 0:
            subprocess.run(['umount', '-l', str(ro)], capture_output=True, timeout=30)

    return Case(
        ['tools/train.py', config, '--work-dir',
         str(ro / 'work')], {},
        [
            f"the work dir '{ro / 'work'}' cannot be used: could not write {ro / 'work'}: {reason}",
            'pick a writable --work-dir'
        ], unmount)


def runner_list(fields, *needles):

    def case(tmp_path, tiny_data, run_tool):
        config = write_config(tmp_path / 'c.py', tiny_data('cifar10'), **fields)
        work = tmp_path / 'work'

        def nothing_built(proc):
            assert not work.exists()

        return Case(['tools/train.py', config, '--work-dir',
                     str(work)], {}, list(needles), nothing_built)

    return case


def failing_loader(root, workers, rank=None):
    """A train dataloader whose every item raises a data error (on ``rank`` only, if given)."""
    dataset = dict(
        _delete_=True, type='FailingItems', bad=list(range(20)), rank=rank,
        dataset=dict(type='mmstiff.CIFAR10', data_root=root, pipeline=[dict(type='PackInputs')]))
    return dict(batch_size=2, num_workers=workers, persistent_workers=False, dataset=dataset)


def dataloader_worker(tmp_path, tiny_data, run_tool):
    """The dataset raises in one of 2 worker processes; the line equals that of a run without
    workers (num_workers=0), which ``after`` runs."""
    root = tiny_data('cifar10')
    configs = {
        workers:
        write_config(tmp_path / f'w{workers}.py', root, custom_imports=FAULTS,
                     train_dataloader=failing_loader(root, workers))
        for workers in (0, 2)
    }

    def same_as_without_workers(proc):
        plain = run_tool('tools/train.py', configs[0], '--work-dir', str(tmp_path / 'w0'),
                         env=FAULT_ENV, check=False)
        assert plain.returncode == 1 and last_line(plain) == last_line(proc)

    return Case(['tools/train.py', configs[2], '--work-dir',
                 str(tmp_path / 'w2')], FAULT_ENV,
                ['of the dataset is damaged (planted by the test)'], same_as_without_workers)


def corrupt_image(tmp_path, tiny_data, run_tool):
    """mmpretrain's ImageNet whose JPEG files hold no image, read by 2 DataLoader workers:
    mmcv's ``failed to load image`` assertion, raised in a worker."""
    from mmstiff.testing import write_imagenet
    root = write_imagenet(str(tmp_path / 'imagenet'), num_classes=2, per_class=2)
    for folder, _, files in os.walk(osp.join(root, 'train')):
        for name in files:
            with open(osp.join(folder, name), 'wb') as f:
                f.write(b'this is not a JPEG file' * 10)
    pipeline = [
        dict(type='LoadImageFromFile'),
        dict(type='Resize', scale=32),
        dict(type='PackInputs')
    ]
    loader = dict(
        batch_size=2, num_workers=2, persistent_workers=False,
        dataset=dict(_delete_=True, type='ImageNet', data_root=root, split='train',
                     pipeline=pipeline))
    config = write_config(tmp_path / 'corrupt.py', tiny_data('cifar10'), train_dataloader=loader)
    return Case(['tools/train.py', config, '--work-dir',
                 str(tmp_path / 'w')], {},
                [
                    f'error: image file {osp.join(root, "train")}', 'could not be read as an image',
                    'replace it, or remove it from the annotation file'
                ])


def rank_1(tmp_path, tiny_data, run_tool):
    """tools/dist_train.sh with 2 processes; only rank 1's data fails."""
    from distributed_launch import free_port  # tests/
    root = tiny_data('cifar10')
    config = write_config(tmp_path / 'rank1.py', root, custom_imports=FAULTS,
                          train_dataloader=failing_loader(root, 0,
                                                          rank=1), train_cfg=dict(max_iters=4))

    def printed_once(proc):
        assert proc.stderr.count('of the dataset is damaged') == 1, proc.stderr[-3000:]

    return Case(['tools/dist_train.sh', config, '2', '--work-dir',
                 str(tmp_path / 'w')], dict(FAULT_ENV, PORT=str(free_port())),
                ['error: on rank 1 (of 2): ', 'of the dataset is damaged (planted by the test)'],
                printed_once)


def model_index(tmp_path, tiny_data, run_tool):
    """tools/misc/model_index.py --check in a checkout whose index lacks a config."""
    script = tmp_path / 'tools' / 'misc' / 'model_index.py'
    script.parent.mkdir(parents=True)
    shutil.copy(osp.join(REPO, 'tools', 'misc', 'model_index.py'), script)
    (tmp_path / 'configs' / 'stepnet').mkdir(parents=True)
    (tmp_path / 'configs' / 'stepnet' / 'resnet50-stepnet_8xb32-120e_in1k.py').write_text('')
    (tmp_path / 'model-index.yml').write_text(
        textwrap.dedent('''\
        Import:
          - configs/stepnet/metafile.yml
        '''))

    def listed(proc):
        assert 'configs/stepnet/metafile.yml, which does not exist' in proc.stderr
        assert 'resnet50-stepnet_8xb32-120e_in1k.py has no entry in' in proc.stderr

    return Case([str(script), '--check'], {}, ['2 problem(s) in the model index (listed above)'],
                listed)


CASES = {
    'missing-image-mmdet-coco':
    missing_image,
    'disk-full-checkpoint':
    disk_full,
    'unwritable-work-dir':
    unwritable_work_dir,
    'custom-hooks-string':
    runner_list(
        dict(custom_hooks=['CheckpointHook']),
        "custom_hooks.0='CheckpointHook' is a str, not a hook config",
        "write dict(type='CheckpointHook')"),
    'custom-hooks-no-type':
    runner_list(
        dict(custom_hooks=[dict(interval=3)]), "custom_hooks.0={'interval': 3} has no type"),
    'custom-hooks-unknown-type':
    runner_list(
        dict(custom_hooks=[dict(type='EMAHook'), dict(type='CheckpointHok')]),
        "custom_hooks.1.type='CheckpointHok' is not a hook type", "did you mean 'CheckpointHook'"),
    'param-scheduler-no-type':
    runner_list(
        dict(
            param_scheduler=[dict(type='ConstantLR', factor=1.0, by_epoch=False),
                             dict(factor=0.5)]), "param_scheduler.1={'factor': 0.5} has no type"),
    'vis-backends-string':
    runner_list(
        dict(visualizer=dict(type='UniversalVisualizer', vis_backends=['LocalVisBackend'])),
        "visualizer.vis_backends.0='LocalVisBackend' is a str",
        "write dict(type='LocalVisBackend')"),
    'dataloader-worker':
    dataloader_worker,
    'corrupt-image-worker':
    corrupt_image,
    'rank-1-of-2':
    rank_1,
    'model-index-check':
    model_index,
}
#: the cases that take a training run (or mmdet's import), more than a few seconds
SLOW = {
    'missing-image-mmdet-coco', 'disk-full-checkpoint', 'custom-hooks-no-type',
    'custom-hooks-unknown-type', 'param-scheduler-no-type', 'vis-backends-string',
    'dataloader-worker', 'corrupt-image-worker', 'rank-1-of-2'
}
DET = {'missing-image-mmdet-coco'}


def case_params():
    return [
        pytest.param(name,
                     marks=[pytest.mark.slow] * (name in SLOW) + [pytest.mark.det] * (name in DET),
                     id=name) for name in CASES
    ]
