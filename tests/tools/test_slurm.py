"""tools/slurm_train.sh and tools/slurm_test.sh hand srun the command mmpretrain's scripts do.

A fake ``srun`` on PATH records its arguments and environment instead of starting tasks.
"""
import json
import os
import os.path as osp
import stat
import subprocess

import pytest

FAKE_SRUN = '''#!/usr/bin/env python3
import json, os, sys
with open(os.environ['SRUN_RECORD'], 'w') as f:
    json.dump(dict(argv=sys.argv[1:], pythonpath=os.environ.get('PYTHONPATH', '')), f)
'''


@pytest.fixture
def slurm(tmp_path, repo_root):
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    srun = bin_dir / 'srun'
    srun.write_text(FAKE_SRUN)
    srun.chmod(srun.stat().st_mode | stat.S_IEXEC)
    record = tmp_path / 'srun.json'

    def run(script, *args, **env):
        full_env = {
            k: v
            for k, v in os.environ.items()
            if k not in ('GPUS', 'GPUS_PER_NODE', 'CPUS_PER_TASK', 'SRUN_ARGS', 'PYTHON')
        }
        full_env.update(env, PATH=f'{bin_dir}:{os.environ["PATH"]}', SRUN_RECORD=str(record),
                        PYTHONPATH='/elsewhere')
        proc = subprocess.run(['bash', osp.join(repo_root, 'tools', script), *args], env=full_env,
                              capture_output=True, text=True, timeout=60)
        called = json.loads(record.read_text()) if record.exists() else None
        return proc, called

    return run


def test_train_defaults_are_upstreams(slurm, repo_root):
    proc, called = slurm('slurm_train.sh', 'gpu', 'r50', 'configs/x.py', 'work_dirs/x')
    assert proc.returncode == 0, proc.stderr
    tools = osp.join(repo_root, 'tools')
    assert called['argv'] == [
        '-p', 'gpu', '--job-name=r50', '--gres=gpu:8', '--ntasks=8', '--ntasks-per-node=8',
        '--cpus-per-task=5', '--kill-on-bad-exit=1', 'python', '-u', f'{tools}/train.py',
        'configs/x.py', '--work-dir=work_dirs/x', '--launcher=slurm'
    ]
    # the checkout first on the path, the caller's PYTHONPATH kept
    assert called['pythonpath'] == f'{tools}/..:/elsewhere'


def test_train_passes_layout_srun_args_and_train_args(slurm, repo_root):
    proc, called = slurm('slurm_train.sh', 'gpu', 'job', 'c.py', 'w', '--amp', '--cfg-options',
                         'model.backbone.depth=34', 'a b', GPUS='16', GPUS_PER_NODE='8',
                         CPUS_PER_TASK='2', SRUN_ARGS='--quotatype=auto -x node1', PYTHON='python3')
    assert proc.returncode == 0, proc.stderr
    assert called['argv'] == [
        '-p', 'gpu', '--job-name=job', '--gres=gpu:8', '--ntasks=16', '--ntasks-per-node=8',
        '--cpus-per-task=2', '--kill-on-bad-exit=1', '--quotatype=auto', '-x', 'node1', 'python3',
        '-u',
        osp.join(repo_root, 'tools', 'train.py'), 'c.py', '--work-dir=w', '--launcher=slurm',
        '--amp', '--cfg-options', 'model.backbone.depth=34', 'a b'
    ]


def test_test_script_passes_the_checkpoint(slurm, repo_root):
    proc, called = slurm('slurm_test.sh', 'gpu', 'ev', 'c.py', 'w/epoch_1.pth', '--out', 'm.json',
                         GPUS='2')
    assert proc.returncode == 0, proc.stderr
    assert called['argv'] == [
        '-p', 'gpu', '--job-name=ev', '--gres=gpu:2', '--ntasks=2', '--ntasks-per-node=2',
        '--cpus-per-task=5', '--kill-on-bad-exit=1', 'python', '-u',
        osp.join(repo_root, 'tools',
                 'test.py'), 'c.py', 'w/epoch_1.pth', '--launcher=slurm', '--out', 'm.json'
    ]


@pytest.mark.parametrize('script', ['slurm_train.sh', 'slurm_test.sh'])
@pytest.mark.parametrize('env, message', [
    (dict(GPUS='0'), 'GPUS=0 is not supported; expected a positive integer'),
    (dict(GPUS='eight'), 'GPUS=eight is not supported'),
    (dict(GPUS='4', GPUS_PER_NODE='8'), 'GPUS_PER_NODE=8 is not supported with GPUS=4'),
    (dict(CPUS_PER_TASK='-1'), 'CPUS_PER_TASK=-1 is not supported'),
])
def test_bad_layout_is_named_before_srun_runs(slurm, script, env, message):
    proc, called = slurm(script, 'gpu', 'job', 'c.py', 'w', **env)
    assert proc.returncode == 2 and message in proc.stderr
    assert called is None


@pytest.mark.parametrize('script', ['slurm_train.sh', 'slurm_test.sh'])
def test_missing_arguments_print_usage(slurm, script):
    proc, called = slurm(script, 'gpu', 'job', 'c.py')
    assert proc.returncode == 2 and proc.stderr.startswith('usage:')
    assert called is None
