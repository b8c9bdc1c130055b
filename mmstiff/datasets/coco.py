"""mmdet's ``CocoDataset`` that reports the boxes it drops and fails when none is left.

mmdet's ``CocoDataset.parse_data_info`` skips, without a word, every box whose width or height
is below one pixel or whose ``area`` is not positive, every box outside its image and every box
of a category the dataset does not list. ``mmstiff.CocoDataset`` (same arguments) loads
exactly what mmdet loads, then

* warns once with the number of boxes dropped for each reason, the annotation file and an
  example annotation id of each;
* raises ``ValueError`` naming the annotation file when the file has boxes but none of them is
  kept, or (outside ``test_mode``) when it has none at all: training would start on images
  without a single object.

Boxes mmdet skips on purpose (``ignore=True``) are neither counted nor reported. Use it in
configs as ``type='mmstiff.CocoDataset'``; it imports mmdet, and is registered through
:mod:`mmstiff.datasets.lazy_coco` so that ``mmstiff.datasets`` does not.
"""
import logging
from collections import Counter

from mmdet.datasets import CocoDataset as _UpstreamCocoDataset
from mmengine.logging import print_log

from mmstiff.registry import DATASETS

#: Why mmdet drops a box, in the order they are checked here.
SIZE = 'zero or negative size (width or height below 1 pixel, or area <= 0)'
OUTSIDE = 'outside its image'
CATEGORY = 'a category the dataset does not list'


def box_drop_reason(ann, img_info, cat_ids):
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


@DATASETS.register_module(force=True)  # takes the name over from the lazy placeholder
class CocoDataset(_UpstreamCocoDataset):
    """mmdet's ``CocoDataset`` that reports dropped boxes and fails without boxes (module
    docstring). After loading, ``dropped_boxes`` maps each reason to its count."""

    def load_data_list(self):
        self.dropped_boxes = Counter()
        self._dropped_examples = {}
        self._num_boxes = 0
        data_list = super().load_data_list()
        kept = sum(len(info['instances']) for info in data_list)
        if self.dropped_boxes:
            counts = '; '.join(f'{n} with {reason} (e.g. annotation id '
                               f'{self._dropped_examples[reason]})'
                               for reason, n in self.dropped_boxes.most_common())
            print_log(f'{self.ann_file}: dropped {sum(self.dropped_boxes.values())} of '
                      f'{self._num_boxes} boxes: {counts}', logger='current',
                      level=logging.WARNING)
        if kept == 0 and (self._num_boxes or not self.test_mode):
            raise ValueError(
                f'{self.ann_file}: no box is left of the {self._num_boxes} in the file '
                f'({dict(self.dropped_boxes) or "it has none"}); expected at least one box '
                'of a listed category, inside its image and at least 1 x 1 pixel')
        return data_list

    def parse_data_info(self, raw_data_info):
        img_info = raw_data_info['raw_img_info']
        for ann in raw_data_info['raw_ann_info']:
            self._num_boxes += not ann.get('ignore', False)
            reason = box_drop_reason(ann, img_info, self.cat_ids)
            if reason is not None:
                self.dropped_boxes[reason] += 1
                self._dropped_examples.setdefault(reason, ann.get('id'))
        return super().parse_data_info(raw_data_info)
