"""One rank of a two-process gloo run of adaptors that normalise with SyncBN.

    python sync_bn_worker.py RANK WORLD_SIZE PORT OUT_DIR [cpu|cuda]

Writes ``OUT_DIR/rank<RANK>.json`` with

* ``layer``: a ``CPUSyncBatchNorm`` of 3 channels on this rank's batch of 2 pooled values
  (``x``), its output, running statistics and the gradient of ``(out * coeff).sum()`` with
  respect to its weight and bias and to ``x`` (the test compares them with one BN on the batch
  of both ranks);
* ``backbone``: a StepResNet-18 whose adaptors normalise with SyncBN (``adaptor_norm_cfg``):
  the adaptors' norm types and their running means after one train-mode batch (a different
  batch on each rank).
"""
import json
import os
import os.path as osp
import sys


def layer_run(rank, device):
    import torch

    from mmstiff.models.layers import CPUSyncBatchNorm
    torch.manual_seed(0)
    layer = CPUSyncBatchNorm(3).to(device)
    with torch.no_grad():
        layer.weight.uniform_(0.5, 1.5)
        layer.bias.uniform_(-0.5, 0.5)
    torch.manual_seed(10 + rank)
    x = torch.randn(2, 3, 1, 1, device=device, requires_grad=True)
    coeff = torch.arange(6.0, device=device).view(2, 3, 1, 1) + 6 * rank
    out = layer(x)
    (out * coeff).sum().backward()
    return dict(x=x.tolist(), out=out.tolist(), running_mean=layer.running_mean.tolist(),
                running_var=layer.running_var.tolist(), weight_grad=layer.weight.grad.tolist(),
                bias_grad=layer.bias.grad.tolist(), x_grad=x.grad.tolist())


def backbone_run(rank, device):
    import torch

    from mmstiff.models.backbones import StepResNet
    from mmstiff.models.steps import StepAdaptor
    torch.manual_seed(0)  # the same weights on every rank
    model = StepResNet(18, stem_channels=8, base_channels=8,
                       adaptor=dict(type='mmstiff.StepNetAdaptor'),
                       adaptor_norm_cfg=dict(type='SyncBN')).to(device)
    adaptors = [m for m in model.modules() if isinstance(m, StepAdaptor)]
    torch.manual_seed(100 + rank)  # each rank its own batch
    model.train()
    with torch.no_grad():
        model(torch.randn(2, 3, 32, 32, device=device))
    return dict(
        norm_types=sorted({type(a.norm).__name__
                           for a in adaptors}),
        running_means=[a.norm.running_mean.tolist() for a in adaptors])


def main(rank, world_size, port, out_dir, device):
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group('gloo', rank=rank, world_size=world_size)
    result = dict(layer=layer_run(rank, device), backbone=backbone_run(rank, device))
    with open(osp.join(out_dir, f'rank{rank}.json'), 'w') as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == '__main__':
    main(
        int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4],
        sys.argv[5] if len(sys.argv) > 5 else 'cpu')
