"""Over-smoothing diagnostics of transformers (anti-oversmoothing, Appendix F.2 and F.3).

* :func:`token_cosine_similarity`, M_feat (Eq. 76): mean |cos| between the features of every
  pair of distinct tokens.
* :func:`attention_column_cosine_similarity`, M_attn (Eq. 75): mean |cos| between every pair of
  distinct columns of an attention map, averaged over heads.
* :func:`attention_spectral_response`: ``||Λ_i||_2`` for ``Λ = F A F^{-1}``, the response of
  an attention map, seen as a linear filter over the token sequence, at each frequency band
  (Appendix F.2, Fig. 2 and 5).

Values near 1 for the cosine metrics mean collapsed (uniform) tokens or attention.
"""
import torch


def _mean_offdiagonal_abs_cosine(vectors, eps=1e-12):
    """``vectors``: ``(..., n, d)``; mean over pairs ``i < j`` of ``|cos(v_i, v_j)|``, ``(...)``
    float64.

    From the Gram matrix ``G = V Vᵀ`` alone: ``|cos(v_i, v_j)| = |G_ij| r_i r_j`` with
    ``r_i = 1 / max(||v_i||, eps)`` (``||v_i||² = G_ii``; the floor of
    ``torch.nn.functional.normalize``, so a zero vector has cosine 0 with every other). One
    product reads the vectors once; normalising them first would read and write them again.
    """
    n = vectors.shape[-2]
    if n < 2:
        raise ValueError(f'{n} vector(s) given; the pairwise cosine similarity needs at least 2')
    # the n x n products in the input's precision (float32 at least, not float64); the sums
    # over them in float64. Outside autocast: a
    # recorder reads the states inside the model's autocast region, where the product would
    # run in half precision (float16 overflows on the squared norms: NaN)
    v = vectors if vectors.dtype == torch.float64 else vectors.float()
    with torch.autocast(v.device.type, enabled=False):
        gram = v @ v.transpose(-1, -2)
    inv = gram.diagonal(dim1=-2, dim2=-1).sqrt().clamp_min(eps).reciprocal()
    # |G| scaled by r along both axes, in place on the product (a temporary of this function)
    cos = gram.abs_().mul_(inv.unsqueeze(-1)).mul_(inv.unsqueeze(-2))
    total = (
        cos.sum(dim=(-1, -2), dtype=torch.float64) -
        cos.diagonal(dim1=-2, dim2=-1).sum(dim=-1, dtype=torch.float64))
    return total / (n * (n - 1))


def token_cosine_similarity(x: torch.Tensor) -> torch.Tensor:
    """M_feat per sample (anti-oversmoothing Eq. 76).

    Args:
        x (Tensor): ``(B, N, C)`` tokens or ``(N, C)`` for one sample.

    Returns:
        Tensor: ``(B,)`` (or a 0-d tensor), ``2 / (n (n - 1)) Σ_{i<j} |x_i·x_j| / (|x_i| |x_j|)``.
    """
    if not torch.is_tensor(x) or x.dim() not in (2, 3):
        raise ValueError(f'x has shape {tuple(getattr(x, "shape", ()))}; expected (B, N, C) '
                         'tokens or (N, C)')
    return _mean_offdiagonal_abs_cosine(x)


def attention_column_cosine_similarity(attn: torch.Tensor) -> torch.Tensor:
    """M_attn per sample (anti-oversmoothing Eq. 75), averaged over heads.

    Args:
        attn (Tensor): ``(B, H, N, N)`` attention maps (rows: queries, softmax over the last
            axis), or ``(H, N, N)`` for one sample.

    Returns:
        Tensor: ``(B,)`` (or 0-d): ``2 / (n (n - 1) H) Σ_h Σ_{i<j} |cos(A_{:,i}, A_{:,j})|``.
    """
    if not torch.is_tensor(attn) or attn.dim() not in (3, 4) or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f'attn has shape {tuple(getattr(attn, "shape", ()))}; expected '
                         '(B, H, N, N) or (H, N, N) square attention maps')
    columns = attn.transpose(-1, -2)
    return _mean_offdiagonal_abs_cosine(columns).mean(dim=-1)


def dft_matrix(n: int, dtype: torch.dtype = torch.complex128) -> torch.Tensor:
    """The unitary DFT matrix, rows ``f_k = exp(-2πj k m / n) / sqrt(n)``."""
    k = torch.arange(n, dtype=torch.float64)
    angle = -2.0 * torch.pi * torch.outer(k, k) / n
    return torch.polar(torch.full_like(angle, n**-0.5), angle).to(dtype)


def attention_spectral_response(attn: torch.Tensor) -> torch.Tensor:
    """Spectral response ``||Λ_i||_2`` of attention maps, ``Λ = F A F^{-1}`` (Appendix F.2).

    Args:
        attn (Tensor): ``(..., N, N)`` attention maps.

    Returns:
        Tensor: ``(..., N)`` float64, the norm of row ``i`` of ``Λ`` (frequency band ``i`` of the
        length-``N`` token sequence, 0 the DC band). The uniform map ``11ᵀ/N`` gives
        ``(1, 0, ..., 0)``, a pure low-pass filter; the identity gives all ones (all-pass).
    """
    if not torch.is_tensor(attn) or attn.dim() < 2 or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f'attn has shape {tuple(getattr(attn, "shape", ()))}; expected '
                         '(..., N, N) square attention maps')
    n = attn.shape[-1]
    f = dft_matrix(n)
    response = f @ attn.to(torch.complex128) @ f.conj().transpose(0, 1)
    return torch.linalg.vector_norm(response, dim=-1)
