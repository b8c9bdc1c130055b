"""mmdet's ``CocoDataset`` that reports the boxes it drops and fails when none is left.

mmdet's ``CocoDataset.parse_data_info`` skips, without a word, every box whose width or height
is below one pixel or whose ``area`` is not positive, every box outside its image and every box
of a category the dataset does not list. ``mmstiff.CocoDataset`` (same arguments) loads
exactly what mmdet loads, then

* warns once with the number of boxes dropped for each reason, the annotation file and an
  example annotation id of each;
* raises ``ValueError`` naming the annotation file when the file has boxes but none of them is
  kept, or (outside ``test_mode``) when it has none at all: training would start on images
  without a single object;
* warns with the number of annotations that refer to an image id the file does not list (mmdet
  never reads them);
* raises ``ValueError`` naming the file when it lists no image, and when ``filter_cfg`` drops
  every image (mmdet's ``filter_empty_gt``, ``min_size``), with the count for each reason,
  instead of MMEngine's "need at least one array to concatenate"; images it drops while others
  remain are reported in a warning;
* with ``check_files=True`` (default) raises ``ValueError`` before training when image files
  the annotations list are missing from the image folder or empty, naming how many and the
  first ones (instead of a ``FileNotFoundError`` or ``cv2.error`` traceback at the first
  batch). This costs one ``stat`` per image; ``check_files=False`` skips it.

Boxes mmdet skips on purpose (``ignore=True``) are neither counted nor reported. Use it in
configs as ``type='mmstiff.CocoDataset'``; it imports mmdet, and is registered through
:mod:`mmstiff.datasets.lazy_coco` so that ``mmstiff.datasets`` does not.
"""
import logging
from collections import Counter
from typing import List, Union

from mmdet.datasets import CocoDataset as _UpstreamCocoDataset
from mmengine.logging import print_log

from mmstiff.registry import DATASETS
from .coco_boxes import NO_BOX, SMALL, box_drop_reason
from .coco_files import check_image_files


@DATASETS.register_module(force=True)  # takes the name over from the lazy placeholder
class CocoDataset(_UpstreamCocoDataset):
    """mmdet's ``CocoDataset`` that reports dropped boxes and fails without boxes (module
    docstring). After loading, ``dropped_boxes`` maps each reason to its count and
    ``dropped_images`` each reason ``filter_data`` dropped images for to its count.

    Args:
        check_files (bool): check that every image file exists and is not empty before
            training. Default True.
        *args, **kwargs: mmdet's ``CocoDataset`` arguments.
    """

    def __init__(self, *args, check_files: bool = True, **kwargs):
        self.check_files = check_files
        super().__init__(*args, **kwargs)

    def load_data_list(self) -> List[dict]:
        self.dropped_boxes = Counter()
        self._dropped_examples = {}
        self._num_boxes = 0
        self._unknown_image_anns = None
        data_list = super().load_data_list()
        if not data_list:
            raise ValueError(f'{self.ann_file}: lists no image; expected an "images" list of '
                             'at least one image')
        self._report_unknown_images()
        kept = sum(len(info['instances']) for info in data_list)
        if self.dropped_boxes:
            counts = '; '.join(f'{n} with {reason} (e.g. annotation id '
                               f'{self._dropped_examples[reason]})'
                               for reason, n in self.dropped_boxes.most_common())
            print_log(
                f'{self.ann_file}: dropped {sum(self.dropped_boxes.values())} of '
                f'{self._num_boxes} boxes: {counts}', logger='current', level=logging.WARNING)
        if kept == 0 and (self._num_boxes or not self.test_mode):
            raise ValueError(
                f'{self.ann_file}: no box is left of the {self._num_boxes} in the file '
                f'({dict(self.dropped_boxes) or "it has none"}); expected at least one box '
                'of a listed category, inside its image and at least 1 x 1 pixel')
        return data_list

    def _report_unknown_images(self):
        unknown = self._unknown_image_anns or []
        if unknown:
            print_log(
                f'{self.ann_file}: {len(unknown)} annotation(s) refer to an image id the '
                f'file does not list (e.g. annotation id {unknown[0]["id"]}, image id '
                f'{unknown[0]["image_id"]}); they are not used', logger='current',
                level=logging.WARNING)

    def filter_data(self) -> List[dict]:
        """mmdet's filter, reporting the images it drops and failing when none is left."""
        kept = super().filter_data()
        self.dropped_images = Counter()
        if not self.test_mode:
            min_size = self.filter_cfg.get('min_size', 0) if self.filter_cfg else 0
            kept_ids = {info['img_id'] for info in kept}
            for info in self.data_list:
                if info['img_id'] not in kept_ids:
                    small = min(info['width'], info['height']) < min_size
                    self.dropped_images[SMALL if small else NO_BOX] += 1
        if self.dropped_images:
            counts = dict(self.dropped_images)
            if not kept:
                raise ValueError(f'{self.ann_file}: filter_cfg={self.filter_cfg!r} drops every '
                                 f'one of the {len(self.data_list)} images ({counts}); '
                                 'expected at least one image left to train on')
            print_log(
                f'{self.ann_file}: filter_cfg dropped {sum(counts.values())} of '
                f'{len(self.data_list)} images: {counts}', logger='current', level=logging.WARNING)
        if self.check_files:
            check_image_files([info['img_path'] for info in kept], self.ann_file)
        return kept

    def parse_data_info(self, raw_data_info: dict) -> Union[dict, List[dict]]:
        if self._unknown_image_anns is None:  # self.coco exists while mmdet parses
            listed = set(self.coco.imgs)
            self._unknown_image_anns = [
                ann for ann in self.coco.dataset.get('annotations', [])
                if ann.get('image_id') not in listed
            ]
        img_info = raw_data_info['raw_img_info']
        for ann in raw_data_info['raw_ann_info']:
            self._num_boxes += not ann.get('ignore', False)
            reason = box_drop_reason(ann, img_info, self.cat_ids)
            if reason is not None:
                self.dropped_boxes[reason] += 1
                self._dropped_examples.setdefault(reason, ann.get('id'))
        return super().parse_data_info(raw_data_info)
