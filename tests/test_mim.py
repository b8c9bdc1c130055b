"""mim and MMEngine find the configs, tools and model index of an installed mmstiff.

The wheel ``pip install .`` would build is built from a copy of the checkout and unpacked into
a folder that goes first on ``PYTHONPATH``: a fresh interpreter then imports that mmstiff, and
mim and MMEngine locate its ``.mim`` folder from its dist-info, as after ``pip install mmstiff``.
(The project's own environment installs mmstiff editable; MMEngine 0.10.7 and mim 0.3.9 derive
the ``.mim`` folder from the dist-info location, which a PEP 660 editable install puts in
site-packages, so they cannot be tested there: docs/install.md.)
"""
import json
import os
import os.path as osp
import re
import subprocess
import sys
import zipfile

import pytest
import yaml
from script_modules import load_script  # tests/
from test_packaging import copy_checkout

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))

model_index = load_script('tools/misc/model_index.py')

SKIPPED_FOLDERS = ('_base_', 'studies')


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    """A folder holding mmstiff as ``pip install .`` installs it (package and dist-info)."""
    base = tmp_path_factory.mktemp('installed')
    src = copy_checkout(str(base / 'src'))
    dist = base / 'dist'
    proc = subprocess.run([
        sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--no-build-isolation', '-q', '-w',
        str(dist), src
    ], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not osp.exists(osp.join(src, 'mmstiff', '.mim'))  # the build copied, the tree stayed
    (wheel, ) = dist.glob('mmstiff-*.whl')
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(base / 'site')
    return str(base / 'site')


def installed_env(site):
    return dict(os.environ,
                PYTHONPATH=os.pathsep.join(filter(None, [site, os.environ.get('PYTHONPATH')])),
                OMP_NUM_THREADS='1')


def run(site, *args, cwd=None, check=True, timeout=600):
    proc = subprocess.run([sys.executable, *args], cwd=cwd or REPO, env=installed_env(site),
                          capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


def checkout_files(*patterns):
    out = set()
    for folder, _, names in os.walk(REPO):
        rel = osp.relpath(folder, REPO)
        if rel.split(os.sep)[0] not in ('configs', 'tools') or '__pycache__' in rel:
            continue
        out |= {osp.normpath(osp.join(rel, n)) for n in names if n.endswith(patterns)}
    return out


@pytest.mark.slow
def test_wheel_carries_every_module_config_tool_and_the_index(site):
    mim = osp.join(site, 'mmstiff', '.mim')
    shipped = set()
    for folder, _, names in os.walk(mim):
        shipped |= {osp.relpath(osp.join(folder, n), mim) for n in names}
    wanted = checkout_files('.py', '.sh', '.yml') | {'model-index.yml'}
    assert wanted <= shipped, sorted(wanted - shipped)
    for name in wanted:
        with open(osp.join(REPO, name), 'rb') as a, open(osp.join(mim, name), 'rb') as b:
            assert a.read() == b.read(), name
    modules = {
        osp.relpath(osp.join(folder, n), REPO)
        for folder, _, names in os.walk(osp.join(REPO, 'mmstiff'))
        if '.mim' not in folder and '__pycache__' not in folder for n in names if n.endswith('.py')
    }
    missing = {m for m in modules if not osp.isfile(osp.join(site, m))}
    assert not missing, sorted(missing)


def one_config_per_folder():
    picks = []
    for folder in sorted(os.listdir(osp.join(REPO, 'configs'))):
        path = osp.join(REPO, 'configs', folder)
        if folder in SKIPPED_FOLDERS or not osp.isdir(path):
            continue
        name = sorted(n for n in os.listdir(path) if n.endswith('.py'))[0]
        marks = [pytest.mark.det] if folder == 'faster_rcnn' else []
        picks.append(pytest.param(f'{folder}/{name}', marks=marks, id=folder))
    return picks


RESOLVE = r'''
import json, sys
import mmstiff  # noqa: F401  (teaches MMEngine the mmstiff:: prefix)
from mmengine.config import Config
base, mine = sys.argv[1:]
path, scope = Config._get_cfg_path('mmstiff::' + base, mine)
cfg = Config.fromfile(mine)
print(json.dumps(dict(path=path, scope=scope, cfg=cfg.to_dict()), default=str))
'''


def expected_config(base, **overrides):
    """The repository's config ``base`` with ``overrides``, as JSON would carry it."""
    from mmengine.config import Config
    cfg = Config.fromfile(osp.join(REPO, 'configs', base))
    cfg.merge_from_dict(overrides)
    return json.loads(json.dumps(cfg.to_dict(), default=str))


@pytest.mark.slow
@pytest.mark.parametrize('base', one_config_per_folder())
def test_mmstiff_base_resolves_to_the_installed_config(site, base, tmp_path):
    """``_base_ = 'mmstiff::FOLDER/NAME.py'`` in a config outside the repository gives the
    config of the repository, with the overrides of the outer config on top, read from the
    installed package's ``.mim/configs`` and with no ``_scope_`` added to its dicts."""
    mine = tmp_path / 'mine.py'
    mine.write_text(f"_base_ = 'mmstiff::{base}'\nrandomness = dict(seed=1234)\n")
    out = json.loads(
        run(site, '-c', RESOLVE, base, str(mine),
            cwd=str(tmp_path)).stdout.strip().splitlines()[-1])
    assert out['path'] == osp.join(site, 'mmstiff', '.mim', 'configs', base)
    assert out['scope'] is None
    assert out['cfg'] == expected_config(base, randomness=dict(seed=1234))


def test_mmstiff_base_in_this_environment_builds_the_model(tmp_path):
    """The same in this process (an editable install: ``.mim`` links to the checkout), down
    to building the model in the config's own default scope."""
    from mmengine.config import Config
    from mmengine.registry import MODELS, DefaultScope

    import mmstiff  # noqa: F401

    base = 'vit/vit-lite-7-p4-stepnet_1xb128-200e_cifar10.py'
    mine = tmp_path / 'mine.py'
    mine.write_text(f"_base_ = 'mmstiff::{base}'\n"
                    'model = dict(backbone=dict(drop_path_rate=0.0))\n')
    path, scope = Config._get_cfg_path(f'mmstiff::{base}', str(mine))
    assert osp.realpath(path) == osp.join(REPO, 'configs', base) and scope is None
    cfg = Config.fromfile(str(mine))
    assert json.loads(json.dumps(cfg.to_dict(), default=str)) == expected_config(
        base, model=dict(backbone=dict(drop_path_rate=0.0)))
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        model = MODELS.build(cfg.model)
    assert type(model).__name__ == 'ImageClassifier'
    assert type(model.backbone).__module__ == 'mmstiff.models.backbones.step_vit'


def test_unknown_mmstiff_base_names_the_missing_file(tmp_path):
    from mmengine.config import Config

    import mmstiff  # noqa: F401
    mine = tmp_path / 'mine.py'
    mine.write_text("_base_ = 'mmstiff::vit/no-such-config.py'\n")
    with pytest.raises(
            FileNotFoundError, match=r"'mmstiff::vit/no-such-config.py' is not an "
            r'mmstiff config: .*no-such-config.py does not'):
        Config.fromfile(str(mine))


NO_PKG_RESOURCES = r'''
import json, sys

class Gone:  # setuptools >= 82 ships no pkg_resources
    def find_spec(self, name, path=None, target=None):
        if name == 'pkg_resources':
            raise ModuleNotFoundError("No module named 'pkg_resources'", name=name)

sys.meta_path.insert(0, Gone())
import mmstiff  # noqa: F401
from mmengine.config import Config
print(json.dumps(Config._get_cfg_path(sys.argv[1], sys.argv[2])))
'''


@pytest.mark.slow
def test_upstream_bases_resolve_without_pkg_resources(tmp_path):
    """Where setuptools >= 82 took pkg_resources away, ``mmpretrain::`` bases (which every
    mmstiff config uses) resolve to the file MMEngine itself finds where it is present."""
    from mmengine.config import Config

    import mmstiff  # noqa: F401
    base = 'mmpretrain::_base_/default_runtime.py'
    expected = list(Config._get_cfg_path(base, str(tmp_path / 'mine.py')))
    proc = subprocess.run([sys.executable, '-c', NO_PKG_RESOURCES, base,
                           str(tmp_path / 'x.py')], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == expected
    assert expected[1] == 'mmpretrain' and osp.isfile(expected[0])


def indexed_models():
    with open(osp.join(REPO, 'model-index.yml')) as f:
        imports = yaml.safe_load(f)['Import']
    models = {}
    for metafile in imports:
        with open(osp.join(REPO, metafile)) as f:
            for model in yaml.safe_load(f)['Models']:
                models[model['Name']] = model
    return models


def test_model_index_covers_every_config_once():
    assert model_index.check() == []
    models = indexed_models()
    configs = set(model_index.config_files())
    assert {m['Config'] for m in models.values()} == configs
    assert len(models) == len(configs)  # one entry, one name, per config
    measured = model_index.measured_results()  # from the committed docs/results/*/runs.json
    for name, model in models.items():
        assert name == osp.splitext(osp.basename(model['Config']))[0]
        for result in model.get('Results', []):
            for metric, value in result['Metrics'].items():
                # the paper's figure, labelled so, or the mean measured here by a study
                assert metric.endswith('(paper)') or (
                    metric == 'Top 1 Accuracy' and value == measured[model['Config']][0]
                    and model['Reproduced'].endswith(f'docs/results/'
                                                     f'{measured[model["Config"]][2]}/'))
    for config in measured:  # every measured config carries its figure
        assert any(r['Metrics'].get('Top 1 Accuracy') == measured[config][0]
                   for m in models.values() if m['Config'] == config for r in m.get('Results', []))


@pytest.mark.slow
def test_measured_complexity_of_deit_small_matches_the_paper():
    """Anti-oversmoothing, Table 1: DeiT-S + AttnScale, 22.0M parameters and 4.57G FLOPs at 224;
    the index holds the values measured here, which agree with the paper's to 1%."""
    config = 'configs/vit/deit-small-attnscale_4xb256_in1k.py'
    _, params, flops, size = model_index.measure(config)
    assert size == (224, 224)
    assert abs(params / 22.0e6 - 1) < 0.01 and abs(flops / 4.57e9 - 1) < 0.01, (params, flops)
    entry = indexed_models()[osp.splitext(osp.basename(config))[0]]
    assert entry['Metadata']['Parameters'] == params
    assert entry['Metadata']['FLOPs'] == flops
    assert entry['Results'][0]['Metrics'] == {'Top 1 Accuracy (paper)': 80.7}


@pytest.mark.slow
def test_mim_search_lists_the_index_of_the_installed_package(site, tmp_path):
    out = tmp_path / 'search.json'
    run(site, '-m', 'mim', 'search', 'mmstiff', '--json', str(out), cwd=str(tmp_path))
    found = json.loads(out.read_text())  # {field: {model name: value}}
    models = indexed_models()
    assert found['config'] == {name: model['Config'] for name, model in models.items()}
    name = 'deit-small-attnscale_4xb256_in1k'
    assert found['imagenet-1k/top_1_accuracy_(paper)'][name] == 80.7
    assert found['parameters'][name] == models[name]['Metadata']['Parameters']
    assert found['model'][name] == 'attnscale and featscale'  # its collection, lower-cased


@pytest.mark.slow
def test_mim_run_finds_the_packaged_scripts(site, tmp_path):
    """``mim run mmstiff model_index --check`` runs the copy in ``.mim/tools`` against the
    installed ``.mim`` index; ``mim run mmpretrain get_flops`` reads an mmstiff config."""
    proc = run(site, '-m', 'mim', 'run', 'mmstiff', 'model_index', '--check', cwd=str(tmp_path))
    script = osp.join(site, 'mmstiff', '.mim', 'tools', 'misc', 'model_index.py')
    assert f'Use the script {script}' in proc.stdout

    config = osp.join(REPO, 'configs', 'vit', 'vit-lite-7-p4-stepnet_1xb128-200e_cifar10.py')
    proc = run(site, '-m', 'mim', 'run', 'mmpretrain', 'get_flops', config, '--shape', '32',
               cwd=str(tmp_path))
    params = re.search(r'Params: ([\d.]+)M', proc.stdout)
    assert params, proc.stdout[-2000:]
    measured = indexed_models()['vit-lite-7-p4-stepnet_1xb128-200e_cifar10']['Metadata']
    assert abs(float(params.group(1)) * 1e6 - measured['Parameters']) < 1e3

    # print_config resolves the mmpretrain:: bases and the mmstiff types of the config
    proc = run(site, '-m', 'mim', 'run', 'mmpretrain', 'print_config', config, cwd=str(tmp_path))
    assert "type='mmstiff.StepViT'" in proc.stdout and 'msa_adaptor=' in proc.stdout, \
        proc.stdout[-2000:]


@pytest.mark.slow
def test_mim_train_and_test_run_the_packaged_tools(site, tiny_data, tmp_path):
    root = tiny_data('cifar10')
    options = [
        f'{loader}.dataset.data_root={root}'
        for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader')
    ]
    config = osp.join(REPO, 'tests', 'data', 'configs', 'cifar10_resnet18_tiny.py')
    work = tmp_path / 'work'
    proc = run(site, '-m', 'mim', 'train', 'mmstiff', config, '--gpus', '0', '--work-dir',
               str(work), '--cfg-options', *options, cwd=str(tmp_path))
    tools = osp.join(site, 'mmstiff', '.mim', 'tools')
    assert f'{tools}/train.py {config} --launcher none' in proc.stdout
    assert (work / 'iter_2.pth').is_file()

    metrics = tmp_path / 'metrics.json'
    proc = run(site, '-m', 'mim', 'test', 'mmstiff', config, '--checkpoint',
               str(work / 'iter_2.pth'), '--gpus', '0', '--work-dir', str(work), '--out',
               str(metrics), '--cfg-options', *options, cwd=str(tmp_path))
    assert f'{tools}/test.py {config}' in proc.stdout
    assert 0.0 <= json.loads(metrics.read_text())['accuracy/top1'] <= 100.0


@pytest.mark.slow
def test_mim_train_finds_a_config_by_name_in_the_package(site, tmp_path):
    """A bare config name is looked up in the installed package's configs; train.py then
    refuses the unknown flag, so nothing trains."""
    name = 'vit-lite-7-p4-stepnet_1xb128-200e_cifar10.py'
    proc = run(site, '-m', 'mim', 'train', 'mmstiff', name, '--gpus', '0', '--no-such-flag',
               cwd=str(tmp_path), check=False)
    found = osp.join(site, 'mmstiff', '.mim', 'configs', 'vit', name)
    assert f'will use {found} instead' in proc.stdout, proc.stdout[-2000:]
    assert proc.returncode != 0 and 'unrecognized arguments: --no-such-flag' in proc.stderr
