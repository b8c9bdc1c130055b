"""Every user's mistake ends a tool in one ``error:`` line and exit status 1 (docs/reliability.md,
"How a tool stops on a mistake").

* Every error path of the sources (:func:`error_paths.raise_sites`: each ``raise`` of a
  ``ValueError`` / ``KeyError`` / ``FileNotFoundError`` or of an mmstiff error class, found by
  parsing ``mmstiff/`` and ``tools/``), raised from its own file and line inside a model that
  MMEngine's registry builds, ends a forked fresh process with exit status 1, its stderr's last
  line ``error: <the message>``, and no traceback unless ``--debug``. One driver process forks
  them all; the sweep over every site is ``slow``, the first site of each file runs always.
* Real runs: mmdet's own ``CocoDataset`` with bad boxes, no images, no annotations or unknown
  categories stops before the Runner is built, saying which mmstiff type checks it; a text
  ``.log`` given to plot_logs.py; a bug keeps its traceback; a run that fails in the Runner's
  build keeps its log and releases the work-dir lock; a missing torch is one line.
* The cases that ended in a traceback before (``last_cases.py``): an image file the annotation
  file lists but the disk lacks (mmdet's ``CocoDataset``), a full disk while a checkpoint is
  written, a work dir that cannot be written, a malformed entry of the lists the Runner builds,
  an error in a DataLoader worker, an error on rank 1 of 2, ``tools/misc/model_index.py``.
"""
import fcntl
import json
import os
import os.path as osp
import subprocess
import sys
import textwrap

import pytest
from bad_hook_config import HOOK_OPTION  # tests/
from error_paths import HERE, marker, raise_sites, site_id
from last_cases import CASES, UPSTREAM_COCO, case_params

REPO = osp.dirname(osp.dirname(HERE))
SITES = raise_sites()
FIRST_OF_FILE = [s for i, s in enumerate(SITES) if i == 0 or SITES[i - 1]['path'] != s['path']]


def test_the_sweep_finds_the_error_paths():
    """The grep finds the checks of every layer: tools, runtime, datasets, models, studies."""
    paths = {s['path'] for s in SITES}
    for expected in ('mmstiff/apis/runtime.py', 'mmstiff/datasets/preflight.py',
                     'mmstiff/datasets/mnist.py', 'mmstiff/models/backbones/cait.py',
                     'mmstiff/studies/spec.py', 'mmstiff/utils/checkpoint.py'):
        assert expected in paths, expected
    assert len(SITES) > 300


def _drive(sites, tmp_path):
    sites_file, out = tmp_path / 'sites.json', tmp_path / 'out.json'
    sites_file.write_text(json.dumps(sites))
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=os.pathsep.join([REPO, HERE]))
    env.pop('MMSTIFF_DEBUG', None)
    subprocess.run([
        sys.executable, '-W', 'ignore',
        osp.join(HERE, 'error_paths.py'),
        str(sites_file),
        str(out)
    ], cwd=REPO, env=env, check=True, timeout=1800)
    return json.loads(out.read_text())


@pytest.fixture(scope='module')
def first_results(tmp_path_factory):
    return _drive(FIRST_OF_FILE, tmp_path_factory.mktemp('first'))


@pytest.fixture(scope='module')
def all_results(tmp_path_factory):
    return _drive(SITES, tmp_path_factory.mktemp('all'))


def check_one(results, site):
    for key in (site_id(site), site_id(site) + ':debug'):
        if key not in results:
            continue
        got = results[key]
        lines = got['stderr'].strip().splitlines()
        assert got['status'] == 1, (key, got)
        assert lines and lines[-1].startswith('error: '), (key, got['stderr'][-2000:])
        assert marker(site) in lines[-1], (key, lines[-1])
        assert ('Traceback' in got['stderr']) == got['debug'], (key, got['stderr'][-2000:])


@pytest.mark.parametrize('site', FIRST_OF_FILE, ids=site_id)
def test_first_error_path_of_each_file_ends_in_one_line(first_results, site):
    check_one(first_results, site)


@pytest.mark.slow
@pytest.mark.parametrize('site', SITES, ids=site_id)
def test_every_error_path_ends_in_one_line(all_results, site):
    check_one(all_results, site)


# ------------------------------------------------------------------ real runs
def last_line(proc):
    lines = proc.stderr.strip().splitlines()
    return lines[-1] if lines else ''


def assert_one_line(proc, *needles):
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert 'Traceback' not in proc.stderr, proc.stderr[-3000:]
    line = last_line(proc)
    assert line.startswith('error: '), proc.stderr[-3000:]
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def _edit(root, change):
    path = osp.join(root, 'annotations', 'instances_train2017.json')
    with open(path) as f:
        data = json.load(f)
    change(data)
    with open(path, 'w') as f:
        json.dump(data, f)
    return path


def _zero_boxes(data):
    for ann in data['annotations']:
        ann['bbox'][2] = 0


def _no_images(data):
    data['images'], data['annotations'] = [], []


def _no_annotations(data):
    data['annotations'] = []


def _unknown_categories(data):
    for cat in data['categories']:
        cat['name'] = 'not-a-coco-class-' + str(cat['id'])


@pytest.mark.det
@pytest.mark.parametrize(
    'change, needle', [
        (_zero_boxes, 'no box is left of the'),
        pytest.param(_no_images, 'lists no image', marks=pytest.mark.slow),
        pytest.param(_no_annotations, 'holds no annotation', marks=pytest.mark.slow),
        pytest.param(_unknown_categories, 'is a class of the dataset', marks=pytest.mark.slow),
    ], ids=['zero-size-boxes', 'no-images', 'no-annotations', 'unknown-categories'])
def test_mmdet_coco_dataset_is_checked_before_the_runner(tmp_path, run_tool, change, needle):
    pytest.importorskip('mmdet')
    from mmstiff.testing import write_coco
    root = write_coco(str(tmp_path / 'coco'), num_train=3, num_val=2) + '/'
    path = _edit(root, change)
    config = tmp_path / 'upstream_coco.py'
    config.write_text(UPSTREAM_COCO.format(root=root))
    proc = run_tool('tools/train.py', str(config), '--work-dir', str(tmp_path / 'work'),
                    check=False)
    line = assert_one_line(proc, needle, 'train_dataloader.dataset', osp.normpath(path),
                           "type='CocoDataset' does not check this", 'mmstiff.CocoDataset')
    assert 'skip_data_checks=True' in line
    assert not (tmp_path / 'work').exists()  # nothing was built, nothing written


@pytest.mark.det
def test_mmdet_coco_with_some_bad_boxes_warns_and_the_checks_can_be_skipped(tmp_path):
    from mmengine.config import Config

    from mmstiff.datasets.preflight import check_data
    from mmstiff.testing import write_coco
    root = write_coco(str(tmp_path / 'coco'), num_train=3, num_val=2) + '/'

    def one_zero_box(data):
        data['annotations'][0]['bbox'][3] = 0

    _edit(root, one_zero_box)
    config = tmp_path / 'upstream_coco.py'
    config.write_text(UPSTREAM_COCO.format(root=root))
    cfg = Config.fromfile(str(config))
    boxes = len(
        json.load(open(osp.join(root, 'annotations', 'instances_train2017.json')))['annotations'])
    [line] = [w for w in check_data(cfg) if w.startswith('train_dataloader') and 'mmdet drops' in w]
    assert f'mmdet drops 1 of {boxes} boxes: 1 with zero or negative size' in line
    _edit(root, _no_images)
    cfg.skip_data_checks = True
    assert check_data(cfg) == []


@pytest.mark.parametrize('case', case_params())
def test_the_cases_that_ended_in_a_traceback_end_in_one_line(case, tiny_data, tmp_path, run_tool):
    args, env, needles, after = CASES[case](tmp_path, tiny_data, run_tool)
    proc = run_tool(*args, env=env, check=False)
    try:
        line = assert_one_line(proc, *needles)
        assert [ln for ln in proc.stderr.splitlines() if ln.startswith('error: ')] == [line]
    finally:
        if after is not None:
            after(proc)


def test_plot_logs_given_a_text_log(tmp_path, run_tool):
    run = tmp_path / '20260101_000000'
    (run / 'vis_data').mkdir(parents=True)
    text = run / '20260101_000000.log'
    text.write_text('2026/01/01 00:00:00 - mmengine - INFO - Iter(train) [1/4] loss: 2.3\n')
    proc = run_tool('tools/analysis/plot_logs.py', str(text), check=False)
    assert_one_line(proc, str(text), 'is a text log', 'vis_data/scalars.json')
    (run / 'vis_data' / 'scalars.json').write_text(''.join(
        json.dumps(dict(loss=2.3 - i / 10, lr=0.1, iter=i, step=i)) + '\n' for i in range(1, 5)))
    proc = run_tool('tools/analysis/plot_logs.py', str(text), '--out-dir', str(tmp_path / 'p'))
    assert f'reading the JSON log of the same run, {run / "vis_data" / "scalars.json"}' in \
        proc.stderr
    curves = json.loads((tmp_path / 'p' / 'curves.json').read_text())
    assert curves['series']['loss']['loss']['values'] == pytest.approx([2.2, 2.1, 2.0, 1.9])


BUG = '''
import sys
from mmstiff.tool_main import run_tool
def main():
    return {}['missing key']  # a bug: no raise statement of mmstiff
run_tool(main)
'''


def test_a_bug_keeps_its_traceback():
    proc = subprocess.run([sys.executable, '-c', BUG], capture_output=True, text=True, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=REPO))
    assert proc.returncode == 1
    assert 'Traceback' in proc.stderr and last_line(proc) == "KeyError: 'missing key'"


BLOCK_TORCH = '''
import runpy, sys
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name == 'torch' or name.startswith('torch.'):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Blocker())
sys.argv = sys.argv[1:]
if sys.argv[0] == '-m':
    sys.argv = sys.argv[1:]
    runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)
else:
    runpy.run_path(sys.argv[0], run_name='__main__')
'''


@pytest.mark.parametrize('entry', [
    ['tools/train.py', 'x.py'],
    ['tools/analysis/tns.py', 'x.py', 'x.pth'],
    ['tools/benchmark/bench_alternet.py'],
    ['-m', 'mmstiff.demo'],
], ids=['train', 'tns', 'bench_alternet', 'demo'])
def test_a_missing_torch_is_one_line_naming_the_install_command(entry, tmp_path):
    args = [osp.join(REPO, a) if a.endswith('.py') else a for a in entry]
    proc = subprocess.run([sys.executable, '-c', BLOCK_TORCH, *args], capture_output=True,
                          text=True, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=REPO))
    assert_one_line(proc, 'mmstiff needs PyTorch (torch)', 'pip install torch torchvision')


@pytest.mark.slow
def test_a_mistake_in_the_runner_build_keeps_the_log_and_frees_the_lock(
        tiny_data, tmp_path, run_tool):
    """The hook's option check runs while the Runner builds (after the work dir, its log and
    its lock exist): one line, the log kept, the lock free; --debug adds the traceback."""
    base = osp.join(REPO, 'tests', 'data', 'configs', 'cifar10_resnet18_tiny.py')
    config = tmp_path / 'bad_hook.py'
    config.write_text(HOOK_OPTION.format(base=base, root=tiny_data('cifar10')))
    work = tmp_path / 'work'
    proc = run_tool('tools/train.py', str(config), '--work-dir', str(work), check=False)
    assert_one_line(proc, 'max_skips', '-3')
    logs = list(work.glob('*/*.log'))
    assert logs and 'max_skips' in logs[0].read_text()  # the log says why the run stopped
    with open(work / '.lock', 'a') as f:  # not held any more
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    debug = run_tool('tools/train.py', str(config), '--work-dir', str(work), '--debug', check=False)
    assert debug.returncode == 1 and 'Traceback' in debug.stderr
    assert last_line(debug) == last_line(proc)


def test_upstream_mnist_with_a_short_label_file_stops_before_the_runner(tmp_path, run_tool):
    from mmstiff.testing import write_mnist
    root = write_mnist(str(tmp_path / 'mnist'), num_train=40, num_test=20)
    labels = osp.join(root, 't10k-labels-idx1-ubyte')
    with open(labels, 'r+b') as f:  # 19 labels for the 20 images
        f.seek(4)
        f.write((19).to_bytes(4, 'big'))
        f.truncate(8 + 19)
    config = tmp_path / 'upstream_mnist.py'
    config.write_text(
        textwrap.dedent(f'''
        _base_ = {osp.join(REPO, 'configs', 'demo',
                           'preact-resnet20-stepnet_1xb128-3e_fashion-mnist.py')!r}
        test_dataloader = dict(dataset=dict(type='FashionMNIST', data_root={root!r},
                                            split='test', test_mode=True))
        '''))
    proc = run_tool('tools/test.py', str(config), str(config), '--work-dir', str(tmp_path / 'w'),
                    check=False)
    assert_one_line(proc, 'test_dataloader.dataset', labels, 'holds 19 labels but',
                    'holds 20 images', 'mmstiff.MNIST / mmstiff.FashionMNIST')


@pytest.mark.slow
def test_the_demo_stops_with_the_line_of_the_tool_that_failed(tmp_path):
    """``python -m mmstiff.demo`` whose training meets a bad hook option (raised while the Runner
    builds the hooks): train.py's one line is the last, the demo adds no traceback of its own."""
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=REPO)
    env.pop('MMSTIFF_DEBUG', None)
    proc = subprocess.run([
        sys.executable, '-m', 'mmstiff.demo', '--work-dir', 'w', '--cfg-options',
        'custom_hooks.0.interval=0'
    ], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert_one_line(proc, 'interval', '0')
    assert 'CalledProcessError' not in proc.stderr
