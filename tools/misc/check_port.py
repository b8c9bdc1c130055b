#!/usr/bin/env python
"""Check that the master port of a distributed run is free before torchrun starts.

    python tools/misc/check_port.py ADDR PORT

Exits 0 when ``PORT`` can be bound on ``ADDR`` (or ``ADDR`` is not an address of this machine,
where nothing can be checked), 2 with a message naming the port and how to pick another when it
is in use. ``tools/dist_run.sh`` (``dist_train.sh``, ``dist_test.sh``) runs it on node 0.
"""
import errno
import socket
import sys


def port_in_use(addr, port):
    """Whether ``port`` on ``addr`` is taken by another process."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((addr, port))
        except OSError as err:
            return err.errno == errno.EADDRINUSE
    return False


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or not argv[1].isdigit():
        sys.exit('usage: check_port.py ADDR PORT')
    addr, port = argv[0], int(argv[1])
    try:
        addr = socket.gethostbyname(addr)
    except OSError:
        return 0  # an unknown name: torchrun reports it
    if port_in_use(addr, port):
        print(
            f'error: port {port} on {addr} is in use (another distributed run, or another '
            f'program); pick a free one with PORT=, e.g. PORT={port + 1} '
            'tools/dist_train.sh CONFIG NUM_PROCS', file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main())
