# Reproduction study: does a stiffness-aware step size help beyond ResNets? Plain vs SE vs StepNet
# step sizes on three non-ResNet families of mmpretrain, each written onto the upstream backbone
# by mmstiff.WithSteps, trained from scratch on Fashion-MNIST with one matched budget.
#
#   make data                       # the real Fashion-MNIST in data/fashion_mnist
#   python tools/reproduce.py configs/studies/steps_beyond_resnets_fashion_mnist.py --jobs 1
#
# The configs are in configs/zoo/: ConvNeXt-atto (2x2 stem), MobileNetV2 and DeiT-tiny (4x4
# patches), each plain (the zoo study's config), with an SE adaptor and with a StepNet adaptor on
# every residual step (`*-se_*`, `*-stepnet_*`: the plain config with its backbone wrapped), the
# adaptors at the paper's start. The budget is the zoo study's (configs/zoo/_base_/: the first
# 6,400 training images, 100 iterations at batch 64, AdamW 1e-3 with a cosine schedule; tested on
# the first 2,000 test images), sized for one thread of a shared 2-core CPU.
# Results: docs/results/steps_beyond_resnets_fashion_mnist/.
_zoo = 'configs/zoo/{}_1xb64-1e_fashion-mnist-6400.py'

name = 'steps_beyond_resnets_fashion_mnist'
claim = dict(
    quote=('Similar to the adaptive step-size method which is effective in solving stiff ODEs, '
           'we show that the SAM is also a stiffness-aware step size adaptor that can enhance '
           "the model's representational ability to measure intrinsic SP by refining the "
           'estimation of stiffness information and generating adaptive attention values.'),
    source=('Huang et al., "Understanding Self-attention Mechanism via Dynamical System '
            'Perspective", ICCV 2023, abstract (https://arxiv.org/abs/2308.09939); the paper '
            'tests it on ResNets and on the branches of a ViT'),
    tested=('the claim read beyond the ResNets it was shown on: on ConvNeXt-atto, MobileNetV2 '
            'and DeiT-tiny, each trained from scratch for 100 iterations on Fashion-MNIST with '
            'the same budget, a StepNet step size on every residual step raises test top-1 over '
            'the plain network (declared for ConvNeXt-atto, the family whose blocks already '
            'carry a learned step size, layer scale; the other families and SE as secondary '
            'comparisons). 3 seeds of every variant, far from convergence: the study reads what '
            'the step size does to early training at this scale, not the converged accuracy.'))
seeds = [0, 1, 2]
analysis = ['tns']
analysis_args = dict(tns=['--num-batches', '2'])
runs = []
for _family in ('convnext-atto', 'mobilenet-v2', 'deit-tiny-p4'):
    runs += [
        dict(label=f'{_family}.plain', config=_zoo.format(_family), baseline=True),
        dict(label=f'{_family}.se', config=_zoo.format(f'{_family}-se'),
             baseline=f'{_family}.plain'),
        dict(label=f'{_family}.stepnet', config=_zoo.format(f'{_family}-stepnet'),
             baseline=[f'{_family}.plain', f'{_family}.se']),
    ]
del _family

# The primary outcome, declared before any run: StepNet raises ConvNeXt-atto's test top-1 over
# the plain ConvNeXt-atto; smallest effect of interest 1 point (the order of the gains the paper
# reports for StepNet over plain ResNets on CIFAR).
outcome = dict(metric='test/accuracy/top1',
               comparison=['convnext-atto.stepnet', 'convnext-atto.plain'], direction='greater',
               margin=1.0, link='tns/network')
