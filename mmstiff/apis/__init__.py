"""What the command-line tools do with a config: check it, prepare it, build the Runner; and
what the tools share beyond that (their arguments, the analysis tools' trained model, batches
and outputs, the benchmarks' train-step timing), in modules of their own.

Above :mod:`mmstiff.engine` in the layers (docs/design.md); imported by ``tools/`` only.
"""
from .runtime import (ConfigError, build_runner, cfg_option, codebase_of, init_cpu_distributed,
                      load_config, prepare_runner_cfg, shutdown_distributed)

__all__ = [
    'ConfigError', 'build_runner', 'cfg_option', 'codebase_of', 'init_cpu_distributed',
    'load_config', 'prepare_runner_cfg', 'shutdown_distributed'
]
