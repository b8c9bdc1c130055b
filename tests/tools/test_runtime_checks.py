"""Bad input to the tools fails before any work starts, with a message naming the value."""
import argparse

import pytest
import torch
from mmengine.config import Config

from mmstiff.apis import ConfigError, codebase_of, prepare_runner_cfg
from mmstiff.apis.runtime import check_codebase_loads, init_cpu_distributed
from mmstiff.dependencies import MMCV_OPS_HINT, installed_mmcv

CLS_CONFIG = 'tests/data/configs/cifar10_resnet18_tiny.py'


def train_args(**kw):
    base = dict(config=CLS_CONFIG, work_dir=None, resume=None, amp=False, no_validate=False,
                auto_scale_lr=False, no_pin_memory=False, no_persistent_workers=False,
                cfg_options=None, launcher='none')
    base.update(kw)
    return argparse.Namespace(**base)


def test_codebase_follows_default_scope():
    assert codebase_of(Config(dict(default_scope='mmdet'))) == 'mmdet'
    assert codebase_of(Config(dict(default_scope='mmpretrain'))) == 'mmpretrain'
    with pytest.raises(ConfigError, match=r"default_scope='mmseg'"):
        codebase_of(Config(dict(default_scope='mmseg')))
    with pytest.raises(ConfigError, match='default_scope=None'):
        codebase_of(Config(dict()))


def test_a_codebase_that_cannot_load_is_named_before_anything_else(monkeypatch):
    """mmdet without mmcv's compiled ops is the error a detection config gets, before the data
    checks (which would otherwise name the missing COCO files first); other import errors are
    not taken for it."""
    import importlib
    real = importlib.import_module

    def no_ops(name, *args, **kwargs):
        if name == 'mmdet.models':
            raise ModuleNotFoundError("No module named 'mmcv._ext'", name='mmcv._ext')
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib, 'import_module', no_ops)
    check_codebase_loads(Config(dict(default_scope='mmpretrain')))  # loads
    dist, version = installed_mmcv() or ('mmcv', '?')
    expected = ('this config needs mmdet, and mmdet needs mmcv with its compiled ops, which '
                f'{dist} {version} does not have: {MMCV_OPS_HINT}')
    with pytest.raises(ConfigError) as err:
        check_codebase_loads(Config(dict(default_scope='mmdet')))
    assert str(err.value) == expected

    def broken(name, *args, **kwargs):
        raise ImportError('cannot import name X from a user module')

    monkeypatch.setattr(importlib, 'import_module', broken)
    with pytest.raises(ImportError, match='cannot import name X'):
        check_codebase_loads(Config(dict(default_scope='mmdet')))


def test_train_args_merge_like_upstream(repo_root):
    cfg = Config.fromfile(f'{repo_root}/{CLS_CONFIG}')
    prepare_runner_cfg(
        cfg, train_args(no_validate=True, resume='auto', cfg_options={'train_cfg.max_iters': 7}),
        'train')
    assert cfg.work_dir == './work_dirs/cifar10_resnet18_tiny'
    assert cfg.val_cfg is None and cfg.val_dataloader is None and cfg.val_evaluator is None
    assert cfg.resume is True and cfg.load_from is None
    assert cfg.train_cfg.max_iters == 7  # --cfg-options wins over everything else
    # num_workers=0 in this config: no persistent workers by default, no pinning without CUDA.
    assert cfg.train_dataloader.persistent_workers is False
    assert cfg.train_dataloader.pin_memory is torch.cuda.is_available()


@pytest.mark.skipif(torch.cuda.is_available(), reason='checks the CPU-only message')
def test_amp_on_cpu_is_a_clear_error(repo_root):
    cfg = Config.fromfile(f'{repo_root}/{CLS_CONFIG}')
    with pytest.raises(ConfigError, match='--amp needs a CUDA device'):
        prepare_runner_cfg(cfg, train_args(amp=True), 'train')


def test_persistent_workers_without_workers_is_a_clear_error(repo_root):
    cfg = Config.fromfile(f'{repo_root}/{CLS_CONFIG}')
    args = train_args(cfg_options={'train_dataloader.persistent_workers': True})
    with pytest.raises(
            ConfigError, match=r'train_dataloader.persistent_workers=True needs '
            r'train_dataloader.num_workers > 0, got num_workers=0'):
        prepare_runner_cfg(cfg, args, 'train')


def test_missing_resume_checkpoint_is_named(repo_root, tmp_path):
    cfg = Config.fromfile(f'{repo_root}/{CLS_CONFIG}')
    missing = str(tmp_path / 'nope.pth')
    with pytest.raises(ConfigError, match='nope.pth'):
        prepare_runner_cfg(cfg, train_args(resume=missing), 'train')


def test_test_out_suffix_is_checked(repo_root, tmp_path):
    cfg = Config.fromfile(f'{repo_root}/{CLS_CONFIG}')
    ckpt = tmp_path / 'c.pth'
    ckpt.write_bytes(b'')
    args = argparse.Namespace(config=CLS_CONFIG, checkpoint=str(ckpt), work_dir=None, out='res.txt',
                              no_pin_memory=False, cfg_options=None, launcher='none')
    with pytest.raises(ConfigError, match=r"--out 'res.txt' has suffix '.txt'"):
        prepare_runner_cfg(cfg, args, 'test')
    args.out = str(tmp_path / 'res.pkl')
    prepare_runner_cfg(cfg, args, 'test')
    dumps = [e for e in cfg.test_evaluator if e['type'] == 'DumpResults']
    assert dumps == [dict(type='DumpResults', out_file_path=args.out)]


@pytest.mark.skipif(torch.cuda.is_available(), reason='the gloo path is for CPU-only machines')
def test_cpu_distributed_needs_torchrun_environment(monkeypatch):
    for key in ('RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT'):
        monkeypatch.delenv(key, raising=False)
    cfg = Config(dict(launcher='pytorch', default_scope='mmpretrain'))
    with pytest.raises(ConfigError, match='torchrun environment'):
        init_cpu_distributed(cfg)
    with pytest.raises(ConfigError, match="--launcher 'slurm' needs CUDA"):
        init_cpu_distributed(Config(dict(launcher='slurm')))


def test_cli_reports_errors_without_traceback(run_tool, tmp_path):
    proc = run_tool('tools/train.py', str(tmp_path / 'missing.py'), check=False)
    assert proc.returncode != 0
    assert 'missing.py' in proc.stderr and 'does not exist' in proc.stderr
    assert 'Traceback' not in proc.stderr
    if not torch.cuda.is_available():
        proc = run_tool('tools/train.py', CLS_CONFIG, '--amp', '--work-dir', str(tmp_path / 'w'),
                        check=False)
        assert proc.returncode != 0 and '--amp needs a CUDA device' in proc.stderr
        assert not (tmp_path / 'w').exists()  # failed before any work started
