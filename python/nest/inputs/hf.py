"""Hugging Face ``config.json`` -> :class:`~nest.specs.ModelSpec` (no network access).

Supported ``model_type`` values and the keys read (the real Hugging Face names):

* decoder-only, gated MLP, RMSNorm, rotary positions: ``llama``, ``mistral``,
  ``mixtral``, ``qwen2``, ``qwen2_moe``, ``qwen3``, ``qwen3_moe``, ``deepseek_v2``,
  ``deepseek_v3``:
  ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
  ``num_key_value_heads`` (default: ``num_attention_heads``), ``intermediate_size``,
  ``vocab_size``, ``max_position_embeddings``, ``tie_word_embeddings`` (default false),
  ``attention_bias`` / ``mlp_bias`` (llama family), ``attention_dropout``.
* ``gpt2``: ``n_embd``, ``n_layer``, ``n_head``, ``n_positions``, ``n_inner`` (null:
  ``4 n_embd``), ``vocab_size``, ``resid_pdrop`` / ``embd_pdrop`` / ``attn_pdrop``.
  LayerNorm, learned positions, biases, tied embeddings.
* ``gpt_neox``: the decoder keys above plus ``rotary_pct`` (partial rotary has no
  parameters), ``use_parallel_residual`` (changes the dataflow, not the parameters),
  ``attention_bias`` (default true); LayerNorm with bias, untied ``embed_out``.
* ``bert``: the decoder keys above plus ``type_vocab_size``, ``hidden_dropout_prob``,
  ``position_embedding_type`` (only ``absolute``); read as ``BertForPreTraining``
  (pooler, masked-LM transform, tied decoder), like the ``bert-large`` preset.

Mixture of experts: ``num_local_experts`` (Mixtral), ``num_experts`` (Qwen),
``n_routed_experts`` (DeepSeek); ``num_experts_per_tok``; ``moe_intermediate_size``
(per expert; Mixtral's experts are ``intermediate_size`` wide);
``shared_expert_intermediate_size`` (Qwen2-MoE) or ``n_shared_experts`` (DeepSeek);
which blocks are MoE from ``decoder_sparse_step`` + ``mlp_only_layers`` (Qwen) or
``first_k_dense_replace`` + ``moe_layer_freq`` (DeepSeek), multi-token prediction modules
from ``num_nextn_predict_layers`` (DeepSeek). Hugging Face's MoE layers
are dropless, so ``capacity_factor`` is 0 (dropless) unless overridden.
Multi-head latent attention (DeepSeek): ``q_lora_rank`` (null: no query compression),
``kv_lora_rank``, ``qk_rope_head_dim``, ``qk_nope_head_dim``, ``v_head_dim``.

Sequence length: ``seq_len`` is ``max_position_embeddings`` (``n_positions`` for
GPT-2) unless the caller passes ``seq_len=``; ``max_position`` always keeps the
config's value, so learned position tables are counted in full. A learned-position
model cannot train on more positions than it has (SpecError).

Architecture features :class:`ModelSpec` cannot express are mapped to the closest
fields and listed by :func:`approximations` (and in the spec's ``source``), e.g. Qwen2's
bias on Q/K/V only (mapped to ``bias=True``, which adds the output-projection bias,
``hidden`` parameters per block), Qwen3's explicit ``head_dim`` and Q/K norms,
DeepSeek's router bias.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

from ..errors import SpecError, reject_unknown_keys, short_repr
from ..specs import ModelSpec, field_names
from .files import read_json_object

__all__ = ["SUPPORTED", "approximations", "model_from_hf_config", "read_hf_config"]

SUPPORTED = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
             "gpt2", "gpt_neox", "bert", "deepseek_v2", "deepseek_v3")
"""The ``model_type`` values :func:`model_from_hf_config` reads."""

_GATED = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v2",
          "deepseek_v3")
_DEEPSEEK = ("deepseek_v2", "deepseek_v3")


def read_hf_config(path_or_dict) -> dict:
    """The config mapping of a ``config.json`` path (or a dict, returned as is).

    SpecError when the file is missing, is not JSON, or does not hold a JSON object.
    """
    if isinstance(path_or_dict, dict):
        return path_or_dict
    return read_json_object(path_or_dict, "hf config")


class _Config:
    """Typed access to the keys of one config, with one-line SpecErrors."""

    def __init__(self, data: dict):
        self.data = data

    def has(self, key: str) -> bool:
        """Whether ``key`` is present and not null."""
        return self.data.get(key) is not None

    def int(self, key: str, default=None, minimum: int = 1) -> int:
        """Integer ``key`` >= ``minimum``; ``default`` when absent (None: required)."""
        value = self.data.get(key)
        if value is None:
            if default is None:
                raise SpecError(f"hf config {key}: missing")
            return default
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise SpecError(f"hf config {key} = {short_repr(value)}: must be an integer >= {minimum}")
        return value

    def bool(self, key: str, default: bool) -> bool:
        """Boolean ``key``, ``default`` when absent."""
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise SpecError(f"hf config {key} = {short_repr(value)}: must be true or false")
        return value

    def number(self, key: str, default: float) -> float:
        """Finite number ``key`` >= 0, ``default`` when absent."""
        value = self.data.get(key)
        if value is None:
            return default
        if (not isinstance(value, (int, float)) or isinstance(value, bool)
                or not math.isfinite(value) or value < 0):
            raise SpecError(f"hf config {key} = {short_repr(value)}: must be a finite number >= 0")
        return float(value)

    def int_list(self, key: str) -> list[int]:
        """Sorted distinct layer indices of list ``key`` (empty when absent)."""
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
            raise SpecError(f"hf config {key} = {short_repr(value)}: must be a list of layer indices")
        return sorted(set(value))


def _model_type(cfg: _Config) -> str:
    model_type = cfg.data.get("model_type")
    if model_type is None:
        raise SpecError("hf config model_type: missing")
    if model_type not in SUPPORTED:
        raise SpecError(f"hf config model_type = {short_repr(model_type)}: unsupported "
                        f"(supported: {', '.join(SUPPORTED)})")
    return model_type


def _default_name(path_or_dict, data: dict, model_type: str) -> str:
    origin = data.get("_name_or_path")
    if isinstance(origin, str) and origin.strip("/"):
        return origin.rstrip("/").split("/")[-1]
    if not isinstance(path_or_dict, dict):
        file = Path(path_or_dict)
        if file.name == "config.json" and file.resolve().parent.name:
            return file.resolve().parent.name
        return file.stem
    return model_type


def _experts(cfg: _Config, model_type: str, fields: dict, notes: list[str]) -> None:
    """MoE fields for the MoE families (no-op for dense configs)."""
    key = {"mixtral": "num_local_experts", "qwen2_moe": "num_experts", "qwen3_moe": "num_experts",
           "deepseek_v2": "n_routed_experts", "deepseek_v3": "n_routed_experts"}.get(model_type)
    if key is None or not cfg.has(key):
        if key is not None:
            raise SpecError(f"hf config {key}: missing")
        return
    layers = fields["num_layers"]
    fields["num_experts"] = cfg.int(key)
    fields["experts_per_token"] = cfg.int("num_experts_per_tok")
    fields["capacity_factor"] = 0.0  # Hugging Face MoE layers are dropless
    if model_type == "mixtral":
        fields["moe_ffn_hidden"] = fields["ffn_hidden"]
        return
    moe_ffn = cfg.int("moe_intermediate_size")
    fields["moe_ffn_hidden"] = moe_ffn
    if model_type in _DEEPSEEK:
        fields["num_shared_experts"] = cfg.int("n_shared_experts", default=0, minimum=0)
        first = cfg.int("first_k_dense_replace", default=0, minimum=0)
        freq = cfg.int("moe_layer_freq", default=1)
        # Hugging Face: block i is MoE iff i >= first_k_dense_replace and i % moe_layer_freq == 0.
        fields["first_dense_layers"] = -(-first // freq) * freq
        fields["moe_layer_interval"] = freq
        if cfg.has("topk_method") and cfg.data["topk_method"] == "noaux_tc":
            notes.append(f"router score-correction bias ({fields['num_experts']} parameters "
                         "per MoE block) not counted")
        fields["mtp_layers"] = cfg.int("num_nextn_predict_layers", default=0, minimum=0)
        return
    # Qwen: block i is MoE iff i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0.
    step = cfg.int("decoder_sparse_step", default=1)
    dense_only = cfg.int_list("mlp_only_layers")
    sparse = [i for i in range(layers) if i not in dense_only and (i + 1) % step == 0]
    if not sparse:
        raise SpecError(f"hf config mlp_only_layers = {short_repr(dense_only)}: no MoE block is left")
    first, interval = sparse[0], step
    expected = list(range(first, layers, interval))
    if sparse != expected:
        raise SpecError(f"hf config mlp_only_layers = {short_repr(dense_only)}: MoE blocks {short_repr(sparse)} "
                        "are not a dense prefix followed by every decoder_sparse_step-th block")
    fields["first_dense_layers"] = first
    fields["moe_layer_interval"] = interval
    if model_type == "qwen2_moe" and cfg.has("shared_expert_intermediate_size"):
        shared = cfg.int("shared_expert_intermediate_size", minimum=0)
        if shared % moe_ffn:
            raise SpecError(f"hf config shared_expert_intermediate_size = {shared}: not a multiple "
                            f"of moe_intermediate_size ({moe_ffn})")
        fields["num_shared_experts"] = shared // moe_ffn
        notes.append(f"shared-expert gate ({fields['hidden']} parameters per MoE block) not counted")


def _mla(cfg: _Config, fields: dict) -> None:
    fields["kv_lora_rank"] = cfg.int("kv_lora_rank")
    fields["q_lora_rank"] = cfg.int("q_lora_rank", default=0, minimum=0)
    fields["qk_rope_head_dim"] = cfg.int("qk_rope_head_dim")
    fields["qk_nope_head_dim"] = cfg.int("qk_nope_head_dim")
    fields["v_head_dim"] = cfg.int("v_head_dim")
    fields["num_kv_heads"] = fields["num_heads"]  # MLA has no grouped K/V heads


def _gated_decoder(cfg: _Config, model_type: str, notes: list[str]) -> dict:
    heads = cfg.int("num_attention_heads")
    fields = dict(
        num_layers=cfg.int("num_hidden_layers"), hidden=cfg.int("hidden_size"), num_heads=heads,
        num_kv_heads=cfg.int("num_key_value_heads", default=heads),
        ffn_hidden=cfg.int("intermediate_size"), vocab_size=cfg.int("vocab_size"),
        max_position=cfg.int("max_position_embeddings"), mlp="swiglu", norm="rmsnorm",
        position_embedding="rope", tied_embeddings=cfg.bool("tie_word_embeddings", False),
        dropout=cfg.number("attention_dropout", 0.0) > 0, bias=False)
    if model_type in ("qwen2", "qwen2_moe"):
        # Q, K and V have biases, the output projection has none: closest is bias=True.
        fields["bias"] = True
        notes.append(f"Q/K/V-only bias mapped to bias=True: counts the output-projection bias "
                     f"too (+{fields['hidden']} parameters per block)")
    elif cfg.bool("attention_bias", False):
        fields["bias"] = True  # llama-style attention_bias: Q, K, V and output projection
    if cfg.bool("mlp_bias", False):
        raise SpecError("hf config mlp_bias = True: gated-MLP biases are not supported")
    act = cfg.data.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
        notes.append(f"hidden_act = {short_repr(act)}: gated MLP priced as SwiGLU (same shapes)")
    head_dim = cfg.data.get("head_dim")
    if model_type not in _DEEPSEEK and head_dim is not None and head_dim != fields["hidden"] // heads:
        fields["attention_head_dim"] = cfg.int("head_dim")
    if model_type in ("qwen3", "qwen3_moe"):
        fields["qk_norm"] = True  # Qwen3Attention's q_norm and k_norm
    window = cfg.data.get("sliding_window")
    if (model_type in ("mistral", "mixtral") and isinstance(window, int)
            and not isinstance(window, bool) and window < fields["max_position"]):
        notes.append(f"sliding_window = {window}: attention priced as full causal attention")
    _experts(cfg, model_type, fields, notes)
    if model_type in _DEEPSEEK:
        _mla(cfg, fields)
    return fields


def _gpt2(cfg: _Config) -> dict:
    hidden = cfg.int("n_embd")
    dropout = any(cfg.number(k, 0.1) > 0 for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop"))
    return dict(num_layers=cfg.int("n_layer"), hidden=hidden, num_heads=cfg.int("n_head"),
                ffn_hidden=cfg.int("n_inner", default=4 * hidden), vocab_size=cfg.int("vocab_size"),
                max_position=cfg.int("n_positions"), mlp="gelu", norm="layernorm", bias=True,
                tied_embeddings=cfg.bool("tie_word_embeddings", True),
                position_embedding="learned", dropout=dropout)


def _gpt_neox(cfg: _Config) -> dict:
    dropout = any(cfg.number(k, 0.0) > 0 for k in ("attention_dropout", "hidden_dropout"))
    return dict(num_layers=cfg.int("num_hidden_layers"), hidden=cfg.int("hidden_size"),
                num_heads=cfg.int("num_attention_heads"), ffn_hidden=cfg.int("intermediate_size"),
                vocab_size=cfg.int("vocab_size"), max_position=cfg.int("max_position_embeddings"),
                mlp="gelu", norm="layernorm", bias=cfg.bool("attention_bias", True),
                tied_embeddings=cfg.bool("tie_word_embeddings", False),
                position_embedding="rope", dropout=dropout)


def _bert(cfg: _Config) -> dict:
    kind = cfg.data.get("position_embedding_type", "absolute")
    if kind != "absolute":
        raise SpecError(f"hf config position_embedding_type = {short_repr(kind)}: only 'absolute' is supported")
    dropout = any(cfg.number(k, 0.1) > 0
                  for k in ("hidden_dropout_prob", "attention_probs_dropout_prob"))
    return dict(num_layers=cfg.int("num_hidden_layers"), hidden=cfg.int("hidden_size"),
                num_heads=cfg.int("num_attention_heads"), ffn_hidden=cfg.int("intermediate_size"),
                vocab_size=cfg.int("vocab_size"), max_position=cfg.int("max_position_embeddings"),
                type_vocab_size=cfg.int("type_vocab_size", default=2, minimum=0),
                mlp="gelu", norm="layernorm", bias=True, tied_embeddings=True,
                position_embedding="learned", encoder_head=True, causal=False, dropout=dropout)


def _map(data: dict) -> tuple[str, dict, list[str]]:
    cfg = _Config(data)
    model_type = _model_type(cfg)
    notes: list[str] = []
    if model_type in _GATED:
        fields = _gated_decoder(cfg, model_type, notes)
    elif model_type == "gpt2":
        fields = _gpt2(cfg)
    elif model_type == "gpt_neox":
        fields = _gpt_neox(cfg)
    else:
        fields = _bert(cfg)
    return model_type, fields, notes


def approximations(path_or_dict) -> list[str]:
    """Features of the config that :class:`ModelSpec` cannot express (empty: exact)."""
    return _map(read_hf_config(path_or_dict))[2]


def model_from_hf_config(path_or_dict, name: str | None = None, *, seq_len: int | None = None,
                         **overrides) -> ModelSpec:
    """A :class:`ModelSpec` from a Hugging Face ``config.json`` path or its parsed dict.

    ``name`` defaults to the config's ``_name_or_path``, else the directory holding
    ``config.json`` (the file stem otherwise). ``seq_len`` defaults to the config's
    maximum position count. ``overrides`` replace any other ModelSpec field (e.g.
    ``capacity_factor=1.25``). SpecError (one line, naming the key and value) on an
    unknown ``model_type``, a missing or malformed key, or a non-JSON file.
    """
    data = read_hf_config(path_or_dict)
    model_type, fields, notes = _map(data)
    max_position = fields["max_position"]
    if seq_len is None:
        seq_len = max_position
    elif not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len <= 0:
        raise SpecError(f"seq_len = {short_repr(seq_len)}: must be a positive integer")
    if fields["position_embedding"] == "learned" and seq_len > max_position:
        raise SpecError(f"seq_len = {seq_len}: exceeds the {max_position} learned positions "
                        f"of this {model_type} config")
    where = "config dict" if isinstance(path_or_dict, dict) else str(path_or_dict)
    source = f"Hugging Face config.json ({where}), model_type {model_type}"
    if notes:
        source += "; approximations: " + "; ".join(notes)
    fields.update(name=name or _default_name(path_or_dict, data, model_type), seq_len=seq_len,
                  source=source)
    reject_unknown_keys(overrides, field_names(ModelSpec), "model")
    try:
        spec = ModelSpec(**fields)
    except SpecError as error:
        # ModelSpec names its own fields; the user wrote the config's keys.
        keys = _hf_keys(model_type, seq_len_from_config=seq_len == max_position)
        prefix = "hf config" if isinstance(path_or_dict, dict) else f"hf config ({where})"
        field = re.match(r"model\.\w+", str(error))
        raise SpecError(f"{prefix} {_rename(str(error), keys)}" + (f" [{field.group(0)}]" if field else "")) from None
    return replace(spec, **overrides) if overrides else spec


def _hf_keys(model_type: str, seq_len_from_config: bool) -> dict[str, str]:
    """ModelSpec field -> the config key it was read from, for error messages."""
    if model_type == "gpt2":
        keys = {"num_layers": "n_layer", "hidden": "n_embd", "num_heads": "n_head", "ffn_hidden": "n_inner",
                "max_position": "n_positions"}
    else:
        keys = {"num_layers": "num_hidden_layers", "hidden": "hidden_size", "num_heads": "num_attention_heads",
                "num_kv_heads": "num_key_value_heads", "ffn_hidden": "intermediate_size",
                "max_position": "max_position_embeddings", "attention_head_dim": "head_dim"}
    keys.update(vocab_size="vocab_size", type_vocab_size="type_vocab_size",
                experts_per_token="num_experts_per_tok", moe_ffn_hidden="moe_intermediate_size",
                num_experts={"mixtral": "num_local_experts", "deepseek_v2": "n_routed_experts",
                             "deepseek_v3": "n_routed_experts"}.get(model_type, "num_experts"),
                num_shared_experts="n_shared_experts" if model_type in _DEEPSEEK else "shared_expert_intermediate_size",
                kv_lora_rank="kv_lora_rank", q_lora_rank="q_lora_rank", qk_rope_head_dim="qk_rope_head_dim",
                qk_nope_head_dim="qk_nope_head_dim", v_head_dim="v_head_dim")
    if seq_len_from_config:
        keys["seq_len"] = keys["max_position"]
    return keys


def _rename(message: str, keys: dict[str, str]) -> str:
    """``"model.hidden = 512: must be divisible by num_heads (7)"`` -> ``"hidden_size = 512:
    must be divisible by num_attention_heads (7)"``: the field and the fields its rule
    cites, in the config's names."""
    message = re.sub(r"^model\.(\w+)", lambda m: keys.get(m.group(1), f"model.{m.group(1)}"), message)
    return re.sub(r"\b(\w+) \(", lambda m: f"{keys.get(m.group(1), m.group(1))} (", message)
