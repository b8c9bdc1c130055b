"""One rank of a two-process CPU (gloo) training run with the diagnostics hooks.

    python ddp_worker.py RANK WORLD_SIZE PORT WORK_DIR

Each rank trains on its own shard of the toy data and appends the scalars its hooks computed
*before* the cross-rank mean to ``WORK_DIR/local_<rank>.jsonl``, so the test can check that the
logged value is the mean over ranks.
"""
import json
import os
import os.path as osp
import sys


def main(rank, world_size, port, work_dir):
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), MASTER_ADDR='127.0.0.1',
        MASTER_PORT=str(port))
    import torch
    torch.set_num_threads(1)
    torch.distributed.init_process_group('gloo', rank=rank, world_size=world_size)
    # the script's folder is first on sys.path: its sibling module imports directly
    from diagnostics_toy import ToyClassifier, tiny_backbone, toy_dataset, toy_loader
    from mmengine.runner import Runner
    from torch.utils.data.distributed import DistributedSampler

    from mmstiff.engine.hooks import TrajectoryDiagnosticHook

    torch.manual_seed(0)  # the same weights on every rank
    dataset = toy_dataset()
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    runner = Runner(
        model=ToyClassifier(tiny_backbone()),
        work_dir=work_dir,
        train_dataloader=toy_loader(batch_size=4, sampler=sampler),
        train_cfg=dict(by_epoch=False, max_iters=4),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.01)),
        custom_hooks=[
            dict(type='mmstiff.StiffnessHook', interval=2),
            dict(type='mmstiff.FrequencyHook', interval=2)
        ],
        # logger interval 4: the hooks write iterations 2 and 4 together, one all_reduce; the
        # checkpoint of iteration 2 (rank 0 alone) draws the dashboard without writing them
        default_hooks=dict(
            logger=dict(type='LoggerHook', interval=4),
            checkpoint=dict(type='CheckpointHook', interval=2, by_epoch=False)),
        launcher='pytorch',
        env_cfg=dict(dist_cfg=dict(backend='gloo')),
        cfg=dict(model_wrapper_cfg=dict(type='MMDistributedDataParallel', device_ids=None)),
        default_scope='mmengine')
    local_path = osp.join(work_dir, f'local_{rank}.jsonl')
    for hook in runner.hooks:
        if isinstance(hook, TrajectoryDiagnosticHook):
            write = hook.write

            def recording(runner, rows, write=write, hook=hook):
                # this rank's values, before the mean over the ranks
                with open(local_path, 'a') as f:
                    for row in rows:
                        named = {f'{hook.prefix}/{k}': v for k, v in row.scalars.items()}
                        f.write(json.dumps(dict(named, step=row.step)) + '\n')
                return write(runner, rows)

            hook.write = recording
    runner.train()
    with open(osp.join(work_dir, f'log_dir_{rank}.txt'), 'w') as f:
        f.write(runner.log_dir)
    torch.distributed.destroy_process_group()


if __name__ == '__main__':
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
