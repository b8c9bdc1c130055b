"""One rank of a two-process gloo run of a StepResNet whose adaptors normalise with SyncBN.

    python sync_bn_worker.py RANK WORLD_SIZE PORT OUT_DIR [cuda]

Writes ``OUT_DIR/rank<RANK>.json``: the adaptors' norm types, the eval-mode output (frozen
statistics, no synchronisation), and what a train-mode forward did. On the CPU torch's
``SyncBatchNorm`` refuses a synchronised forward ("expected input tensor to be on GPU"), which
it reaches only when it would synchronise; with ``cuda`` the forward runs and the file holds the
adaptors' running means after one batch.
"""
import json
import os
import os.path as osp
import sys


def main(rank, world_size, port, out_dir, device):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR='127.0.0.1',
                      MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group('gloo', rank=rank, world_size=world_size)

    from mmstiff.models.backbones import StepResNet
    from mmstiff.models.steps import StepAdaptor

    torch.manual_seed(0)  # the same weights on every rank
    model = StepResNet(18, stem_channels=8, base_channels=8,
                       adaptor=dict(type='mmstiff.StepNetAdaptor'),
                       adaptor_norm_cfg=dict(type='SyncBN')).to(device)
    adaptors = [m for m in model.modules() if isinstance(m, StepAdaptor)]
    result = dict(norm_types=sorted({type(a.norm).__name__ for a in adaptors}))
    torch.manual_seed(100 + rank)  # each rank its own batch
    x = torch.randn(2, 3, 32, 32, device=device)
    model.eval()
    with torch.no_grad():
        result['eval_output_sum'] = float(model(x)[-1].sum())
    model.train()
    try:
        with torch.no_grad():
            model(x)
        result['train'] = 'ran'
        result['running_means'] = [a.norm.running_mean.tolist() for a in adaptors]
    except ValueError as err:
        result['train'] = f'refused: {err}'
    with open(osp.join(out_dir, f'rank{rank}.json'), 'w') as f:
        json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == '__main__':
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4],
         sys.argv[5] if len(sys.argv) > 5 else 'cpu')
