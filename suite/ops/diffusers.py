"""The suite's fused ops inside diffusers' `WanTransformer3DModel`: `patch_wan(model)`.

    from suite.ops.diffusers import patch_wan
    model = patch_wan(model)                    # fused AdaLN for the modulated / affine norms
    model = patch_wan(model, epilogues=True)    # + fused residual epilogues and qk RMSNorm
    model.compile_repeated_blocks()             # regional compile still traces each block whole

Each block's forward (and the model's, for the head) is replaced by one that mirrors diffusers'
own line by line except for the calls below, with diffusers' numerics (LayerNorm and modulation
in fp32, the result cast once to the residual's dtype; residuals as diffusers rounds them):

    diffusers (0.42.1)                                     adaln=True              epilogues=True
    norm1(x.float()) * (1 + scale_msa) + shift_msa         adaln(x, scale, shift)
    x.float() + attn1_out * gate_msa; norm2(x.float())     layer_norm_affine(x)    residual_norm(x, y, gate, weight, bias)
    x + attn2_out; norm3(x.float()) * (1 + c_scale) + ...  adaln(x, c_scale, ...)  residual_norm(x, y, scale, shift)
    attn.norm_q(q), attn.norm_k(k) (RMSNorm modules)                               rms_norm(q, weight)
    head: norm_out(x.float()) * (1 + scale) + shift        adaln(x, scale, shift)
    x.float() + ffn_out.float() * c_gate_msa               (plain: see below)

The FFN's gated residual feeds the next block's norm1. Fusing it across the block boundary would
change what a block returns, and so what diffusers' per-block gradient checkpoint saves and what
regional compile sees; it stays diffusers' eager expression. Parameters, their names and the
state dict are unchanged (qk RMSNorm modules are swapped for ones holding the same weights).

The patch refuses, naming the reason, when the installed diffusers' block or model forward is not
the source it mirrors (checked by hash), or a block is not the structure it expects.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import types

import torch
from torch import Tensor, nn

from suite.ops.fused_adaln import adaln, layer_norm_affine

# sha256[:16] of inspect.getsource of the forwards the replacements mirror (diffusers 0.42.1)
MIRRORED = {
    "WanTransformerBlock.forward": "21c15441b009932c",
    "WanTransformer3DModel.forward": "9f81a7225288656f",
}
MIRRORED_VERSION = "0.42.1"
EPILOGUE_MODULE = "suite.ops.epilogue"
_epi: types.ModuleType | None = None  # suite.ops.epilogue once a patch asks for it


def _source_hash(fn) -> str:
    return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()[:16]


def _check_sources() -> None:
    import diffusers
    from diffusers.models.transformers import transformer_wan as tw

    for key, want in MIRRORED.items():
        cls, attr = key.split(".")
        got = _source_hash(getattr(getattr(tw, cls), attr))
        if got != want:
            raise RuntimeError(
                f"patch_wan mirrors {key} of diffusers {MIRRORED_VERSION} (source sha256 {want}); "
                f"the installed diffusers {diffusers.__version__} has another ({got}). Refusing: "
                f"a stale mirror would silently change the model. Update suite/ops/diffusers.py."
            )


def _unpatchable(model: nn.Module, epilogues: bool) -> str | None:
    """Why `model` does not have the structure the patch mirrors, or None."""
    from diffusers.models.normalization import FP32LayerNorm
    from diffusers.models.transformers import transformer_wan as tw

    def plain_ln(m):
        return type(m) is FP32LayerNorm and not m.elementwise_affine

    if type(model) is not tw.WanTransformer3DModel:
        return f"model must be a diffusers WanTransformer3DModel, got {type(model).__name__}"
    if getattr(model, "_suite_patch", None) is not None:
        return f"model is patched already ({model._suite_patch})"
    if not plain_ln(model.norm_out):
        return f"model.norm_out must be FP32LayerNorm without affine, got {model.norm_out!r}"
    D = model.norm_out.normalized_shape[0]
    for i, b in enumerate(model.blocks):
        where = f"blocks[{i}]"
        if type(b) is not tw.WanTransformerBlock:
            return f"{where} must be a WanTransformerBlock, got {type(b).__name__}"
        if "forward" in vars(b):
            return f"{where}.forward is overridden on the instance already"
        for n in ("norm1", "norm3"):
            if not plain_ln(getattr(b, n)):
                return f"{where}.{n} must be FP32LayerNorm without affine, got {getattr(b, n)!r}"
        n2 = b.norm2
        if not (type(n2) is nn.Identity or (type(n2) is FP32LayerNorm and n2.elementwise_affine)):
            return f"{where}.norm2 must be an affine FP32LayerNorm or Identity, got {n2!r}"
        if tuple(b.scale_shift_table.shape) != (1, 6, D):
            return f"{where}.scale_shift_table must be [1, 6, {D}], got {list(b.scale_shift_table.shape)}"
        if epilogues:
            for a in ("attn1", "attn2"):
                attn = getattr(b, a)
                if type(attn.processor) is not tw.WanAttnProcessor:
                    return f"{where}.{a}.processor must be WanAttnProcessor, got {type(attn.processor).__name__}"
                for n in ("norm_q", "norm_k"):
                    m = getattr(attn, n)
                    if type(m) is not nn.RMSNorm or m.weight is None:
                        return f"{where}.{a}.{n} must be an affine torch.nn.RMSNorm, got {m!r}"
    return None


class EpilogueRMSNorm(nn.Module):
    """torch.nn.RMSNorm on suite.ops.epilogue.rms_norm, holding the replaced module's weight."""

    def __init__(self, norm: nn.RMSNorm):
        super().__init__()
        self.normalized_shape, self.eps = norm.normalized_shape, norm.eps
        self.weight = norm.weight  # the same Parameter: state dict and optimiser unchanged

    def forward(self, x: Tensor) -> Tensor:
        eps = torch.finfo(x.dtype).eps if self.eps is None else self.eps
        return _epi.rms_norm(x, self.weight, eps)

    def extra_repr(self) -> str:
        return f"{tuple(self.normalized_shape)}, eps={self.eps}, fused"


def _modulation(table: Tensor, temb: Tensor) -> tuple[Tensor, ...]:
    """Wan's six modulation rows, exactly as diffusers' block forms them (fp32)."""
    if temb.ndim == 4:  # [B, S, 6, D] (Wan 2.2 TI2V): per-token rows
        return tuple(c.squeeze(2) for c in (table.unsqueeze(0) + temb.float()).chunk(6, dim=2))
    return (table + temb.float()).chunk(6, dim=1)  # [B, 6, D] (Wan 2.1): [B, 1, D] rows


def _block_forward(self, hidden_states, encoder_hidden_states, temb, rotary_emb):
    """diffusers' WanTransformerBlock.forward with the fused calls of `self._suite_patch`."""
    fused_adaln, fused_epi = self._suite_patch
    shift_msa, scale_msa, gate_msa, c_shift_msa, c_scale_msa, c_gate_msa = _modulation(
        self.scale_shift_table, temb
    )
    x, dtype = hidden_states, hidden_states.dtype
    affine2 = not isinstance(self.norm2, nn.Identity)

    # 1. Self-attention
    if fused_adaln:
        norm_x = adaln(x, scale_msa, shift_msa, self.norm1.eps, out_dtype=dtype)
    else:
        norm_x = (self.norm1(x.float()) * (1 + scale_msa) + shift_msa).type_as(x)
    attn_output = self.attn1(norm_x, None, None, rotary_emb)

    # 2. Cross-attention (gated residual, then the affine norm2)
    if fused_epi and affine2:
        w, b = self.norm2.weight, self.norm2.bias
        x, norm_x = _epi.residual_norm(
            x, attn_output, gate_msa, weight=w, bias=b, eps=self.norm2.eps
        )
    else:
        x = (x.float() + attn_output * gate_msa).type_as(x)
        if not affine2:
            norm_x = x  # diffusers: Identity(x.float()).type_as(x)
        elif fused_adaln:
            w, b = self.norm2.weight, self.norm2.bias
            norm_x = layer_norm_affine(x, w, b, self.norm2.eps, out_dtype=dtype)
        else:
            norm_x = self.norm2(x.float()).type_as(x)
    attn_output = self.attn2(norm_x, encoder_hidden_states, None, None)

    # 3. Feed-forward (residual, then the modulated norm3)
    if fused_epi:
        x, norm_x = _epi.residual_norm(
            x, attn_output, None, scale=c_scale_msa, shift=c_shift_msa, eps=self.norm3.eps
        )
    else:
        x = x + attn_output
        if fused_adaln:
            norm_x = adaln(x, c_scale_msa, c_shift_msa, self.norm3.eps, out_dtype=dtype)
        else:
            norm_x = (self.norm3(x.float()) * (1 + c_scale_msa) + c_shift_msa).type_as(x)
    ff_output = self.ffn(norm_x)
    return (x.float() + ff_output.float() * c_gate_msa).type_as(x)


def _model_forward(
    self,
    hidden_states: Tensor,
    timestep: Tensor,
    encoder_hidden_states: Tensor,
    encoder_hidden_states_image: Tensor | None = None,
    return_dict: bool = True,
    attention_kwargs: dict | None = None,
):
    """diffusers' WanTransformer3DModel.forward with the head's modulated norm fused."""
    from diffusers.models.modeling_outputs import Transformer2DModelOutput

    batch_size, num_channels, num_frames, height, width = hidden_states.shape
    p_t, p_h, p_w = self.config.patch_size
    ppf, pph, ppw = num_frames // p_t, height // p_h, width // p_w

    rotary_emb = self.rope(hidden_states)
    hidden_states = self.patch_embedding(hidden_states).flatten(2).transpose(1, 2).contiguous()
    if timestep.ndim == 2:
        ts_seq_len = timestep.shape[1]
        timestep = timestep.flatten()
    else:
        ts_seq_len = None
    temb, timestep_proj, encoder_hidden_states, encoder_hidden_states_image = (
        self.condition_embedder(
            timestep,
            encoder_hidden_states,
            encoder_hidden_states_image,
            timestep_seq_len=ts_seq_len,
        )
    )
    timestep_proj = timestep_proj.unflatten(2 if ts_seq_len is not None else 1, (6, -1))
    if encoder_hidden_states_image is not None:
        encoder_hidden_states = torch.concat(
            [encoder_hidden_states_image, encoder_hidden_states], dim=1
        )

    args = (encoder_hidden_states, timestep_proj, rotary_emb)
    if torch.is_grad_enabled() and self.gradient_checkpointing:
        for block in self.blocks:
            hidden_states = self._gradient_checkpointing_func(block, hidden_states, *args)
    else:
        for block in self.blocks:
            hidden_states = block(hidden_states, *args)

    table = self.scale_shift_table.to(temb.device)
    if temb.ndim == 3:
        shift, scale = (
            c.squeeze(2) for c in (table.unsqueeze(0) + temb.unsqueeze(2)).chunk(2, dim=2)
        )
    else:
        shift, scale = (table + temb.unsqueeze(1)).chunk(2, dim=1)
    shift, scale = shift.to(hidden_states.device), scale.to(hidden_states.device)
    hidden_states = adaln(
        hidden_states, scale, shift, self.norm_out.eps, out_dtype=hidden_states.dtype
    )
    hidden_states = self.proj_out(hidden_states)

    hidden_states = hidden_states.reshape(batch_size, ppf, pph, ppw, p_t, p_h, p_w, -1)
    hidden_states = hidden_states.permute(0, 7, 1, 4, 2, 5, 3, 6)
    output = hidden_states.flatten(6, 7).flatten(4, 5).flatten(2, 3)
    if not return_dict:
        return (output,)
    return Transformer2DModelOutput(sample=output)


def _load_epilogue() -> types.ModuleType:
    global _epi
    if _epi is None:
        try:
            _epi = importlib.import_module(EPILOGUE_MODULE)
        except ModuleNotFoundError as e:
            raise ImportError(
                f"patch_wan(epilogues=True) needs {EPILOGUE_MODULE} (the fused block epilogues), "
                f"which is not installed here: {e}"
            ) from e
    return _epi


def patch_wan(model: nn.Module, *, adaln: bool = True, epilogues: bool = False) -> nn.Module:
    """Swap the modulated and affine norms of a diffusers `WanTransformer3DModel` for the suite's
    fused ops, in place; returns `model`.

    adaln:     norm1 + modulate, norm3 + modulate and the head's norm_out + modulate become
               `suite.ops.adaln`; the affine norm2 becomes `suite.ops.layer_norm_affine`.
    epilogues: the gated residual after attn1 fused with norm2, the residual after attn2 fused
               with norm3 + modulate (`suite.ops.epilogue.residual_norm`), and attention's qk
               RMSNorm (`suite.ops.epilogue.rms_norm`); needs suite.ops.epilogue.

    Outputs and gradients match the unpatched model to rounding (tests/test_diffusers_patch.py);
    the replaced forwards have no graph break, so `model.compile_repeated_blocks()` (or
    compiling each block) works after the patch. Raises RuntimeError when the installed
    diffusers' Wan forwards are not the ones mirrored, ValueError on an unexpected structure.
    """
    if not isinstance(adaln, bool) or not isinstance(epilogues, bool):
        raise TypeError(f"adaln and epilogues must be bool, got {adaln!r} and {epilogues!r}")
    if not (adaln or epilogues):
        raise ValueError("patch_wan with adaln=False and epilogues=False would change nothing")
    _check_sources()
    if (why := _unpatchable(model, epilogues)) is not None:
        raise ValueError(f"patch_wan: unsupported structure: {why}")
    if epilogues:
        _load_epilogue()
    for block in model.blocks:
        block._suite_patch = (adaln, epilogues)
        block.forward = types.MethodType(_block_forward, block)
        if epilogues:
            for attn in (block.attn1, block.attn2):
                attn.norm_q, attn.norm_k = (
                    EpilogueRMSNorm(attn.norm_q),
                    EpilogueRMSNorm(attn.norm_k),
                )
    if adaln:
        from diffusers.utils import apply_lora_scale

        model.forward = types.MethodType(
            apply_lora_scale("attention_kwargs")(_model_forward), model
        )
    model._suite_patch = dict(adaln=adaln, epilogues=epilogues)
    return model


def is_patched(model: nn.Module) -> dict | None:
    """The flags `patch_wan` applied to `model`, or None."""
    return getattr(model, "_suite_patch", None)
