"""Dataset problems reported before training, naming the file (docs/reliability.md).

COCO: an annotation file without images, a filter that drops every image, annotations of image
ids the file does not list, missing or empty image files. Fashion-MNIST / MNIST: labels outside
the classes.
"""
import json
import os.path as osp
import struct

import numpy as np
import pytest

from mmstiff.datasets import FashionMNIST
from mmstiff.testing import write_coco, write_mnist


# ------------------------------------------------------------------ COCO
def build_coco(root, split='train2017', test_mode=False, **kwargs):
    """``mmstiff.CocoDataset`` built through mmdet's registry, as a config builds it."""
    from mmdet.registry import DATASETS
    from mmengine.registry import init_default_scope
    init_default_scope('mmdet')
    return DATASETS.build(
        dict(type='mmstiff.CocoDataset', data_root=root,
             ann_file=f'annotations/instances_{split}.json', data_prefix=dict(img=f'{split}/'),
             test_mode=test_mode, pipeline=[], **kwargs))


def edit(root, split, change):
    path = osp.join(root, 'annotations', f'instances_{split}.json')
    with open(path) as f:
        data = json.load(f)
    change(data)
    with open(path, 'w') as f:
        json.dump(data, f)
    return path


@pytest.fixture
def coco(tmp_path):
    pytest.importorskip('mmdet')
    return write_coco(str(tmp_path / 'coco'), num_train=3, num_val=2)


@pytest.mark.det
@pytest.mark.parametrize('test_mode', [False, True])
def test_coco_without_images_names_the_file(coco, test_mode):

    def empty(data):
        data['images'], data['annotations'] = [], []

    edit(coco, 'train2017', empty)
    with pytest.raises(ValueError, match=r'instances_train2017.json: lists no image'):
        build_coco(coco, test_mode=test_mode)


@pytest.mark.det
def test_coco_filter_dropping_every_image_names_the_rule(coco):
    with pytest.raises(
            ValueError, match=r"instances_train2017.json: filter_cfg=.* drops every "
            r"one of the 3 images \(\{'smaller than min_size': 3\}"):
        build_coco(coco, filter_cfg=dict(filter_empty_gt=True, min_size=10000))


@pytest.mark.det
def test_coco_annotations_of_unknown_images_are_reported(coco, monkeypatch):
    import mmstiff.datasets.coco as coco_module

    def orphan(data):
        ann = dict(data['annotations'][0], id=999, image_id=424242)
        data['annotations'].append(ann)

    edit(coco, 'train2017', orphan)
    logged = []
    monkeypatch.setattr(coco_module, 'print_log', lambda msg, **kw: logged.append(msg))
    build_coco(coco)
    assert any(
        msg.endswith('instances_train2017.json: 1 annotation(s) refer to an image id the '
                     'file does not list (e.g. annotation id 999, image id 424242); they '
                     'are not used') for msg in logged), logged


@pytest.mark.det
def test_coco_missing_and_empty_image_files_fail_before_training(coco):
    folder = osp.join(coco, 'train2017')
    with open(osp.join(coco, 'annotations', 'instances_train2017.json')) as f:
        names = [img['file_name'] for img in json.load(f)['images']]
    import os
    os.remove(osp.join(folder, names[0]))
    open(osp.join(folder, names[1]), 'w').close()
    with pytest.raises(
            ValueError, match=rf'instances_train2017.json: of the 3 image files it '
            rf'lists, 1 missing \(e.g. .*{names[0]}\); 1 empty '
            rf'\(e.g. .*{names[1]}\)'):
        build_coco(coco)
    assert len(build_coco(coco, check_files=False)) == 3


# ------------------------------------------------------------------ Fashion-MNIST labels
def test_fashion_mnist_label_out_of_range_names_the_file(tmp_path):
    root = write_mnist(str(tmp_path / 'fm'), num_train=6, num_test=4)
    labels = osp.join(root, 't10k-labels-idx1-ubyte')
    with open(labels, 'rb') as f:
        values = np.frombuffer(f.read()[8:], np.uint8).copy()
    values[2] = 200
    with open(labels, 'wb') as f:
        f.write(struct.pack('>2I', 2049, values.size) + values.tobytes())
    with pytest.raises(
            ValueError, match=rf'{labels} holds 1 label\(s\) outside \[0, 10\), the '
            r'first at index 2: 200'):
        FashionMNIST(data_root=root, split='test', test_mode=True)
    assert len(FashionMNIST(data_root=root, split='train')) == 6


@pytest.mark.det
def test_checked_coco_base_config_keeps_mmdets_settings(repo_root):
    import mmdet
    from mmengine.config import Config
    ours = Config.fromfile(
        osp.join(repo_root, 'configs', '_base_', 'datasets', 'coco_detection.py'))
    upstream = Config.fromfile(
        osp.join(
            osp.dirname(mmdet.__file__), '.mim', 'configs', '_base_', 'datasets',
            'coco_detection.py'))
    for loader in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        assert ours[loader].dataset.type == 'mmstiff.CocoDataset'
        mine = {k: v for k, v in ours[loader].dataset.items() if k not in ('type', '_scope_')}
        theirs = {k: v for k, v in upstream[loader].dataset.items() if k != 'type'}
        assert mine == theirs, loader
