"""Unpickling dataset files that may hold numpy arrays and plain data, and nothing else.

The plain ``pickle`` module runs whatever a file asks for: a crafted ``test_batch`` whose
pickle calls ``os.system`` runs it while the dataset is built. The CIFAR "python version"
files hold only dicts, lists, strings, numbers and numpy ``uint8`` arrays, which need three
globals: numpy's array reconstruction function, ``numpy.ndarray`` and ``numpy.dtype`` (under
``numpy.core`` in files written with numpy 1, ``numpy._core`` with numpy 2). Files written by
Python 3 with pickle protocol 2 also spell ``bytes`` as ``_codecs.encode(text, 'latin1')``
(and ``b''`` as ``bytes()``). :class:`NumpyDataUnpickler` resolves exactly those, the last
two restricted to those very calls; any other global fails with :class:`UnsafePickleError`
naming it, before anything is called.
"""
import io
import pickle
from typing import Any, NoReturn

import numpy as np

from mmstiff.errors import MmstiffError

#: The array reconstruction function and scalar constructor, whatever numpy calls their module.
_RECONSTRUCT = np.ndarray.__reduce__(np.zeros(0))[0]
_SCALAR = np.float64(0).__reduce__()[0]


class UnsafePickleError(pickle.UnpicklingError, MmstiffError):
    """A pickle that refers to a global outside :data:`ALLOWED_GLOBALS`, or calls one of the
    restricted ones otherwise than plain data needs."""


def _latin1_bytes(text, encoding):
    """``_codecs.encode`` as protocol-2 pickles of ``bytes`` call it, and only so."""
    if not isinstance(text, str) or encoding != 'latin1':
        raise UnsafePickleError(f'it calls _codecs.encode with {type(text).__name__} and '
                                f"{encoding!r}; plain data only needs (str, 'latin1')")
    return text.encode('latin1')


def _empty_bytes(*args):
    """``bytes()`` as protocol-2 pickles of ``b''`` call it, and only so."""
    if args:
        raise UnsafePickleError(f'it calls bytes with arguments {args!r:.80}; plain data only '
                                "calls bytes() (for b'')")
    return b''


#: ``(module, name)`` a plain numpy pickle refers to -> the object it stands for.
ALLOWED_GLOBALS = {
    ('numpy', 'ndarray'): np.ndarray,
    ('numpy', 'dtype'): np.dtype,
    **{
        (f'{package}.multiarray', name): obj
        for package in ('numpy.core', 'numpy._core')
        for name, obj in (('_reconstruct', _RECONSTRUCT), ('scalar', _SCALAR))
    },
    ('_codecs', 'encode'): _latin1_bytes,
    ('__builtin__', 'bytes'): _empty_bytes,
    ('builtins', 'bytes'): _empty_bytes,
}


class NumpyDataUnpickler(pickle.Unpickler):
    """An unpickler that builds only plain data and numpy arrays, dtypes and scalars."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise UnsafePickleError(
                f'it refers to {module}.{name}, which is not numpy array data; only '
                f'{sorted(".".join(k) for k in ALLOWED_GLOBALS)} are allowed (unpickling it '
                'could run code)') from None

    def persistent_load(self, pid: Any) -> NoReturn:
        raise UnsafePickleError(f'it holds a persistent id {pid!r}; plain data has none')


def loads_numpy_data(data: bytes, encoding: str = 'latin1') -> Any:
    """Unpickle the bytes ``data`` with :class:`NumpyDataUnpickler`.

    Raises:
        UnsafePickleError: the pickle refers to anything but plain data and numpy arrays.
    """
    return NumpyDataUnpickler(io.BytesIO(data), encoding=encoding).load()
