"""Model presets: architectures as published, with the parameter counts they report.

Sources:
* GPT-3 175B: Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1
  (96 layers, d_model 12288, 96 heads, context 2048; BPE vocabulary padded to 51200 as
  in Megatron-LM).
* GPT family 1.7B ... 1T: Narayanan et al. 2021, "Efficient Large-Scale Language Model
  Training on GPU Clusters Using Megatron-LM" (SC21), Table 1 (vocab 51200, seq 2048).
* Llama 2: Touvron et al. 2023 and the Hugging Face ``config.json`` of
  ``meta-llama/Llama-2-{7,13,70}b-hf``; counts from the safetensors metadata.
* Llama 3 / 3.1: Meta's model cards and ``config.json`` of ``meta-llama/Meta-Llama-3-8B``,
  ``-70B`` and ``Llama-3.1-405B``.
* Default global batches (sequences) are the published training batches: GPT-3 1536
  (3.2M tokens), SC21 Table 1's batch column, Llama 2 4M tokens, Llama 3 4M tokens
  (16M for 405B), BERT 256.
* BERT-large: Devlin et al. 2019 (24 layers, 1024 hidden, 16 heads, seq 512, vocab
  30522); 335,141,888 parameters for ``BertModel`` (with pooler) per Hugging Face, the
  paper rounds to 340M. The masked-LM transform and its vocabulary bias add 1.08M.
"""

from __future__ import annotations

from ..specs import ModelSpec

_MEGATRON = "Narayanan et al. 2021 (SC21), Table 1"


def _gpt(name: str, layers: int, hidden: int, heads: int, published: int, batch: int,
         source: str) -> ModelSpec:
    return ModelSpec(name=name, num_layers=layers, hidden=hidden, num_heads=heads,
                     ffn_hidden=4 * hidden, vocab_size=51200, seq_len=2048,
                     published_parameters=published, default_global_batch=batch, source=source)


def _llama(name: str, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int,
           vocab: int, seq_len: int, published: int, batch: int, source: str) -> ModelSpec:
    return ModelSpec(name=name, num_layers=layers, hidden=hidden, num_heads=heads,
                     num_kv_heads=kv_heads, ffn_hidden=ffn, vocab_size=vocab, seq_len=seq_len,
                     mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False,
                     position_embedding="rope", dropout=False, published_parameters=published,
                     default_global_batch=batch, source=source)


_PRESETS = [
    _gpt("gpt3-175b", 96, 12288, 96, 175_000_000_000, 1536, "Brown et al. 2020, Table 2.1"),
    _gpt("gpt-1.7b", 24, 2304, 24, 1_700_000_000, 512, _MEGATRON),
    _gpt("gpt-3.6b", 30, 3072, 32, 3_600_000_000, 512, _MEGATRON),
    _gpt("gpt-7.5b", 36, 4096, 32, 7_500_000_000, 512, _MEGATRON),
    _gpt("gpt-18b", 40, 6144, 48, 18_400_000_000, 1024, _MEGATRON),
    _gpt("gpt-39b", 48, 8192, 64, 39_100_000_000, 1536, _MEGATRON),
    _gpt("gpt-76b", 60, 10240, 80, 76_100_000_000, 1792, _MEGATRON),
    _gpt("gpt-145b", 80, 12288, 96, 145_600_000_000, 2304, _MEGATRON),
    _gpt("gpt-310b", 96, 16384, 128, 310_100_000_000, 2160, _MEGATRON),
    _gpt("gpt-530b", 105, 20480, 128, 529_600_000_000, 2520, _MEGATRON),
    _gpt("gpt-1t", 128, 25600, 160, 1_008_000_000_000, 3072, _MEGATRON),
    _llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096, 6_738_415_616, 1024,
           "meta-llama/Llama-2-7b-hf config.json and safetensors metadata"),
    _llama("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096, 13_015_864_320, 1024,
           "meta-llama/Llama-2-13b-hf config.json and safetensors metadata"),
    _llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096, 68_976_648_192, 1024,
           "meta-llama/Llama-2-70b-hf config.json and safetensors metadata"),
    _llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192, 8_030_261_248, 512,
           "meta-llama/Meta-Llama-3-8B config.json and safetensors metadata"),
    _llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192, 70_553_706_496, 512,
           "meta-llama/Meta-Llama-3-70B config.json and safetensors metadata"),
    _llama("llama3.1-405b", 126, 16384, 128, 8, 53248, 128256, 8192, 405_853_388_800, 2048,
           "meta-llama/Llama-3.1-405B config.json and safetensors metadata"),
    ModelSpec(name="bert-large", num_layers=24, hidden=1024, num_heads=16, ffn_hidden=4096,
              vocab_size=30522, seq_len=512, type_vocab_size=2, encoder_head=True,
              causal=False, published_parameters=336_226_108, default_global_batch=256,
              source="Devlin et al. 2019; BertForPreTraining parameter count (Hugging Face)"),
]


def _moe(name: str, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int,
         experts: int, top_k: int, expert_ffn: int, published: int, active: int, batch: int,
         source: str, seq_len: int = 4096, **extra) -> ModelSpec:
    return ModelSpec(name=name, num_layers=layers, hidden=hidden, num_heads=heads,
                     num_kv_heads=kv_heads, ffn_hidden=ffn, vocab_size=vocab, seq_len=seq_len,
                     mlp="swiglu", norm="rmsnorm", bias=False, tied_embeddings=False,
                     position_embedding="rope", dropout=False, num_experts=experts,
                     experts_per_token=top_k, moe_ffn_hidden=expert_ffn,
                     published_parameters=published, published_active_parameters=active,
                     default_global_batch=batch, source=source, **extra)


_PRESETS += [
    _moe("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 8, 2, 14336, 46_700_000_000,
         12_900_000_000, 1024, "mistralai/Mixtral-8x7B-v0.1 config.json; Jiang et al. 2024 "
         "(46.7B total, 12.9B active)"),
    _moe("mixtral-8x22b", 56, 6144, 48, 8, 16384, 32768, 8, 2, 16384, 141_000_000_000,
         39_000_000_000, 1024, "mistralai/Mixtral-8x22B-v0.1 config.json (141B total, 39B active)"),
    _moe("qwen3-30b-a3b", 48, 2048, 32, 4, 6144, 151936, 128, 8, 768, 30_500_000_000,
         3_300_000_000, 1024, "Qwen/Qwen3-30B-A3B config.json; Qwen3 technical report "
         "(30.5B total, 3.3B active)", attention_head_dim=128, qk_norm=True),
    _moe("qwen3-235b-a22b", 94, 4096, 64, 4, 12288, 151936, 128, 8, 1536, 235_000_000_000,
         22_000_000_000, 1024, "Qwen/Qwen3-235B-A22B config.json; Qwen3 technical report "
         "(235B total, 22B active)", attention_head_dim=128, qk_norm=True),
    # trained with one multi-token prediction module (num_nextn_predict_layers = 1; every
    # Megatron DeepSeek-V3 recipe sets mtp_num_layers 1). README_WEIGHTS.md: the main model
    # 671B (36.6B active with the 0.9B output head, the 0.9B input embedding left out, which
    # nest counts as used), the module 11.5B unique (1.5B active, 0.9B of it the shared
    # head; 14B as stored, with copies of the embedding and output head): active 36.6 +
    # 0.6 + 0.9
    _moe("deepseek-v3", 61, 7168, 128, 128, 18432, 129280, 256, 8, 2048, 682_500_000_000,
         38_100_000_000, 4608, "deepseek-ai/DeepSeek-V3 config.json and README_WEIGHTS.md; DeepSeek-V3 "
         "technical report (671B main model + the multi-token prediction module's 11.5B unique)",
         num_shared_experts=1, first_dense_layers=3, q_lora_rank=1536, kv_lora_rank=512,
         qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, mtp_layers=1),
]

MODELS: dict[str, ModelSpec] = {m.name: m for m in _PRESETS}
"""Preset models by name."""
