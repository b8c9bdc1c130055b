#!/usr/bin/env python
"""Put the full Fashion-MNIST where mmpretrain's ``FashionMNIST`` reads it.

    python tools/prepare_fashion_mnist.py [--dst DIR] [--install-with-apt]

Fills ``DIR`` (default ``data/fashion_mnist``) with the four unzipped IDX files (60,000 +
10,000 grey 28x28 images, 10 classes) from the Debian package ``dataset-fashion-mnist``, which
ships them gzipped in ``/usr/share/datasets/fashion-mnist/``. Attempts, in order:

1. the files already in ``DIR`` (verified by header and size: fast and idempotent);
2. the package's folder, if the package is installed;
3. only with ``--install-with-apt``, after printing the exact commands it will run:
   as root ``apt-get install -y dataset-fashion-mnist`` (after ``apt-get update`` when apt does
   not know the package yet); otherwise ``apt-get download`` the package and ``dpkg-deb -x`` it
   into a user cache folder (``$MMSTIFF_CACHE`` or ``~/.cache/mmstiff``).

Without ``--install-with-apt`` nothing is installed: when the package is missing the tool fails
and says which flag or command to use. Running it again only verifies the files. Point configs
at the folder with ``data_root=DIR``.
"""
import argparse
import gzip
import os
import os.path as osp
import shutil
import subprocess
import sys
import tempfile

from mmstiff.datasets.fashion_mnist import (FULL_COUNTS, IMAGES_MAGIC, LABELS_MAGIC, SPLIT_FILES,
                                            verify_folder, verify_idx)

PACKAGE = 'dataset-fashion-mnist'
SYSTEM_DIR = '/usr/share/datasets/fashion-mnist'
APT_FLAG = '--install-with-apt'


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
        n = gunzip_verified(
            osp.join(src_dir, images + '.gz'), osp.join(dst, images), IMAGES_MAGIC, want)[0]
        gunzip_verified(osp.join(src_dir, labels + '.gz'), osp.join(dst, labels), LABELS_MAGIC, n)
    return verify_folder(dst, counts)


def has_sources(src_dir):
    """Whether ``src_dir`` holds the four gzipped files."""
    return all(
        osp.isfile(osp.join(src_dir, name + '.gz')) for pair in SPLIT_FILES.values()
        for name in pair)


def default_cache_dir():
    """The user cache folder for an extracted package."""
    base = os.environ.get('MMSTIFF_CACHE') or osp.join(
        os.environ.get('XDG_CACHE_HOME') or osp.expanduser('~/.cache'), 'mmstiff')
    return osp.join(base, PACKAGE)


def is_root():
    return hasattr(os, 'geteuid') and os.geteuid() == 0


def apt_plan(cache_dir):
    """The commands ``--install-with-apt`` runs here, one line each, for the user to read."""
    if is_root():
        return [
            f'apt-cache show {PACKAGE}',
            'apt-get update    (only if apt-cache does not know the package)',
            f'apt-get install -y {PACKAGE}'
        ]
    return [
        f'apt-get download {PACKAGE}    (in {cache_dir})',
        f'dpkg-deb -x {cache_dir}/{PACKAGE}_*.deb {cache_dir}/root'
    ]


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


def how_to_install(dst, cache_dir):
    """What the user can do when the package is missing: the flag, or the command by hand."""
    plan = '\n'.join(f'    {line}' for line in apt_plan(cache_dir))
    return (f'The Debian package {PACKAGE} is not installed. To let this tool install it, '
            f'rerun it with {APT_FLAG}; it will run:\n{plan}\n'
            f'  e.g. python tools/prepare_fashion_mnist.py --dst {dst} {APT_FLAG}\n'
            f'Or install it yourself with `sudo apt-get install -y {PACKAGE}` (Debian/Ubuntu), '
            f'or put the four unzipped *-ubyte files in {dst}.')


def prepare_fashion_mnist(dst='data/fashion_mnist', system_dir=SYSTEM_DIR, use_apt=False,
                          counts=FULL_COUNTS, cache_dir=None, run=_run):
    """Make Fashion-MNIST's unzipped IDX files available in ``dst``; return ``dst``.

    Args:
        dst (str): folder to fill; pass it as ``data_root`` of mmpretrain's ``FashionMNIST``.
        system_dir (str): where the Debian package keeps the gz files.
        use_apt (bool): whether apt may be run when ``system_dir`` lacks the files (the
            ``--install-with-apt`` flag). The commands are printed before they run.
        counts (dict, optional): expected images per split (default: the full dataset);
            ``None`` accepts any consistent count.
        cache_dir (str, optional): where a downloaded package is extracted when not root
            (default :func:`default_cache_dir`).
        run (callable): runs a command list, returning ``None`` or a failure reason.

    Raises:
        RuntimeError: when no attempt produced valid files; the message lists each attempt
            and, without ``use_apt``, the flag or command that installs the package.
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
    cache_dir = cache_dir or default_cache_dir()
    if use_apt:
        plan = '\n'.join(f'  {line}' for line in apt_plan(cache_dir))
        print(f'{PACKAGE} is not installed; {APT_FLAG} runs:\n{plan}', flush=True)
        if is_root():
            error = apt_install(run)
            if error:
                tried.append(f'apt-get install {PACKAGE}: {error}')
            elif from_dir(system_dir):
                return dst
        else:
            src, error = apt_extract(cache_dir, run)
            if error:
                tried.append(f'apt-get download + dpkg-deb -x into {cache_dir}: {error}')
            elif from_dir(src):
                return dst
        advice = f'Install it with `apt-get install -y {PACKAGE}` (Debian/Ubuntu) or put the ' \
                 f'four unzipped *-ubyte files in {dst}.'
    else:
        tried.append(f'apt: not run (use_apt=False; {APT_FLAG} allows it)')
        advice = how_to_install(dst, cache_dir)
    raise RuntimeError('Fashion-MNIST could not be prepared in {}. Tried:\n  - {}\n{}'.format(
        dst, '\n  - '.join(tried), advice))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--dst', default='data/fashion_mnist',
                        help='folder to fill (the data_root of FashionMNIST configs)')
    parser.add_argument(
        APT_FLAG, action='store_true',
        help=f'when {PACKAGE} is not installed, run apt-get to install it (as '
        'root) or to download and extract it into a user cache; the commands '
        'are printed before they run')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        dst = prepare_fashion_mnist(args.dst, use_apt=args.install_with_apt)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    counts = verify_folder(dst)
    print(f'Fashion-MNIST is ready in {dst}: {counts["train"]} training and '
          f'{counts["test"]} test images (28x28 grey, 10 classes).')
    return 0


if __name__ == '__main__':
    sys.exit(main())
