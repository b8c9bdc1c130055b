"""A diverged run stops, names the iteration and keeps only finite checkpoints; 'skip' mode
drops the bad steps and finishes."""
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.hooks import Hook
from mmengine.model import BaseModel
from mmengine.runner import Runner
from reliability_runs import FAULTS, load, parameters, write_config
from torch.utils.data import DataLoader, TensorDataset

from mmstiff.engine import DivergenceError, DivergenceHook


def finite(path):
    return all(
        torch.isfinite(v).all() for v in load(path)['state_dict'].values() if v.is_floating_point())


def written(work):
    return sorted(int(p.stem.split('_')[1]) for p in work.glob('iter_*.pth'))


@pytest.mark.slow
def test_huge_learning_rate_stops_with_only_finite_checkpoints(tiny_data, train, tmp_path):
    config = write_config(tmp_path / 'lr.py', tiny_data('cifar10'), train_cfg=dict(max_iters=12),
                          optim_wrapper=dict(optimizer=dict(lr=1000.0)),
                          default_hooks=dict(checkpoint=dict(interval=1)))
    work = tmp_path / 'work'
    proc = train(config, work, check=False)
    assert proc.returncode == 1, proc.stderr[-3000:]
    message = proc.stderr.strip().splitlines()[-1]
    assert message.startswith('error: Training diverged: ') and 'Traceback' not in proc.stderr
    # a checkpoint every iteration: every iteration before the one named was saved, finite
    stopped = int(re.search(r'iteration (\d+)', message)[1])
    assert 1 < stopped < 12
    assert written(work) == list(range(1, stopped))
    assert all(finite(work / f'iter_{i}.pth') for i in written(work))
    last = work / f'iter_{stopped - 1}.pth'
    assert (work / 'last_checkpoint').read_text().strip() == str(last)
    assert f'The last checkpoint is {last}.' in message
    assert "divergence=dict(action='skip', max_skips=N)" in message


@pytest.mark.slow
def test_nan_loss_stops_at_that_iteration(tiny_data, train, tmp_path):
    config = write_config(tmp_path / 'nan.py', tiny_data('cifar10'), train_cfg=dict(max_iters=6),
                          custom_imports=FAULTS,
                          custom_hooks=[dict(type='PoisonIteration', iterations=[3])])
    work = tmp_path / 'work'
    proc = train(config, work, check=False)
    assert proc.returncode == 1
    assert ('error: Training diverged: at iteration 3, the loss is not finite (loss=nan). The '
            f'last checkpoint is {work / "iter_2.pth"}.') in proc.stderr, proc.stderr[-3000:]
    assert written(work) == [2] and finite(work / 'iter_2.pth')
    # the same message is in the run's log file
    log = next(work.glob('*/*.log')).read_text()
    assert 'Training diverged: at iteration 3, the loss is not finite' in log


@pytest.mark.slow
def test_skip_mode_drops_the_bad_step_and_finishes(trained_run, tiny_data, train, tmp_path):
    """Iteration 3 poisoned: its step is not applied, so after 3 iterations the parameters and
    the momentum are those of a clean run after 2."""
    _, clean = trained_run
    skip = write_config(tmp_path / 'skip.py', tiny_data('cifar10'), train_cfg=dict(max_iters=3),
                        custom_imports=FAULTS,
                        custom_hooks=[dict(type='PoisonIteration', iterations=[3])],
                        divergence=dict(action='skip', max_skips=1))
    work = tmp_path / 'work'
    proc = train(skip, work)
    assert ('Iteration 3: the loss is not finite (loss=nan); its optimizer step was skipped '
            '(1 skipped, max_skips=1).') in proc.stdout + proc.stderr
    after, before = parameters(work / 'iter_3.pth'), parameters(clean / 'iter_2.pth')
    assert after.keys() == before.keys()
    for key in before:
        torch.testing.assert_close(after[key], before[key], rtol=0, atol=0, msg=key)
    momenta = [[s['momentum_buffer'] for s in load(path)['optimizer']['state'].values()]
               for path in (work / 'iter_3.pth', clean / 'iter_2.pth')]
    for x, y in zip(*momenta):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    assert load(work / 'iter_3.pth')['message_hub']['runtime_info']['divergence/skipped_iters'] == 1


@pytest.mark.slow
def test_skip_mode_stops_after_max_skips(tiny_data, train, tmp_path):
    skip = write_config(tmp_path / 'skip.py', tiny_data('cifar10'), train_cfg=dict(max_iters=6),
                        custom_imports=FAULTS,
                        custom_hooks=[dict(type='PoisonIteration', iterations=[2, 3])],
                        divergence=dict(action='skip', max_skips=1))
    work = tmp_path / 'work'
    proc = train(skip, work, check=False)
    assert proc.returncode == 1
    assert ('error: Training diverged: 2 iterations had non-finite losses or gradients, more '
            'than max_skips=1; the last one was iteration 3.') in proc.stderr
    assert written(work) == [2] and finite(work / 'iter_2.pth')


# -- the step-size check, in a Runner of this process -------------------------------------
class StepNetClassifier(BaseModel):
    """mmstiff's CIFAR step ResNet-18 (8 channels, StepNet adaptors) and a linear head."""

    def __init__(self):
        super().__init__()
        from mmstiff.models.backbones import StepResNet_CIFAR
        self.backbone = StepResNet_CIFAR(depth=18, base_channels=8, stem_channels=8,
                                         adaptor=dict(type='mmstiff.StepNetAdaptor'))
        self.head = nn.Linear(64, 4)

    def forward(self, inputs, labels=None, mode='tensor'):
        logits = self.head(self.backbone(inputs)[-1].mean(dim=(2, 3)))
        return dict(loss=F.cross_entropy(logits, labels)) if mode == 'loss' else logits


class InfiniteStep(Hook):
    """Make the step size of one adaptor infinite in one iteration (its forward output)."""

    def __init__(self, adaptor, iteration):
        self.adaptor, self.iteration, self.handle = adaptor, iteration, None

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        if runner.iter + 1 == self.iteration:
            module = runner.model.get_submodule(self.adaptor)
            self.handle = module.register_forward_hook(lambda m, a, out: out * float('inf'))

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        if self.handle is not None:
            self.handle.remove()


@pytest.mark.slow
@pytest.mark.parametrize('interval, named', [(1, True), (2, False)])
def test_non_finite_step_size_is_named(tmp_path, interval, named):
    """An infinite Δ in iteration 3 makes the loss NaN; checked at that iteration (interval 1)
    the message also names the adaptor it came from."""
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(8, 3, 16, 16), torch.randint(0, 4, (8, )))
    runner = Runner(
        model=StepNetClassifier(), work_dir=str(tmp_path),
        train_dataloader=DataLoader(data,
                                    batch_size=2), train_cfg=dict(by_epoch=False, max_iters=4),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.01)),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=2, by_epoch=False)),
        custom_hooks=[
            DivergenceHook(interval=interval),
            InfiniteStep('backbone.layer2.1.step_adaptor', 3)
        ])
    with pytest.raises(DivergenceError) as err:
        runner.train()
    message = str(err.value)
    assert message.startswith('Training diverged: at iteration 3, the loss is not finite')
    # the adaptors after it see non-finite states, those before it do not
    assert ('the step sizes Δ (or parameters) of the adaptors backbone.layer2.1.step_adaptor, '
            'backbone.layer3.0.step_adaptor' in message) is named
    assert ('(first in the forward pass: backbone.layer2.1.step_adaptor)' in message) is named
    assert 'layer2.0' not in message and 'layer1' not in message


def test_settings_are_checked():
    with pytest.raises(
            ValueError, match=r"action='ignore' is not supported; expected one of "
            r"\('stop', 'skip'\)"):
        DivergenceHook(action='ignore')
    with pytest.raises(ValueError, match='max_skips'):
        DivergenceHook(action='skip', max_skips=-1)
