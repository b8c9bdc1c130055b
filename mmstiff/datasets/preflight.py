"""The tools' data checks of a config, run before the Runner builds anything.

For every dataset of the config's dataloaders (through ``ConcatDataset`` / ``RepeatDataset`` /
``ClassBalancedDataset`` wrappers), whatever class it names, upstream's or mmstiff's:

* a COCO-style dataset (mmdet's ``CocoDataset`` or a subclass, ``mmstiff.CocoDataset``): its
  annotation JSON is read and checked as ``mmstiff.CocoDataset`` checks it while it loads
  (:func:`check_coco_file`), and every image file the dataset will read is looked for on disk
  (one ``stat`` each, no decoding; :mod:`mmstiff.datasets.coco_files`);
* mmpretrain's ``MNIST`` / ``FashionMNIST`` (and mmstiff's): the IDX headers, sizes, label
  counts and label range of the split the dataset will read (the same checks as
  ``mmstiff.MNIST``); a ``split`` that disagrees with ``test_mode`` is an error for mmstiff's
  types and a warning for upstream's (mmpretrain reads the files by ``test_mode``);
* mmpretrain's ``CIFAR10`` / ``CIFAR100`` (and mmstiff's): every file of the split unpickled
  with the restricted unpickler and checked as ``mmstiff.CIFAR10`` checks it.

A failed check raises :class:`DataCheckError` naming the dataloader, the file and what is wrong;
for an upstream type the same line says which mmstiff type runs the checks while it loads.
Files the dataset would download (``download=True``) and files on remote storage are skipped.
``skip_data_checks=True`` in the config (``tools/train.py --skip-data-checks``) skips them all;
``skip_image_checks=True`` (``--skip-image-checks``) only the image files' (for huge datasets on
slow storage), and so does ``check_files=False`` of an ``mmstiff.CocoDataset``.
"""
import json
import os.path as osp
from collections import Counter
from typing import TYPE_CHECKING, Iterator, List, Optional, Sequence, Tuple, Union

from mmstiff.errors import MmstiffError
from .coco_boxes import CATEGORY, NO_BOX, SMALL, box_drop_reason
from .coco_files import check_image_files

if TYPE_CHECKING:
    from mmengine.config import Config

DATALOADERS = ('train_dataloader', 'val_dataloader', 'test_dataloader')
#: the config key that turns the checks off
SKIP_KEY = 'skip_data_checks'
#: the config key that turns off only the check that every image file is on disk
SKIP_IMAGES_KEY = 'skip_image_checks'
#: the mmstiff type that runs the same checks while it loads, per kind of dataset
CHECKED_TYPES = dict(coco='mmstiff.CocoDataset', idx='mmstiff.MNIST / mmstiff.FashionMNIST',
                     cifar='mmstiff.CIFAR10 / mmstiff.CIFAR100')


class DataCheckError(ValueError, MmstiffError):
    """A dataset file of the config fails its pre-flight check."""


def dataset_cfgs(cfg: Union['Config', dict],
                 fields: Sequence[str] = DATALOADERS) -> Iterator[Tuple[str, dict]]:
    """``(field, dataset config)`` of every dataset below the dataloaders ``fields`` of ``cfg``
    (``field``: the dotted path, ``train_dataloader.dataset.datasets.0``)."""

    def walk(node, path):
        if not isinstance(node, dict):
            return
        if 'dataset' in node or 'datasets' in node:  # a wrapper
            inner = node.get('dataset')
            if inner is not None:
                yield from walk(inner, f'{path}.dataset')
            for i, child in enumerate(node.get('datasets') or []):
                yield from walk(child, f'{path}.datasets.{i}')
            if 'type' not in node or inner is not None or node.get('datasets'):
                return
        yield path, node

    for field in fields:
        loader = cfg.get(field)
        if isinstance(loader, dict) and isinstance(loader.get('dataset'), dict):
            yield from walk(loader['dataset'], f'{field}.dataset')


def _resolve(type_name, scope):
    """The class a dataset ``type`` names in ``scope``'s registry (mmdet or mmpretrain), or
    None where it cannot be found here."""
    if not isinstance(type_name, str):
        return type_name if isinstance(type_name, type) else None
    if type_name.startswith('mmstiff.'):
        return None  # mmstiff's own types are told apart by name (the COCO one loads lazily)
    if '.' in type_name:
        scope, type_name = type_name.split('.', 1)
    try:
        if scope == 'mmdet':
            from mmdet.registry import DATASETS
        elif scope == 'mmpretrain':
            from mmpretrain.registry import DATASETS
        else:
            return None
        return DATASETS.get(type_name)
    except Exception:  # a scope that does not import here: the Runner's build says so
        return None


def kind_of(dataset: dict, scope: Optional[str]) -> Tuple[Optional[str], bool]:
    """``(kind, upstream)``: which checks apply to the dataset config (``'coco'``, ``'idx'``,
    ``'cifar'`` or None) and whether it names an upstream class (not mmstiff's)."""
    type_name = dataset.get('type')
    if isinstance(type_name, str) and type_name.startswith('mmstiff.'):
        name = type_name[len('mmstiff.'):]
        kind = {
            'CocoDataset': 'coco',
            'MNIST': 'idx',
            'FashionMNIST': 'idx',
            'CIFAR10': 'cifar',
            'CIFAR100': 'cifar'
        }.get(name)
        return kind, False
    cls = _resolve(type_name, scope)
    if cls is None:
        return None, True
    for kind, module, base in (('coco', 'mmdet.datasets',
                                'CocoDataset'), ('idx', 'mmpretrain.datasets', 'MNIST'),
                               ('cifar', 'mmpretrain.datasets', 'CIFAR10')):
        upstream = _upstream_class(module, base)
        if upstream is not None and issubclass(cls, upstream):
            return kind, not cls.__module__.startswith('mmstiff.')
    return None, True


def _upstream_class(module, name):
    try:
        import importlib
        return getattr(importlib.import_module(module), name)
    except Exception:
        return None


def _join(root, path):
    if not path or osp.isabs(path) or '://' in str(path):
        return path
    return osp.join(root, path) if root else path


def _classes(dataset, cls_name, module):
    metainfo = dataset.get('metainfo') or {}
    if metainfo.get('classes'):
        return tuple(metainfo['classes'])
    cls = _upstream_class(module, cls_name)
    return tuple((getattr(cls, 'METAINFO', None) or {}).get('classes') or ())


# ------------------------------------------------------------------ COCO
def _load_json(path):
    if not osp.isfile(path):
        raise FileNotFoundError(f'{path} does not exist; expected a COCO annotation file '
                                '(check data_root and ann_file)')
    try:
        with open(path, 'rb') as f:
            return json.load(f)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f'{path} is not a JSON file ({exc}); expected a COCO annotation '
                         'file') from None


def check_coco_file(path: str, classes: Sequence[str], test_mode: bool = False,
                    filter_cfg: Optional[dict] = None) -> List[str]:
    """Check the COCO annotation file ``path`` as mmdet's ``CocoDataset`` would load it with the
    class names ``classes``; return the warning lines (boxes mmdet drops, annotations of unlisted
    images, images ``filter_cfg`` drops), or raise ``ValueError`` / ``FileNotFoundError``: a file
    that is not JSON, lists no image, lists no category of ``classes``, has no annotation
    (outside ``test_mode``), keeps no box, or whose ``filter_cfg`` drops every image."""
    return read_coco_file(path, classes, test_mode, filter_cfg)[0]


def read_coco_file(path: str, classes: Sequence[str], test_mode: bool = False,
                   filter_cfg: Optional[dict] = None) -> Tuple[List[str], List[dict]]:
    """:func:`check_coco_file`, returning ``(warning lines, images)``: the image entries of the
    file the dataset keeps (all of them in ``test_mode``; those ``filter_cfg`` keeps outside
    it), whose files it will read."""
    data = _load_json(path)
    if not isinstance(data, dict):
        raise ValueError(f'{path} holds a JSON {type(data).__name__}; expected a COCO object '
                         'with "images", "annotations" and "categories"')
    images = data.get('images') or []
    if not images:
        raise ValueError(f'{path}: lists no image; expected an "images" list of at least one '
                         'image')
    categories = data.get('categories') or []
    wanted = set(classes)
    cat_ids = {c['id'] for c in categories if c.get('name') in wanted}
    anns = data.get('annotations') or []
    if not cat_ids and (anns or not test_mode):
        names = [c.get('name') for c in categories]
        raise ValueError(
            f'{path}: none of its {len(categories)} categories ({", ".join(map(str, names[:8]))}'
            f'{", ..." if len(names) > 8 else ""}) is a class of the dataset '
            f'({", ".join(classes[:8])}{", ..." if len(classes) > 8 else ""}; '
            f'{len(classes)} classes), so every box would be dropped; expected '
            "metainfo=dict(classes=(...)) naming the file's categories")
    if not anns and not test_mode:
        raise ValueError(f'{path}: holds no annotation (0 boxes for {len(images)} images); '
                         'expected the boxes of the training images')
    by_id = {img['id']: img for img in images}
    dropped, examples, unknown, kept_per_image = Counter(), {}, [], Counter()
    for ann in anns:
        img = by_id.get(ann.get('image_id'))
        if img is None:
            unknown.append(ann)
            continue
        reason = box_drop_reason(ann, img, cat_ids)
        if reason is None:
            kept_per_image[ann['image_id']] += not ann.get('ignore', False)
        else:
            dropped[reason] += 1
            examples.setdefault(reason, ann.get('id'))
    boxes = sum(not ann.get('ignore', False) for ann in anns) - len(unknown)
    kept = sum(kept_per_image.values())
    if kept == 0 and (boxes or not test_mode):
        hint = (' (no annotation names a category of the dataset)'
                if dropped.get(CATEGORY) == boxes else '')
        raise ValueError(
            f'{path}: no box is left of the {boxes} in the file '
            f'({dict(dropped) or "it has none"}){hint}; expected at least one box of a listed '
            'category, inside its image and at least 1 x 1 pixel')
    warnings = []
    if dropped:
        counts = '; '.join(f'{n} with {reason} (e.g. annotation id {examples[reason]})'
                           for reason, n in dropped.most_common())
        warnings.append(f'{path}: mmdet drops {sum(dropped.values())} of {boxes} boxes: {counts}')
    if unknown:
        warnings.append(f'{path}: {len(unknown)} annotation(s) refer to an image id the file does '
                        f'not list (e.g. annotation id {unknown[0].get("id")}, image id '
                        f'{unknown[0].get("image_id")}); they are not used')
    if filter_cfg and not test_mode:
        more, images = _check_filter(path, images, kept_per_image, filter_cfg)
        warnings += more
    return warnings, images


def _check_filter(path, images, kept_per_image, filter_cfg):
    """``(warning lines, images kept)`` of mmdet's ``filter_data`` with ``filter_cfg``."""
    min_size = filter_cfg.get('min_size', 0) or 0
    empty_gt = filter_cfg.get('filter_empty_gt', False)
    dropped, kept = Counter(), []
    for img in images:
        if empty_gt and not kept_per_image.get(img['id']):
            dropped[NO_BOX] += 1
        elif min(img['width'], img['height']) < min_size:
            dropped[SMALL] += 1
        else:
            kept.append(img)
    if sum(dropped.values()) == len(images):
        raise ValueError(f'{path}: filter_cfg={dict(filter_cfg)!r} drops every one of the '
                         f'{len(images)} images ({dict(dropped)}); expected at least one image '
                         'left to train on')
    if dropped:
        return [
            f'{path}: filter_cfg drops {sum(dropped.values())} of {len(images)} images: '
            f'{dict(dropped)}'
        ], kept
    return [], kept


def _image_folder(dataset):
    """The folder mmdet joins each ``file_name`` to (``data_root`` + ``data_prefix.img``), or
    None where the images are not on a local disk (a URL, a non-local ``backend_args``)."""
    prefix = dataset.get('data_prefix') or {}
    if isinstance(prefix, dict):
        prefix = prefix.get('img', prefix.get('img_path', '')) or ''
    backend = (dataset.get('backend_args') or {}).get('backend', 'local')
    folder = _join(dataset.get('data_root') or '', prefix) or ''
    if '://' in str(folder) or backend != 'local':
        return None
    return folder


def _check_coco(dataset, images=True):
    """The checks of a COCO-style dataset: the annotation file, then (``images``) one ``stat``
    per image file the dataset will read."""
    root = dataset.get('data_root') or ''
    ann_file = _join(root, dataset.get('ann_file') or '')
    if not ann_file or '://' in ann_file:
        return []
    warnings, kept = read_coco_file(ann_file, _classes(dataset, 'CocoDataset', 'mmdet.datasets'),
                                    bool(dataset.get('test_mode', False)),
                                    dataset.get('filter_cfg'))
    folder = _image_folder(dataset)
    if images and folder is not None and dataset.get('check_files', True):
        check_image_files((osp.join(folder, img['file_name']) for img in kept), ann_file,
                          skip_hint=f'{SKIP_IMAGES_KEY}=True in the config (--skip-image-checks) '
                          'to skip this check')
    return warnings


# ------------------------------------------------------------------ MNIST, CIFAR
def _prefix_root(dataset):
    prefix = dataset.get('data_prefix') or ''
    if isinstance(prefix, dict):
        prefix = prefix.get('root', '')
    return _join(dataset.get('data_root') or '', prefix) or dataset.get('data_root') or ''


def _split(dataset, upstream):
    """``(split read, warnings)``: the files mmpretrain reads are chosen by ``test_mode``; a
    ``split`` that disagrees is an error for mmstiff's types (as they raise it) and a warning for
    upstream's (whose configs often leave ``test_mode`` unset)."""
    split = dataset.get('split', 'train')
    test_mode = bool(dataset.get('test_mode', False))
    read = 'test' if test_mode else 'train'
    if split not in ('train', 'test') or split == read:
        return read, []
    problem = (f'split={split!r} with test_mode={test_mode!r}: mmpretrain reads the files by '
               f"test_mode, so this {'would read' if not upstream else 'reads'} the "
               f"{'test' if test_mode else 'training'} files; expected "
               f"test_mode={split == 'test'} for split={split!r}")
    if not upstream:
        raise ValueError(problem)
    return read, [f'{problem} ({CHECKED_TYPES["idx"]} refuse this)']


def _check_idx(dataset, upstream):
    from .fashion_mnist import SPLIT_FILES
    from .mnist import check_idx_split
    root = _prefix_root(dataset)
    if '://' in root:
        return []
    split, warnings = _split(dataset, upstream)
    missing = [n for n in SPLIT_FILES[split] if not osp.isfile(osp.join(root, n))]
    if missing and dataset.get('download', True):
        return warnings  # mmpretrain downloads them
    classes = _classes(dataset, 'MNIST', 'mmpretrain.datasets')
    check_idx_split(root, split, num_classes=len(classes) or None)
    return warnings


def _check_cifar(dataset, cls_name):
    from mmpretrain import datasets

    from .cifar import check_cifar_batch, load_cifar_pickle
    upstream = getattr(datasets, 'CIFAR100' if '100' in cls_name else 'CIFAR10')
    root = _prefix_root(dataset)
    if '://' in root:
        return []
    split = dataset.get('split', 'test' if dataset.get('test_mode') else 'train')
    files = upstream.train_list if split == 'train' else upstream.test_list
    paths = [osp.join(root, upstream.base_folder, name) for name, _ in files]
    missing = [p for p in paths if not osp.isfile(p)]
    if missing:
        if dataset.get('download', cls_name.startswith('mmstiff.') is False):
            return []  # mmpretrain downloads them
        raise FileNotFoundError(f'missing {", ".join(missing)}; expected the CIFAR files of '
                                f'split {split!r} (download {upstream.url} and extract it into '
                                f'{root or "."}, or pass download=True)')
    label_key, num_classes = (('fine_labels', 100) if upstream.__name__ == 'CIFAR100' else
                              ('labels', 10))
    total = sum(check_cifar_batch(load_cifar_pickle(p), p, label_key, num_classes) for p in paths)
    if not total:
        raise ValueError(f"split {split!r} holds no image: {', '.join(paths)} have 0 rows of "
                         "'data'; expected at least one")
    return []


def check_dataset(field: str, dataset: dict, scope: Optional[str],
                  images: bool = True) -> List[str]:
    """Run the checks of one dataset config (module docstring); return its warning lines.
    ``images=False`` leaves out the check that every image file is on disk.

    Raises:
        DataCheckError: naming ``field``, the file and what is wrong.
    """
    kind, upstream = kind_of(dataset, scope)
    if kind is None:
        return []
    try:
        if kind == 'coco':
            return _check_coco(dataset, images)
        if kind == 'idx':
            return _check_idx(dataset, upstream)
        return _check_cifar(dataset, str(dataset.get('type')))
    except (ValueError, FileNotFoundError) as exc:
        text = exc.args[0] if exc.args else str(exc)
        hint = ''
        if upstream:
            hint = (f" ({field}.type={dataset.get('type')!r} does not check this; "
                    f'{CHECKED_TYPES[kind]}, same arguments, checks it while it loads)')
        raise DataCheckError(f'{field}: {text}{hint}. The data checks run before training; '
                             f'{SKIP_KEY}=True in the config skips them') from None


def check_data(cfg: Union['Config', dict], fields: Sequence[str] = DATALOADERS) -> List[str]:
    """Check every dataset of the dataloaders ``fields`` of ``cfg`` (module docstring), unless
    ``cfg.skip_data_checks``; the image files of COCO-style datasets unless
    ``cfg.skip_image_checks`` too. Return the warning lines (the caller logs them).

    Raises:
        DataCheckError: the first dataset that fails, naming its field and its file.
    """
    if cfg.get(SKIP_KEY, False):
        return []
    scope = cfg.get('default_scope')
    images = not cfg.get(SKIP_IMAGES_KEY, False)
    warnings = []
    for field, dataset in dataset_cfgs(cfg, fields):
        warnings += [f'{field}: {line}' for line in check_dataset(field, dataset, scope, images)]
    return warnings
