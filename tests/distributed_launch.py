"""One process per rank of a worker script, for the tests of distributed code (gloo on the CPU,
or one GPU shared by the ranks): a free port, the checkout's mmstiff first, every rank waited
for and checked to exit 0. Importable from any test folder (it sits beside the root
conftest.py)."""
import os
import os.path as osp
import socket
import subprocess
import sys

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def run_ranks(worker, *args, world=2, timeout=300):
    """Run ``python WORKER RANK WORLD PORT *ARGS`` for every rank at once and wait for all; a
    rank that exits non-zero fails the test with the end of its output."""
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS='1',
               PYTHONPATH=REPO + os.pathsep + os.environ.get('PYTHONPATH', ''))
    procs = [
        subprocess.Popen(
            [sys.executable, worker,
             str(rank), str(world),
             str(port), *map(str, args)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True) for rank in range(world)
    ]
    outputs = [p.communicate(timeout=timeout)[0] for p in procs]
    for rank, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f'rank {rank} exited {p.returncode}:\n{out[-5000:]}'
