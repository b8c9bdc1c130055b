"""Let MMEngine read ``_base_ = 'mmstiff::FOLDER/CONFIG.py'`` from any config.

Importing mmstiff teaches MMEngine's ``Config`` the ``mmstiff::`` prefix and a lookup of
``mmpretrain::`` / ``mmdet::`` bases that needs no ``pkg_resources`` (docs/design.md,
"Config bases").
"""
import os.path as osp
from typing import List, Tuple

PREFIX = 'mmstiff::'


def config_dirs() -> List[str]:
    """Where ``mmstiff::`` configs are looked up, in order: the ``.mim/configs`` an install
    puts beside the package, then the ``configs/`` of a checkout."""
    package = osp.dirname(osp.abspath(__file__))
    return [osp.join(package, '.mim', 'configs'), osp.join(osp.dirname(package), 'configs')]


def resolve_config(cfg_path: str) -> str:
    """The file ``'mmstiff::REL'`` stands for.

    Raises:
        FileNotFoundError: no folder of :func:`config_dirs` holds ``REL``.
    """
    rel = cfg_path[len(PREFIX):]
    for folder in config_dirs():
        if osp.isdir(folder):
            path = osp.join(folder, rel)
            if osp.isfile(path):
                return path
            raise FileNotFoundError(f'{cfg_path!r} is not an mmstiff config: {path} does not '
                                    'exist; expected a path under configs/, e.g. '
                                    "'mmstiff::stepnet/resnet50-stepnet_8xb32-120e_in1k.py'")
    raise FileNotFoundError(f'{cfg_path!r}: this mmstiff has no configs folder (looked in '
                            f'{config_dirs()}); reinstall it with pip or mim')


def resolve_upstream_config(cfg_path: str) -> Tuple[str, str]:
    """``(path, scope)`` of ``'pkg::REL'`` (mmpretrain, mmdet, ...) found as MMEngine finds it,
    ``.mim/configs/REL`` of the installed package, but through importlib."""
    import importlib.util
    module, rel = cfg_path.split('::', 1)
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f'{module} is not installed, please install {module} manually',
                                  name=module)
    path = osp.join(osp.dirname(spec.origin), '.mim', 'configs', rel)
    if not osp.isfile(path):
        raise FileNotFoundError(f'{cfg_path!r}: {path} does not exist')
    return path, module


def register_config_package() -> None:
    """Make ``Config`` resolve ``mmstiff::`` bases (idempotent)."""
    try:
        from mmengine.config import Config
    except ImportError:  # no MMEngine, no configs to read
        return
    upstream = Config._get_cfg_path
    if getattr(upstream, 'resolves', None) == PREFIX:
        return

    def _get_cfg_path(cfg_path, filename):
        if cfg_path.startswith(PREFIX):
            return resolve_config(cfg_path), None
        try:
            return upstream(cfg_path, filename)
        except ModuleNotFoundError as e:  # setuptools >= 82: no pkg_resources
            if e.name != 'pkg_resources' or '::' not in cfg_path:
                raise
            return resolve_upstream_config(cfg_path)

    _get_cfg_path.resolves = PREFIX
    Config._get_cfg_path = staticmethod(_get_cfg_path)
