"""One residual step called as a block with ``fused`` calls it, for the tests of the step
itself. Importable from any test folder (it sits beside the root conftest.py)."""
from mmstiff.models.steps import choose_step


def residual_update(x_t, f, adaptor, layout, fused, kernels=None, **kwargs):
    """``act(shortcut + Δ_t ⊙ f)`` through the step a block of ``layout`` with ``fused`` takes
    on ``x_t``'s device (on ``kernels`` where given and ``fused`` is not False); ``kwargs``
    are the step's (``act``, ``drop_path``, ``shortcut``, ``norm``, ``request``, ...)."""
    return choose_step(fused, x_t.device, kernels, layout)(x_t, f, adaptor, **kwargs)
