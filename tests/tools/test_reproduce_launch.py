"""tools/reproduce.py --dry-run: the commands of another config (--configs, --set), of the
multi-GPU launchers (pytorch, slurm), of runs packed onto GPUs (--device cuda), and of the
paper-scale study files."""
import os
import os.path as osp
import subprocess
import sys

import pytest
from tiny_study import DEMO, TINY_STUDY  # tests/

from mmstiff.studies import Launch, StudyError, check_launch, load_study

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
OTHER = 'configs/stepnet/preact-resnet164-stepnet_1xb128-164e_cifar100.py'
STUDY = TINY_STUDY + f'''configs = dict(cifar=dict(config=dict(stepnet={OTHER!r}),
                          cfg_options=['train_cfg.max_epochs=9'], seeds=[5]))
'''


def dry_run(tmp_path, *args):
    study = tmp_path / 'tiny.py'
    study.write_text(STUDY)
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(
            [REPO] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]))
    proc = subprocess.run(
        [sys.executable, 'tools/reproduce.py',
         str(study), '--dry-run', '--work-dir', 'w', *args], cwd=REPO, env=env, capture_output=True,
        text=True, timeout=300)
    return proc


def commands(proc):
    """``{run: [command, ...]}`` of a dry run's output."""
    assert proc.returncode == 0, proc.stderr
    runs, key = {}, None
    for line in proc.stdout.splitlines():
        if line.startswith('  '):
            runs[key].append(line.strip())
        else:
            key = line.split()[0]
            runs[key] = []
    return runs


@pytest.mark.slow
def test_set_and_configs_change_every_run(tmp_path):
    runs = commands(dry_run(tmp_path, '--set', 'optim_wrapper.optimizer.lr=0.05'))
    assert list(runs) == ['plain/seed0', 'plain/seed1', 'stepnet/seed0', 'stepnet/seed1']
    assert runs['plain/seed1'][0] == (
        f'python tools/train.py {DEMO} --work-dir w/tiny/plain/seed1 --cfg-options '
        'optim_wrapper.optimizer.lr=0.05 model.backbone.adaptor=None randomness.seed=1')
    runs = commands(dry_run(tmp_path, '--configs', 'cifar'))
    assert list(runs) == ['plain/seed5', 'stepnet/seed5']  # its seeds, its name
    assert runs['stepnet/seed5'][0] == (
        f'python tools/train.py {OTHER} --work-dir w/tiny.cifar/stepnet/seed5 --cfg-options '
        'train_cfg.max_epochs=9 randomness.seed=5')
    assert runs['plain/seed5'][0].startswith(f'python tools/train.py {DEMO} ')


@pytest.mark.slow
def test_launchers_and_packing(tmp_path):
    runs = commands(dry_run(tmp_path, '--launcher', 'pytorch', '--gpus', '4'))
    assert runs['stepnet/seed0'][:2] == [
        f'tools/dist_train.sh {DEMO} 4 --work-dir w/tiny/stepnet/seed0 --cfg-options '
        'randomness.seed=0',
        f'tools/dist_test.sh {DEMO} CKPT 4 --work-dir w/tiny/stepnet/seed0/test --out '
        'w/tiny/stepnet/seed0/metrics.json --cfg-options randomness.seed=0'
    ]
    runs = commands(dry_run(tmp_path, '--launcher', 'slurm', '--gpus', '8', '--partition', 'gpu'))
    assert runs['plain/seed0'][:2] == [
        f'env GPUS=8 tools/slurm_train.sh gpu tiny/plain/seed0/train {DEMO} w/tiny/plain/seed0 '
        '--cfg-options model.backbone.adaptor=None randomness.seed=0',
        f'env GPUS=8 tools/slurm_test.sh gpu tiny/plain/seed0/test {DEMO} CKPT --work-dir '
        'w/tiny/plain/seed0/test --out w/tiny/plain/seed0/metrics.json --cfg-options '
        'model.backbone.adaptor=None randomness.seed=0'
    ]
    # 4 runs over 2 GPUs: run i on GPU i mod 2, every stage of a run on the same GPU
    runs = commands(dry_run(tmp_path, '--device', 'cuda', '--gpus', '2', '--jobs', '4'))
    gpus = {key: {c.split()[1] for c in cmds} for key, cmds in runs.items()}
    assert gpus == {
        'plain/seed0': {'CUDA_VISIBLE_DEVICES=0'},
        'plain/seed1': {'CUDA_VISIBLE_DEVICES=1'},
        'stepnet/seed0': {'CUDA_VISIBLE_DEVICES=0'},
        'stepnet/seed1': {'CUDA_VISIBLE_DEVICES=1'}
    }
    runs = commands(dry_run(tmp_path, '--device', 'cpu'))
    assert all(c.startswith('env CUDA_VISIBLE_DEVICES= python ') for c in runs['plain/seed0'])


@pytest.mark.parametrize('launch, message', [
    (Launch('mpi'), "--launcher 'mpi'; expected one of ['none', 'pytorch', 'slurm']"),
    (Launch('slurm'), '--launcher slurm needs --partition PARTITION'),
    (Launch(partition='gpu'), "--partition 'gpu' is for --launcher slurm only"),
    (Launch(device='tpu'), "--device 'tpu'; expected one of ['cpu', 'cuda']"),
    (Launch(gpus=0), '--gpus 0; expected a positive integer'),
    (Launch('pytorch', device='cpu'), '--launcher pytorch starts GPU jobs'),
])
def test_bad_launch_is_refused(launch, message):
    with pytest.raises(StudyError) as err:
        check_launch(launch)
    assert message in str(err.value)


@pytest.mark.parametrize('kwargs, message', [
    (dict(config_set='imagenet'), "--configs 'imagenet': the study file has no such entry; "
     "its configs: ['cifar']"),
    (dict(overrides=['lr']), "--set[0]='lr'; expected key=value"),
    (dict(overrides=['randomness.seed=3']), "--set[0]='randomness.seed=3' sets the seed"),
])
def test_bad_configs_or_set_is_refused(tmp_path, kwargs, message):
    study = tmp_path / 'tiny.py'
    study.write_text(STUDY)
    with pytest.raises(StudyError) as err:
        load_study(str(study), **kwargs)
    assert message in str(err.value)


@pytest.mark.slow
def test_bad_launch_stops_the_runner_before_any_work(tmp_path):
    proc = dry_run(tmp_path, '--launcher', 'slurm')
    assert proc.returncode != 0 and proc.stdout == ''
    assert proc.stderr == 'error: --launcher slurm needs --partition PARTITION\n'


@pytest.mark.slow
@pytest.mark.parametrize('study, runs, first', [
    ('stepnet_vs_se_cifar100',
     [f'{v}/seed{s}' for v in ('plain', 'se', 'stepnet') for s in range(5)], [
         'python tools/train.py configs/stepnet/preact-resnet164_1xb128-164e_cifar100.py '
         '--work-dir w/stepnet_vs_se_cifar100/plain/seed0 --cfg-options randomness.seed=0',
         'python tools/test.py configs/stepnet/preact-resnet164_1xb128-164e_cifar100.py CKPT '
         '--work-dir w/stepnet_vs_se_cifar100/plain/seed0/test --out '
         'w/stepnet_vs_se_cifar100/plain/seed0/metrics.json --cfg-options randomness.seed=0',
         'python tools/analysis/tns.py configs/stepnet/preact-resnet164_1xb128-164e_cifar100.py '
         'CKPT --out-dir w/stepnet_vs_se_cifar100/plain/seed0/analysis/tns --num-batches 8 '
         '--cfg-options randomness.seed=0'
     ]),
    ('oversmoothing_deit_s', [
        f'{v}/seed{s}' for v in ('deit12', 'deit12-attnscale', 'deit12-featscale', 'deit24',
                                 'deit24-attnscale', 'deit24-featscale') for s in range(3)
    ], [
        'python tools/train.py configs/vit/deit-small-attnscale_4xb256_in1k.py --work-dir '
        'w/oversmoothing_deit_s/deit12/seed0 --cfg-options model.backbone.attn_scale_layers=None '
        'randomness.seed=0'
    ]),
])
def test_paper_scale_study_files(study, runs, first):
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(
            [REPO] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p]))
    proc = subprocess.run(
        [sys.executable, 'tools/reproduce.py', study, '--dry-run', '--work-dir', 'w'], cwd=REPO,
        env=env, capture_output=True, text=True, timeout=300)
    planned = commands(proc)
    assert list(planned) == runs
    first_run = planned[runs[0]]
    assert first_run[:len(first)] == first
    # every config the file names exists; every run trains, tests and analyses
    for key, cmds in planned.items():
        config = cmds[0].split()[2]
        assert osp.isfile(osp.join(REPO, config)), config
        assert cmds[0].startswith('python tools/train.py') and 'tools/test.py' in cmds[1]
        assert f'randomness.seed={key.split("seed")[-1]}' in cmds[0]


def test_a_config_set_with_an_unknown_field_is_refused(tmp_path):
    study = tmp_path / 'tiny.py'
    study.write_text(STUDY.replace("seeds=[5]", "epochs=3"))
    with pytest.raises(StudyError) as err:
        load_study(str(study))
    assert ("configs['cifar']=" in str(err.value)
            and "expected a dict of some of ['config', 'cfg_options', 'seeds', 'analysis_args']"
            in str(err.value))
