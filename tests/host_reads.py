"""Checks that a block of code reads no tensor value back to the host: on a GPU each such read
makes the host wait until the device has run everything queued before it, so a read inside a
train step serialises the host's launches with the device's work. Importable from any test
folder (it sits beside the root conftest.py).

Two nets, because CPU tensors give no synchronisation to observe:

* :func:`no_host_reads` makes the Python-level reads raise (``.item()``, ``.tolist()``,
  ``.numpy()``, ``.cpu()``, ``float()``, ``int()``);
* :class:`HostReadOps` catches the ATen ops that hand a value to the host, whoever calls them
  (``bool(t)`` and ``if t:`` through ``is_nonzero``, C++ code calling ``item``, ops whose output
  shape depends on values, such as ``nonzero``).
"""
import contextlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode

#: the ``Tensor`` methods that read a value back to the host
READS = ('item', 'tolist', 'numpy', 'cpu', '__float__', '__int__')
#: ATen ops that read values back to the host (on CUDA each synchronises with the device)
READ_OPS = frozenset({
    'aten::_local_scalar_dense', 'aten::is_nonzero', 'aten::equal', 'aten::nonzero',
    'aten::masked_select', 'aten::unique', 'aten::_unique2', 'aten::allclose'
})


@contextlib.contextmanager
def no_host_reads(monkeypatch):
    """Every Python-level way of reading a tensor back to the host raises inside the block."""

    def refuse(name):

        def read(*args, **kwargs):
            raise AssertionError(f'Tensor.{name}() read a value back to the host')

        return read

    with monkeypatch.context() as patch:
        for name in READS:
            patch.setattr(torch.Tensor, name, refuse(name))
        yield


class HostReadOps(TorchDispatchMode):
    """Records the ATen ops of :data:`READ_OPS` dispatched inside it, in :attr:`reads`."""

    def __init__(self):
        super().__init__()
        self.reads = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._schema.name in READ_OPS:
            self.reads.append(func._schema.name)
        return func(*args, **(kwargs or {}))
