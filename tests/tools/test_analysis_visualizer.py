"""tools/analysis/{tns,spectrum,freq_noise}.py: ``--to-visualizer`` and ``--device``."""
import json
import os.path as osp

import cv2
import pytest
import torch
from analysis_runs import CNN, analysis_tool, train_tiny

from mmstiff.apis.devices import check_device
from mmstiff.apis.runtime import ConfigError

TOOLS = ('tns.py', 'spectrum.py', 'freq_noise.py')


@pytest.fixture(scope='module')
def cnn_checkpoint(tmp_path_factory, tiny_data):
    config, checkpoint, _, _ = train_tiny(
        str(tmp_path_factory.mktemp('cnn_vis')), tiny_data('mnist'), CNN)
    return config, checkpoint


@pytest.mark.slow
@pytest.mark.parametrize('tool, extra', [('tns.py', []), ('spectrum.py', []),
                                         ('freq_noise.py', ['--freqs', '0', '1.0'])])
def test_figures_reach_the_local_backend(cnn_checkpoint, tool, extra, tmp_path):
    """The config's visualizer (mmpretrain's, with a LocalVisBackend) gets every figure."""
    config, checkpoint = cnn_checkpoint
    out = str(tmp_path / 'out')
    stdout = analysis_tool(tool, config, checkpoint, '--out-dir', out, '--num-batches', '1',
                           '--to-visualizer', *extra)
    assert 'LocalVisBackend' in stdout
    (result, ) = [
        osp.join(out, f) for f in ('tns.json', 'spectrum.json', 'freq_noise.json')
        if osp.isfile(osp.join(out, f))
    ]
    figures = json.load(open(result))['figures']
    assert figures
    for figure in figures:
        sent = osp.join(out, 'vis_data', 'vis_image', figure[:-len('.png')] + '_0.png')
        assert osp.isfile(sent), sent
        # the same picture as the PNG the tool wrote (RGB kept, not swapped)
        original, copy = cv2.imread(osp.join(out, figure)), cv2.imread(sent)
        assert copy.shape == original.shape and (copy == original).all(), figure


@pytest.mark.slow
def test_without_the_flag_nothing_goes_to_the_visualizer(cnn_checkpoint, tmp_path):
    config, checkpoint = cnn_checkpoint
    out = tmp_path / 'out'
    stdout = analysis_tool('tns.py', config, checkpoint, '--out-dir', str(out), '--num-batches',
                           '1')
    assert 'visualizer' not in stdout and not (out / 'vis_data').exists()


@pytest.mark.parametrize('device, message', [
    ('mps', "--device 'mps' is not supported"),
    ('gpu0', "--device 'gpu0' is not a device"),
])
def test_device_names_the_bad_value(device, message):
    with pytest.raises(ConfigError) as err:
        check_device(device)
    assert message in str(err.value) and "expected 'cpu', 'cuda' or 'cuda:N'" in str(err.value)


def test_device_cpu_and_available_cuda():
    assert check_device('cpu') == torch.device('cpu')
    if torch.cuda.is_available():
        assert check_device('cuda').type == 'cuda'
        with pytest.raises(ConfigError, match='CUDA device'):
            check_device(f'cuda:{torch.cuda.device_count()}')


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason='CUDA is available here')
@pytest.mark.parametrize('tool', TOOLS)
def test_cuda_without_cuda_is_an_error_before_any_work(tool, run_tool, tmp_path):
    # the checkpoint does not exist: the device error must come before it is looked at
    proc = run_tool(f'tools/analysis/{tool}', 'tests/data/configs/cifar10_resnet18_tiny.py',
                    str(tmp_path / 'missing.pth'), '--device', 'cuda', '--out-dir',
                    str(tmp_path / 'out'), check=False)
    assert proc.returncode != 0
    assert "--device 'cuda': CUDA is not available on this machine" in proc.stderr
    assert 'missing.pth' not in proc.stderr and not (tmp_path / 'out').exists()


@pytest.mark.slow
def test_to_visualizer_without_backends_fails_before_any_work(cnn_checkpoint, run_tool, tmp_path):
    config, checkpoint = cnn_checkpoint
    out = tmp_path / 'out'
    proc = run_tool('tools/analysis/tns.py', config, checkpoint, '--out-dir', str(out),
                    '--num-batches', '1', '--to-visualizer', '--cfg-options',
                    'visualizer.vis_backends=[]', check=False)
    assert proc.returncode != 0
    assert 'no visualizer.vis_backends' in proc.stderr, proc.stderr[-2000:]
    assert not out.exists()  # nothing computed, nothing written
