"""The command-line arguments the tools share (docs/diagnostics.md, docs/benchmarks.md).

Argument groups only: the tools build their parsers from these, parse, run and exit; nothing
here exits or runs anything. A value that parses but cannot run is checked where it is used and
raises :class:`~mmstiff.apis.runtime.ConfigError`.
"""
import argparse

import torch
from mmengine.config import DictAction

from .runtime import cfg_option

#: ``--split`` of the analysis tools: the config's dataloader they read
SPLITS = ('test', 'val', 'train')
#: ``--mode`` of the tools that evaluate the training loss
MODES = ('eval', 'train')


def positive_int(text: str) -> int:
    """``argparse`` type of a command-line count: ``text`` as an int of at least 1, else an
    ``argparse.ArgumentTypeError`` that argparse reports with the option's name."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f'{text!r} is not a positive integer')
    return value


def add_checkpoint_args(parser: argparse.ArgumentParser, verb: str) -> None:
    """``--trust-checkpoint``, ``--allow-partial-load`` and ``--allow-non-finite`` of a tool
    that loads ``CHECKPOINT`` into the config's model; ``verb``: what the tool does with it
    (``'evaluate'``, ``'analyse'``)."""
    parser.add_argument(
        '--trust-checkpoint', action='store_true',
        help='unpickle CHECKPOINT in full; only for files from a source you trust (a pickle '
        'can run code). By default it loads weights-only')
    parser.add_argument(
        '--allow-partial-load', action='store_true',
        help=f'{verb} even when CHECKPOINT does not match the model (missing, unexpected or '
        'differently shaped parameters keep their initial values); by default an error')
    parser.add_argument(
        '--allow-non-finite', action='store_true',
        help=f'{verb} even when CHECKPOINT holds NaN or inf weights or statistics (a '
        'diverged run); by default an error naming them, before any work')


def analysis_parser(description: str, num_batches: int = 10) -> argparse.ArgumentParser:
    """``CONFIG CHECKPOINT [--out-dir] [--num-batches] [--split] [--batch-size]
    [--cfg-options]`` and the checkpoint flags: what every analysis tool takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument('config', help='config file the checkpoint was trained with')
    parser.add_argument('checkpoint', help='checkpoint file (loaded weights-only and strictly)')
    parser.add_argument(
        '--out-dir', default=None, help='where to write the JSON and PNG files (default: '
        '<checkpoint dir>/analysis/<tool>)')
    parser.add_argument('--num-batches', type=positive_int, default=num_batches,
                        help=f'batches of the split to analyse (default {num_batches})')
    parser.add_argument('--split', choices=SPLITS, default='test',
                        help='dataloader of the config to read (default test)')
    parser.add_argument('--batch-size', type=positive_int, default=None,
                        help='override the dataloader batch size')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, default=None,
                        type=cfg_option, help='override config settings, key=value')
    add_checkpoint_args(parser, 'analyse')
    add_debug_arg(parser)
    return parser


def add_debug_arg(parser: argparse.ArgumentParser) -> None:
    """``--debug``, listed in the help; :func:`mmstiff.tool_main.run_tool` takes it off the
    command line before the tool parses it."""
    parser.add_argument(
        '--debug', action='store_true',
        help="print the traceback of a user's mistake too (MMSTIFF_DEBUG=1 does "
        'the same); by default it ends in one error: line')


def add_device_arg(parser: argparse.ArgumentParser) -> None:
    """``--device`` of tns.py, spectrum.py and freq_noise.py (the CPU by default)."""
    parser.add_argument(
        '--device', default='cpu',
        help="where the model runs: 'cpu' (default), 'cuda' or 'cuda:N'; "
        'an error when that device is not available')


def add_visualizer_arg(parser: argparse.ArgumentParser) -> None:
    """``--to-visualizer``: the figures also go to the config's visualizer backends."""
    parser.add_argument(
        '--to-visualizer', action='store_true',
        help="also send each figure to the backends of the config's "
        "'visualizer' (Visualizer.add_image at step 0; LocalVisBackend "
        'writes OUT_DIR/vis_data/vis_image/<figure>_0.png, '
        'TensorboardVisBackend an image summary under OUT_DIR/vis_data)')


def add_instrument_args(parser: argparse.ArgumentParser) -> None:
    """``--device`` (CUDA where present by default) and ``--seed`` of hessian.py,
    loss_landscape.py and feature_variance.py."""
    parser.add_argument('--device', default=None,
                        help='where to run: cpu, cuda, cuda:1 (default: cuda where present)')
    parser.add_argument(
        '--seed', type=int, default=0,
        help='seed of the data order, the augmentations and the random vectors '
        '(default 0)')


def add_loss_args(parser: argparse.ArgumentParser) -> None:
    """Options of the tools that evaluate the training loss (hessian.py, loss_landscape.py)."""
    parser.add_argument(
        '--mode', choices=MODES, default='eval',
        help='model mode while the loss is evaluated: eval (BN running '
        'statistics, no dropout / drop path; default) or train (batch '
        'statistics, one random draw per batch; buffers restored)')
    parser.add_argument(
        '--weight-decay', type=float, default=None,
        help="coefficient λ of the l2 term Σ λ/2 ||w||² for every parameter "
        "(default: each parameter's decay from the config's optim_wrapper)")
    parser.set_defaults(split='train')


#: ``--compile-mode``: ``torch.compile``'s modes the benchmarks take (``reduce-overhead``: the
#: compiled graphs replayed as CUDA graphs)
COMPILE_MODES = ('default', 'reduce-overhead', 'max-autotune-no-cudagraphs')


def add_compile_argument(parser: argparse.ArgumentParser) -> None:
    """``--compile`` and ``--compile-mode`` of the benchmarks that time train steps with
    :func:`mmstiff.apis.benchmark.compare_models`."""
    parser.add_argument('--compile', action='store_true',
                        help='time torch.compile-d models (compiled during the warm-up)')
    parser.add_argument(
        '--compile-mode', choices=COMPILE_MODES, default='default',
        help="torch.compile's mode with --compile (reduce-overhead: replay the compiled "
        'graphs as CUDA graphs, CUDA only)')


def check_compile_warmup(parser: argparse.ArgumentParser,
                         args: argparse.Namespace) -> argparse.Namespace:
    """``args``, or a usage error where ``--compile`` has no warm-up step to compile in, or
    ``--compile-mode`` does not apply."""
    if args.compile and args.warmup < 1:
        parser.error(f'--warmup {args.warmup} is not supported with --compile; expected at least '
                     '1 untimed step, in which each model is compiled')
    check_compile_mode(parser, args)
    return args


def check_compile_mode(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A usage error where ``--compile-mode`` is not ``default`` without ``--compile``, or is
    ``reduce-overhead`` (CUDA graphs) on a device other than CUDA."""
    if args.compile_mode == 'default':
        return
    if not args.compile:
        parser.error(f'--compile-mode {args.compile_mode} needs --compile')
    device = torch.device(args.device)
    if args.compile_mode == 'reduce-overhead' and device.type != 'cuda':
        parser.error(f'--compile-mode reduce-overhead is not supported with --device '
                     f'{args.device}; expected cuda (it replays CUDA graphs)')


def add_block_types_arg(parser: argparse.ArgumentParser) -> None:
    """Add ``--block-types CLASS=KIND ...`` to an analysis tool's parser (read with
    :func:`mmstiff.apis.block_types_arg.block_types_for`)."""
    parser.add_argument(
        '--block-types', nargs='+', default=None, metavar='CLASS=KIND',
        help="block classes of the model that the built-in tables do not know, each "
        "CLASS=conv|preact|transformer (e.g. ConvNeXtBlock=conv); the config's StiffnessHook / "
        'FrequencyHook block_types are taken too')


def add_run_args(parser: argparse.ArgumentParser) -> None:
    """Add what ``tools/train.py`` and ``tools/test.py`` share about the run itself:
    ``--launcher``, ``--skip-data-checks``, ``--skip-image-checks``, ``--debug`` and the
    launcher's ``--local-rank``."""
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'], default='none',
                        help='job launcher')
    parser.add_argument(
        '--skip-data-checks', action='store_true',
        help='skip the data checks of the dataset files before the run (annotation JSON, IDX '
        'and CIFAR files, read once before the run); the config key '
        'skip_data_checks=True does the same')
    parser.add_argument(
        '--skip-image-checks', action='store_true',
        help='of the data checks, skip only the one that looks for every image file a COCO '
        'annotation file lists (one stat per image; for huge datasets on slow storage); the '
        'config key skip_image_checks=True does the same')
    parser.add_argument(
        '--debug', action='store_true',
        help="print the traceback of a user's mistake too (MMSTIFF_DEBUG=1 does "
        'the same); by default it ends in one error: line')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
