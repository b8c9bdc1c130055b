"""Runtime helpers shared by mmstiff's command-line tools."""
from .runtime import (ConfigError, codebase_of, init_cpu_distributed, load_config,
                      prepare_runner_cfg, trust_checkpoints)

__all__ = ['ConfigError', 'codebase_of', 'init_cpu_distributed', 'load_config',
           'prepare_runner_cfg', 'trust_checkpoints']
