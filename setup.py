"""mmstiff: stiffness-aware step-size adaptors and frequency-aware attention for OpenMMLab 2.x.

Installs into an existing OpenMMLab environment without touching its torch, torchvision or mmcv:

    pip install .                   # classification, ViT family, diagnostics
    pip install ".[det]"            # + detection: mmdet and the mmcv range it asserts
    pip install -e ".[det,tests]"   # development; docs/install.md says what needs a regular one

``install_requires`` holds only what pip can install anywhere (ranges, no pins); mmcv (or
``mmcv-lite``) is the user's, or comes from the ``mim`` extra, ``requirements/mminstall.txt``, as
in every OpenMMLab project; the ``det`` extra asks for the mmcv range mmdet asserts, so that pip
never puts mmdet beside an mmcv it refuses (docs/install.md, "mmcv or mmcv-lite"). The exact
versions the project's own environment is tested with live in
``requirements/constraints.txt``, used by ``tools/setup_env.sh`` as ``pip install -c``.
"""
import os
import os.path as osp
import shutil
import sys

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = osp.dirname(osp.abspath(__file__))

#: Files and folders ``mim`` and MMEngine's ``package::`` config bases look for in
#: ``mmstiff/.mim/`` (``mim train mmstiff CONFIG``, ``_base_ = 'mmstiff::stepnet/...'``).
MIM_FILES = ('configs', 'tools', 'model-index.yml')


def read_version():
    namespace = {}
    with open(osp.join(HERE, 'mmstiff', 'version.py')) as f:
        exec(f.read(), namespace)
    return namespace['__version__']


def read_requirements(name):
    """Requirement lines of ``requirements/NAME`` (comments and ``-c``/``-r`` lines dropped)."""
    with open(osp.join(HERE, 'requirements', name)) as f:
        lines = (line.split('#')[0].strip() for line in f)
        return [line for line in lines if line and not line.startswith('-')]


def link_mim_files(argv):
    """For an editable install (``pip install -e .``), link configs/, tools/ and model-index.yml
    into ``mmstiff/.mim`` of the checkout, so that they follow it. Wheels copy them instead
    (:class:`BuildPyWithMim`), leaving the checkout untouched."""
    if 'develop' not in argv and 'editable_wheel' not in argv:
        return
    mim_dir = osp.join(HERE, 'mmstiff', '.mim')
    os.makedirs(mim_dir, exist_ok=True)
    for name in MIM_FILES:
        src, dst = osp.join(HERE, name), osp.join(mim_dir, name)
        if not osp.exists(src):
            continue
        _remove(dst)
        os.symlink(osp.relpath(src, mim_dir), dst)


def _remove(path):
    if osp.islink(path) or osp.isfile(path):
        os.remove(path)
    elif osp.isdir(path):
        shutil.rmtree(path)


class BuildPyWithMim(build_py):
    """``build_py`` that also copies configs/, tools/ and model-index.yml into
    ``mmstiff/.mim`` of the build tree, so every wheel (``pip install .``, ``mim install .``,
    a wheel built from the sdist) carries them."""

    def run(self):
        super().run()
        if getattr(self, 'editable_mode', False):
            return
        mim_dir = osp.join(self.build_lib, 'mmstiff', '.mim')
        _remove(mim_dir)
        os.makedirs(mim_dir)
        for name in MIM_FILES:
            src, dst = osp.join(HERE, name), osp.join(mim_dir, name)
            if osp.isdir(src):
                shutil.copytree(src, dst, ignore=shutil.ignore_patterns('__pycache__', '*.pyc'))
            elif osp.isfile(src):
                shutil.copyfile(src, dst)


if __name__ == '__main__':
    link_mim_files(sys.argv)
    readme = osp.join(HERE, 'README.md')
    setup(
        name='mmstiff',
        version=read_version(),
        description='Stiffness-aware step-size adaptors and frequency-aware attention '
        'for MMPretrain and MMDetection',
        long_description=open(readme).read() if osp.exists(readme) else '',
        long_description_content_type='text/markdown',
        keywords='computer vision, residual networks, vision transformer, stiffness',
        packages=find_packages(exclude=('tests', 'tests.*', 'configs', 'tools', 'tools.*')),
        python_requires='>=3.9',
        install_requires=read_requirements('runtime.txt'),
        extras_require={
            'det':
            read_requirements('det.txt'),
            'mim':
            read_requirements('mminstall.txt'),
            'tests':
            read_requirements('tests.txt'),
            'optional':
            read_requirements('optional.txt'),
            'all':
            read_requirements('runtime.txt') + read_requirements('det.txt') +
            read_requirements('optional.txt') + read_requirements('tests.txt'),
        },
        classifiers=[
            'License :: OSI Approved :: Apache Software License',
            'Operating System :: OS Independent',
            'Programming Language :: Python :: 3',
            'Topic :: Scientific/Engineering :: Artificial Intelligence',
        ],
        license='Apache-2.0',
        cmdclass={'build_py': BuildPyWithMim},
        zip_safe=False,
    )
