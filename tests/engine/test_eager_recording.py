"""The compiler's eager stance while diagnostics hooks record (eager_recording)."""
import pytest
import torch
from torch._dynamo import eval_frame

from mmstiff.engine.hooks.eager_recording import EagerWhileRecording


def _stance():
    return eval_frame._stance.stance


@pytest.fixture
def default_stance():
    torch.compiler.set_stance('default')
    yield
    torch.compiler.set_stance('default')


@pytest.mark.parametrize('first_out', [True, False], ids=['fifo', 'lifo'])
def test_two_holders_restore_the_stance_once_both_let_go(default_stance, first_out):
    eager = EagerWhileRecording()
    eager.hold()
    eager.hold()  # a second hook records the same iteration
    assert _stance() == 'force_eager' and eager.holds == 2
    eager.release()
    assert _stance() == 'force_eager'  # the other hook still records, whichever ends first
    eager.release()
    assert _stance() == 'default' and eager.holds == 0
    eager.release()  # nothing held: nothing changes
    assert _stance() == 'default' and eager.holds == 0


def test_the_stance_before_the_first_hold_comes_back(default_stance):
    torch.compiler.set_stance('eager_on_recompile')  # the user's own stance
    eager = EagerWhileRecording()
    eager.hold()
    assert _stance() == 'force_eager'
    eager.release()
    assert _stance() == 'eager_on_recompile'


def test_a_compiled_function_runs_eagerly_while_held(default_stance):
    calls = []

    def backend(graph, example_inputs):
        calls.append(graph)
        return graph.forward

    @torch.compile(backend=backend)
    def double(x):
        return x * 2

    eager = EagerWhileRecording()
    eager.hold()
    assert torch.equal(double(torch.ones(2)), torch.full((2, ), 2.0))
    assert calls == []  # not compiled while held
    eager.release()
    double(torch.ones(2))
    assert len(calls) == 1
