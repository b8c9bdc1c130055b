"""The diagnostics hooks under DDP: two CPU processes (gloo), values averaged and written once."""
import glob
import json
import os
import os.path as osp
import socket
import subprocess
import sys

import pytest
from diagnostics_toy import read_json_lines

WORKER = osp.join(osp.dirname(osp.abspath(__file__)), 'ddp_worker.py')
REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_ranks_log_the_mean_once(tmp_path):
    port, world = _free_port(), 2
    env = dict(os.environ, OMP_NUM_THREADS='1',
               PYTHONPATH=REPO + os.pathsep + os.environ.get('PYTHONPATH', ''))
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER,
             str(r), str(world),
             str(port), str(tmp_path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True) for r in range(world)
    ]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-5000:]

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
    # the two shards differ, so at least the NSI of the first block differs between ranks
    assert local[0][2]['stiffness/nsi/layer1.0'] != local[1][2]['stiffness/nsi/layer1.0']
    assert len(glob.glob(osp.join(log_dir, 'vis_data', '*.json'))) == 4  # + one log per hook
    json.dumps(diag_lines)  # plain JSON numbers
