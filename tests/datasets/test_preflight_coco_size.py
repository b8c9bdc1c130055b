"""The pre-flight check of a COCO-sized annotation file (118,287 images and 860,001 boxes, as
COCO 2017's train split): its time, and the boxes it counts (docs/reliability.md, "Data
checks before the Runner")."""
import json
import time

import numpy as np
import pytest

from mmstiff.datasets.coco_boxes import CATEGORY, OUTSIDE, SIZE
from mmstiff.datasets.preflight import check_coco_file

NUM_IMAGES, NUM_BOXES = 118_287, 860_001
#: boxes planted per reason mmdet drops a box
PLANTED = 1000
#: the bound the check must stay under on 2 CPU cores (it measured 13 s there, beside other work)
BOUND_S = 60


def write_coco_sized(path, rng):
    """A COCO-style file of :data:`NUM_IMAGES` images and :data:`NUM_BOXES` boxes of category 1
    ('person'), :data:`PLANTED` of them of zero size, outside their image and of category 0
    (not listed) each."""
    images = [
        dict(id=i, file_name=f'{i:012d}.jpg', width=640, height=480) for i in range(NUM_IMAGES)
    ]
    image_ids = rng.integers(0, NUM_IMAGES, NUM_BOXES)
    xy = rng.uniform(0, 400, (NUM_BOXES, 2)).round(1)
    wh = rng.uniform(2, 200, (NUM_BOXES, 2)).round(1)
    anns = []
    for i in range(NUM_BOXES):
        x, y, w, h = float(xy[i, 0]), float(xy[i, 1]), float(wh[i, 0]), float(wh[i, 1])
        category = 1
        if i < PLANTED:
            w = 0.0
        elif i < 2 * PLANTED:
            x = 700.0
        elif i < 3 * PLANTED:
            category = 0
        anns.append(
            dict(id=i + 1, image_id=int(image_ids[i]), category_id=category, bbox=[x, y, w, h],
                 area=w * h, iscrowd=0))
    categories = [dict(id=1, name='person'), dict(id=0, name='not-a-class')]
    with open(path, 'w') as f:
        json.dump(dict(images=images, annotations=anns, categories=categories), f)


@pytest.mark.slow
def test_coco_sized_file_is_checked_in_seconds(tmp_path):
    path = tmp_path / 'instances_train2017.json'
    write_coco_sized(path, np.random.default_rng(0))
    start = time.perf_counter()
    warnings = check_coco_file(str(path), ('person', 'bicycle'))
    took = time.perf_counter() - start
    print(f'\npre-flight check of {NUM_IMAGES} images / {NUM_BOXES} boxes '
          f'({path.stat().st_size / 2**20:.0f} MiB): {took:.1f} s')
    [line] = warnings
    assert f'mmdet drops {3 * PLANTED} of {NUM_BOXES} boxes' in line
    for reason in (SIZE, OUTSIDE, CATEGORY):
        assert f'{PLANTED} with {reason}' in line
    assert took < BOUND_S
