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
_n = '[hessian/nep]'
verdict = (
    'Inconclusive at 3 seeds. Trained for the same ~470 iterations, the 4-layer ViT on a tenth '
    'of Fashion-MNIST has a negative max-eigenvalue proportion of {mean[vit_small]' + _n + '} '
    'against {mean[vit_large]' + _n + '} on all of it, a difference of '
    '{diff[vit_small]' + _n + '} (95% CI {ci[vit_small]' + _n + '}): the interval contains '
    'both 0 and the declared margin of 0.05, and the study could only have seen an effect of '
    'about the MDE above. Both ViTs have negative eigenvalues among their five largest in '
    'magnitude (most negative {mean[vit_small][hessian/most_negative]} with a tenth of the data, '
    '{mean[vit_large][hessian/most_negative]} with all of it); the small-data ViT\'s largest '
    'eigenvalue is larger in every seed ({diff[vit_small][hessian/max]}, CI '
    '{ci[vit_small][hessian/max]}, q = {q[vit_small][hessian/max]}). NEP is read from 20 '
    'eigenvalues a run (5 per batch, 4 batches), so it moves in steps of 0.05 and seeds tie. At '
    'this length the small-data ViT is not overfit (top-1 {mean[vit_small][test/accuracy/top1]} '
    '% against {mean[vit_large][test/accuracy/top1]} %); the paper trains to convergence.')
