#!/usr/bin/env python
"""Put the full Fashion-MNIST where mmpretrain's ``FashionMNIST`` reads it.

    python tools/prepare_fashion_mnist.py [--dst DIR]

Fills ``DIR`` (default ``data/fashion_mnist``) with the four unzipped IDX files, from the
Debian package ``dataset-fashion-mnist`` (installed or downloaded as needed; see
:func:`mmstiff.datasets.fashion_mnist.prepare_fashion_mnist`). Running it again only
verifies the files. Point configs at the folder with ``data_root=DIR``.
"""
import argparse
import sys

from mmstiff.datasets.fashion_mnist import prepare_fashion_mnist, verify_folder


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--dst', default='data/fashion_mnist',
                        help='folder to fill (the data_root of FashionMNIST configs)')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        dst = prepare_fashion_mnist(args.dst)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    counts = verify_folder(dst)
    print(f'Fashion-MNIST is ready in {dst}: {counts["train"]} training and '
          f'{counts["test"]} test images (28x28 grey, 10 classes).')
    return 0


if __name__ == '__main__':
    sys.exit(main())
