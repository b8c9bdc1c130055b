"""The tiny-data writers produce the official on-disk formats.

Each writer's output is read back twice: by the upstream reader (mmpretrain's CIFAR loading
code, ``ImageNet``, ``MNIST``/``FashionMNIST``; mmdet's ``CocoDataset`` and pycocotools) and
by an independent decoding of the bytes written here (``pickle`` with ``encoding='bytes'``,
``struct`` on the IDX header, PIL on the JPEGs).
"""
import json
import os.path as osp
import pickle
import struct

import numpy as np
import pytest
from PIL import Image

from mmstiff.testing import COCO_CATEGORIES, write_cifar, write_coco, write_imagenet, write_mnist
from mmstiff.testing.shapes import (SHAPE_KINDS, class_colour, class_grey, mask_bbox, polygon,
                                    polygon_mask)


def unpickle_bytes(path):
    """Unpickle as the CIFAR website's example does: keys and strings stay bytes."""
    with open(path, 'rb') as f:
        return pickle.load(f, encoding='bytes')


def hwc(row):
    """A CIFAR row (3072 values: R, G, B planes, row-major) -> (32, 32, 3)."""
    return np.asarray(row, dtype=np.uint8).reshape(3, 32, 32).transpose(1, 2, 0)


# ----------------------------------------------------------------------------- shapes


def test_polygon_mask_square_matches_hand_count():
    # axis-aligned square with corners at integer coordinates 2..6: pixel centres 2.5..5.5
    square = np.array([[2, 2], [6, 2], [6, 6], [2, 6]])
    mask = polygon_mask(square, (10, 8))
    expected = np.zeros((8, 10), bool)
    expected[2:6, 2:6] = True
    assert np.array_equal(mask, expected)
    assert mask_bbox(mask) == [2, 2, 4, 4]


def test_class_styles_differ_between_neighbouring_classes():
    for a in range(9):
        assert class_colour(a, 10) != class_colour(a + 1, 10)
    assert len({class_grey(v, 10) for v in range(10)}) == 2  # 5 kinds x 2 grey levels
    assert len(polygon(SHAPE_KINDS[2], (0, 0), 1)) == 24
    with pytest.raises(ValueError, match='label=10'):
        class_colour(10, 10)


# ----------------------------------------------------------------------------- CIFAR


@pytest.fixture(scope='module')
def cifar10_root(tmp_path_factory):
    return write_cifar(str(tmp_path_factory.mktemp('c10')), 10, num_train=23, num_test=7, seed=3)


@pytest.fixture(scope='module')
def cifar100_root(tmp_path_factory):
    return write_cifar(str(tmp_path_factory.mktemp('c100')), 100, num_train=30, num_test=12)


def _unchecked(upstream_cls):
    """mmpretrain's class with its md5 check disabled: its own reading code, our files."""
    return type('Unchecked' + upstream_cls.__name__, (upstream_cls, ),
                {'_check_integrity': lambda self: True})


def test_cifar10_pickles_have_the_official_fields(cifar10_root):
    folder = osp.join(cifar10_root, 'cifar-10-batches-py')
    total = 0
    for k in range(1, 6):
        path = osp.join(folder, f'data_batch_{k}')
        with open(path, 'rb') as f:
            assert f.read(2) == b'\x80\x02'  # protocol 2, as the official files
        entry = unpickle_bytes(path)
        assert set(entry) == {b'data', b'labels', b'batch_label', b'filenames'}
        assert entry[b'batch_label'] == f'training batch {k} of 5'.encode()
        assert entry[b'data'].dtype == np.uint8 and entry[b'data'].shape[1] == 3072
        assert len(entry[b'labels']) == len(entry[b'filenames']) == len(entry[b'data'])
        total += len(entry[b'data'])
    assert total == 23
    meta = unpickle_bytes(osp.join(folder, 'batches.meta'))
    from mmpretrain.datasets.categories import CIFAR10_CATEGORIES
    assert [n.decode() for n in meta[b'label_names']] == list(CIFAR10_CATEGORIES)
    test = unpickle_bytes(osp.join(folder, 'test_batch'))
    assert len(test[b'labels']) == 7 and sorted(set(test[b'labels'])) == list(range(7))


def test_cifar10_read_by_mmpretrain_loader(cifar10_root):
    from mmpretrain.datasets import CIFAR10
    folder = osp.join(cifar10_root, 'cifar-10-batches-py')
    rows = np.concatenate(
        [unpickle_bytes(osp.join(folder, f'data_batch_{k}'))[b'data'] for k in range(1, 6)])
    labels = sum(
        (unpickle_bytes(osp.join(folder, f'data_batch_{k}'))[b'labels'] for k in range(1, 6)), [])
    ds = _unchecked(CIFAR10)(data_root=cifar10_root, split='train', download=False)
    assert len(ds) == 23
    for i in (0, 11, 22):
        info = ds.get_data_info(i)
        assert info['gt_label'] == labels[i]
        assert np.array_equal(info['img'], hwc(rows[i]))


def test_cifar10_images_show_their_class(cifar10_root):
    entry = unpickle_bytes(osp.join(cifar10_root, 'cifar-10-batches-py', 'test_batch'))
    for row, label in zip(entry[b'data'], entry[b'labels']):
        img = hwc(row).reshape(-1, 3)
        colour = np.array(class_colour(label, 10))
        share = np.all(img == colour, axis=1).mean()
        assert 0.05 < share < 0.8, f'class {label} shape covers {share:.2f} of the image'


def test_cifar100_pickles_and_mmpretrain_loader(cifar100_root):
    from mmpretrain.datasets import CIFAR100
    from mmpretrain.datasets.categories import CIFAR100_CATEGORIES
    folder = osp.join(cifar100_root, 'cifar-100-python')
    train = unpickle_bytes(osp.join(folder, 'train'))
    assert set(train) == {b'data', b'fine_labels', b'coarse_labels', b'batch_label', b'filenames'}
    assert [c for c in train[b'coarse_labels']] == [f // 5 for f in train[b'fine_labels']]
    meta = unpickle_bytes(osp.join(folder, 'meta'))
    assert [n.decode() for n in meta[b'fine_label_names']] == list(CIFAR100_CATEGORIES)
    assert len(meta[b'coarse_label_names']) == 20
    ds = _unchecked(CIFAR100)(data_root=cifar100_root, split='test', download=False)
    test = unpickle_bytes(osp.join(folder, 'test'))
    assert len(ds) == 12
    info = ds.get_data_info(5)
    assert info['gt_label'] == test[b'fine_labels'][5]
    assert np.array_equal(info['img'], hwc(test[b'data'][5]))


def test_cifar_is_deterministic_and_seeded(tmp_path):
    a = write_cifar(str(tmp_path / 'a'), 10, num_train=5, num_test=5, seed=1)
    b = write_cifar(str(tmp_path / 'b'), 10, num_train=5, num_test=5, seed=1)
    c = write_cifar(str(tmp_path / 'c'), 10, num_train=5, num_test=5, seed=2)

    def read(root):
        with open(osp.join(root, 'cifar-10-batches-py', 'test_batch'), 'rb') as f:
            return f.read()

    assert read(a) == read(b) != read(c)


@pytest.mark.parametrize('kwargs, field', [
    (dict(num_classes=20), 'num_classes=20'),
    (dict(num_train=0), 'num_train=0'),
    (dict(num_test=2.5), 'num_test=2.5'),
])
def test_cifar_rejects_bad_arguments(tmp_path, kwargs, field):
    with pytest.raises(ValueError, match=field):
        write_cifar(str(tmp_path), **kwargs)


# ----------------------------------------------------------------------------- ImageNet


@pytest.fixture(scope='module')
def imagenet_root(tmp_path_factory):
    return write_imagenet(
        str(tmp_path_factory.mktemp('in')), num_classes=3, per_class=2, size=(48, 40),
        val_per_class=2)


def _read_list(path):
    with open(path) as f:
        return [(line.split()[0], int(line.split()[1])) for line in f if line.strip()]


def test_imagenet_layout_decoded_independently(imagenet_root):
    train = _read_list(osp.join(imagenet_root, 'meta', 'train.txt'))
    val = _read_list(osp.join(imagenet_root, 'meta', 'val.txt'))
    assert len(train) == 6 and len(val) == 6
    for rel, label in train:
        wnid, name = rel.split('/')
        assert wnid == f'n{label:08d}' and name.startswith(wnid + '_') and name.endswith('.JPEG')
    assert [rel for rel, _ in val] == [f'ILSVRC2012_val_{i:08d}.JPEG' for i in range(1, 7)]
    for split, items in (('train', train), ('val', val)):
        for rel, label in items:
            img = np.asarray(Image.open(osp.join(imagenet_root, split, rel)).convert('RGB'))
            assert img.shape == (40, 48, 3)
            # the class shape's colour is present (JPEG changes it by a few levels only)
            dist = np.abs(img.astype(int) - class_colour(label, 3)).max(axis=2)
            assert (dist <= 24).mean() > 0.05


@pytest.mark.parametrize('split', ['train', 'val'])
def test_imagenet_read_by_mmpretrain(imagenet_root, split):
    from mmpretrain.datasets import ImageNet
    expected = _read_list(osp.join(imagenet_root, 'meta', f'{split}.txt'))
    for ds in (ImageNet(data_root=imagenet_root, split=split),
               ImageNet(data_root=imagenet_root, ann_file=f'meta/{split}.txt', data_prefix=split)):
        assert len(ds) == len(expected)
        for i, (rel, label) in enumerate(expected):
            info = ds.get_data_info(i)
            assert info['img_path'] == osp.join(imagenet_root, split, rel)
            assert int(info['gt_label']) == label


def test_imagenet_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match='num_classes=1001'):
        write_imagenet(str(tmp_path), num_classes=1001)
    with pytest.raises(ValueError, match='per_class=0'):
        write_imagenet(str(tmp_path), per_class=0)
    with pytest.raises(ValueError, match=r'size=\(64, 4\) is invalid; expected \(W, H\), two '
                       'ints >= 8'):
        write_imagenet(str(tmp_path), size=(64, 4))


# ----------------------------------------------------------------------------- MNIST


@pytest.fixture(scope='module')
def mnist_root(tmp_path_factory):
    return write_mnist(str(tmp_path_factory.mktemp('mnist')), num_train=30, num_test=11)


def _read_idx_by_hand(path):
    with open(path, 'rb') as f:
        raw = f.read()
    zero, dtype, ndim = struct.unpack('>HBB', raw[:4])
    dims = struct.unpack(f'>{ndim}I', raw[4:4 + 4 * ndim])
    return zero << 16 | dtype << 8 | ndim, dims, raw[4 + 4 * ndim:]


def test_mnist_idx_headers_by_hand(mnist_root):
    for prefix, n in (('train', 30), ('t10k', 11)):
        magic, dims, body = _read_idx_by_hand(osp.join(mnist_root, f'{prefix}-images-idx3-ubyte'))
        assert (magic, dims, len(body)) == (2051, (n, 28, 28), n * 784)
        magic, dims, body = _read_idx_by_hand(osp.join(mnist_root, f'{prefix}-labels-idx1-ubyte'))
        assert (magic, dims, len(body)) == (2049, (n, ), n)
        assert max(body) <= 9


@pytest.mark.parametrize('cls_name', ['MNIST', 'FashionMNIST'])
def test_mnist_read_by_mmpretrain(mnist_root, cls_name):
    import mmpretrain.datasets as mmpre_datasets
    cls = getattr(mmpre_datasets, cls_name)
    _, _, pixels = _read_idx_by_hand(osp.join(mnist_root, 't10k-images-idx3-ubyte'))
    _, _, labels = _read_idx_by_hand(osp.join(mnist_root, 't10k-labels-idx1-ubyte'))
    # mmpretrain 1.2.0 picks the test files by ``test_mode``, not by ``split``
    ds = cls(data_root=mnist_root, split='test', test_mode=True, download=False)
    assert len(ds) == 11
    info = ds.get_data_info(4)
    assert int(info['gt_label']) == labels[4]
    assert np.array_equal(info['img'],
                          np.frombuffer(pixels, np.uint8)[4 * 784:5 * 784].reshape(28, 28))
    assert len(cls(data_root=mnist_root, split='train', download=False)) == 30


def test_mnist_compressed_form(tmp_path):
    import gzip
    plain = write_mnist(str(tmp_path / 'plain'), num_train=3, num_test=2, seed=5)
    packed = write_mnist(str(tmp_path / 'gz'), num_train=3, num_test=2, seed=5, compress=True)
    for name in ('train-images-idx3-ubyte', 't10k-labels-idx1-ubyte'):
        with gzip.open(osp.join(packed, name + '.gz')) as f, open(osp.join(plain, name), 'rb') as g:
            assert f.read() == g.read()


# ----------------------------------------------------------------------------- COCO


@pytest.fixture(scope='module')
def coco_root(tmp_path_factory):
    return write_coco(
        str(tmp_path_factory.mktemp('coco')), num_train=5, num_val=3, size=(120, 90), seed=7)


@pytest.mark.det
def test_coco_categories_match_mmdet():
    from mmdet.datasets import CocoDataset
    assert [name for _, name, _ in COCO_CATEGORIES] == list(CocoDataset.METAINFO['classes'])
    ids = [i for i, _, _ in COCO_CATEGORIES]
    assert len(ids) == 80 and ids == sorted(ids) and ids[-1] == 90
    assert set(range(1, 91)) - set(ids) == {12, 26, 29, 30, 45, 66, 68, 69, 71, 83}


@pytest.mark.det
def test_coco_json_read_by_pycocotools(coco_root):
    from pycocotools.coco import COCO
    coco = COCO(osp.join(coco_root, 'annotations', 'instances_val2017.json'))
    assert sorted(coco.getImgIds()) == [6, 7, 8]
    assert len(coco.getCatIds()) == 80
    for ann in coco.loadAnns(coco.getAnnIds()):
        mask = coco.annToMask(ann).astype(bool)
        # the polygon rasterised by pycocotools covers (almost) the drawn pixels
        assert abs(mask.sum() - ann['area']) <= 0.25 * ann['area']
        x, y, w, h = ann['bbox']
        assert ann['iscrowd'] == 0 and w > 0 and h > 0


def test_coco_boxes_are_tight_around_drawn_objects(coco_root):
    with open(osp.join(coco_root, 'annotations', 'instances_train2017.json')) as f:
        data = json.load(f)
    names = {c['id']: c['name'] for c in data['categories']}
    index = {i: k for k, (i, _, _) in enumerate(COCO_CATEGORIES)}
    per_image = {}
    for ann in data['annotations']:
        per_image.setdefault(ann['image_id'], []).append(ann)
    assert len(data['images']) == 5 and set(per_image) == {1, 2, 3, 4, 5}
    for image in data['images']:
        anns = per_image[image['id']]
        assert 1 <= len(anns) <= 3
        img = np.asarray(Image.open(osp.join(coco_root, 'train2017', image['file_name'])))
        assert img.shape == (image['height'], image['width'], 3) == (90, 120, 3)
        for ann in anns:
            colour = class_colour(index[ann['category_id']], 80)
            near = np.abs(img.astype(int) - colour).max(axis=2) <= 40  # JPEG tolerance
            x, y, w, h = (int(v) for v in ann['bbox'])
            inside = near[y:y + h, x:x + w]
            assert inside.mean() > 0.4, names[ann['category_id']]
            # tight: every border row/column of the box holds object pixels...
            assert inside[0].any() and inside[-1].any()
            assert inside[:, 0].any() and inside[:, -1].any()
            # ...and the rows/columns just outside it hold none (objects never touch)
            for outside in (near[y - 1,
                                 x:x + w] if y > 0 else None, near[y + h,
                                                                   x:x + w] if y + h < 90 else None,
                            near[y:y + h,
                                 x - 1] if x > 0 else None, near[y:y + h,
                                                                 x + w] if x + w < 120 else None):
                assert outside is None or not outside.any()
            assert ann['area'] == pytest.approx(inside.sum(), rel=0.15)


@pytest.mark.det
def test_coco_read_by_mmdet(coco_root):
    from mmdet.datasets import CocoDataset
    with open(osp.join(coco_root, 'annotations', 'instances_train2017.json')) as f:
        data = json.load(f)
    ds = CocoDataset(data_root=coco_root, ann_file='annotations/instances_train2017.json',
                     data_prefix=dict(img='train2017/'), pipeline=[],
                     filter_cfg=dict(filter_empty_gt=True, min_size=32))
    assert len(ds) == 5
    info = ds.get_data_info(0)
    anns = [a for a in data['annotations'] if a['image_id'] == info['img_id']]
    got = sorted(tuple(i['bbox']) for i in info['instances'])
    want = sorted(
        (a['bbox'][0], a['bbox'][1], a['bbox'][0] + a['bbox'][2], a['bbox'][1] + a['bbox'][3])
        for a in anns)
    assert got == want
    labels = sorted(i['bbox_label'] for i in info['instances'])
    classes = CocoDataset.METAINFO['classes']
    names = {i: n for i, n, _ in COCO_CATEGORIES}
    assert labels == sorted(classes.index(names[a['category_id']]) for a in anns)


def test_coco_rejects_small_images(tmp_path):
    with pytest.raises(ValueError, match=r'size=\(20, 64\) is invalid.* >= 32'):
        write_coco(str(tmp_path), size=(20, 64))
    with pytest.raises(ValueError, match='category_id=12'):
        write_coco(str(tmp_path), category_ids=[1, 12])


# ----------------------------------------------------------------------------- upstream configs

#: base dataset config -> (default scope, tiny data kind, config text overriding only the
#: data settings: every dataset's data_root (and for CIFAR its type), CocoMetric's ann_file)
CONFIG_OVERRIDES = {
    'mmpretrain::_base_/datasets/cifar10_bs16.py': ('mmpretrain', 'cifar10', """
train_dataloader = dict(dataset=dict(type='mmstiff.CIFAR10', data_root='{root}'))
val_dataloader = dict(dataset=dict(type='mmstiff.CIFAR10', data_root='{root}'))
test_dataloader = val_dataloader
"""),
    'mmpretrain::_base_/datasets/imagenet_bs32.py': ('mmpretrain', 'imagenet', """
train_dataloader = dict(dataset=dict(data_root='{root}'))
val_dataloader = dict(dataset=dict(data_root='{root}'))
test_dataloader = val_dataloader
"""),
    'mmdet::_base_/datasets/coco_detection.py': ('mmdet', 'coco', """
train_dataloader = dict(dataset=dict(data_root='{root}/'))
val_dataloader = dict(dataset=dict(data_root='{root}/'))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file='{root}/annotations/instances_val2017.json')
test_evaluator = val_evaluator
"""),
}


@pytest.mark.parametrize(
    'base',
    [
        pytest.param(base, marks=[pytest.mark.slow] if 'coco' in base else [])  # resizes to 1333
        for base in sorted(CONFIG_OVERRIDES)
    ])
def test_upstream_dataset_configs_read_tiny_data(base, tmp_path, request):
    import importlib

    from mmengine.config import Config
    from mmengine.registry import DefaultScope

    from mmstiff.datasets import CIFAR10

    scope, kind, text = CONFIG_OVERRIDES[base]
    root = request.getfixturevalue(f'{kind}_root')
    path = tmp_path / 'cfg.py'
    path.write_text(f'_base_ = {base!r}\n' + text.format(root=root))
    cfg = Config.fromfile(str(path))
    registry = importlib.import_module(f'{scope}.registry')
    with DefaultScope.overwrite_default_scope(scope):
        for field in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
            dataset = registry.DATASETS.build(cfg[field].dataset)
            assert len(dataset) > 0 and dataset[0]['inputs'].shape[0] == 3
            assert isinstance(dataset, CIFAR10) == (kind == 'cifar10')
        for field in ('val_evaluator', 'test_evaluator'):
            registry.METRICS.build(cfg[field])
