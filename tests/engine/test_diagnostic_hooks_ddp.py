"""The diagnostics hooks under DDP: two CPU processes (gloo), values averaged and written once."""
import glob
import json
import os.path as osp

import pytest
from diagnostics_toy import read_json_lines
from distributed_launch import run_ranks  # tests/

WORKER = osp.join(osp.dirname(osp.abspath(__file__)), 'ddp_worker.py')


@pytest.mark.slow
def test_two_ranks_log_the_mean_once(tmp_path):
    world = 2
    run_ranks(WORKER, tmp_path, world=world, timeout=600)

    local = []
    for r in range(world):
        merged = {}  # step -> every hook's local scalars of that iteration
        for line in read_json_lines(tmp_path / f'local_{r}.jsonl'):
            merged.setdefault(line['step'], {}).update(line)
        local.append(merged)
    log_dir = open(tmp_path / 'log_dir_0.txt').read()
    assert open(tmp_path / 'log_dir_1.txt').read() == log_dir  # one run folder for both ranks
    logged = read_json_lines(osp.join(log_dir, 'vis_data', 'scalars.json'))
    diag_lines = [
        line for line in logged if any(k.startswith(('stiffness/', 'freq/')) for k in line)
    ]
    # both hooks write one line each per recorded iteration, on rank 0 only
    assert sorted(line['step'] for line in diag_lines) == [2, 2, 4, 4]
    for line in diag_lines:
        step = line['step']
        keys = [k for k in line if k.startswith(('stiffness/', 'freq/'))]
        assert keys
        for key in keys:
            values = [local[r][step][key] for r in range(world)]
            assert line[key] == pytest.approx(sum(values) / world, rel=1e-6), key
    # the dashboard, drawn by rank 0 at its checkpoints and at the end of training
    assert osp.isfile(osp.join(tmp_path, 'dashboard.png'))
    # the adjoint, from each rank's own backward pass, is averaged like the rest
    assert any(k.startswith('stiffness/adjoint_gain/') for line in diag_lines for k in line)
    # the two shards differ, so at least the NSI of the first block differs between ranks
    assert local[0][2]['stiffness/nsi/layer1.0'] != local[1][2]['stiffness/nsi/layer1.0']
    assert len(glob.glob(osp.join(log_dir, 'vis_data', '*.json'))) == 4  # + one log per hook
    json.dumps(diag_lines)  # plain JSON numbers
