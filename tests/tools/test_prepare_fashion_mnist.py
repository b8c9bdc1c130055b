"""tools/prepare_fashion_mnist.py: unzip, verify, idempotence, and apt only when asked.

The logic is tested on generated gz files; the real Debian package is used only when it is
installed (and apt is never called: commands go to a recording fake).
"""
import gzip
import os
import os.path as osp
import shutil
import struct

import numpy as np
import pytest
from script_modules import load_script  # tests/

from mmstiff.datasets import fashion_mnist as idx
from mmstiff.testing import write_mnist

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _load_tool():
    return load_script('tools/prepare_fashion_mnist.py')


fm = _load_tool()

NAMES = ('train-images-idx3-ubyte', 'train-labels-idx1-ubyte', 't10k-images-idx3-ubyte',
         't10k-labels-idx1-ubyte')
COUNTS = {'train': 12, 'test': 5}


@pytest.fixture
def gz_dir(tmp_path):
    """A folder laid out like the Debian package's, with tiny gzipped IDX files."""
    return write_mnist(str(tmp_path / 'pkg'), num_train=12, num_test=5, compress=True)


def _gunzip(path):
    with gzip.open(path) as f:
        return f.read()


def test_prepare_unzips_and_mmpretrain_reads_it(gz_dir, tmp_path):
    from mmpretrain.datasets import FashionMNIST
    dst = str(tmp_path / 'dst')
    assert fm.prepare_fashion_mnist(dst, system_dir=gz_dir, use_apt=False, counts=COUNTS) == dst
    for name in NAMES:
        with open(osp.join(dst, name), 'rb') as f:
            assert f.read() == _gunzip(osp.join(gz_dir, name + '.gz'))
    raw = _gunzip(osp.join(gz_dir, 'train-images-idx3-ubyte.gz'))
    assert struct.unpack('>4I', raw[:16]) == (2051, 12, 28, 28)
    labels = _gunzip(osp.join(gz_dir, 'train-labels-idx1-ubyte.gz'))[8:]
    ds = FashionMNIST(data_root=dst, split='train', download=False)
    assert len(ds) == 12
    info = ds.get_data_info(7)
    assert int(info['gt_label']) == labels[7]
    assert np.array_equal(info['img'],
                          np.frombuffer(raw[16 + 7 * 784:16 + 8 * 784], np.uint8).reshape(28, 28))
    assert idx.verify_folder(dst, counts=None) == COUNTS


def test_prepare_is_idempotent(gz_dir, tmp_path):
    dst = str(tmp_path / 'dst')
    fm.prepare_fashion_mnist(dst, system_dir=gz_dir, use_apt=False, counts=COUNTS)
    stamps = {n: os.stat(osp.join(dst, n)).st_mtime_ns for n in NAMES}
    shutil.rmtree(gz_dir)  # a second call needs no source
    fm.prepare_fashion_mnist(dst, system_dir=gz_dir, use_apt=False, counts=COUNTS)
    assert stamps == {n: os.stat(osp.join(dst, n)).st_mtime_ns for n in NAMES}


def test_truncated_gz_gives_clear_error(gz_dir, tmp_path):
    path = osp.join(gz_dir, 't10k-images-idx3-ubyte.gz')
    with open(path, 'rb') as f:
        data = f.read()
    with open(path, 'wb') as f:
        f.write(data[:len(data) // 2])
    with pytest.raises(ValueError, match='t10k-images-idx3-ubyte.gz: cannot be unzipped.*'
                       'truncated'):
        fm.gunzip_verified(path, str(tmp_path / 'out'), idx.IMAGES_MAGIC)
    dst = str(tmp_path / 'dst')
    with pytest.raises(RuntimeError) as info:
        fm.prepare_fashion_mnist(dst, system_dir=gz_dir, use_apt=False, counts=COUNTS)
    message = str(info.value)
    assert 't10k-images-idx3-ubyte.gz: cannot be unzipped' in message
    assert f'files in {dst}' in message and 'use_apt=False' in message
    assert not [n for n in os.listdir(dst) if n.endswith('.part')]  # no half-written files


def test_truncated_content_inside_valid_gz(gz_dir, tmp_path):
    path = osp.join(gz_dir, 'train-labels-idx1-ubyte.gz')
    raw = _gunzip(path)
    with gzip.open(path, 'wb') as f:
        f.write(raw[:-3])
    with pytest.raises(ValueError, match=r'file is 17 bytes; its header \(12,\) needs 20'):
        fm.gunzip_verified(path, str(tmp_path / 'out'), idx.LABELS_MAGIC)


def test_bad_files_in_dst_are_replaced(gz_dir, tmp_path):
    dst = str(tmp_path / 'dst')
    fm.prepare_fashion_mnist(dst, system_dir=gz_dir, use_apt=False, counts=COUNTS)
    with open(osp.join(dst, 'train-images-idx3-ubyte'), 'r+b') as f:
        f.truncate(100)
    fm.prepare_fashion_mnist(dst, system_dir=gz_dir, use_apt=False, counts=COUNTS)
    assert idx.verify_folder(dst, COUNTS) == COUNTS


def test_full_counts_reject_tiny_data(gz_dir, tmp_path):
    with pytest.raises(RuntimeError, match='holds 12 items; expected 60000'):
        fm.prepare_fashion_mnist(str(tmp_path / 'dst'), system_dir=gz_dir, use_apt=False)


class FakeApt:
    """Records commands; ``apt-get download`` drops a .deb, ``dpkg-deb -x`` unpacks ``src``."""

    def __init__(self, src, known=True, fail=None):
        self.src, self.known, self.fail, self.calls = src, known, fail, []

    def __call__(self, cmd, cwd=None):
        self.calls.append(' '.join(cmd))
        if self.fail and cmd[:2] == self.fail:
            return f'`{" ".join(cmd)}` exited with 100: E: simulated failure'
        if cmd[:2] == ['apt-cache', 'show']:
            return None if self.known else 'exited with 100: E: No packages found'
        if cmd[:2] == ['apt-get', 'download']:
            open(osp.join(cwd, 'dataset-fashion-mnist_1.0_all.deb'), 'wb').close()
        if cmd[:2] == ['dpkg-deb', '-x']:
            shutil.copytree(self.src, cmd[3] + fm.SYSTEM_DIR)
        return None


def test_non_root_downloads_and_extracts_into_cache(gz_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(os, 'geteuid', lambda: 1000)
    apt = FakeApt(gz_dir)
    cache = str(tmp_path / 'cache')
    dst = str(tmp_path / 'dst')
    fm.prepare_fashion_mnist(dst, system_dir=str(tmp_path / 'absent'), counts=COUNTS, use_apt=True,
                             cache_dir=cache, run=apt)
    assert apt.calls == [
        'apt-get download dataset-fashion-mnist',
        f'dpkg-deb -x {cache}/dataset-fashion-mnist_1.0_all.deb {cache}/root'
    ]
    assert idx.verify_folder(dst, COUNTS) == COUNTS


def test_root_updates_apt_when_package_unknown(gz_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(os, 'geteuid', lambda: 0)
    system_dir = str(tmp_path / 'system')

    class InstallingApt(FakeApt):

        def __call__(self, cmd, cwd=None):
            error = super().__call__(cmd, cwd)
            if cmd[:2] == ['apt-get', 'install'] and not error:
                shutil.copytree(self.src, system_dir)
            return error

    apt = InstallingApt(gz_dir, known=False)
    dst = str(tmp_path / 'dst')
    fm.prepare_fashion_mnist(dst, system_dir=system_dir, counts=COUNTS, use_apt=True, run=apt)
    assert apt.calls == [
        'apt-cache show dataset-fashion-mnist', 'apt-get update',
        'apt-get install -y dataset-fashion-mnist'
    ]
    assert idx.verify_folder(dst, COUNTS) == COUNTS


def test_all_attempts_fail_with_a_list(tmp_path, monkeypatch):
    monkeypatch.setattr(os, 'geteuid', lambda: 0)
    apt = FakeApt(None, fail=['apt-get', 'install'])
    with pytest.raises(RuntimeError) as info:
        fm.prepare_fashion_mnist(
            str(tmp_path / 'dst'), system_dir=str(tmp_path / 'absent'), use_apt=True, run=apt)
    message = str(info.value)
    assert 'does not exist' in message  # the files in dst
    assert f'{tmp_path}/absent: the four *-ubyte.gz files are not all there' in message
    assert 'apt-get install dataset-fashion-mnist: `apt-get install -y dataset-fashion-mnist` ' \
           'exited with 100' in message
    assert 'apt-get install -y dataset-fashion-mnist` (Debian/Ubuntu)' in message


@pytest.mark.parametrize('uid', [0, 1000])
def test_without_the_flag_apt_never_runs_and_the_error_names_the_flag(gz_dir, tmp_path, monkeypatch,
                                                                      uid):
    monkeypatch.setattr(os, 'geteuid', lambda: uid)
    apt = FakeApt(gz_dir)
    cache = str(tmp_path / 'cache')
    with pytest.raises(RuntimeError) as info:
        fm.prepare_fashion_mnist(
            str(tmp_path / 'dst'), system_dir=str(tmp_path / 'absent'), counts=COUNTS,
            cache_dir=cache, run=apt)  # use_apt defaults off
    assert apt.calls == []
    assert not osp.exists(cache)
    message = str(info.value)
    assert 'rerun it with --install-with-apt' in message
    assert 'sudo apt-get install -y dataset-fashion-mnist' in message
    # the commands the flag would run are spelled out
    if uid == 0:
        assert '    apt-get install -y dataset-fashion-mnist\n' in message
    else:
        assert f'    dpkg-deb -x {cache}/dataset-fashion-mnist_*.deb {cache}/root\n' in message


def test_cli_without_the_flag_fails_naming_it(gz_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(os, 'geteuid', lambda: 1000)
    tool = _load_tool()
    apt = FakeApt(gz_dir)
    prepare = tool.prepare_fashion_mnist
    monkeypatch.setattr(
        tool, 'prepare_fashion_mnist',
        lambda dst, use_apt: prepare(dst, system_dir=str(tmp_path / 'absent'), use_apt=use_apt,
                                     counts=COUNTS, cache_dir=str(tmp_path / 'cache'), run=apt))
    monkeypatch.setattr(tool, 'verify_folder',
                        lambda root, counts=COUNTS: idx.verify_folder(root, counts))
    dst = str(tmp_path / 'dst')
    assert tool.main(['--dst', dst]) == 1
    assert apt.calls == []
    err = capsys.readouterr().err
    assert f'python tools/prepare_fashion_mnist.py --dst {dst} --install-with-apt' in err
    assert tool.main(['--dst', dst, '--install-with-apt']) == 0
    assert apt.calls[0] == 'apt-get download dataset-fashion-mnist'
    out = capsys.readouterr().out
    assert out.index('apt-get download') < out.index(f'ready in {dst}: 12 training and 5 test')


def test_the_flag_prints_the_commands_before_running_them(gz_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(os, 'geteuid', lambda: 0)
    system_dir = str(tmp_path / 'system')
    printed_first = []

    class InstallingApt(FakeApt):

        def __call__(self, cmd, cwd=None):
            if not self.calls:
                printed_first.append(capsys.readouterr().out)
            error = super().__call__(cmd, cwd)
            if cmd[:2] == ['apt-get', 'install']:
                shutil.copytree(self.src, system_dir)
            return error

    apt = InstallingApt(gz_dir)
    fm.prepare_fashion_mnist(
        str(tmp_path / 'dst'), system_dir=system_dir, counts=COUNTS, use_apt=True, run=apt)
    assert apt.calls == [
        'apt-cache show dataset-fashion-mnist', 'apt-get install -y dataset-fashion-mnist'
    ]
    # every command it ran was announced before the first one ran
    assert all(call in printed_first[0] for call in apt.calls)
    assert 'apt-get update' in printed_first[0]


@pytest.mark.skipif(not fm.has_sources(fm.SYSTEM_DIR),
                    reason=f'Debian package {fm.PACKAGE} is not installed')
def test_cli_on_the_real_package(tmp_path, capsys):
    dst = str(tmp_path / 'fashion')
    assert fm.main(['--dst', dst]) == 0
    assert f'ready in {dst}: 60000 training and 10000 test images' in capsys.readouterr().out
    raw_labels = _gunzip(osp.join(fm.SYSTEM_DIR, 't10k-labels-idx1-ubyte.gz'))
    with open(osp.join(dst, 't10k-labels-idx1-ubyte'), 'rb') as f:
        assert f.read() == raw_labels
    assert np.bincount(np.frombuffer(raw_labels[8:], np.uint8)).tolist() == [1000] * 10


def test_cli_reports_failure(tmp_path, capsys, monkeypatch):
    tool = _load_tool()
    asked = []

    def failing(dst, use_apt):
        asked.append(use_apt)
        raise RuntimeError(f'Fashion-MNIST could not be prepared in {dst}.')

    monkeypatch.setattr(tool, 'prepare_fashion_mnist', failing)
    assert tool.main(['--dst', str(tmp_path)]) == 1
    assert f'could not be prepared in {tmp_path}' in capsys.readouterr().err
    assert tool.main(['--dst', str(tmp_path), '--install-with-apt']) == 1
    assert asked == [False, True]  # apt only with the explicit flag
