"""mmstiff: stiffness-aware and frequency-aware attention for OpenMMLab 2.x."""
import os.path as osp

from setuptools import find_packages, setup

HERE = osp.dirname(osp.abspath(__file__))


def read_version():
    namespace = {}
    with open(osp.join(HERE, 'mmstiff', 'version.py')) as f:
        exec(f.read(), namespace)
    return namespace['__version__']


def read_requirements(name):
    path = osp.join(HERE, 'requirements', name)
    with open(path) as f:
        lines = (line.split('#')[0].strip() for line in f)
        return [line for line in lines if line]


setup(
    name='mmstiff',
    version=read_version(),
    description='Stiffness-aware step-size adaptors and frequency-aware attention '
    'for MMPretrain and MMDetection',
    long_description=open(osp.join(HERE, 'README.md')).read() if osp.exists(osp.join(HERE, 'README.md')) else '',
    long_description_content_type='text/markdown',
    packages=find_packages(exclude=('tests', 'tests.*', 'configs', 'tools')),
    python_requires='>=3.9',
    install_requires=read_requirements('runtime.txt'),
    extras_require={
        'tests': read_requirements('tests.txt'),
        'optional': read_requirements('optional.txt'),
    },
    license='Apache-2.0',
    zip_safe=False,
)
