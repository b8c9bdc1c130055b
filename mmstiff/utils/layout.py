"""Where the channels of a state are, and global average pooling over the other axes.

A state of the trajectory is either CNN feature maps, layout ``'nchw'`` ``(B, C, H, W)``, or
transformer tokens, layout ``'nlc'`` ``(B, N, C)``. Pooling over the non-channel axes (the DC
component of the state) is the one reduction the step-size adaptors (SE's ``GAP(f)``, StepNet's
``GAP(x_t)``) and the frequency diagnostics (``DC[X]``) share: :func:`pool_state`.
"""
import torch

LAYOUTS = ('nchw', 'nlc')
#: the axes a state of each layout is pooled over.
POOLED_AXES = {'nchw': (2, 3), 'nlc': (1, )}


def check_layout(layout: str) -> str:
    """``layout`` if it is one of :data:`LAYOUTS`; else ``ValueError`` naming it."""
    if layout not in LAYOUTS:
        raise ValueError(f'layout={layout!r} is not supported; expected one of {LAYOUTS}')
    return layout


def infer_layout(x: torch.Tensor) -> str:
    """``'nchw'`` for a 4-D tensor, ``'nlc'`` for a 3-D one."""
    if not torch.is_tensor(x):
        raise ValueError(f'x must be a torch.Tensor, got {type(x).__name__}')
    if x.dim() == 4:
        return 'nchw'
    if x.dim() == 3:
        return 'nlc'
    raise ValueError(f'x has shape {tuple(x.shape)}; expected (B, C, H, W) feature maps or '
                     '(B, N, C) tokens')


def pool_state(x: torch.Tensor, layout: str, keepdim: bool = True) -> torch.Tensor:
    """Global average pooling of a state over its non-channel axes.

    Args:
        x (Tensor): ``(B, C, H, W)`` for ``'nchw'``, ``(B, N, C)`` for ``'nlc'``.
        layout (str): ``'nchw'`` or ``'nlc'``.
        keepdim (bool): keep the pooled axes, broadcastable against ``x`` (``(B, C, 1, 1)``,
            ``(B, 1, C)``); False gives ``(B, C)``.

    Computed as a sum times 1/N: the value of the mean, but its backward is a broadcast view
    of the small pooled gradient instead of a full-size division, which saves one pass over
    the state per pooled tensor in training. float16 keeps the mean, whose intermediate cannot
    overflow.
    """
    dims = POOLED_AXES[check_layout(layout)]
    if x.dtype == torch.float16:
        return x.mean(dim=dims, keepdim=keepdim)
    count = 1
    for dim in dims:
        count *= x.shape[dim]
    return x.sum(dim=dims, keepdim=keepdim) * (1.0 / count)
