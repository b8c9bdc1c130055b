# How-Do-ViTs claim: AlterNet outperforms CNNs in small data regimes. A small AlterNet-18 and
# the same network with every MSA block replaced by its conv block (a ResNet-18 of the same
# widths), trained 3 epochs on the first 6 000 Fashion-MNIST training images (a tenth), test
# top-1 on the 10 000 test images. 3 seeds; the runs are shared with hdv_hessian_magnitude.
#
#   python tools/reproduce.py configs/studies/hdv_small_data_alternet.py
_alternet = 'configs/alternet/alternet18-small_1xb128-3e_fashion-mnist.py'

# no loader worker processes on a shared CPU
_serial = [
    f'{loader}_dataloader.{key}' for loader in ('train', 'val', 'test')
    for key in ('num_workers=0', 'persistent_workers=False')
]
name = 'hdv_small_data_alternet'
claim = dict(
    quote=('AlterNet outperforms CNNs not only in large data regimes but also in small data '
           'regimes.'),
    source=('Park and Kim, "How Do Vision Transformers Work?", ICLR 2022, abstract and Fig. 12 '
            'center (https://arxiv.org/abs/2202.06709)'),
    tested=('trained on a tenth of Fashion-MNIST (6 000 images, 3 epochs), AlterNet-18 reaches '
            'a higher test top-1 than the ResNet-18 it is built from (by at least 0.5 points, '
            'about the gain the paper reports on CIFAR-100 rescaled to Fashion-MNIST\'s error), '
            '3 seeds.'))
outcome = dict(metric='test/accuracy/top1', comparison=['alternet', 'resnet'], direction='greater',
               margin=0.5)
seeds = [0, 1, 2]  # more seeds extend the study (finished runs are kept)
cfg_options = [
    'train_dataloader.dataset.indices=6000', 'train_cfg.max_epochs=3', 'param_scheduler.1.T_max=3'
] + _serial
runs = [
    dict(label='resnet', config=_alternet, cfg_options=['model.backbone.num_msa_blocks=[0,0,0,0]'],
         baseline=True),
    dict(label='alternet', config=_alternet, baseline='resnet'),
]
reuse = ['hdv_hessian_magnitude']
_t = '[test/accuracy/top1]'
verdict = (
    'The declared comparison did not hold: trained on a tenth of Fashion-MNIST for 3 epochs, '
    'AlterNet-18 reaches {mean[alternet]' + _t + '} % top-1 against {mean[resnet]' + _t + '} % '
    'for the ResNet-18 it is built from, a difference of {diff[alternet][resnet]' + _t + '} '
    '(95% CI {ci[alternet][resnet]' + _t + '}), below the ResNet in every seed; the interval '
    'rules out the 0.5-point gain the study looked for. The paper trains to convergence on '
    'subsets of CIFAR-100; this reading is of a short schedule on a small grey-scale task.')
