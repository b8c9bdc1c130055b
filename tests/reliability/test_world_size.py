"""Resuming on another number of processes skips the samples already seen, and says so.

Before: a 2-process run resumed on 1 process went on without a word, and the dataloader skipped
16 of the 32 samples already seen (one batch per iteration done, whatever the world size).
"""
import socket
import types

import pytest
from reliability_runs import FAULT_ENV, load, write_config

from mmstiff.engine.hooks import SafeCheckpointHook
from mmstiff.engine.world_size import batches_to_skip, layout_change

TWO = dict(world_size=2, train_batch_size=2)
ONE = dict(world_size=1, train_batch_size=2)


def test_batches_to_skip_covers_the_samples_seen():
    # 8 iterations of 2 processes x 2 samples: 32 samples, 16 batches of 2 on one process
    assert batches_to_skip(8, TWO, ONE) == 16
    assert batches_to_skip(8, ONE, TWO) == 4
    assert batches_to_skip(3, dict(world_size=3, train_batch_size=1), ONE) == 4  # 9 // 2


def test_layout_change_says_what_it_skips():
    extra, message = layout_change(8, TWO, ONE)
    assert extra == 8
    assert message == ('Resuming a run of 2 process(es) x 2 samples per batch with 1 x 2: the '
                       '32 samples already seen are skipped as 16 batches per process '
                       '(MMEngine would skip 8)')
    extra, message = layout_change(8, ONE, TWO)
    assert extra == 0 and message.endswith('16 samples not yet seen in this pass are skipped '
                                           'with them, since MMEngine skips one batch per '
                                           'iteration done')
    assert layout_change(8, TWO, TWO) is None
    assert layout_change(0, TWO, ONE) is None
    assert layout_change(8, {}, ONE) is None  # a checkpoint that did not record it


def _free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


class FakeLoader:

    def __init__(self):
        self.batch_size = 2
        self.drawn = 0

    def __next__(self):
        self.drawn += 1
        return self.drawn


def fake_runner(world_size, iters):
    loader = FakeLoader()
    warnings = []
    loop = types.SimpleNamespace(dataloader=loader, dataloader_iterator=loader)
    logger = types.SimpleNamespace(warning=warnings.append)
    return types.SimpleNamespace(world_size=world_size, train_loop=loop, _train_loop=loop,
                                 iter=iters, logger=logger), loader, warnings


def test_hook_records_the_layout_and_skips_the_difference_on_resume():
    saving, _, _ = fake_runner(2, 8)
    checkpoint = {'meta': {'iter': 8}}
    hook = SafeCheckpointHook(interval=2, by_epoch=False)
    hook.before_save_checkpoint(saving, checkpoint)
    assert checkpoint['meta'] == {'iter': 8, 'world_size': 2, 'train_batch_size': 2}

    resumed, loader, warnings = fake_runner(1, 8)
    hook = SafeCheckpointHook(interval=2, by_epoch=False)
    hook.after_load_checkpoint(resumed, checkpoint)
    hook._skip_by_samples(resumed)
    assert loader.drawn == 8  # MMEngine's loop then skips its own 8
    assert warnings == [
        'Resuming a run of 2 process(es) x 2 samples per batch with 1 x 2: the '
        '32 samples already seen are skipped as 16 batches per process '
        '(MMEngine would skip 8).'
    ]


@pytest.mark.slow
def test_two_process_run_resumed_on_one_skips_by_samples(tiny_data, run_tool, tmp_path):
    config = write_config(tmp_path / 'config.py', tiny_data('cifar10'), train_cfg=dict(max_iters=2))
    work = tmp_path / 'work'
    port = str(_free_port())
    run_tool('tools/dist_train.sh', config, '2', '--work-dir', str(work),
             env=dict(FAULT_ENV, PORT=port))
    meta = load(work / 'iter_2.pth')['meta']
    assert (meta['world_size'], meta['train_batch_size']) == (2, 2)
    proc = run_tool('tools/train.py', config, '--work-dir', str(work), '--resume', '--cfg-options',
                    'train_cfg.max_iters=4', env=FAULT_ENV)
    log = proc.stdout + proc.stderr
    assert ('Resuming a run of 2 process(es) x 2 samples per batch with 1 x 2: the 8 samples '
            'already seen are skipped as 4 batches per process (MMEngine would skip 2).') in log
    assert load(work / 'iter_4.pth')['meta']['world_size'] == 1
