# Reproduction study: do MSAs reduce and Convs raise the high-frequency amplitude of features?
#
#   make data
#   make reproduce STUDY=configs/studies/frequency_fashion_mnist.py
#
# Three networks trained on Fashion-MNIST, 3 seeds each: the small AlterNet-18 of
# configs/alternet/ (conv blocks, and an MSA block at the end of stages 2-4), the plain
# pre-activation ResNet-20 of the demo (conv blocks only) and the 8-layer small ViT of
# configs/vit/ (MSA and MLP steps). tools/analysis/spectrum.py measures the Δ log amplitude at
# 1.0π of the state after every step on test images; its change across a step, averaged over
# the steps of each kind (spectrum/dlogamp_step/{conv,msa,mlp}), is the quantity of Fig. 8.
# The ResNet and ViT runs are those of stepnet_vs_se_fashion_mnist and
# oversmoothing_fashion_mnist (same configs, options and seeds; `reuse` below), so only the
# AlterNet runs train here. Results: docs/results/frequency_fashion_mnist/.
name = 'frequency_fashion_mnist'
claim = dict(
    quote=('the Fourier analysis of feature maps shows that MSAs reduce high-frequency signals, '
           'while Convs, conversely, amplifies high-frequency components. In other words, MSAs '
           'are low-pass filters, but Convs are high-pass filters. [...] MSAs almost always '
           'decrease the high-frequency amplitude, and MLPs—corresponding to Convs—increase it. '
           'The only exception is in the early stages of the model.'),
    source=('Park & Kim, "How Do Vision Transformers Work?", ICLR 2022, Section 2 and Fig. 8 '
            '(https://arxiv.org/abs/2202.06709)'),
    tested=('on networks trained on Fashion-MNIST, the Δ log amplitude at 1.0π of the state '
            'falls across MSA steps (AlterNet, ViT) and rises across conv steps (AlterNet, '
            'ResNet) and MLP steps (ViT), on average over the steps of each kind.'
            ' Scale chosen for 2 CPU cores: networks of 0.14-0.42 M parameters trained 2-3 epochs'
            ' (5-12 minutes a run), 3 seeds each; the maps are small (28x28 input, 2x2 to 14x14 '
            "in AlterNet's stages), which limits the frequencies a step can show."))
seeds = [0, 1, 2]
analysis = ['spectrum']
# the flags of the runs reused from stepnet_vs_se_fashion_mnist
analysis_args = dict(tns=['--num-batches', '4'], spectrum=['--num-batches', '2'],
                     freq_noise=['--num-batches', '2'])
reuse = ['stepnet_vs_se_fashion_mnist', 'oversmoothing_fashion_mnist']
runs = [
    dict(label='alternet18-small', baseline=False,
         config='configs/alternet/alternet18-small_1xb128-3e_fashion-mnist.py'),
    dict(label='preact-resnet20', baseline=False,
         config='configs/demo/preact-resnet20-stepnet_1xb128-3e_fashion-mnist.py',
         cfg_options=['model.backbone.adaptor=None'], analysis=['tns', 'spectrum', 'freq_noise']),
    dict(label='vit8', config='configs/vit/vit-tiny-p4_1xb128-2e_fashion-mnist.py',
         cfg_options=['model.backbone.arch.num_layers=8'], baseline=False),
]
_s = 'spectrum/dlogamp_step/'
# The primary outcome: the ViT's MSA steps lower the high-frequency log amplitude at 1.0π
# (one-sample, against 0); smallest effect of interest 0.05 log units.
outcome = dict(metric='spectrum/dlogamp_step/msa', comparison=['vit8'], direction='less',
               margin=0.05)
verdict = (
    'Inconclusive for the declared outcome, with every seed on the claimed side: the 8-layer '
    'ViT\'s MSA steps change the Δ log amplitude at 1.0π by {mean[vit8][%(s)smsa]} '
    '({mean_ci[vit8][%(s)smsa]}), 3 of 3 seeds negative, an interval that reaches 0. AlterNet\'s '
    'MSA steps: {mean[alternet18-small][%(s)smsa]} ({mean_ci[alternet18-small][%(s)smsa]}). The '
    'ViT\'s MLP steps raise it slightly ({mean[vit8][%(s)smlp]}, {mean_ci[vit8][%(s)smlp]}); '
    'the 4-layer ViT of oversmoothing_fashion_mnist goes the other way there (its page). The '
    'conv steps that keep the map size lower it too, in the ResNet '
    '({mean[preact-resnet20][%(s)sconv]}, {mean_ci[preact-resnet20][%(s)sconv]}) and in '
    'AlterNet ({mean[alternet18-small][%(s)sconv]}, {mean_ci[alternet18-small][%(s)sconv]}); '
    'only the strided steps raise it (ResNet {mean[preact-resnet20][%(s)sdownsample]}, AlterNet '
    '{mean[alternet18-small][%(s)sdownsample]}), where 1.0π is a frequency twice as high as '
    'before the step. "Convs are high-pass filters" does not show on these small networks '
    'trained 2–3 epochs on 28×28 images.' % dict(s=_s))
