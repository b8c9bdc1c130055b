"""Data-parallel cost of the diagnostics hooks: 1 process against 2, with the hooks at interval 1
and at their default intervals.

Each world size runs under ``torchrun`` (the launcher ``tools/dist_train.sh`` uses), on the CPU
with the gloo backend (``--device cuda``: one GPU per process and NCCL). Every process trains
the same model (mmpretrain's ``ResNet_CIFAR``, wrapped in ``DistributedDataParallel``) on its
own batch, the hooks driven as the Runner drives them (see ``bench_hooks.py``). The settings
are interleaved iteration by iteration, ``--repeats`` times; medians. Printed per world size:

* the iteration time of each setting and its ratio to training without hooks;
* the hooks' ``all_reduce`` (the cross-rank mean of their values: one per write of the recorded
  iterations, at the ``LoggerHook`` interval) per iteration, and its share of the 2-process
  iteration without hooks: what data parallelism adds to the hooks' cost;
* the wait before it: a collective returns when the slowest rank has reached it, so the time
  spent in it also holds how far the ranks drifted apart since the last synchronisation (the
  gradients' all-reduce of the backward pass). The benchmark separates the two with a barrier
  before each of the hooks' ``all_reduce``: the wait is time the ranks would otherwise spend at
  the next gradient all-reduce, the ``all_reduce`` after it the collective's own cost.

Usage (about 6 minutes on 2 CPU cores):
    python tools/benchmark/bench_ddp.py
    python tools/benchmark/bench_ddp.py --device cuda --base-channels 64 --batch-size 128
"""
import argparse
import copy
import json
import os
import os.path as osp
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from mmstiff.tool_main import run_tool  # first: a missing torch is one error line

# isort: split
import torch

BASELINE = 'no hook'
SETTINGS = (BASELINE, 'both @1', 'both @defaults')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--depth', type=int, default=18, help='ResNet_CIFAR depth')
    parser.add_argument('--base-channels', type=int, default=16)
    parser.add_argument('--batch-size', type=int, default=16, help='per process')
    parser.add_argument('--img-size', type=int, default=32)
    parser.add_argument('--device', default='cpu', help="'cpu' (gloo) or 'cuda' (NCCL)")
    parser.add_argument('--world-sizes', type=int, nargs='+', default=[1, 2])
    parser.add_argument(
        '--iters', type=int, default=100,
        help='iterations per setting and repeat (a multiple of 100, the '
        "default FrequencyHook interval's write interval)")
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--warmup', type=int, default=3)
    parser.add_argument('--log-interval', type=int, default=10)
    parser.add_argument('--threads', type=int, default=1, help='torch CPU threads per process')
    parser.add_argument('--worker', default=None, help=argparse.SUPPRESS)  # result file
    args = parser.parse_args(argv)
    for field in ('depth', 'base_channels', 'batch_size', 'img_size', 'iters', 'repeats',
                  'log_interval', 'threads'):
        if getattr(args, field) < 1:
            parser.error(f'--{field.replace("_", "-")} {getattr(args, field)} is not '
                         'supported; expected a positive integer')
    if args.iters % 100:
        parser.error(f'--iters {args.iters} is not a multiple of 100 (the FrequencyHook '
                     'writes its default-interval iterations every 100)')
    if any(w < 1 for w in args.world_sizes):
        parser.error(f'--world-sizes {args.world_sizes}: expected positive integers')
    if args.device.startswith('cuda') and torch.cuda.device_count() < max(args.world_sizes):
        parser.error(f'--device cuda with {max(args.world_sizes)} processes needs as many '
                     f'GPUs; {torch.cuda.device_count()} found')
    return args


def _hooks(name):
    from mmstiff.engine.hooks import FrequencyHook, StiffnessHook
    if name == 'both @1':
        return [StiffnessHook(interval=1), FrequencyHook(interval=1)]
    if name == 'both @defaults':
        return [StiffnessHook(), FrequencyHook()]
    return []


def worker(args):
    """One process of one world size: time every setting, rank 0 writes the medians."""
    import bench_hooks
    import torch.distributed as dist
    from mmengine.model import MMDistributedDataParallel

    from mmstiff.engine.hooks import scalar_rows

    torch.set_num_threads(args.threads)
    cuda = args.device.startswith('cuda')
    rank, world = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])
    if cuda:
        torch.cuda.set_device(int(os.environ['LOCAL_RANK']))
    dist.init_process_group('nccl' if cuda else 'gloo')
    device = torch.device('cuda', torch.cuda.current_device()) if cuda else torch.device('cpu')
    torch.manual_seed(0)  # the same weights on every rank
    model, _ = bench_hooks.build_model(
        bench_hooks.parse_args(
            ['--depth', str(args.depth), '--base-channels',
             str(args.base_channels)]))
    model = MMDistributedDataParallel(
        model.to(device).train(), device_ids=[device.index] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(rank)  # each rank its own batch
    batch = (torch.randn(args.batch_size, 3, args.img_size, args.img_size,
                         generator=gen).to(device),
             torch.randint(0, 10, (args.batch_size, ), generator=gen).to(device))
    runner = bench_hooks.BenchRunner(model, tempfile.mkdtemp(prefix='bench_ddp_'),
                                     args.log_interval)
    setups = {name: _hooks(name) for name in SETTINGS}
    for hooks in setups.values():
        for hook in hooks:
            hook.before_train(runner)

    reduce_time = dict.fromkeys((None, ) + SETTINGS, 0.0)  # None: warm-up
    wait_time = dict.fromkeys((None, ) + SETTINGS, 0.0)
    current = [None]
    reduce = scalar_rows.all_reduce

    def timed_all_reduce(*a, **k):  # the hooks' cross-rank mean, timed per setting
        start = time.perf_counter()
        dist.barrier()  # the ranks' drift, apart from the collective itself
        ready = time.perf_counter()
        wait_time[current[0]] += ready - start
        try:
            return reduce(*a, **k)
        finally:
            reduce_time[current[0]] += time.perf_counter() - ready

    scalar_rows.all_reduce = timed_all_reduce
    everything = [hook for hooks in setups.values() for hook in hooks]
    for _ in range(args.warmup):
        bench_hooks.train_iteration(runner, everything, optimizer, *batch)
    for hook in everything:
        hook.flush(runner)
    runners = {name: copy.copy(runner) for name in SETTINGS}
    times = {name: [] for name in SETTINGS}
    reduces = {name: [] for name in SETTINGS}
    waits = {name: [] for name in SETTINGS}
    for _ in range(args.repeats):
        totals = dict.fromkeys(SETTINGS, 0.0)
        before = {name: reduce_time[name] for name in SETTINGS}
        waited = {name: wait_time[name] for name in SETTINGS}
        for r in runners.values():
            r.iter = 0
        for i in range(args.iters):
            k = i % len(SETTINGS)
            for name in SETTINGS[k:] + SETTINGS[:k]:
                current[0] = name
                bench_hooks.synchronize(device)
                dist.barrier()  # every rank starts the iteration together
                start = time.perf_counter()
                bench_hooks.train_iteration(runners[name], setups[name], optimizer, *batch)
                bench_hooks.synchronize(device)
                totals[name] += time.perf_counter() - start
        for name in SETTINGS:
            times[name].append(totals[name] / args.iters)
            reduces[name].append((reduce_time[name] - before[name]) / args.iters)
            waits[name].append((wait_time[name] - waited[name]) / args.iters)
    # the slowest rank sets the pace: the maximum over ranks of each measurement
    packed = torch.tensor([times[n] + reduces[n] + waits[n] for n in SETTINGS], dtype=torch.float64)
    dist.all_reduce(packed, op=dist.ReduceOp.MAX)
    if rank == 0:
        r = args.repeats
        result = {
            name: dict(times=row[:r], reduce=row[r:2 * r], wait=row[2 * r:])
            for name, row in zip(SETTINGS, packed.tolist())
        }
        with open(args.worker, 'w') as f:
            json.dump(dict(world_size=world, results=result), f)
    dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def launch(args, world, out):
    """Run this script's worker in ``world`` processes with torchrun."""
    cmd = [
        sys.executable, '-m', 'torch.distributed.run', f'--nproc_per_node={world}',
        f'--master_port={_free_port()}',
        osp.abspath(__file__), '--worker', out, *sys.argv[1:]
    ]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f'torchrun with {world} processes failed ({proc.returncode}):\n'
                         f'{proc.stderr[-4000:]}')
    with open(out) as f:
        return json.load(f)['results']


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    results = {}
    for world in args.world_sizes:
        out = osp.join(tempfile.mkdtemp(prefix='bench_ddp_'), f'world{world}.json')
        results[world] = launch(args, world, out)
        print(f'{world} process(es) done', file=sys.stderr, flush=True)
    print(f'ResNet_CIFAR-{args.depth} (base {args.base_channels}) batch={args.batch_size}/process '
          f'img={args.img_size} device={args.device} threads/process={args.threads} '
          f'repeats={args.repeats} iters/setting={args.iters}; medians; time: the slowest rank')
    header = (f'{"processes":>9}  {"setting":<16}{"iter (ms)":>11}{"time ratio":>12}'
              f'{"all_reduce (ms/iter)":>22}{"all_reduce share":>18}'
              f'{"wait before (ms/iter)":>23}')
    print(header)
    print('-' * len(header))
    for world, result in results.items():
        base = result[BASELINE]['times']
        plain = statistics.median(base)
        for name in SETTINGS:
            row = result[name]
            ratio = statistics.median(t / b for t, b in zip(row['times'], base))
            reduce_ms = statistics.median(row['reduce']) * 1e3
            print(f'{world:>9}  {name:<16}{statistics.median(row["times"]) * 1e3:>11.2f}'
                  f'{ratio:>12.3f}{reduce_ms:>22.3f}{reduce_ms / (plain * 1e3):>18.4f}'
                  f'{statistics.median(row["wait"]) * 1e3:>23.3f}')
    if len(results) > 1:
        worlds = sorted(results)
        one, many = results[worlds[0]], results[worlds[-1]]
        print(f'hooks @1, {worlds[-1]} processes against {worlds[0]}: time ratio '
              f'{_ratio(many) / _ratio(one):.3f} (how much more the hooks cost under data '
              'parallelism)')


def _ratio(result):
    base = result[BASELINE]['times']
    return statistics.median(t / b for t, b in zip(result['both @1']['times'], base))


if __name__ == '__main__':
    run_tool(main)
