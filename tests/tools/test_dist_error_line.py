"""tools/dist_train.sh on a user's mistake: rank 0's one error: line is the last, exit status 1,
no traceback (tools/misc/torchrun_report.py drops torchrun's own report); a crash keeps it."""
import io
import os.path as osp

import pytest
from bad_hook_config import HOOK_OPTION  # tests/
from distributed_launch import free_port  # tests/
from script_modules import load_script  # tests/

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
report = load_script('tools/misc/torchrun_report.py')

AGENT = ('W1201 20:02:14.098000 18318 .venv/lib/python3.11/site-packages/torch/distributed/'
         'elastic/multiprocessing/api.py:1028] Sending process 18364 closing signal SIGTERM\n')
SUMMARY = '''Traceback (most recent call last):
  File ".venv/bin/torchrun", line 8, in <module>
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
tools/train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  rank      : 1 (local_rank: 1)
  exitcode  : {other} (pid: 2)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 1)
============================================================
'''


def filtered(text):
    out = io.StringIO()
    report.main(io.StringIO(text), out)
    return out.getvalue()


@pytest.mark.parametrize('other', ['1', '-15'])
def test_torchruns_report_of_a_users_mistake_is_dropped(other):
    text = 'loading\nerror: max_skips=-3 is not supported\n' + AGENT + SUMMARY.format(other=other)
    assert filtered(text) == 'loading\nerror: max_skips=-3 is not supported\n'


def test_a_crash_keeps_torchruns_report():
    text = 'error: a line\n' + AGENT + SUMMARY.format(other='-11')
    assert filtered(text) == text
    text = 'error: a line\nmore output of the tool\n' + AGENT + SUMMARY.format(other='1')
    assert filtered(text) == text


def test_without_an_error_line_everything_passes():
    text = AGENT + SUMMARY.format(other='1')
    assert filtered(text) == text


@pytest.mark.slow
def test_dist_train_on_a_bad_hook_option_ends_in_rank_0s_line(tiny_data, tmp_path, run_tool):
    base = osp.join(REPO, 'tests', 'data', 'configs', 'cifar10_resnet18_tiny.py')
    config = tmp_path / 'bad_hook.py'
    config.write_text(HOOK_OPTION.format(base=base, root=tiny_data('cifar10')))
    proc = run_tool('tools/dist_train.sh', str(config), '2', '--work-dir', str(tmp_path / 'w'),
                    env=dict(PORT=str(free_port())), check=False)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert 'Traceback' not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith('error: ')]
    assert errors == ['error: max_skips=-3 is not supported; expected an int >= 0']
    assert proc.stderr.strip().splitlines()[-1] == errors[0]
