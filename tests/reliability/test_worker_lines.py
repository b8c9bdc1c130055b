"""An exception of a DataLoader worker, raised again by PyTorch in the main process, ends in the
line the same exception ends in without workers (mmstiff.tool_main.failure_line), and a bug in a
worker keeps its traceback.

The worker's side is PyTorch's own: ``torch._utils.ExceptionWrapper`` formats the exception
where it was raised and ``reraise`` raises its class again with that text, as the DataLoader
does. The exceptions are raised from real ``raise`` statements of mmstiff (file and line).
"""
import errno
import os
import os.path as osp

import pytest
from error_paths import raise_sites
from torch._utils import ExceptionWrapper

from mmstiff.datasets.preflight import DataCheckError
from mmstiff.tool_main import failure_line

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def site_of(path, cls):
    return next(s for s in raise_sites() if s['path'] == path and s['cls'] == cls)


def raise_at(site, exc):
    """Raise ``exc`` from the file and line of ``site`` (its code compiled at that position)."""
    code = compile('\n' * (site['line'] - 1) + 'raise _exc', osp.join(REPO, site['path']), 'exec')
    exec(code, {'_exc': exc})


def through_a_worker(raise_it, worker=3):
    """The exception the main process gets when ``raise_it()`` raises in worker ``worker``."""
    try:
        raise_it()
    except Exception:
        wrapper = ExceptionWrapper(where=f'in DataLoader worker process {worker}')
    try:
        wrapper.reraise()
    except Exception as exc:
        return exc
    raise AssertionError('reraise did not raise')


def direct(raise_it):
    try:
        raise_it()
    except Exception as exc:
        return exc


@pytest.mark.parametrize('path, cls', [('mmstiff/datasets/preflight.py', ValueError),
                                       ('mmstiff/datasets/preflight.py', FileNotFoundError),
                                       ('mmstiff/apis/runtime.py', KeyError)])
def test_a_mistake_raised_in_a_worker_is_the_line_it_is_without_workers(path, cls):
    site = site_of(path, 'ValueError')  # a raise statement of mmstiff (KeyError: its quotes)
    message = f'bad value at {path} line {site["line"]}: expected another one'

    def raise_it():
        raise_at(site, cls(message))

    wrapped = through_a_worker(raise_it)
    assert 'in DataLoader worker process 3' in str(wrapped)  # PyTorch's wrapper
    assert failure_line(wrapped) == failure_line(direct(raise_it)) == f'error: {message}'


def test_an_mmstiff_error_class_and_a_chain_are_unwrapped():

    def data_error():
        raise DataCheckError('train_dataloader.dataset: x.json: lists no image')

    assert failure_line(through_a_worker(data_error)) == \
        'error: train_dataloader.dataset: x.json: lists no image'

    site = site_of('mmstiff/datasets/preflight.py', 'ValueError')

    def raised_from():
        try:
            raise_at(site, ValueError('the planted mistake'))
        except ValueError as err:
            raise RuntimeError('while loading item 7') from err

    wrapped = through_a_worker(raised_from)
    assert isinstance(wrapped, RuntimeError)
    assert failure_line(wrapped) == failure_line(direct(raised_from)) == \
        'error: the planted mistake'


def test_a_bug_in_a_worker_keeps_its_traceback():

    def bug():
        return {}['missing key']  # no raise statement of mmstiff

    def foreign_raise():
        raise ValueError('raised by a file outside mmstiff')

    def handled_badly():
        try:
            bug()
        except KeyError:
            raise TypeError('another failure while handling it')

    for raise_it in (bug, foreign_raise, handled_badly):
        assert failure_line(through_a_worker(raise_it)) is None
        assert failure_line(direct(raise_it)) is None


def test_an_image_mmcv_cannot_decode_is_one_line():
    path = '/data/coco/train2017/000000000009.jpg'

    def mmcv_load():
        assert None is not None, f'failed to load image: {path}'

    for exc in (direct(mmcv_load), through_a_worker(mmcv_load)):
        line = failure_line(exc)
        assert line.startswith(f'error: image file {path} could not be read as an image')


def test_a_file_the_machine_refuses_is_one_line_naming_it():
    from mmstiff.tool_main import io_line

    def full(path):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    line = failure_line(direct(lambda: full('/out/spectrum.png')))
    assert line == ('error: could not write /out/spectrum.png: No space left on device (ENOSPC); '
                    'the files written before it are intact')

    def denied():
        try:
            open('/root-only/metrics.json', 'w')
        except FileNotFoundError as err:  # no such folder here: raise what a chmod 0 gives
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), err.filename) from None

    assert failure_line(direct(denied)) == ('error: no permission for /root-only/metrics.json: '
                                            'Permission denied (EACCES); the files written '
                                            'before it are intact')
    # what the kernel says without a file name, and errors that are no refusal
    line = io_line(OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)))
    assert line.startswith('error: could not write a file: Disk quota exceeded (EDQUOT)')
    assert io_line(OSError(errno.EIO, os.strerror(errno.EIO), 'x')) is None
    assert failure_line(direct(lambda: open('/no/such/file'))) is None  # FileNotFoundError: a bug
