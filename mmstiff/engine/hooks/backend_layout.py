"""One chart per quantity in TensorBoard: the custom-scalars layout of the per-step keys.

The diagnostics hooks log one scalar per step and quantity (``stiffness/nsi/layer1.0``, ...):
hundreds of names on a deep network. TensorBoard's scalars tab draws one chart per name; its
custom-scalars tab draws the charts a layout names, each with every name its regular expression
matches. :func:`group_per_step_keys` gives each ``TensorboardVisBackend`` of the visualizer a
layout with one multi-line chart per quantity (``stiffness/nsi``: every step's NSI in one chart),
grouped by hook (``stiffness``, ``freq``), and writes it again when a later row brings a new
quantity (docs/diagnostics.md, "Visualizer backends").
"""
import re
import weakref
from collections import OrderedDict
from typing import Any, Dict, Iterable, List

#: backend -> the quantities its layout has
_WRITTEN = weakref.WeakKeyDictionary()


def quantity_of(name: str) -> str:
    """The quantity of a logged name: its first two components (``stiffness/nsi`` of
    ``stiffness/nsi/layer1.0``), or the name itself when it has fewer."""
    parts = name.split('/')
    return '/'.join(parts[:2]) if len(parts) > 2 else name


def custom_scalars_layout(quantities: Iterable[str]) -> Dict[str, Dict[str, List]]:
    """TensorBoard's custom-scalars layout (``SummaryWriter.add_custom_scalars``): per hook
    namespace, one ``Multiline`` chart per quantity matching ``^<quantity>/``."""
    layout = OrderedDict()
    for quantity in sorted(quantities):
        namespace = quantity.split('/')[0]
        charts = layout.setdefault(namespace, OrderedDict())
        charts[quantity] = ['Multiline', [f'^{re.escape(quantity)}/']]
    return layout


def _is_tensorboard(backend) -> bool:
    return any(cls.__name__ == 'TensorboardVisBackend' for cls in type(backend).__mro__)


def group_per_step_keys(visualizer: Any, names: Iterable[str]) -> None:
    """Give every ``TensorboardVisBackend`` of ``visualizer`` the layout of the per-step
    quantities among ``names`` and those it had (written only when a quantity is new)."""
    backends = getattr(visualizer, '_vis_backends', None)
    if not isinstance(backends, dict):
        return
    quantities = {quantity_of(n) for n in names if n.count('/') >= 2}
    if not quantities:
        return
    for backend in backends.values():
        if not _is_tensorboard(backend):
            continue
        known = _WRITTEN.setdefault(backend, set())
        if quantities <= known:
            continue
        known |= quantities
        writer = backend.experiment
        add = getattr(writer, 'add_custom_scalars', None)
        if callable(add):
            add(custom_scalars_layout(known))


__all__ = ['group_per_step_keys', 'custom_scalars_layout', 'quantity_of']
