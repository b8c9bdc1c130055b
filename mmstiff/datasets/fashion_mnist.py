"""Make the real Fashion-MNIST available where mmpretrain's ``FashionMNIST`` reads it.

mmpretrain's ``FashionMNIST(data_root=DIR)`` reads the four *unzipped* IDX files from
``DIR`` and tries to download them when one is missing. :func:`prepare_fashion_mnist` puts
the full dataset (60,000 + 10,000 grey 28x28 images, 10 classes) there from the Debian
package ``dataset-fashion-mnist``, which ships the gzipped IDX files in
``/usr/share/datasets/fashion-mnist/``. Attempts, in order:

1. the files already in ``dst`` (verified by header and size: fast and idempotent);
2. the package's folder, if the package is installed;
3. as root: ``apt-get install -y dataset-fashion-mnist`` (after ``apt-get update`` when apt
   does not know the package yet);
4. otherwise: ``apt-get download`` the package and ``dpkg-deb -x`` it into a user cache
   folder (``$MMSTIFF_CACHE`` or ``~/.cache/mmstiff``).

If all fail, ``RuntimeError`` says what was tried and why each attempt failed.
"""
import gzip
import math
import os
import os.path as osp
import shutil
import struct
import subprocess
import tempfile

PACKAGE = 'dataset-fashion-mnist'
SYSTEM_DIR = '/usr/share/datasets/fashion-mnist'
IMAGES_MAGIC = 2051
LABELS_MAGIC = 2049
IMAGE_SHAPE = (28, 28)

#: split -> (images file, labels file), unzipped names as mmpretrain reads them.
SPLIT_FILES = {
    'train': ('train-images-idx3-ubyte', 'train-labels-idx1-ubyte'),
    'test': ('t10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte'),
}
#: Images per split of the full Fashion-MNIST.
FULL_COUNTS = {'train': 60000, 'test': 10000}


def read_idx_header(path):
    """``(magic, dims)`` of the IDX file ``path`` (unzipped), from its big-endian header."""
    with open(path, 'rb') as f:
        head = f.read(4)
        if len(head) < 4:
            raise ValueError(f'{path}: file is {len(head)} bytes long; expected an IDX header')
        magic, = struct.unpack('>I', head)
        ndim = magic & 0xFF
        raw = f.read(4 * ndim)
    if len(raw) < 4 * ndim:
        raise ValueError(f'{path}: header is truncated; expected {ndim} dimensions')
    return magic, struct.unpack(f'>{ndim}I', raw)


def verify_idx(path, magic, count=None):
    """Check an unzipped IDX file's magic, dimensions and exact size; return its dims.

    Args:
        path (str): the file.
        magic (int): expected magic number (2051 images, 2049 labels).
        count (int, optional): expected number of items (first dimension).
    """
    if not osp.isfile(path):
        raise FileNotFoundError(f'{path} does not exist')
    found, dims = read_idx_header(path)
    if found != magic:
        raise ValueError(f'{path}: magic number is {found}; expected {magic}')
    if magic == IMAGES_MAGIC and tuple(dims[1:]) != IMAGE_SHAPE:
        raise ValueError(f'{path}: images are {dims[1:]}; expected {IMAGE_SHAPE}')
    if count is not None and dims[0] != count:
        raise ValueError(f'{path}: holds {dims[0]} items; expected {count}')
    want = 4 * (1 + len(dims)) + math.prod(dims)
    size = osp.getsize(path)
    if size != want:
        raise ValueError(f'{path}: file is {size} bytes; its header {dims} needs {want} '
                         '(truncated or corrupted file)')
    return dims


def verify_folder(root, counts=FULL_COUNTS):
    """Verify the four unzipped files in ``root``; return ``{split: number of images}``.

    ``counts`` (``{split: n}`` or None) fixes the expected number of images per split.
    """
    found = {}
    for split, (images, labels) in SPLIT_FILES.items():
        want = None if counts is None else counts[split]
        n = verify_idx(osp.join(root, images), IMAGES_MAGIC, want)[0]
        verify_idx(osp.join(root, labels), LABELS_MAGIC, n)
        found[split] = n
    return found


def gunzip_verified(src, dst_path, magic, count=None):
    """Unzip ``src`` to ``dst_path`` through a temporary file, verify it, then move it in."""
    fd, tmp = tempfile.mkstemp(dir=osp.dirname(dst_path) or '.', suffix='.part')
    try:
        with os.fdopen(fd, 'wb') as out, gzip.open(src, 'rb') as f:
            shutil.copyfileobj(f, out, length=1 << 20)
    except (OSError, EOFError) as exc:
        os.unlink(tmp)
        raise ValueError(f'{src}: cannot be unzipped ({exc}); the file is truncated or '
                         'not gzip') from exc
    try:
        dims = verify_idx(tmp, magic, count)
    except ValueError as exc:
        os.unlink(tmp)
        raise ValueError(f'{src}: unzipped content is invalid: {exc}') from exc
    os.chmod(tmp, 0o644)  # mkstemp creates 0600; the data is meant to be shared
    os.replace(tmp, dst_path)
    return dims


def install_from(src_dir, dst, counts=FULL_COUNTS):
    """Unzip the four ``<name>.gz`` files of ``src_dir`` into ``dst``; return the counts."""
    os.makedirs(dst, exist_ok=True)
    for split, (images, labels) in SPLIT_FILES.items():
        want = None if counts is None else counts[split]
        n = gunzip_verified(osp.join(src_dir, images + '.gz'), osp.join(dst, images),
                            IMAGES_MAGIC, want)[0]
        gunzip_verified(osp.join(src_dir, labels + '.gz'), osp.join(dst, labels),
                        LABELS_MAGIC, n)
    return verify_folder(dst, counts)


def has_sources(src_dir):
    """Whether ``src_dir`` holds the four gzipped files."""
    return all(osp.isfile(osp.join(src_dir, name + '.gz'))
               for pair in SPLIT_FILES.values() for name in pair)


def default_cache_dir():
    """The user cache folder for an extracted package."""
    base = os.environ.get('MMSTIFF_CACHE') or osp.join(
        os.environ.get('XDG_CACHE_HOME') or osp.expanduser('~/.cache'), 'mmstiff')
    return osp.join(base, PACKAGE)


def _run(cmd, cwd=None):
    """Run ``cmd``; return ``None`` on success, else a one-line reason."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    except OSError as exc:
        return f'`{" ".join(cmd)}` could not run: {exc}'
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ['']
        return f'`{" ".join(cmd)}` exited with {proc.returncode}: {tail[0]}'
    return None


def apt_install(run=_run):
    """``apt-get install -y`` the package (``apt-get update`` first if apt does not know it).

    Returns ``None`` on success, else the reason it failed.
    """
    if run(['apt-cache', 'show', PACKAGE]) is not None:
        error = run(['apt-get', 'update'])
        if error:
            return error
    return run(['apt-get', 'install', '-y', PACKAGE])


def apt_extract(cache_dir, run=_run):
    """``apt-get download`` the package into ``cache_dir`` and ``dpkg-deb -x`` it there.

    Returns ``(folder with the gz files or None, reason it failed or None)``.
    """
    os.makedirs(cache_dir, exist_ok=True)
    tree = osp.join(cache_dir, 'root')
    src = tree + SYSTEM_DIR
    if has_sources(src):
        return src, None
    error = run(['apt-get', 'download', PACKAGE], cwd=cache_dir)
    if error:
        return None, error
    debs = sorted(f for f in os.listdir(cache_dir) if f.startswith(PACKAGE) and f.endswith('.deb'))
    if not debs:
        return None, f'apt-get download left no {PACKAGE}*.deb in {cache_dir}'
    error = run(['dpkg-deb', '-x', osp.join(cache_dir, debs[-1]), tree])
    if error:
        return None, error
    if not has_sources(src):
        return None, f'{debs[-1]} did not contain the gz files under {SYSTEM_DIR}'
    return src, None


def prepare_fashion_mnist(dst='data/fashion_mnist', system_dir=SYSTEM_DIR, use_apt=True,
                          counts=FULL_COUNTS, cache_dir=None, run=_run):
    """Make Fashion-MNIST's unzipped IDX files available in ``dst``; return ``dst``.

    Args:
        dst (str): folder to fill; pass it as ``data_root`` of mmpretrain's ``FashionMNIST``.
        system_dir (str): where the Debian package keeps the gz files.
        use_apt (bool): whether to try apt when ``system_dir`` lacks the files.
        counts (dict, optional): expected images per split (default: the full dataset);
            ``None`` accepts any consistent count.
        cache_dir (str, optional): where a downloaded package is extracted when not root
            (default :func:`default_cache_dir`).
        run (callable): runs a command list, returning ``None`` or a failure reason.

    Raises:
        RuntimeError: when no attempt produced valid files; the message lists each attempt.
    """
    tried = []
    try:
        verify_folder(dst, counts)
        return dst
    except (OSError, ValueError) as exc:
        tried.append(f'files in {dst}: {exc}')

    def from_dir(src):
        if not has_sources(src):
            tried.append(f'{src}: the four *-ubyte.gz files are not all there')
            return False
        try:
            install_from(src, dst, counts)
            return True
        except (OSError, ValueError) as exc:
            tried.append(f'{src}: {exc}')
            return False

    if from_dir(system_dir):
        return dst
    if use_apt:
        if hasattr(os, 'geteuid') and os.geteuid() == 0:
            error = apt_install(run)
            if error:
                tried.append(f'apt-get install {PACKAGE}: {error}')
            elif from_dir(system_dir):
                return dst
        else:
            cache_dir = cache_dir or default_cache_dir()
            src, error = apt_extract(cache_dir, run)
            if error:
                tried.append(f'apt-get download + dpkg-deb -x into {cache_dir}: {error}')
            elif from_dir(src):
                return dst
    else:
        tried.append('apt: not tried (use_apt=False)')
    raise RuntimeError('Fashion-MNIST could not be prepared in {}. Tried:\n  - {}\nInstall '
                       'it with `apt-get install -y {}` (Debian/Ubuntu) or put the four '
                       'unzipped *-ubyte files in {}.'.format(dst, '\n  - '.join(tried),
                                                            PACKAGE, dst))
