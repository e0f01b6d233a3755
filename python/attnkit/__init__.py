"""attnkit: attention kernels for NVIDIA Hopper, as PyTorch ops (torch.ops.attnkit.*).

Mirrors of the functions people already call:
    flash_attn_func, flash_attn_varlen_func and the packed variants   (flash_attn)
    flex_attention, attnkit.flex.* mod catalog      (torch.nn.attention.flex_attention)
    chunk_gated_delta_rule, fused_recurrent_gated_delta_rule   (flash-linear-attention)
Every op runs on CPU tensors (the reference backend) and on CUDA tensors (the Hopper kernels,
where this build has them; otherwise NotImplementedError says so).
"""

from attnkit import _library, _registrations  # noqa: F401  (load the ops, then fake shapes + autograd)
from attnkit import flex
from attnkit.attention import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                               flash_attn_varlen_func, flash_attn_varlen_kvpacked_func,
                               flash_attn_varlen_qkvpacked_func)
from attnkit.flex import flex_attention
from attnkit.gdn import (chunk_gated_delta_rule, chunk_gated_delta_rule_bwd_dhu, fused_recurrent_gated_delta_rule,
                         fused_recurrent_gated_delta_rule_update_)

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
           "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func", "flex_attention", "flex", "chunk_gated_delta_rule",
           "fused_recurrent_gated_delta_rule", "fused_recurrent_gated_delta_rule_update_",
           "chunk_gated_delta_rule_bwd_dhu"]
__version__ = "0.1.0"
