from .attn_scale import AttnScale, record_attention_maps  # noqa: F401
from .aug_shortcut import AugmentedShortcut  # noqa: F401
from .circulant import CirculantLinear  # noqa: F401
from .class_attention import ClassAttention  # noqa: F401
from .feat_scale import FeatScale  # noqa: F401
from .iebn import IEBN, SyncIEBN, instance_enhancement  # noqa: F401
from .local_attention import LocalSelfAttention  # noqa: F401
from .sync_bn import CPUSyncBatchNorm  # noqa: F401
from .talking_heads import TalkingHeadsAttention  # noqa: F401
