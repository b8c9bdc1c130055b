"""Training diagnostics as pure functions, plus recorders of the trajectory a network follows.

Nothing here depends on MMEngine: tensors in, numbers out (docs/methods.md §5 and §8).
"""
from mmstiff.utils.layout import LAYOUTS, check_layout, infer_layout, pool_state
from .attention import (AttentionModule, AttentionRecorder, attention_from_qkv, attention_modules,
                        softmax_column_cosine_similarity)
from .blocks import (ResidualBlock, block_kind, find_blocks, is_residual_block, register_block_type,
                     register_step_gate, register_step_type, step_sources)
from .frequency import (FrequencySummary, as_maps, delta_log_amplitude, delta_log_amplitudes,
                        diagonal_end_bins, diagonal_frequencies, frequency_summary, frequency_sums,
                        high_frequency_ratio, log_amplitude_profile, log_amplitude_spectrum,
                        operator_frequency_summary, tokens_to_maps)
from .noise import frequency_band_mask, frequency_band_noise, normalised_frequency_radius
from .scratch import ScratchBuffer
from .similarity import (attention_column_cosine_similarity, attention_spectral_response,
                         token_cosine_similarity)
from .stiffness import (TrajectoryStatistics, columnwise_pearson_correlation, kernel_step_sums,
                        mean_step_size, neural_stiffness_index, nsi_step_correlation,
                        pearson_correlation, stiffness_event, stiffness_event_probability,
                        stiffness_norms, stiffness_ratio, tns_per_trajectory,
                        total_neural_stiffness, trajectory_mean, trajectory_statistics)
from .stiffness_sums import (PendingNorms, StiffnessNorms, norms_of_pending, pending_norms,
                             stiffness_norms_from_sums)
from .trajectory import BlockTaps, StepRecord, TrajectoryRecorder, record_states, stage_of
from .triton_spectrum import SpectrumSums, high_frequency_ratio_of

__all__ = [
    'AttentionRecorder', 'attention_from_qkv', 'attention_modules', 'block_kind', 'find_blocks',
    'is_residual_block', 'register_block_type', 'step_sources', 'as_maps', 'delta_log_amplitude',
    'diagonal_frequencies', 'high_frequency_ratio', 'log_amplitude_profile',
    'log_amplitude_spectrum', 'tokens_to_maps', 'frequency_band_mask', 'frequency_band_noise',
    'normalised_frequency_radius', 'attention_column_cosine_similarity',
    'attention_spectral_response', 'token_cosine_similarity', 'columnwise_pearson_correlation',
    'mean_step_size', 'neural_stiffness_index', 'nsi_step_correlation', 'pearson_correlation',
    'stiffness_event', 'stiffness_event_probability', 'stiffness_norms',
    'stiffness_norms_from_sums', 'stiffness_ratio', 'tns_per_trajectory', 'total_neural_stiffness',
    'trajectory_mean', 'trajectory_statistics', 'StepRecord', 'TrajectoryRecorder', 'record_states',
    'stage_of'
]
__all__ += [
    'AttentionModule', 'ResidualBlock', 'register_step_gate', 'register_step_type', 'LAYOUTS',
    'check_layout', 'infer_layout', 'pool_state', 'StiffnessNorms', 'TrajectoryStatistics',
    'BlockTaps', 'diagonal_end_bins', 'delta_log_amplitudes', 'frequency_summary',
    'FrequencySummary', 'softmax_column_cosine_similarity', 'ScratchBuffer', 'kernel_step_sums',
    'PendingNorms', 'norms_of_pending', 'pending_norms', 'frequency_sums', 'SpectrumSums',
    'high_frequency_ratio_of', 'operator_frequency_summary'
]
