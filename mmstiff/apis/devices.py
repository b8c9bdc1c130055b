"""The torch device a tool's ``--device`` names, checked before any work: a name that is not
a device, or one this machine does not have, raises :class:`~mmstiff.apis.runtime.ConfigError`
naming it."""
from typing import TYPE_CHECKING, Optional

from .runtime import ConfigError

if TYPE_CHECKING:
    import torch


def check_device(device: str) -> 'torch.device':
    """``device`` (``--device`` of tns.py, spectrum.py, freq_noise.py) as a ``torch.device``."""
    import torch
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"--device {device!r} is not a device; expected 'cpu', 'cuda' or "
                          "'cuda:N'") from None
    if parsed.type == 'cpu':
        return parsed
    if parsed.type != 'cuda':
        raise ConfigError(f"--device {device!r} is not supported; expected 'cpu', 'cuda' or "
                          "'cuda:N'")
    if not torch.cuda.is_available():
        raise ConfigError(f"--device {device!r}: CUDA is not available on this machine; use "
                          '--device cpu')
    if parsed.index is not None and parsed.index >= torch.cuda.device_count():
        raise ConfigError(f'--device {device!r}: this machine has '
                          f'{torch.cuda.device_count()} CUDA device(s), numbered from 0')
    return parsed


def default_device() -> str:
    """``'cuda'`` where CUDA is available, else ``'cpu'``: the device where ``--device`` is not
    given."""
    import torch
    return 'cuda' if torch.cuda.is_available() else 'cpu'


def resolve_device(text: Optional[str]) -> 'torch.device':
    """The device of the instruments' ``--device`` (hessian.py, loss_landscape.py,
    feature_variance.py): CUDA where present when ``text`` is None."""
    import torch
    text = text or default_device()
    try:
        device = torch.device(text)
    except RuntimeError as err:
        raise ConfigError(f'--device {text!r} is not a device ({err}); expected cpu or '
                          'cuda[:N]') from None
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise ConfigError(f'--device {text!r} asks for CUDA, which is not available here; '
                          'use --device cpu')
    return device
