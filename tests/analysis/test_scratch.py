"""The reusable difference buffer: its sizing policy, and NSI norms computed through it equal
the explicit formula for every kind of step and dtype."""
import pytest
import torch

from mmstiff.analysis import ScratchBuffer, stiffness_norms


def explicit_norms(x_t, x_next, step=None):
    """||(x_next - x_t) / Δ|| and ||x_t|| per sample, in float64, 0/0 as 0."""
    x_t, x_next = x_t.double(), x_next.double()
    diff = x_next - x_t
    if step is not None:
        diff = torch.nan_to_num(diff / torch.as_tensor(step).double(), nan=0.0)
    return diff.flatten(1).norm(dim=1), x_t.flatten(1).norm(dim=1)


def test_buffer_grows_and_shrinks_with_the_states():
    scratch = ScratchBuffer()
    assert scratch.nbytes == 0
    first = scratch.take((4, 8, 16, 16), torch.device('cpu'))
    assert first.shape == (4, 8, 16, 16) and first.dtype == torch.float32
    assert scratch.nbytes == 4 * 8 * 16 * 16 * 4
    # a smaller request at least half the size reuses the buffer
    second = scratch.take((4, 16, 8, 8), torch.device('cpu'))
    assert second.data_ptr() == first.data_ptr() and scratch.nbytes == 4 * 8 * 16 * 16 * 4
    third = scratch.take((4, 8, 8, 16), torch.device('cpu'))  # half: still reused
    assert third.data_ptr() == first.data_ptr()
    # less than half: a buffer of that size, the old one dropped
    scratch.take((4, 32, 4, 4), torch.device('cpu'))
    assert scratch.nbytes == 4 * 32 * 4 * 4 * 4
    # larger: grows to it
    scratch.take((4, 64, 32, 32), torch.device('cpu'))
    assert scratch.nbytes == 4 * 64 * 32 * 32 * 4
    scratch.release()
    assert scratch.nbytes == 0


def test_a_request_like_the_last_gets_the_same_view():
    scratch = ScratchBuffer()
    cpu = torch.device('cpu')
    first = scratch.take(torch.Size((2, 8, 4, 4)), cpu)
    assert scratch.take((2, 8, 4, 4), cpu) is first  # a tuple equal to the Size
    other = scratch.take((2, 4, 4, 4), cpu)  # another shape: a new view of the same buffer
    assert other.shape == (2, 4, 4, 4) and other.data_ptr() == first.data_ptr()
    again = scratch.take((2, 8, 4, 4), cpu)
    assert again is not first and again.shape == (2, 8, 4, 4)
    # another device: a buffer there, not the last view
    meta = scratch.take((2, 8, 4, 4), torch.device('meta'))
    assert meta.device.type == 'meta' and meta.shape == (2, 8, 4, 4)
    assert scratch.take((2, 8, 4, 4), cpu).device == cpu
    scratch.release()
    assert scratch.nbytes == 0
    assert scratch.take((2, 8, 4, 4), cpu) is not again  # released: made anew


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize('step_kind',
                         ['none', 'scalar', 'per_sample', 'per_channel', 'per_element'])
def test_norms_through_the_buffer_equal_the_formula(dtype, step_kind):
    torch.manual_seed(0)
    x_t = torch.randn(3, 4, 5, 5).to(dtype)
    x_next = (x_t.float() + 0.1 * torch.randn(3, 4, 5, 5)).to(dtype)
    step = {
        'none': None,
        'scalar': 0.5,
        'per_sample': torch.rand(3, 1, 1, 1) + 0.1,
        'per_channel': torch.rand(3, 4, 1, 1) + 0.1,
        'per_element': torch.rand(3, 4, 5, 5) + 0.1
    }[step_kind]
    scratch = ScratchBuffer()
    # the buffer holds another state's values before: they must not leak into the result
    scratch.take((3, 4, 5, 5), x_t.device).fill_(123.0)
    slope, state = stiffness_norms(x_t, x_next, step, scratch=scratch)
    plain_slope, plain_state = stiffness_norms(x_t, x_next, step)
    ref_slope, ref_state = explicit_norms(x_t, x_next, step)
    assert torch.allclose(slope.double(), ref_slope, rtol=1e-5)
    assert torch.allclose(state.double(), ref_state, rtol=1e-5)
    # the same float32 arithmetic with and without the buffer
    assert torch.equal(slope, plain_slope) and torch.equal(state, plain_state)


def test_inputs_are_not_modified_through_the_buffer():
    x_t = torch.randn(2, 3, 4, 4)
    x_next = x_t + torch.randn(2, 3, 4, 4)
    step = torch.rand(2, 3, 4, 4) + 0.5
    before = (x_t.clone(), x_next.clone(), step.clone())
    stiffness_norms(x_t, x_next, step, scratch=ScratchBuffer())
    assert all(torch.equal(a, b) for a, b in zip(before, (x_t, x_next, step)))
