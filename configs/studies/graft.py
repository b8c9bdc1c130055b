# Reproduction study: step-size adaptors grafted onto a plain pretrained network, with the
# paper's start and with the identity start (docs/methods.md §3, "Starting from a plain
# checkpoint").
#
#   make data                                   # the real Fashion-MNIST in data/fashion_mnist
#   OMP_NUM_THREADS=1 python tools/reproduce.py configs/studies/graft.py
#   python tools/reproduce.py graft --report-only                   # after filling `verdict`
#
# 1. `plain-3e`: the demo pre-activation ResNet-20 without adaptors, trained 3 epochs, one per
#    seed; its last checkpoint is the plain checkpoint the other runs of the same seed start
#    from (`after='plain-3e'`, `{seed}` in the path; the classifier's init_cfg Pretrained, not
#    load_from, which tools/test.py would load again over the checkpoint it tests). The runs
#    read it from the runner's default work dir (work_dirs/studies); with --work-dir D, change
#    _plain_checkpoint below to D/graft/plain-3e/seed{seed}/epoch_3.pth.
# 2. `step0.*`: the network at step 0 of fine-tuning (plain, or with SE / StepNet adaptors in
#    every block, `start` 'paper' or 'identity'): built, initialised and loaded like the `ft.*`
#    run of the same seed, then one iteration at learning rate 0 with every BN frozen
#    (norm_eval=True, adaptor_norm='follow'), which leaves every weight and statistic as it
#    was, and tested. (The runner tests what training saves; this is the no-op training.)
#    `step0.plain` and the identity starts must give exactly the top-1 of `plain-3e`.
# 3. `ft.*`: the same networks fine-tuned one epoch (lr 0.01, warm-up then cosine) and tested.
#
# Every run skips the in-training validation (the runner tests the final checkpoint) and the
# diagnostic hooks. Results: docs/results/graft/.
_config = 'configs/demo/preact-resnet20-stepnet_1xb128-3e_fashion-mnist.py'
_plain_checkpoint = 'work_dirs/studies/graft/plain-3e/seed{seed}/epoch_3.pth'
_adaptors = {
    'plain': ['model.backbone.adaptor=None'],
    'se-paper':
    ['model.backbone.adaptor.type=mmstiff.SEAdaptor', 'model.backbone.adaptor.start=paper'],
    'se-identity':
    ['model.backbone.adaptor.type=mmstiff.SEAdaptor', 'model.backbone.adaptor.start=identity'],
    'stepnet-paper': ['model.backbone.adaptor.start=paper'],
    'stepnet-identity': ['model.backbone.adaptor.start=identity'],
}
_one_epoch = [
    'model.init_cfg.type=Pretrained', f'model.init_cfg.checkpoint={_plain_checkpoint}',
    'train_cfg.max_epochs=1', 'param_scheduler.1.T_max=1'
]
_fine_tune = _one_epoch + ['optim_wrapper.optimizer.lr=0.01']
# one batch of 128 at learning rate 0, every BN frozen: the saved model is the loaded one
_step0 = _one_epoch + [
    'optim_wrapper.optimizer.lr=0.0', 'model.backbone.norm_eval=True',
    'model.backbone.adaptor_norm=follow', 'train_dataloader.dataset.indices=128'
]

name = 'graft'
claim = dict(
    quote=('Hypothesis of this project (no paper states it): step-size adaptors grafted onto a '
           'trained plain ResNet with the identity start (Δ ≡ 1) keep its accuracy and '
           'fine-tune as well as the plain network, while the start the paper uses loses it.'),
    source=("mmstiff's own hypothesis, about the adaptors of Huang et al., \"Understanding "
            'Self-attention Mechanism via Dynamical System Perspective", ICCV 2023 '
            '(https://arxiv.org/abs/2308.09939), which trains them from scratch or from an '
            'adapted ImageNet checkpoint'),
    tested=('grafted onto plain checkpoints of the demo ResNet-20 (Fashion-MNIST, 3 epochs, '
            'one per seed), '
            "adaptors with the paper's start (StepNet: Δ ≡ sigmoid(-1); SE: random Δ near 0.5) "
            'lose the pretrained accuracy at step 0 and end one epoch of fine-tuning below the '
            'plain network fine-tuned alike, while the identity start (Δ ≡ 1) starts at the '
            'plain accuracy exactly and fine-tunes at least as well as the plain network.'))
seeds = [0, 1, 2]
cfg_options = ['train_cfg.val_begin=1000', 'custom_hooks=[]']
runs = [dict(label='plain-3e', config=_config, cfg_options=_adaptors['plain'], baseline=False)]
runs += [
    dict(label=f'step0.{label}', config=_config, cfg_options=_step0 + options,
         baseline=True if label == 'plain' else 'step0.plain', after='plain-3e')
    for label, options in _adaptors.items()
]
runs += [
    dict(label=f'ft.{label}', config=_config, cfg_options=_fine_tune + options,
         baseline=True if label == 'plain' else 'ft.plain', after='plain-3e')
    for label, options in _adaptors.items()
]
# Filled in after looking at the results page, with its numbers as placeholders.
_top1 = '[test/accuracy/top1]'
# The primary outcome (the project's hypothesis): StepNet grafted with the identity start
# fine-tunes as well as the plain network fine-tuned alike, within ±0.5 points of top-1.
outcome = dict(metric='test/accuracy/top1', comparison=['ft.stepnet-identity', 'ft.plain'],
               direction='equivalent', margin=0.5)
verdict = (
    'Equivalence shown within ±0.5 points: StepNet grafted with the identity start and '
    'fine-tuned one epoch ends {diff[ft.stepnet-identity]' + _top1 + '} points from the plain '
    'network fine-tuned alike (95% CI {ci[ft.stepnet-identity]' + _top1 + '}); SE with the '
    'identity start {diff[ft.se-identity]' + _top1 + '} (CI {ci[ft.se-identity]' + _top1 + '}). '
    "At step 0 the identity start keeps each plain checkpoint's top-1 exactly (mean "
    '{mean[plain-3e]' + _top1 + '}%, difference {diff[step0.stepnet-identity]' + _top1 + '} in '
    'every seed), while the paper\'s start '
    'loses it: StepNet (Δ ≡ sigmoid(-1)) {mean[step0.stepnet-paper]' + _top1 + '}%, SE '
    '{mean[step0.se-paper]' + _top1 + '}%, and after fine-tuning StepNet with that start ends '
    '{diff[ft.stepnet-paper]' + _top1 + '} points from the plain network (CI '
    '{ci[ft.stepnet-paper]' + _top1 + '}; below it in every seed, but the interval does not '
    'exclude 0). Each seed grafts onto and fine-tunes its own plain checkpoint (plain-3e of '
    'the same seed), so the intervals hold the variation between checkpoints as well as the '
    "fine-tuning's.")
