# Paper-scale study: plain vs SE vs StepNet pre-activation ResNet-164 on CIFAR-100, 5 seeds.
#
#   python tools/reproduce.py configs/studies/stepnet_vs_se_cifar100.py --dry-run
#   python tools/reproduce.py configs/studies/stepnet_vs_se_cifar100.py --device cuda --jobs 2
#   python tools/reproduce.py configs/studies/stepnet_vs_se_cifar100.py --launcher slurm \
#       --partition PARTITION --gpus 1
#
# 164 epochs a run (the paper's schedule); fields: docs/studies.md.
_dir = 'configs/stepnet/'

name = 'stepnet_vs_se_cifar100'
claim = dict(
    quote=('Similar to the adaptive step-size method which is effective in solving stiff ODEs, '
           'we show that the SAM is also a stiffness-aware step size adaptor that can enhance '
           "the model's representational ability to measure intrinsic SP by refining the "
           'estimation of stiffness information and generating adaptive attention values.'),
    source=('Huang et al., "Understanding Self-attention Mechanism via Dynamical System '
            'Perspective", ICCV 2023, abstract (https://arxiv.org/abs/2308.09939)'),
    tested=('on the pre-activation ResNet-164 trained 164 epochs on CIFAR-100, as in the paper: '
            'StepNet raises the total neural stiffness over the plain network, TNS tracks '
            'top-1 across the runs, and top-1 (secondary) rises with SE and more with StepNet.'))
seeds = [0, 1, 2, 3, 4]
analysis = ['tns', 'spectrum', 'freq_noise']
analysis_args = dict(tns=['--num-batches', '8'], spectrum=['--num-batches', '4'],
                     freq_noise=['--num-batches', '4'])
runs = [
    dict(label='plain', config=_dir + 'preact-resnet164_1xb128-164e_cifar100.py', baseline=True),
    dict(label='se', config=_dir + 'preact-resnet164-se_1xb128-164e_cifar100.py', baseline='plain'),
    dict(label='stepnet', config=_dir + 'preact-resnet164-stepnet_1xb128-164e_cifar100.py',
         baseline=['plain', 'se']),
]
outcome = dict(metric='tns/network', comparison=['stepnet', 'plain'], direction='greater',
               margin=0.2, link='test/accuracy/top1')
verdict = None
