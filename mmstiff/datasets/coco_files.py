"""Whether the image files a COCO annotation file lists are on disk: one ``stat`` per file.

Shared by ``mmstiff.CocoDataset`` (after it loads) and the tools' pre-flight check of any
COCO-style dataset a config names (:mod:`mmstiff.datasets.preflight`). A ``stat`` reads the
folder entry only, never the image, so the check's time grows with the number of files, not
with their sizes (its time on a COCO-sized split: docs/reliability.md). A file that exists but
is not a readable image still fails when it is read.
"""
import os
from typing import Iterable, List, Tuple

from .coco_boxes import EXAMPLES


def image_file_problems(paths: Iterable[str]) -> Tuple[List[str], List[str]]:
    """``(missing, empty)``: the paths of ``paths`` that are not on disk, and those of 0 bytes."""
    missing, empty = [], []
    for path in paths:
        try:
            if os.stat(path).st_size == 0:
                empty.append(path)
        except OSError:
            missing.append(path)
    return missing, empty


def check_image_files(paths: Iterable[str], ann_file: str,
                      skip_hint: str = 'check_files=False to skip this check') -> None:
    """Every path of ``paths`` (the image files ``ann_file`` lists) is a non-empty file.

    Raises:
        ValueError: naming ``ann_file``, how many image files are missing or empty, the first
            :data:`EXAMPLES` of each, and ``skip_hint`` (how to skip the check).
    """
    paths = list(paths)
    missing, empty = image_file_problems(paths)
    problems = []
    if missing:
        problems.append(f'{len(missing)} missing (e.g. {", ".join(missing[:EXAMPLES])})')
    if empty:
        problems.append(f'{len(empty)} empty (e.g. {", ".join(empty[:EXAMPLES])})')
    if problems:
        raise ValueError(f'{ann_file}: of the {len(paths)} image files it lists, '
                         f'{"; ".join(problems)}; expected every image in the image folder '
                         f'(check data_root and data_prefix.img), or {skip_hint}')
