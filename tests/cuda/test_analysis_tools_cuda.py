"""tools/analysis/{tns,spectrum,freq_noise}.py with ``--device cuda``: the numbers of the same
checkpoint on the CPU, within the precision of cuDNN's convolutions (TF32 where the card has
it)."""
import json

import pytest
from analysis_runs import CNN, analysis_tool, train_tiny  # tests/ (beside its conftest.py)

pytestmark = [pytest.mark.cuda, pytest.mark.slow]


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory, tiny_data):
    config, ckpt, _, _ = train_tiny(
        str(tmp_path_factory.mktemp('cnn_cuda')), tiny_data('mnist'), CNN)
    return config, ckpt


def _run(tool, result, config, ckpt, out, device, *extra):
    analysis_tool(tool, config, ckpt, '--out-dir', str(out / device), '--num-batches', '1',
                  '--device', device, *extra)
    return json.load(open(out / device / result))


def test_tns_on_cuda_equals_cpu(checkpoint, tmp_path):
    cpu, cuda = (_run('tns.py', 'tns.json', *checkpoint, tmp_path, d) for d in ('cpu', 'cuda'))
    assert cpu['trajectories'].keys() == cuda['trajectories'].keys()
    for name, values in cpu['trajectories'].items():
        assert cuda['trajectories'][name]['tns'] == pytest.approx(values['tns'], rel=2e-2)


def test_spectrum_on_cuda_equals_cpu(checkpoint, tmp_path):
    cpu, cuda = (
        _run('spectrum.py', 'spectrum.json', *checkpoint, tmp_path, d) for d in ('cpu', 'cuda'))
    assert cpu['states'].keys() == cuda['states'].keys()
    for name, state in cpu['states'].items():
        assert cuda['states'][name]['hf_ratio'] == pytest.approx(state['hf_ratio'], rel=2e-2)


def test_freq_noise_on_cuda_runs_and_agrees_without_noise(checkpoint, tmp_path):
    # the noise itself is drawn on the device (other random streams): only the clean accuracy
    # is comparable, and every band gets a finite drop
    cpu, cuda = (
        _run('freq_noise.py', 'freq_noise.json', *checkpoint, tmp_path, d, '--freqs', '0', '1.0')
        for d in ('cpu', 'cuda'))
    assert cuda['clean_accuracy'] == pytest.approx(cpu['clean_accuracy'], abs=1.0)
    assert len(cuda['bands']) == len(cpu['bands']) == 2
    assert all(abs(b['drop']) <= 100 for b in cuda['bands'])
