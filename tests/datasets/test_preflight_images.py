"""The pre-flight check that every image file a COCO annotation file lists is on disk (one
``stat`` per file), for mmstiff's and mmdet's ``CocoDataset`` alike, and its switches
(docs/reliability.md, "Data checks before the Runner")."""
import json
import os
import os.path as osp
import time

import pytest

from mmstiff.datasets.coco_files import check_image_files, image_file_problems
from mmstiff.datasets.preflight import DataCheckError, check_data
from mmstiff.testing import write_coco

NUM_IMAGES = 118_287
#: the bound the check must stay under on 2 shared CPU cores (see docs/reliability.md)
BOUND_S = 30


def coco_cfg(root, type_name='mmstiff.CocoDataset', **dataset):
    ds = dict(type=type_name, data_root=root + '/', ann_file='annotations/instances_train2017.json',
              data_prefix=dict(img='train2017/'), **dataset)
    return {'default_scope': 'mmdet', 'train_dataloader': dict(dataset=ds)}


def file_names(root):
    with open(osp.join(root, 'annotations', 'instances_train2017.json')) as f:
        return [img['file_name'] for img in json.load(f)['images']]


@pytest.fixture
def coco(tmp_path):
    return write_coco(str(tmp_path / 'coco'), num_train=6, num_val=2)


@pytest.mark.det  # the COCO classes of the dataset come from mmdet
def test_missing_and_empty_image_files_are_named_with_their_counts(coco):
    names = file_names(coco)
    gone = [osp.join(coco, 'train2017', n) for n in names[1:5]]  # 4 missing
    for path in gone:
        os.remove(path)
    open(osp.join(coco, 'train2017', names[5]), 'w').close()  # 1 empty
    with pytest.raises(DataCheckError) as err:
        check_data(coco_cfg(coco))
    text = str(err.value)
    ann = osp.join(coco, 'annotations', 'instances_train2017.json')
    assert text.startswith(f'train_dataloader.dataset: {ann}: of the 6 image files it lists, '
                           f'4 missing (e.g. {gone[0]}, {gone[1]}, {gone[2]}); 1 empty (e.g. '
                           f'{osp.join(coco, "train2017", names[5])})')
    assert gone[3] not in text  # the first three only
    assert 'skip_image_checks=True in the config (--skip-image-checks)' in text


@pytest.mark.det  # the COCO classes of the dataset come from mmdet
def test_the_switches_skip_the_image_check_only_or_every_check(coco):
    os.remove(osp.join(coco, 'train2017', file_names(coco)[0]))
    cfg = coco_cfg(coco)
    cfg['skip_image_checks'] = True
    assert check_data(cfg) == []
    assert check_data(coco_cfg(coco, check_files=False)) == []  # mmstiff.CocoDataset's own switch
    cfg = coco_cfg(coco)
    cfg['skip_data_checks'] = True
    assert check_data(cfg) == []
    # the annotation checks still run with skip_image_checks
    path = osp.join(coco, 'annotations', 'instances_train2017.json')
    with open(path) as f:
        data = json.load(f)
    data['annotations'] = []
    with open(path, 'w') as f:
        json.dump(data, f)
    cfg = coco_cfg(coco)
    cfg['skip_image_checks'] = True
    with pytest.raises(DataCheckError, match='holds no annotation'):
        check_data(cfg)


@pytest.mark.det  # the COCO classes of the dataset come from mmdet
def test_only_the_images_the_dataset_keeps_are_looked_for(coco):
    """filter_empty_gt drops an image without boxes: mmdet never reads its file."""
    path = osp.join(coco, 'annotations', 'instances_train2017.json')
    with open(path) as f:
        data = json.load(f)
    dropped = data['images'][2]
    data['annotations'] = [a for a in data['annotations'] if a['image_id'] != dropped['id']]
    with open(path, 'w') as f:
        json.dump(data, f)
    os.remove(osp.join(coco, 'train2017', dropped['file_name']))
    [line] = check_data(coco_cfg(coco, filter_cfg=dict(filter_empty_gt=True)))
    assert 'filter_cfg drops 1 of 6 images' in line
    with pytest.raises(DataCheckError, match='of the 6 image files it lists, 1 missing'):
        check_data(coco_cfg(coco, test_mode=True))  # in test_mode every image is read


@pytest.mark.det  # the COCO classes of the dataset come from mmdet
def test_images_on_remote_storage_are_not_looked_for(coco):
    os.remove(osp.join(coco, 'train2017', file_names(coco)[0]))
    remote = coco_cfg(coco, backend_args=dict(backend='petrel'))
    assert check_data(remote) == []


@pytest.mark.det
def test_mmdets_own_coco_dataset_gets_the_image_check(coco):
    pytest.importorskip('mmdet')
    missing = osp.join(coco, 'train2017', file_names(coco)[3])
    os.remove(missing)
    with pytest.raises(DataCheckError) as err:
        check_data(coco_cfg(coco, type_name='CocoDataset'))
    text = str(err.value)
    assert f'of the 6 image files it lists, 1 missing (e.g. {missing})' in text
    assert "type='CocoDataset' does not check this; mmstiff.CocoDataset" in text


def test_check_image_files_counts_against_a_listing(tmp_path):
    present = [tmp_path / f'{i}.jpg' for i in range(5)]
    for i, path in enumerate(present):
        path.write_bytes(b'x' * i)  # 0.jpg is empty
    absent = [str(tmp_path / f'gone{i}.jpg') for i in range(7)]
    paths = [str(p) for p in present] + absent
    missing, empty = image_file_problems(paths)
    assert missing == absent and empty == [str(present[0])]
    with pytest.raises(ValueError, match=r'of the 12 image files it lists, 7 missing'):
        check_image_files(paths, 'ann.json')
    check_image_files(paths[1:5], 'ann.json')


@pytest.mark.slow
def test_the_image_check_of_a_coco_sized_split_takes_seconds(tmp_path):
    """118,287 empty-named files (COCO 2017 train's count), one of them missing: the check
    finds exactly that one, in seconds."""
    folder = tmp_path / 'train2017'
    folder.mkdir()
    paths = [str(folder / f'{i:012d}.jpg') for i in range(NUM_IMAGES)]
    for path in paths:
        with open(path, 'wb') as f:
            f.write(b'\xff')
    os.remove(paths[4242])
    start = time.perf_counter()
    missing, empty = image_file_problems(paths)
    took = time.perf_counter() - start
    print(f'\nimage-file check of {NUM_IMAGES} files: {took:.2f} s')
    assert missing == [paths[4242]] and empty == []
    assert took < BOUND_S
