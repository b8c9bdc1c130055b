"""Bad data and bad input fail (or warn) before any work starts, naming file, field and value.

COCO boxes mmdet drops silently, label files shorter than their image files, truncated and
empty files, an ``--out`` that cannot be written, a config with a syntax error, a
``--cfg-options`` item without ``=`` and a diagnostics ``module`` that does not exist.
"""
import argparse
import json
import os
import os.path as osp
import pickle
import struct
import types

import numpy as np
import pytest
import torch.nn as nn
from mmengine.config import Config
from script_modules import load_script  # tests/

from mmstiff.apis.runtime import ConfigError, load_config, prepare_runner_cfg
from mmstiff.datasets import CIFAR10, STL10, FashionMNIST
from mmstiff.datasets.coco_boxes import SIZE
from mmstiff.testing import write_cifar, write_coco, write_mnist, write_stl10

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
CLS_CONFIG = osp.join(REPO, 'tests', 'data', 'configs', 'cifar10_resnet18_tiny.py')
DEMO_CONFIG = osp.join(REPO, 'configs', 'demo',
                       'preact-resnet20-stepnet_1xb128-3e_fashion-mnist.py')
COCO_CONFIG = osp.join(REPO, 'configs', 'faster_rcnn', 'faster-rcnn_r50_fpn_1x_coco.py')


# ------------------------------------------------------------------ COCO boxes
def build_coco(root, split='val2017', test_mode=True):
    """``mmstiff.CocoDataset`` built through mmdet's registry, as a config builds it."""
    from mmdet.registry import DATASETS
    from mmengine.registry import init_default_scope
    init_default_scope('mmdet')
    return DATASETS.build(
        dict(type='mmstiff.CocoDataset', data_root=root,
             ann_file=f'annotations/instances_{split}.json', data_prefix=dict(img=f'{split}/'),
             test_mode=test_mode, pipeline=[]))


def edit_annotations(root, split, edit):
    path = osp.join(root, 'annotations', f'instances_{split}.json')
    with open(path) as f:
        data = json.load(f)
    edit(data['annotations'])
    with open(path, 'w') as f:
        json.dump(data, f)
    return path


@pytest.mark.det
def test_coco_boxes_of_zero_or_negative_size_are_counted_and_reported(tmp_path, monkeypatch):
    pytest.importorskip('mmdet')
    import mmstiff.datasets.coco as coco
    root = write_coco(str(tmp_path / 'coco'), num_train=2, num_val=4)

    def shrink(annotations):
        annotations[0]['bbox'][2] = 0  # zero width
        annotations[1]['bbox'][3] = -3  # negative height
        annotations[2]['area'] = 0  # no area

    path = edit_annotations(root, 'val2017', shrink)
    with open(path) as f:
        annotations = json.load(f)['annotations']
    logged = []
    monkeypatch.setattr(coco, 'print_log', lambda msg, **kw: logged.append((msg, kw)))
    dataset = build_coco(root)
    assert type(dataset).__name__ == 'CocoDataset' and isinstance(dataset, coco.CocoDataset)
    assert dataset.dropped_boxes == {SIZE: 3}
    kept = sum(len(dataset.get_data_info(i)['instances']) for i in range(len(dataset)))
    assert kept == len(annotations) - 3
    (message, kw), = logged
    assert message.startswith(f'{dataset.ann_file}: dropped 3 of {len(annotations)} boxes: '
                              f'3 with {SIZE} (e.g. annotation id {annotations[0]["id"]})')
    assert kw['level'] == 30

    # the boxes kept are exactly mmdet's
    from mmdet.datasets import CocoDataset as Upstream
    upstream = Upstream(data_root=root, ann_file='annotations/instances_val2017.json',
                        data_prefix=dict(img='val2017/'), test_mode=True, pipeline=[])
    assert [d['instances'] for d in upstream.load_data_list()] == \
        [dataset.get_data_info(i)['instances'] for i in range(len(dataset))]


@pytest.mark.det
def test_coco_without_any_box_left_fails_naming_the_file(tmp_path):
    pytest.importorskip('mmdet')
    root = write_coco(str(tmp_path / 'coco'), num_train=3, num_val=1)

    def flatten(annotations):
        for ann in annotations:
            ann['bbox'][3] = 0

    path = edit_annotations(root, 'train2017', flatten)
    with pytest.raises(
            ValueError, match=r'instances_train2017.json: no box is left of the \d+ '
            r'in the file \(\{.zero or negative size'):
        build_coco(root, 'train2017', test_mode=False)
    assert osp.isfile(path)


@pytest.mark.det
def test_coco_config_builds_the_checked_dataset():
    cfg = Config.fromfile(COCO_CONFIG)
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        assert cfg[loader].dataset.type == 'mmstiff.CocoDataset', loader


def test_box_drop_reasons_follow_mmdet():
    pytest.importorskip('mmdet')
    from mmstiff.datasets.coco_boxes import CATEGORY, OUTSIDE, box_drop_reason
    img = dict(width=100, height=50)

    def ann(bbox, area=10, cat=1, **kw):
        return dict(bbox=bbox, area=area, category_id=cat, **kw)

    assert box_drop_reason(ann([10, 10, 5, 5]), img, [1]) is None
    assert box_drop_reason(ann([10, 10, 0.5, 5]), img, [1]) == SIZE
    assert box_drop_reason(ann([10, 10, 5, -5]), img, [1]) == SIZE
    assert box_drop_reason(ann([10, 10, 5, 5], area=0), img, [1]) == SIZE
    assert box_drop_reason(ann([100, 10, 5, 5]), img, [1]) == OUTSIDE
    assert box_drop_reason(ann([10, 10, 5, 5], cat=2), img, [1]) == CATEGORY
    assert box_drop_reason(ann([10, 10, 0, 0], ignore=True), img, [1]) is None


# ------------------------------------------------------------------ MNIST / Fashion-MNIST
def write_idx(path, array):
    array = np.asarray(array, dtype=np.uint8)
    with open(path, 'wb') as f:
        f.write(
            struct.pack(f'>{1 + array.ndim}I', 2049 if array.ndim == 1 else 2051, *array.shape) +
            array.tobytes())


def demo_test_dataset(root):
    """The test dataset of the demo config, on the files in ``root``."""
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import DATASETS
    cfg = Config.fromfile(DEMO_CONFIG)
    init_default_scope('mmpretrain')
    return DATASETS.build(dict(cfg.test_dataloader.dataset, data_root=root))


def test_fewer_labels_than_images_fail_naming_both_files(tmp_path):
    from mmpretrain.datasets import FashionMNIST as Upstream
    root = write_mnist(str(tmp_path / 'fm'), num_train=12, num_test=6)
    labels = osp.join(root, 't10k-labels-idx1-ubyte')
    with open(labels, 'rb') as f:
        write_idx(labels, np.frombuffer(f.read()[8:], np.uint8)[:5])
    # mmpretrain pairs images and labels with zip: the sixth image is silently gone
    assert len(Upstream(data_root=root, split='test', test_mode=True)) == 5
    with pytest.raises(
            ValueError, match=f'{labels} holds 5 labels but .*t10k-images-idx3-ubyte '
            'holds 6 images; expected one label per image'):
        demo_test_dataset(root)
    assert len(FashionMNIST(data_root=root, split='train')) == 12  # the other split is fine


def test_truncated_idx_file_fails_naming_it(tmp_path):
    root = write_mnist(str(tmp_path / 'fm'), num_train=12, num_test=6)
    images = osp.join(root, 't10k-images-idx3-ubyte')
    with open(images, 'rb') as f:
        data = f.read()
    with open(images, 'wb') as f:
        f.write(data[:-100])
    with pytest.raises(
            ValueError, match=f'{images}: file is {len(data) - 100} bytes; its '
            rf'header \(6, 28, 28\) needs {len(data)} \(truncated'):
        demo_test_dataset(root)


def test_split_and_test_mode_must_agree(tmp_path):
    root = write_mnist(str(tmp_path / 'fm'), num_train=12, num_test=6)
    with pytest.raises(
            ValueError, match=r"split='test' with test_mode=False: mmpretrain reads "
            'the files by test_mode, so this would read the training files'):
        FashionMNIST(data_root=root, split='test')
    with pytest.raises(ValueError, match="split='val' is not supported"):
        FashionMNIST(data_root=root, split='val')


# ------------------------------------------------------------------ empty datasets
def test_empty_datasets_fail_naming_their_files(tmp_path):
    """MMEngine's own error for an empty dataset is "need at least one array to concatenate"."""
    root = write_cifar(str(tmp_path / 'cifar'), num_classes=10, num_train=10, num_test=10)
    batch = osp.join(root, 'cifar-10-batches-py', 'test_batch')
    with open(batch, 'wb') as f:
        pickle.dump({'data': np.zeros((0, 3072), np.uint8), 'labels': []}, f, protocol=2)
    with pytest.raises(
            ValueError, match=f"CIFAR10 split 'test' holds no image: {batch} have "
            "0 rows of 'data'"):
        CIFAR10(data_root=root, split='test')

    root = write_stl10(str(tmp_path / 'stl'), num_train=2, num_test=2)
    for name in ('test_X.bin', 'test_y.bin'):
        open(osp.join(root, 'stl10_binary', name), 'wb').close()
    with pytest.raises(ValueError, match=r'test_X.bin holds no image \(0 bytes\)'):
        STL10(data_root=root, split='test')

    root = write_mnist(str(tmp_path / 'fm'), num_train=2, num_test=2)
    write_idx(osp.join(root, 't10k-images-idx3-ubyte'), np.zeros((0, 28, 28)))
    write_idx(osp.join(root, 't10k-labels-idx1-ubyte'), np.zeros(0))
    with pytest.raises(ValueError, match='t10k-images-idx3-ubyte holds 0 images; expected at '
                       'least one'):
        demo_test_dataset(root)


# ------------------------------------------------------------------ the tools' input
def tool_args(tmp_path, out):
    checkpoint = tmp_path / 'c.pth'
    checkpoint.write_bytes(b'x')
    return argparse.Namespace(config=CLS_CONFIG, checkpoint=str(checkpoint),
                              work_dir=str(tmp_path / 'work'), out=out, no_pin_memory=False,
                              cfg_options=None, launcher='none')


@pytest.mark.slow
def test_unwritable_out_fails_before_the_evaluation(tmp_path):
    blocker = tmp_path / 'a_file'
    blocker.write_text('')
    out = str(blocker / 'sub' / 'metrics.json')
    with pytest.raises(
            ConfigError, match=f"--out '{out}' cannot be created: '{blocker}' is a "
            'file, not a directory'):
        prepare_runner_cfg(Config.fromfile(CLS_CONFIG), tool_args(tmp_path, out), 'test')
    folder = tmp_path / 'results.pkl'
    folder.mkdir()
    with pytest.raises(ConfigError, match='is a directory; expected a file path'):
        prepare_runner_cfg(Config.fromfile(CLS_CONFIG), tool_args(tmp_path, str(folder)), 'test')
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / 'locked'
        locked.mkdir(mode=0o500)
        with pytest.raises(ConfigError, match='is not writable'):
            prepare_runner_cfg(
                Config.fromfile(CLS_CONFIG), tool_args(tmp_path, str(locked / 'm.json')), 'test')
    fine = str(tmp_path / 'new' / 'deeper' / 'metrics.json')  # folders are created later
    prepare_runner_cfg(Config.fromfile(CLS_CONFIG), tool_args(tmp_path, fine), 'test')
    assert not osp.exists(osp.dirname(fine))


def test_config_syntax_error_names_the_file_and_line(tmp_path):
    bad = tmp_path / 'bad.py'
    bad.write_text("_base_ = ['mmpretrain::_base_/default_runtime.py']\nmodel = dict(\n"
                   "x = 1\n")
    with pytest.raises(ConfigError, match=f"config file '{bad}' has a syntax error: .*line 2"):
        load_config(str(bad))
    child = tmp_path / 'child.py'
    child.write_text("_base_ = ['./bad.py']\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(child))
    assert str(child) in str(info.value) and str(bad) in str(info.value)


def load_tool(name, path):
    return load_script(path, name)


@pytest.mark.parametrize('tool', ['train', 'test', 'analysis'])
def test_cfg_option_without_equals_is_a_usage_error(tool, capsys):
    if tool == 'analysis':
        from mmstiff.apis.cli import analysis_parser
        parser = analysis_parser('x')
        parse, argv = parser.parse_args, ['cfg.py', 'c.pth']
    else:
        parse = load_tool(f'{tool}_tool', osp.join(REPO, 'tools', f'{tool}.py')).parse_args
        argv = ['cfg.py'] + (['c.pth'] if tool == 'test' else [])
    with pytest.raises(SystemExit) as info:
        parse(argv + ['--cfg-options', 'a=1', 'train_cfg.max_iters'])
    assert info.value.code == 2
    assert ("argument --cfg-options: invalid key=value value: 'train_cfg.max_iters'"
            in capsys.readouterr().err)
    args = parse(argv + ['--cfg-options', 'a=1', 'b.c=x=y'])
    assert args.cfg_options == {'a': 1, 'b.c': 'x=y'}


# ------------------------------------------------------------------ diagnostics module
def test_missing_diagnostics_module_fails_naming_what_is_there():
    from mmstiff.engine.hooks import FrequencyHook, StiffnessHook
    model = nn.Module()
    model.backbone = nn.Module()
    model.backbone.layer1 = nn.Conv2d(1, 1, 1)
    model.backbone.layer2 = nn.Conv2d(1, 1, 1)
    model.head = nn.Linear(1, 1)
    runner = types.SimpleNamespace(model=model)
    with pytest.raises(
            ValueError, match=r"module='backbone.layer9' is not a submodule: "
            r"backbone \(Module\) has no submodule 'layer9'; expected one of "
            r"\['layer1', 'layer2'\]"):
        StiffnessHook(module='backbone.layer9').target_module(runner)
    with pytest.raises(
            ValueError, match=r"the model \(Module\) has no submodule 'neck'; "
            r"expected one of \['backbone', 'head'\]"):
        FrequencyHook(module='neck').target_module(runner)
    assert StiffnessHook(module='backbone.layer2').target_module(runner) is \
        model.backbone.layer2
    assert StiffnessHook(module=None).target_module(runner) is model
    bare = nn.Sequential(nn.Conv2d(1, 1, 1))  # no backbone: the default records it whole
    assert StiffnessHook().target_module(types.SimpleNamespace(model=bare)) is bare
