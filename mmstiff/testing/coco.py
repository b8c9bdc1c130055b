"""Tiny COCO 2017 detection data in the official layout and annotation format.

Layout written under ``root`` (the ``data_root`` of mmdet's ``CocoDataset``)::

    train2017/<12-digit image id>.jpg
    val2017/<12-digit image id>.jpg
    annotations/instances_train2017.json
    annotations/instances_val2017.json

Each image holds 1 to 3 non-overlapping filled polygons on a dark noisy background. An
object's category decides its colour and kind (:mod:`.shapes`); its annotation carries the
polygon as ``segmentation``, the number of drawn pixels as ``area`` and the tight extent of
the drawn pixels as ``bbox = [x, y, w, h]``. ``categories`` lists all 80 official COCO
categories with their official ids, names and supercategories, so mmdet's ``CocoDataset``
metainfo matches.
"""
import json
import os
import os.path as osp
from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np

from .imagenet import save_jpeg
from .shapes import (Size, check_size, class_colour, class_kind, mask_bbox, noise_background, paint,
                     polygon, polygon_mask)

#: The 80 official COCO categories: (id, name, supercategory).
COCO_CATEGORIES = ((1, 'person', 'person'), (2, 'bicycle', 'vehicle'), (3, 'car', 'vehicle'),
                   (4, 'motorcycle', 'vehicle'), (5, 'airplane', 'vehicle'), (6, 'bus', 'vehicle'),
                   (7, 'train', 'vehicle'), (8, 'truck', 'vehicle'), (9, 'boat', 'vehicle'),
                   (10, 'traffic light', 'outdoor'), (11, 'fire hydrant', 'outdoor'),
                   (13, 'stop sign', 'outdoor'), (14, 'parking meter', 'outdoor'), (15, 'bench',
                                                                                    'outdoor'),
                   (16, 'bird', 'animal'), (17, 'cat', 'animal'), (18, 'dog', 'animal'),
                   (19, 'horse', 'animal'), (20, 'sheep', 'animal'), (21, 'cow', 'animal'),
                   (22, 'elephant', 'animal'), (23, 'bear', 'animal'), (24, 'zebra', 'animal'),
                   (25, 'giraffe', 'animal'), (27, 'backpack', 'accessory'), (28, 'umbrella',
                                                                              'accessory'),
                   (31, 'handbag', 'accessory'), (32, 'tie', 'accessory'), (33, 'suitcase',
                                                                            'accessory'),
                   (34, 'frisbee', 'sports'), (35, 'skis', 'sports'), (36, 'snowboard', 'sports'),
                   (37, 'sports ball',
                    'sports'), (38, 'kite', 'sports'), (39, 'baseball bat',
                                                        'sports'), (40, 'baseball glove', 'sports'),
                   (41, 'skateboard', 'sports'), (42, 'surfboard',
                                                  'sports'), (43, 'tennis racket',
                                                              'sports'), (44, 'bottle', 'kitchen'),
                   (46, 'wine glass', 'kitchen'), (47, 'cup', 'kitchen'), (48, 'fork', 'kitchen'),
                   (49, 'knife', 'kitchen'), (50, 'spoon', 'kitchen'), (51, 'bowl', 'kitchen'),
                   (52, 'banana', 'food'), (53, 'apple', 'food'), (54, 'sandwich',
                                                                   'food'), (55, 'orange', 'food'),
                   (56, 'broccoli',
                    'food'), (57, 'carrot', 'food'), (58, 'hot dog', 'food'), (59, 'pizza', 'food'),
                   (60, 'donut', 'food'), (61, 'cake', 'food'), (62, 'chair', 'furniture'),
                   (63, 'couch', 'furniture'), (64, 'potted plant', 'furniture'), (65, 'bed',
                                                                                   'furniture'),
                   (67, 'dining table',
                    'furniture'), (70, 'toilet',
                                   'furniture'), (72, 'tv',
                                                  'electronic'), (73, 'laptop',
                                                                  'electronic'), (74, 'mouse',
                                                                                  'electronic'),
                   (75, 'remote',
                    'electronic'), (76, 'keyboard',
                                    'electronic'), (77, 'cell phone',
                                                    'electronic'), (78, 'microwave',
                                                                    'appliance'), (79, 'oven',
                                                                                   'appliance'),
                   (80, 'toaster',
                    'appliance'), (81, 'sink', 'appliance'), (82, 'refrigerator',
                                                              'appliance'), (84, 'book', 'indoor'),
                   (85, 'clock',
                    'indoor'), (86, 'vase',
                                'indoor'), (87, 'scissors',
                                            'indoor'), (88, 'teddy bear',
                                                        'indoor'), (89, 'hair drier',
                                                                    'indoor'), (90, 'toothbrush',
                                                                                'indoor'))

#: Minimum side (pixels) mmdet's COCO configs keep (``filter_cfg.min_size``).
MIN_SIDE = 32


def category_style(category_id: int) -> Tuple[str, Tuple[int, int, int]]:
    """(kind, RGB colour) of objects of ``category_id``, from its index among the 80."""
    ids = [c[0] for c in COCO_CATEGORIES]
    if category_id not in ids:
        raise ValueError(f'category_id={category_id!r} is not an official COCO category id')
    index = ids.index(category_id)
    return class_kind(index), class_colour(index, len(ids))


def categories_json() -> List[dict]:
    """The ``categories`` list of a COCO annotation file."""
    return [{'supercategory': s, 'id': i, 'name': n} for i, n, s in COCO_CATEGORIES]


def _disjoint(box, boxes, margin=2):
    x, y, w, h = box
    for bx, by, bw, bh in boxes:
        if (x < bx + bw + margin and bx < x + w + margin and y < by + bh + margin
                and by < y + h + margin):
            return False
    return True


def draw_objects(size: Size, category_ids: Sequence[int], rng: np.random.Generator,
                 max_objects: int = 3, max_tries: int = 20) -> Tuple[np.ndarray, List[dict]]:
    """Draw 1..``max_objects`` non-overlapping objects on a noisy background.

    Returns:
        tuple: ``(image (H, W, 3) uint8, objects)`` with one dict per drawn object holding
        ``category_id``, ``vertices`` (N, 2), ``mask`` (H, W) bool and ``bbox`` [x, y, w, h].
    """
    w, h = size
    image = noise_background(size, rng)
    objects = []
    for _ in range(int(rng.integers(1, max_objects + 1))):
        for _ in range(max_tries):
            category_id = int(rng.choice(category_ids))
            kind, colour = category_style(category_id)
            radius = rng.uniform(0.12, 0.25) * min(w, h)
            centre = (rng.uniform(radius + 1,
                                  w - radius - 1), rng.uniform(radius + 1, h - radius - 1))
            vertices = polygon(kind, centre, radius)
            mask = polygon_mask(vertices, size)
            bbox = mask_bbox(mask)
            if _disjoint(bbox, [o['bbox'] for o in objects]):
                image = paint(image, mask, colour)
                objects.append(
                    dict(category_id=category_id, vertices=vertices, mask=mask, bbox=bbox))
                break
    return image, objects


def _annotation(obj, image_id, ann_id):
    return {
        'segmentation': [[round(float(v), 2) for v in obj['vertices'].reshape(-1)]],
        'area': float(obj['mask'].sum()),
        'iscrowd': 0,
        'image_id': image_id,
        'bbox': [float(v) for v in obj['bbox']],
        'category_id': obj['category_id'],
        'id': ann_id,
    }


def write_coco_split(root: str, split: str, image_ids: Iterable[int], size: Size,
                     rng: np.random.Generator, category_ids: Sequence[int]) -> dict:
    """Write the images of one split and its annotation file; return the annotation dict."""
    w, h = size
    os.makedirs(osp.join(root, split), exist_ok=True)
    images, annotations = [], []
    for image_id in image_ids:
        file_name = f'{image_id:012d}.jpg'
        image, objects = draw_objects(size, category_ids, rng)
        save_jpeg(image, osp.join(root, split, file_name))
        images.append({
            'license': 1,
            'file_name': file_name,
            'coco_url': '',
            'height': h,
            'width': w,
            'date_captured': '2017-01-01 00:00:00',
            'flickr_url': '',
            'id': image_id
        })
        for k, obj in enumerate(objects):
            # unique across splits: at most 3 objects per image
            annotations.append(_annotation(obj, image_id, ann_id=image_id * 10 + k))
    data = {
        'info': {
            'description': 'tiny COCO-format detection data of drawn shapes',
            'version': '1.0',
            'year': 2017,
            'contributor': 'mmstiff',
            'date_created': '2017/01/01',
            'url': ''
        },
        'licenses': [{
            'url': '',
            'id': 1,
            'name': 'generated'
        }],
        'images': images,
        'annotations': annotations,
        'categories': categories_json(),
    }
    os.makedirs(osp.join(root, 'annotations'), exist_ok=True)
    with open(osp.join(root, 'annotations', f'instances_{split}.json'), 'w') as f:
        json.dump(data, f)
    return data


def write_coco(root: str, num_train: int = 4, num_val: int = 2, size: Size = (128, 96),
               seed: int = 0, category_ids: Optional[Sequence[int]] = None) -> str:
    """Write tiny COCO 2017 detection data under ``root``; return ``root``.

    Args:
        root (str): folder to write into; created if missing.
        num_train (int): images in ``train2017``.
        num_val (int): images in ``val2017``.
        size (tuple): ``(W, H)`` of every image; both at least 32 (mmdet's COCO configs drop
            smaller images).
        seed (int): seed of every random choice; equal seeds write equal files.
        category_ids (sequence, optional): official category ids objects are drawn from
            (default: all 80).

    Returns:
        str: ``root``.
    """
    for name, value in (('num_train', num_train), ('num_val', num_val)):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f'{name}={value!r} is invalid; expected a positive int')
    size = check_size(size, minimum=MIN_SIDE)
    if category_ids is None:
        category_ids = [c[0] for c in COCO_CATEGORIES]
    for category_id in category_ids:
        category_style(category_id)
    rng = np.random.default_rng(seed)
    write_coco_split(root, 'train2017', range(1, num_train + 1), size, rng, category_ids)
    write_coco_split(root, 'val2017', range(num_train + 1, num_train + num_val + 1), size, rng,
                     category_ids)
    return root
