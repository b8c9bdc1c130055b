"""The testbed's dataset, flow network and metric, and one training run through the train and
test tools."""
import json
import os.path as osp

import numpy as np
import pytest
import torch

from mmstiff.datasets import StiffFlowDataset
from mmstiff.evaluation import FlowMetric, step_stiffness_correlations
from mmstiff.models import FlowResNet
from mmstiff.testbed import initial_states, local_stiffness, make_system, trajectory

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
STIFF = osp.join(REPO, 'configs', 'testbed', 'flow-resnet8-stepnet_relaxation-stiff.py')


def test_dataset_holds_the_exact_trajectories_and_the_stiffness_at_each_start():
    data = StiffFlowDataset(dim=4, spread=20.0, coupling=1.0, num_samples=6, horizon=0.8,
                            num_steps=4, split='train', seed=3, system_seed=2)
    system = make_system(4, 20.0, 1.0, seed=2)
    x0 = initial_states(6, 4, seed=3)
    states = trajectory(system, x0, 0.8, 4)
    item = data[5]
    assert torch.allclose(item['inputs'], x0[5].float())
    assert torch.allclose(item['trajectory'], states[5].float())
    starts = torch.cat([x0[5:6], states[5, :-1]])
    assert torch.allclose(item['stiffness'], local_stiffness(system, starts).float())
    # the test split draws other starting states from the same system
    test = StiffFlowDataset(dim=4, spread=20.0, coupling=1.0, num_samples=6, horizon=0.8,
                            num_steps=4, split='test', seed=3, system_seed=2)
    assert not torch.allclose(test[0]['inputs'], item['inputs'])
    assert torch.equal(test.system.rotation, data.system.rotation)
    with pytest.raises(ValueError, match="split='val'"):
        StiffFlowDataset(split='val')


@pytest.mark.parametrize(
    'adaptor', [None, dict(type='mmstiff.SEAdaptor'),
                dict(type='mmstiff.StepNetAdaptor')])
def test_flow_resnet_steps_are_residual_steps_with_the_adaptors_step(adaptor):
    torch.manual_seed(0)
    model = FlowResNet(dim=4, depth=3, hidden=8, adaptor=adaptor).eval()
    x = torch.randn(5, 4)
    states, steps = model.integrate(x)
    assert states.shape == steps.shape == (5, 3, 4)
    # by hand: x_l = x_{l-1} + Δ_l ⊙ f_l(x_{l-1})
    state = x
    for i, block in enumerate(model.steps):
        f = block.residual(state)
        step = torch.ones_like(f) if adaptor is None else \
            block.adaptor(state[:, None], f[:, None])[:, 0]
        state = state + step * f
        assert torch.allclose(states[:, i], state, atol=1e-6)
        assert torch.allclose(steps[:, i], step.expand_as(state), atol=1e-6)
    target = torch.randn(5, 3, 4)
    loss = model(x, target, torch.ones(5, 3), mode='loss')['loss']
    assert float(loss) == pytest.approx(float(((states - target)**2).mean()), rel=1e-5)
    final = FlowResNet(dim=4, depth=3, hidden=8, adaptor=adaptor, supervise='final')
    final.load_state_dict(model.state_dict())
    final.eval()
    loss = final(x, target, torch.ones(5, 3), mode='loss')['loss']
    assert float(loss) == pytest.approx(
        float(((states[:, -1] - target[:, -1])**2).mean()), rel=1e-5)
    with pytest.raises(ValueError, match="supervise='all'"):
        FlowResNet(supervise='all')


def test_step_stiffness_correlations_against_numpy():
    rng = np.random.default_rng(0)
    rho = np.exp(rng.normal(size=(6, 5)))
    steps = 0.5 - 0.1 * np.log(rho) + 0.05 * rng.normal(size=(6, 5))
    pooled, per_trajectory = step_stiffness_correlations(steps, rho)
    assert pooled == pytest.approx(np.corrcoef(steps.ravel(), np.log(rho).ravel())[0, 1])
    expected = np.mean([np.corrcoef(s, np.log(k))[0, 1] for s, k in zip(steps, rho)])
    assert per_trajectory == pytest.approx(expected)
    assert pooled < -0.8
    # constant stiffness: undefined
    assert all(np.isnan(step_stiffness_correlations(steps, np.ones_like(rho))))


def test_flow_metric_errors_and_steps():
    metric = FlowMetric()
    samples = []
    for i in range(4):
        target = torch.full((3, 2), float(i + 1))
        samples.append(
            dict(states=target + 0.1, trajectory=target,
                 stiffness=torch.tensor([4.0, 2.0, 1.0]) * (i + 1), steps=torch.tensor([[0.2, 0.4],
                                                                                        [0.5, 0.5],
                                                                                        [0.9,
                                                                                         0.7]])))
    metric.process({}, samples)
    result = metric.compute_metrics(metric.results)
    targets = torch.stack([s['trajectory'] for s in samples])
    final = targets[:, -1]
    assert result['final_rel_error'] == pytest.approx(float(0.1 * 2**0.5 * 2 / final.norm()))
    assert result['final_log_error'] == pytest.approx(np.log(result['final_rel_error']))
    assert result['trajectory_rel_error'] == pytest.approx(
        float((0.1 * torch.ones_like(targets)).norm() / targets.norm()))
    assert result['step/1'] == pytest.approx(0.3) and result['step/3'] == pytest.approx(0.8)
    along = np.corrcoef([0.3, 0.5, 0.8], np.log([4.0, 2.0, 1.0]))[0, 1]
    assert along < -0.9 and result['step_stiffness_corr_trajectory'] == pytest.approx(along)
    rho = np.log(np.stack([s['stiffness'].numpy() for s in samples]))
    pooled = np.corrcoef(np.tile([0.3, 0.5, 0.8], 4), rho.ravel())[0, 1]
    assert result['step_stiffness_corr'] == pytest.approx(pooled)
    plain = FlowMetric()
    plain.process({}, [dict(s, steps=None) for s in samples])
    assert 'step_stiffness_corr' not in plain.compute_metrics(plain.results)


@pytest.mark.slow
def test_one_run_through_the_train_and_test_tools(tmp_path):
    import subprocess
    import sys
    work = str(tmp_path / 'run')
    # 32 Adam steps (4 epochs of 8 batches, the cosine schedule shortened to match): enough for
    # the learned flow to beat the zero prediction (relative error 1); 4 steps are not (3.7).
    options = [
        'train_cfg.max_epochs=4', 'param_scheduler.0.T_max=4', 'train_dataloader.batch_size=32',
        'train_dataloader.dataset.num_samples=256', 'test_dataloader.dataset.num_samples=128'
    ]
    subprocess.run([
        sys.executable,
        osp.join(REPO, 'tools', 'train.py'), STIFF, '--work-dir', work, '--cfg-options', *options
    ], check=True, cwd=REPO)
    checkpoint = osp.join(work, 'epoch_4.pth')
    if not osp.exists(checkpoint):
        checkpoint = osp.join(work, open(osp.join(work, 'last_checkpoint')).read().strip())
    out = osp.join(work, 'metrics.json')
    subprocess.run([
        sys.executable,
        osp.join(REPO, 'tools', 'test.py'), STIFF, checkpoint, '--work-dir', work, '--out', out,
        '--cfg-options', *options
    ], check=True, cwd=REPO)
    metrics = json.load(open(out))
    assert 0 < metrics['flow/final_rel_error'] < 1
    assert -1 <= metrics['flow/step_stiffness_corr'] <= 1
    assert all(0 < metrics[f'flow/step/{i}'] < 1 for i in range(1, 9))
