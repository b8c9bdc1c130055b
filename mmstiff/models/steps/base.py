"""The step-size adaptor abstraction (docs/methods.md §0).

A residual block is one explicit-Euler step of an ODE,

    x_{t+1} = act(x_t + Δ_t ⊙ f(x_t)),

and a *step-size adaptor* is the module that computes Δ_t from the current state ``x_t`` and
the residual branch output ``f``. The plain ResNet (Δ ≡ 1), SE (Δ from f) and StepNet
(Δ from x_t and x_t + f) are all adaptors, so a backbone takes ``adaptor=dict(type=...)``.

Contract for every adaptor:

* ``forward(x_t, f)`` returns Δ_t, broadcastable against ``f`` (e.g. ``(B, C, 1, 1)`` for
  feature maps, ``(B, 1, C)`` for tokens, or a Python scalar for :class:`ConstantStep`).
  The block then computes ``x_t + Δ_t * f`` itself.
* Backbones build adaptors as ``MODELS.build(dict(cfg, channels=C, layout=...))``, so every
  adaptor's constructor accepts ``channels`` (the number of channels of ``f``) and ``layout``.
* ``layout`` says where the channels are: ``'nchw'`` (CNN feature maps, pooled over H, W) or
  ``'nlc'`` (transformer tokens, pooled over the token axis).
* The trajectory recorder of :mod:`mmstiff.analysis` reads a block's step size as the output
  of the :class:`StepAdaptor` submodule inside that block, so adaptors must be called exactly
  once per block forward and must not be shared between blocks.
"""
import torch
from mmengine.model import BaseModule

from mmstiff.analysis.blocks import register_step_type
from mmstiff.analysis.layout import check_layout
from mmstiff.registry import MODELS
from mmstiff.utils.checks import check_config

#: keys of an adaptor config that the backbone fills in for each block.
BUILD_KEYS = ('channels', 'layout')


@register_step_type
class StepAdaptor(BaseModule):
    """Base class of step-size adaptors ``(x_t, f) -> Δ_t``.

    Args:
        layout (str): ``'nchw'`` or ``'nlc'``; see the module docstring.
        init_cfg (dict, optional): MMEngine initialisation config.
    """

    def __init__(self, layout='nchw', init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        self.layout = check_layout(layout)

    def forward(self, x_t, f):  # pragma: no cover - abstract
        raise NotImplementedError


def resolve_adaptor(adaptor, name='adaptor'):
    """Check an adaptor config at build time; return it with ``type`` resolved to a class.

    The config is None (no adaptor) or a dict with a ``'type'`` that names a registered
    :class:`StepAdaptor` (or is one), without ``channels`` or ``layout``: the backbone fills
    those in for each block. Resolving the class here, in mmstiff's registry, makes the build
    independent of the runner's default scope (mmpretrain or mmdet), and makes an unknown type
    fail before any layer is built.

    Args:
        adaptor (dict | None): the config.
        name (str): the field, for the messages (``'adaptor'``, ``'msa_adaptor'``, ...).

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


def build_adaptor(adaptor, channels, layout):
    """One adaptor module from a config checked by :func:`resolve_adaptor` (None: None)."""
    if adaptor is None:
        return None
    return MODELS.build(dict(adaptor, channels=channels, layout=layout))


@MODELS.register_module()
class ConstantStep(StepAdaptor):
    """The plain residual step, Δ ≡ ``step`` (1.0: a standard ResNet block). No parameters.

    Args:
        step (float): the constant step size. Default 1.0.
        channels (int, optional): accepted for a uniform adaptor interface; unused.
        layout (str): ``'nchw'`` or ``'nlc'``.
    """

    def __init__(self, step=1.0, channels=None, layout='nchw', init_cfg=None):
        super().__init__(layout=layout, init_cfg=init_cfg)
        self.step = float(step)

    def forward(self, x_t, f):
        return self.step

    def extra_repr(self):
        return f'step={self.step}, layout={self.layout!r}'


def apply_step(x_t, step, f):
    """One Euler update ``x_t + Δ ⊙ f`` (without the activation), skipping the multiply for Δ ≡ 1."""
    if isinstance(step, float) and step == 1.0:
        return x_t + f
    return torch.addcmul(x_t, step, f) if torch.is_tensor(step) else x_t + step * f
