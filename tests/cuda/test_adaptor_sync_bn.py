"""Two gloo processes on one GPU, adaptors normalised with SyncBN: after a train-mode batch
(a different one on each rank) both ranks hold the same adaptor statistics, which a per-rank BN
would not (docs/methods.md §3, "The adaptor's normalisation")."""
import json
import os
import os.path as osp
import socket
import subprocess
import sys

import pytest
import torch

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
WORKER = osp.join(REPO, 'tests', 'models', 'sync_bn_worker.py')


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@pytest.mark.cuda
@pytest.mark.slow
def test_two_ranks_share_the_adaptor_statistics(tmp_path):
    port, world = _free_port(), 2
    env = dict(os.environ, OMP_NUM_THREADS='1',
               PYTHONPATH=REPO + os.pathsep + os.environ.get('PYTHONPATH', ''))
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER,
             str(r), str(world),
             str(port),
             str(tmp_path), 'cuda'], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True) for r in range(world)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-5000:]
    ranks = [json.loads((tmp_path / f'rank{r}.json').read_text())['backbone'] for r in range(world)]
    assert all(r['norm_types'] == ['CPUSyncBatchNorm'] for r in ranks)  # torch's CUDA path
    means = [[torch.tensor(m) for m in r['running_means']] for r in ranks]
    assert len(means[0]) == 8
    for a, b in zip(*means):
        torch.testing.assert_close(a, b)
        assert a.abs().sum() > 0  # the batch moved them
