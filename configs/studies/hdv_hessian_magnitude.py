# How-Do-ViTs landscape claim: MSAs reduce the magnitude of the Hessian eigenvalues. A 4-layer
# ViT and a small AlterNet-18 against the same AlterNet-18 with every MSA block replaced by its
# conv block (a ResNet-18 of the same widths), all trained 3 epochs on 6 000 Fashion-MNIST
# training images (the first tenth: the early phase of training in a small data regime), then
# the top-5 Hessian eigenvalues of the l2-regularised training loss on 4 augmented batches of 16
# (tools/analysis/hessian.py, docs/methods.md §12). 3 seeds.
#
#   python tools/reproduce.py configs/studies/hdv_hessian_magnitude.py
_alternet = 'configs/alternet/alternet18-small_1xb128-3e_fashion-mnist.py'
_vit = 'configs/vit/vit-tiny-p4_1xb128-2e_fashion-mnist.py'

# no loader worker processes on a shared CPU
_serial = [
    f'{loader}_dataloader.{key}' for loader in ('train', 'val', 'test')
    for key in ('num_workers=0', 'persistent_workers=False')
]
name = 'hdv_hessian_magnitude'
claim = dict(
    quote=('Another property of MSAs is that they reduces the magnitude of Hessian eigenvalues. '
           'Figure 1c and Fig. 4 shows that the eigenvalues of ViT are significantly smaller '
           'than that of CNNs.'),
    source=('Park and Kim, "How Do Vision Transformers Work?", ICLR 2022, §2.2 "MSAs flatten '
            'the loss landscape", Fig. 1c, 4 and 12 right (https://arxiv.org/abs/2202.06709)'),
    tested=('the average positive top-5 Hessian eigenvalue (APE, Appendix C.5) of a 4-layer '
            'ViT is smaller than that of a ResNet-18 (ln APE lower by more than ln 2); '
            'secondary: AlterNet-18 against the same ResNet-18 early in training (Fig. 12 '
            'right), NEP, the largest eigenvalue. Scale for 2 CPU cores: 6 000 training '
            'images, 3 epochs, 4 batches of 16 for the spectrum, 3 seeds; the paper trains '
            'on CIFAR-100 and ImageNet and measures 10 batches.'))
outcome = dict(metric='hessian/log_ape', comparison=['vit', 'resnet'], direction='less',
               margin=0.69)  # ln 2: eigenvalues at least halved
seeds = [0, 1, 2]  # sized for a shared 2-core machine; more seeds extend the study
cfg_options = [
    'train_dataloader.dataset.indices=6000', 'train_cfg.max_epochs=3', 'param_scheduler.1.T_max=3'
] + _serial
analysis = ['hessian']
analysis_args = dict(hessian=['--num-batches', '4', '--top-k', '5', '--max-iter', '50'])
runs = [
    dict(label='resnet', config=_alternet, cfg_options=['model.backbone.num_msa_blocks=[0,0,0,0]'],
         baseline=True),
    dict(label='vit', config=_vit, baseline='resnet'),
    dict(label='alternet', config=_alternet, baseline='resnet'),
]
reuse = ['hdv_small_data_alternet']
_a = '[hessian/log_ape]'
_t = '[test/accuracy/top1]'
verdict = (
    'The declared comparison did not hold at this scale: after 3 epochs on 6 000 images the '
    '4-layer ViT\'s ln APE is larger than the ResNet-18\'s by {diff[vit][resnet]' + _a + '} '
    '(95% CI {ci[vit][resnet]' + _a + '}), in every seed, the opposite of the claimed '
    'direction; the interval rules out the halving (ln 2) the study looked for. The ViT also '
    'has the more negative smallest eigenvalue ({mean[vit][hessian/min]} against '
    '{mean[resnet][hessian/min]}) and a NEP of {mean[vit][hessian/nep]} against '
    '{mean[resnet][hessian/nep]}. The two are not at comparable points of training: the ViT '
    'reaches {mean[vit]' + _t + '} % test top-1 and the ResNet {mean[resnet]' + _t + '} %, so '
    'this compares an early ViT with a nearly trained CNN, where the paper compares trained '
    'networks on CIFAR-100 and ImageNet. AlterNet-18 against the same ResNet (secondary, early '
    'training as in Fig. 12 right): ln APE {diff[alternet][resnet]' + _a + '} (CI '
    '{ci[alternet][resnet]' + _a + '}, q = {q[alternet][resnet]' + _a + '}), not the smaller '
    'eigenvalues the paper shows.')
