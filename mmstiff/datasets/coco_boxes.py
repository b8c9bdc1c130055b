"""Which COCO boxes mmdet's ``CocoDataset`` drops, and why: pure functions of the annotation JSON.

Shared by ``mmstiff.CocoDataset`` (which counts what mmdet dropped while it loads) and the tools'
pre-flight check of any COCO-style dataset a config names (:mod:`mmstiff.datasets.preflight`),
which needs no mmdet to read the file.
"""
from typing import Collection, Optional

#: Why mmdet drops a box, in the order they are checked here.
SIZE = 'zero or negative size (width or height below 1 pixel, or area <= 0)'
OUTSIDE = 'outside its image'
CATEGORY = 'a category the dataset does not list'
#: Why ``filter_data`` drops an image.
NO_BOX = 'no box kept (filter_empty_gt)'
SMALL = 'smaller than min_size'
#: How many examples an error message names.
EXAMPLES = 3


def box_drop_reason(ann: dict, img_info: dict, cat_ids: Collection[int]) -> Optional[str]:
    """Why mmdet's ``CocoDataset`` drops the annotation ``ann`` (one of :data:`SIZE`,
    :data:`OUTSIDE`, :data:`CATEGORY`), or None when it keeps it or ignores it on purpose.

    Args:
        ann (dict): a COCO annotation (``bbox = [x, y, w, h]``, ``area``, ``category_id``).
        img_info (dict): its image (``width``, ``height``).
        cat_ids (Collection[int]): the category ids the dataset keeps.
    """
    if ann.get('ignore', False):
        return None
    x1, y1, w, h = ann['bbox']
    if ann['area'] <= 0 or w < 1 or h < 1:
        return SIZE
    inter_w = max(0, min(x1 + w, img_info['width']) - max(x1, 0))
    inter_h = max(0, min(y1 + h, img_info['height']) - max(y1, 0))
    if inter_w * inter_h == 0:
        return OUTSIDE
    if ann['category_id'] not in cat_ids:
        return CATEGORY
    return None
