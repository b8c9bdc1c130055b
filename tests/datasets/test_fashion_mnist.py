"""The Fashion-MNIST data step: unzip, verify, idempotence and the apt fall-backs.

The logic is tested on generated gz files; the real Debian package is used only when it is
installed (and apt is never called: commands go to a recording fake).
"""
import gzip
import importlib.util
import os
import os.path as osp
import shutil
import struct

import numpy as np
import pytest

from mmstiff.datasets import fashion_mnist as fm
from mmstiff.datasets.tiny import write_mnist

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
    assert np.array_equal(info['img'], np.frombuffer(raw[16 + 7 * 784:16 + 8 * 784], np.uint8)
                          .reshape(28, 28))
    assert fm.verify_folder(dst, counts=None) == COUNTS


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
        fm.gunzip_verified(path, str(tmp_path / 'out'), fm.IMAGES_MAGIC)
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
        fm.gunzip_verified(path, str(tmp_path / 'out'), fm.LABELS_MAGIC)


def test_verify_rejects_wrong_magic_counts_and_shapes(tmp_path):
    path = str(tmp_path / 'x')
    with open(path, 'wb') as f:
        f.write(struct.pack('>2I', 2049, 3) + bytes(3))
    assert fm.verify_idx(path, fm.LABELS_MAGIC, 3) == (3, )
    with pytest.raises(ValueError, match='magic number is 2049; expected 2051'):
        fm.verify_idx(path, fm.IMAGES_MAGIC)
    with pytest.raises(ValueError, match='holds 3 items; expected 60000'):
        fm.verify_idx(path, fm.LABELS_MAGIC, 60000)
    with open(path, 'wb') as f:
        f.write(struct.pack('>4I', 2051, 1, 32, 32) + bytes(1024))
    with pytest.raises(ValueError, match=r'images are \(32, 32\); expected \(28, 28\)'):
        fm.verify_idx(path, fm.IMAGES_MAGIC)
    with open(path, 'wb') as f:
        f.write(b'\x00\x00')
    with pytest.raises(ValueError, match='2 bytes long; expected an IDX header'):
        fm.verify_idx(path, fm.IMAGES_MAGIC)


def test_bad_files_in_dst_are_replaced(gz_dir, tmp_path):
    dst = str(tmp_path / 'dst')
    fm.prepare_fashion_mnist(dst, system_dir=gz_dir, use_apt=False, counts=COUNTS)
    with open(osp.join(dst, 'train-images-idx3-ubyte'), 'r+b') as f:
        f.truncate(100)
    fm.prepare_fashion_mnist(dst, system_dir=gz_dir, use_apt=False, counts=COUNTS)
    assert fm.verify_folder(dst, COUNTS) == COUNTS


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
    fm.prepare_fashion_mnist(dst, system_dir=str(tmp_path / 'absent'), counts=COUNTS,
                             cache_dir=cache, run=apt)
    assert apt.calls == ['apt-get download dataset-fashion-mnist',
                         f'dpkg-deb -x {cache}/dataset-fashion-mnist_1.0_all.deb {cache}/root']
    assert fm.verify_folder(dst, COUNTS) == COUNTS


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
    fm.prepare_fashion_mnist(dst, system_dir=system_dir, counts=COUNTS, run=apt)
    assert apt.calls == ['apt-cache show dataset-fashion-mnist', 'apt-get update',
                         'apt-get install -y dataset-fashion-mnist']
    assert fm.verify_folder(dst, COUNTS) == COUNTS


def test_all_attempts_fail_with_a_list(tmp_path, monkeypatch):
    monkeypatch.setattr(os, 'geteuid', lambda: 0)
    apt = FakeApt(None, fail=['apt-get', 'install'])
    with pytest.raises(RuntimeError) as info:
        fm.prepare_fashion_mnist(str(tmp_path / 'dst'), system_dir=str(tmp_path / 'absent'),
                                 run=apt)
    message = str(info.value)
    assert 'does not exist' in message  # the files in dst
    assert f'{tmp_path}/absent: the four *-ubyte.gz files are not all there' in message
    assert 'apt-get install dataset-fashion-mnist: `apt-get install -y dataset-fashion-mnist` ' \
           'exited with 100' in message
    assert 'apt-get install -y dataset-fashion-mnist` (Debian/Ubuntu)' in message


def _load_tool(repo_root):
    spec = importlib.util.spec_from_file_location(
        'prepare_fashion_mnist', osp.join(repo_root, 'tools', 'prepare_fashion_mnist.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not fm.has_sources(fm.SYSTEM_DIR),
                    reason=f'Debian package {fm.PACKAGE} is not installed')
def test_cli_on_the_real_package(tmp_path, repo_root, capsys):
    dst = str(tmp_path / 'fashion')
    assert _load_tool(repo_root).main(['--dst', dst]) == 0
    assert f'ready in {dst}: 60000 training and 10000 test images' in capsys.readouterr().out
    raw_labels = _gunzip(osp.join(fm.SYSTEM_DIR, 't10k-labels-idx1-ubyte.gz'))
    with open(osp.join(dst, 't10k-labels-idx1-ubyte'), 'rb') as f:
        assert f.read() == raw_labels
    assert np.bincount(np.frombuffer(raw_labels[8:], np.uint8)).tolist() == [1000] * 10


def test_cli_reports_failure(tmp_path, repo_root, capsys, monkeypatch):
    tool = _load_tool(repo_root)

    def failing(dst):
        raise RuntimeError(f'Fashion-MNIST could not be prepared in {dst}.')

    monkeypatch.setattr(tool, 'prepare_fashion_mnist', failing)
    assert tool.main(['--dst', str(tmp_path)]) == 1
    assert f'could not be prepared in {tmp_path}' in capsys.readouterr().err
