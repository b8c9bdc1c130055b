"""The MSA branch of a ViT block without its attention matrix (docs/methods.md §13, reading B).

StepNet paper, Appendix G: "we propose to directly replace the attention modules in ViT with
StepNet". Read literally, the token-mixing attention matrix ``softmax(q kᵀ / √d)`` goes and the
branch keeps only what acts on each token by itself, the value and output projections,

    f(h) = γ ⊙ (W_o (W_v h + b_v) + b_o),        h = LN(x),

(``γ`` the LayerScale, identity by default; dropout and drop-path as in the MSA), so that the
block's first Euler step is ``x + Δ ⊙ f(h)`` with ``Δ`` from a step-size adaptor (StepNet) that
sees ``x`` and ``x + f``: the step size takes the attention's place. It equals the MSA with the
attention matrix fixed to the identity (``I V = V``), so the number of heads does not matter.

:class:`ValueBranch` subclasses mmpretrain's ``MultiheadAttention`` and keeps its parameter
names, so ViT checkpoints load into it unchanged: ``W_v``, ``b_v`` are the value rows of the
fused ``qkv`` projection (rows ``2C … 3C - 1``, the layout of mmpretrain and timm) and
``W_o``, ``b_o`` are ``proj``. What the module holds but does not use:

* the query and key rows of ``qkv.weight`` and ``qkv.bias`` (they receive zero gradients; a
  decoupled weight decay such as AdamW's still shrinks them, which changes nothing here);
* ``attn_drop`` (there is no attention matrix to drop).

The fused ``qkv`` projection is never called as a module (only its value rows are applied), so
recorders that rebuild attention maps from its output record nothing for this branch.
"""
import torch.nn.functional as F
from mmpretrain.models.utils import MultiheadAttention

from .feat_scale import FeatScale


class ValueBranch(MultiheadAttention):
    """``f(h) = LayerScale(W_o (W_v h + b_v) + b_o)``: the MSA branch with no attention matrix.

    Args:
        embed_dims (int): token width ``C``.
        num_heads (int): kept for the parameter layout of ``MultiheadAttention``; the branch
            does not depend on it.
        attn_drop (float): accepted and unused (no attention matrix). Default 0.
        proj_drop (float): dropout after the output projection. Default 0.
        dropout_layer (dict): drop-path / dropout on the branch output, as
            ``MultiheadAttention``.
        qkv_bias (bool): whether ``qkv`` has a bias (its value part is used). Default True.
        layer_scale_init_value (float): LayerScale ``γ`` init; 0 disables it. Default 0.
        feat_scale (bool): FeatScale (docs/methods.md §7) on the projected output, before
            LayerScale and drop-path, as in :class:`StepMultiheadAttention`. Default False.
        init_cfg (dict, optional): MMEngine initialisation config.
    """

    def __init__(self,
                 embed_dims,
                 num_heads,
                 attn_drop=0.,
                 proj_drop=0.,
                 dropout_layer=dict(type='Dropout', drop_prob=0.),
                 qkv_bias=True,
                 layer_scale_init_value=0.,
                 feat_scale=False,
                 init_cfg=None):
        super().__init__(
            embed_dims,
            num_heads,
            attn_drop=attn_drop,
            proj_drop=proj_drop,
            dropout_layer=dropout_layer,
            qkv_bias=qkv_bias,
            layer_scale_init_value=layer_scale_init_value,
            init_cfg=init_cfg)
        self.feat_scale = FeatScale(embed_dims) if feat_scale else None

    def value(self, h):
        """``W_v h + b_v`` from the value rows of the fused ``qkv`` projection."""
        c = self.embed_dims
        bias = self.qkv.bias
        return F.linear(h, self.qkv.weight[2 * c:], None if bias is None else bias[2 * c:])

    def forward(self, x):
        x = self.proj_drop(self.proj(self.value(x)))
        if self.feat_scale is not None:
            x = self.feat_scale(x)
        return self.out_drop(self.gamma1(x))

    def extra_repr(self):
        return f'embed_dims={self.embed_dims}, attention matrix: none (value path only)'
