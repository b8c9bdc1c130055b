# How-Do-ViTs claim: ViTs have negative Hessian eigenvalues in small data regimes, and large
# datasets suppress them. The 4-layer ViT trained for the same number of iterations (about 470)
# on the first 6 000 Fashion-MNIST training images (10 epochs) and on all 60 000 (1 epoch);
# then the top-5 Hessian eigenvalues of the l2-regularised training loss on 4 augmented
# batches of 16 (tools/analysis/hessian.py, docs/methods.md §12). 3 seeds.
#
#   python tools/reproduce.py configs/studies/hdv_negative_eigenvalues.py
_vit = 'configs/vit/vit-tiny-p4_1xb128-2e_fashion-mnist.py'

# no loader worker processes on a shared CPU
_serial = [
    f'{loader}_dataloader.{key}' for loader in ('train', 'val', 'test')
    for key in ('num_workers=0', 'persistent_workers=False')
]
name = 'hdv_negative_eigenvalues'
claim = dict(
    quote=('MSAs allow negative Hessian eigenvalues in small data regimes. This means that the '
           'loss landscapes of MSAs are non-convex, and this non-convexity disturbs NN '
           'optimization (Dauphin et al., 2014). Large amounts of training data suppress '
           'negative eigenvalues and convexify losses.'),
    source=('Park and Kim, "How Do Vision Transformers Work?", ICLR 2022, §1 and Fig. 4 '
            '(https://arxiv.org/abs/2202.06709)'),
    tested=('the negative max-eigenvalue proportion (NEP, Appendix C.5) of the top-5 '
            'eigenvalues of a 4-layer ViT trained on a tenth of Fashion-MNIST is higher, by at '
            'least 0.05, than that of the same ViT trained on all of it for as many iterations; '
            'secondary: the most negative eigenvalue, APE. 3 seeds, 4 batches of 16.'))
outcome = dict(metric='hessian/nep', comparison=['vit_small', 'vit_large'], direction='greater',
               margin=0.05)
seeds = [0, 1, 2]  # more seeds extend the study (finished runs are kept)
cfg_options = _serial
analysis = ['hessian']
analysis_args = dict(
    hessian=['--num-batches', '4', '--top-k', '5', '--max-iter', '50', '--most-negative'])
runs = [
    dict(label='vit_large', config=_vit,
         cfg_options=['train_cfg.max_epochs=1', 'param_scheduler.1.T_max=1'], baseline=True),
    dict(
        label='vit_small', config=_vit, cfg_options=[
            'train_dataloader.dataset.indices=6000', 'train_cfg.max_epochs=10',
            'param_scheduler.1.T_max=10'
        ], baseline='vit_large'),
]
verdict = None
