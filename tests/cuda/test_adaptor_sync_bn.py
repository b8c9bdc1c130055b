"""Two gloo processes on one GPU, adaptors normalised with SyncBN: after a train-mode batch
(a different one on each rank) both ranks hold the same adaptor statistics, which a per-rank BN
would not (docs/methods.md §3, "The adaptor's normalisation")."""
import json
import os.path as osp

import pytest
import torch
from distributed_launch import run_ranks  # tests/

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
WORKER = osp.join(REPO, 'tests', 'models', 'sync_bn_worker.py')


@pytest.mark.cuda
@pytest.mark.slow
def test_two_ranks_share_the_adaptor_statistics(tmp_path):
    world = 2
    run_ranks(WORKER, tmp_path, 'cuda', world=world)
    ranks = [json.loads((tmp_path / f'rank{r}.json').read_text())['backbone'] for r in range(world)]
    assert all(r['norm_types'] == ['CPUSyncBatchNorm'] for r in ranks)  # torch's CUDA path
    means = [[torch.tensor(m) for m in r['running_means']] for r in ranks]
    assert len(means[0]) == 8
    for a, b in zip(*means):
        torch.testing.assert_close(a, b)
        assert a.abs().sum() > 0  # the batch moved them
