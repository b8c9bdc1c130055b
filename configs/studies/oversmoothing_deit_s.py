# Paper-scale study: AttnScale and FeatScale on DeiT-S with 12 and 24 layers, ImageNet-1k.
#
#   python tools/reproduce.py configs/studies/oversmoothing_deit_s.py --dry-run
#   python tools/reproduce.py configs/studies/oversmoothing_deit_s.py --launcher pytorch --gpus 4
#   python tools/reproduce.py configs/studies/oversmoothing_deit_s.py --launcher slurm \
#       --partition PARTITION --gpus 4
#
# The DeiT recipe of mmpretrain (4 GPUs × 256 images, 300 epochs); fields: docs/studies.md.
_dir = 'configs/vit/'
_twelve = _dir + 'deit-small-attnscale_4xb256_in1k.py'
_deep = _dir + 'deit-small-24layer_4xb256_in1k.py'

name = 'oversmoothing_deit_s'
claim = dict(
    quote=('AttnScale brings less than 100/150 extra parameters for 12/24-layer DeiT while '
           'boosting the top-1 accuracy by 0.9% for 12-layer DeiT and 0.6% for 24-layer DeiT. '
           'Our FeatScale substantially improves top-1 accuracy by 1% for 12-layer DeiT and '
           '0.8% for 24-layer DeiT.'),
    source=('Wang et al., "Anti-Oversmoothing in Deep Vision Transformers via the Fourier '
            'Domain Analysis: From Theory to Practice", ICLR 2022, Section 5.1 and Table 1 '
            '(https://arxiv.org/abs/2203.05962)'),
    tested=('DeiT-S with 12 and 24 layers on ImageNet-1k, plain, AttnScale and FeatScale, '
            '3 seeds each: top-1 and the last state\'s high-frequency ratio.'))
seeds = [0, 1, 2]
analysis = ['spectrum']
analysis_args = dict(spectrum=['--num-batches', '4'])
runs = [
    dict(label='deit12', config=_twelve, cfg_options=['model.backbone.attn_scale_layers=None'],
         baseline=True),
    dict(label='deit12-attnscale', config=_twelve, baseline='deit12'),
    dict(label='deit12-featscale', config=_dir + 'deit-small-featscale_4xb256_in1k.py',
         baseline='deit12'),
    dict(label='deit24', config=_deep, baseline=True),
    dict(label='deit24-attnscale', config=_dir + 'deit-small-24layer-attnscale_4xb256_in1k.py',
         baseline='deit24'),
    dict(label='deit24-featscale', config=_dir + 'deit-small-24layer-featscale_4xb256_in1k.py',
         baseline='deit24'),
]
outcome = dict(metric='test/accuracy/top1', comparison=['deit24-attnscale', 'deit24'],
               direction='greater', margin=0.3)
verdict = None
