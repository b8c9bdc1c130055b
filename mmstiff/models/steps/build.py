"""An adaptor built from a config: checked once per backbone, then one module per block.

A backbone resolves its ``adaptor`` config once (:func:`resolve_adaptor`), fills in its own norm
(:func:`adaptor_with_norm`) and builds one adaptor per chosen block with that block's channels
and layout (:func:`build_adaptor`; docs/design.md, "The step-size adaptor contract").
"""
from typing import Optional

from mmstiff.registry import MODELS
from mmstiff.utils.checks import check_config
from .base import StepAdaptor

#: keys of an adaptor config that the backbone fills in for each block.
BUILD_KEYS = ('channels', 'layout')


def resolve_adaptor(adaptor: Optional[dict], name: str = 'adaptor') -> Optional[dict]:
    """Check an adaptor config at build time; return it with ``type`` resolved to a class.

    The config is None (no adaptor) or a dict with a ``'type'`` that names a registered
    :class:`StepAdaptor` (or is one), without ``channels`` or ``layout``: the backbone fills
    those in for each block. Resolving the class here, in mmstiff's registry, makes the build
    independent of the runner's default scope (mmpretrain or mmdet), and makes an unknown type
    fail before any layer is built.

    Args:
        adaptor (dict | None): the config.
        name (str): the field, for the messages (``'adaptor'``, ``'msa_adaptor'``, ...).

    Returns:
        dict | None: a copy of the config with ``type`` a :class:`StepAdaptor` class.

    Raises:
        ValueError: naming the field, the bad value and what was expected.
    """
    adaptor = check_config(name, adaptor, reserved=BUILD_KEYS,
                           example="dict(type='mmstiff.StepNetAdaptor')")
    if adaptor is None:
        return None
    adaptor_type = adaptor['type']
    cls = adaptor_type if isinstance(adaptor_type, type) else MODELS.get(adaptor_type)
    if cls is None:
        raise ValueError(f'{name} type {adaptor_type!r} is not registered; expected a '
                         "step-size adaptor such as 'mmstiff.StepNetAdaptor', "
                         "'mmstiff.SEAdaptor' or 'mmstiff.ConstantStep'")
    if not (isinstance(cls, type) and issubclass(cls, StepAdaptor)):
        raise ValueError(f'{name} type {adaptor_type!r} builds {cls!r}, which is not a '
                         'StepAdaptor (a module (x_t, f) -> Δ_t)')
    adaptor['type'] = cls
    return adaptor


def adaptor_with_norm(adaptor: Optional[dict], norm_cfg: Optional[dict],
                      adaptor_norm_cfg: Optional[dict] = None) -> Optional[dict]:
    """The adaptor config a backbone builds: ``norm_cfg`` filled in for an adaptor type that
    takes one (:attr:`StepAdaptor.takes_norm_cfg`) and whose config does not set it.

    Args:
        adaptor (dict | None): a config checked by :func:`resolve_adaptor`.
        norm_cfg (dict): the backbone's ``norm_cfg``, the default.
        adaptor_norm_cfg (dict, optional): the backbone's explicit override for the adaptors.

    Returns:
        dict | None: the config to build.

    Raises:
        ValueError: when both the adaptor config and ``adaptor_norm_cfg`` set the norm.
    """
    if adaptor is None or not adaptor['type'].takes_norm_cfg:
        return adaptor
    if 'norm_cfg' in adaptor:
        if adaptor_norm_cfg is not None:
            raise ValueError(f"adaptor.norm_cfg={adaptor['norm_cfg']!r} and adaptor_norm_cfg="
                             f'{adaptor_norm_cfg!r} both set the adaptors\' norm; expected one')
        return adaptor
    chosen = norm_cfg if adaptor_norm_cfg is None else adaptor_norm_cfg
    return adaptor if chosen is None else dict(adaptor, norm_cfg=dict(chosen))


def build_adaptor(adaptor: Optional[dict], channels: int, layout: str) -> Optional[StepAdaptor]:
    """One adaptor module from a config checked by :func:`resolve_adaptor` (None: None)."""
    if adaptor is None:
        return None
    return MODELS.build(dict(adaptor, channels=channels, layout=layout))
