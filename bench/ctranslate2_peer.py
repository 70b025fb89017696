"""CTranslate2 side of bench.peers: our exported T5 converted and decoded by CTranslate2.

    convert(export_dir, output_dir)        common-layout checkpoint -> CTranslate2 model dir
    Ct2Decoder(model_dir, compute_type, max_new_tokens)
                                           greedy batch-1 decoding of token-id prompts

The converted model is built from `ctranslate2.specs` straight from the exported
`model.safetensors` (numpy, no torch or transformers), mirroring what CTranslate2's own
`TransformersConverter` does for `T5ForConditionalGeneration`: pre-norm RMS layer norms,
fused q/k/v, one relative-attention bias per stack shared by its layers, the (gated) FFN, the
tied-head rescaling `d_model ** -0.5` when the checkpoint applies it. It is always written in
float32; int8 is CTranslate2's quantization when the model is loaded with
`compute_type="int8"` (so float32 and int8 decode the same converted weights).

The vocabulary is the token ids spelled as decimal strings ("0", "1", ...): prompts go in as
ids and come back as ids, with no tokenizer in between, exactly as tfspec sees them.
"""

import json
import os
from typing import List, Sequence

import numpy as np

INSTALL_HINT = "pip install ctranslate2 (or pip install -e '.[peers]')"
COMPUTE_TYPES = ("float32", "int8")


def available() -> str:
    """"" if ctranslate2 imports, else why not (one line)."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError as e:
        return f"ctranslate2 not importable ({e})"
    return ""


def version() -> str:
    import ctranslate2
    return ctranslate2.__version__


def _read_tensors(export_dir: str) -> dict:
    from safetensors.numpy import load_file

    path = os.path.join(export_dir, "model.safetensors")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} not found: export the model with tfspec.save_model "
                                "(a single float32 model.safetensors)")
    tensors = load_file(path)
    return {name: np.ascontiguousarray(value, dtype=np.float32)
            for name, value in tensors.items()}


def _activation(config):
    from ctranslate2.specs import common_spec

    activations = {"relu": common_spec.Activation.RELU,
                   "gelu_new": common_spec.Activation.GELUTanh,
                   "gelu": common_spec.Activation.GELU,
                   "silu": common_spec.Activation.SWISH}
    if config.dense_act_fn not in activations:
        raise ValueError(f"CTranslate2 conversion: activation {config.dense_act_fn!r} is not "
                         f"supported (supported: {', '.join(activations)})")
    return activations[config.dense_act_fn]


def build_spec(config, tensors: dict):
    """A `ctranslate2.specs.TransformerSpec` holding a T5's weights.

    Args:
      config: the checkpoint's `tfspec.models.T5Config`.
      tensors: HF-named float32 numpy arrays (Linear weights [out, in]).
    """
    from ctranslate2.specs import transformer_spec

    spec = transformer_spec.TransformerSpec.from_config(
        (config.num_layers, config.num_decoder_layers), config.num_heads, pre_norm=True,
        activation=_activation(config), ffn_glu=config.is_gated_act,
        relative_attention_bias=True, rms_norm=True)
    shared = tensors["shared.weight"]
    max_distance = np.dtype("int32").type(config.relative_attention_max_distance)

    def linear(layer_spec, name):
        layer_spec.weight = tensors[f"{name}.weight"]

    def fused(layer_spec, names):
        layer_spec.weight = np.concatenate([tensors[f"{n}.weight"] for n in names])

    def stack(stack_spec, prefix, is_decoder):
        embeddings = stack_spec.embeddings  # The encoder's is a list (one per source).
        (embeddings[0] if isinstance(embeddings, list) else embeddings).weight = shared
        stack_spec.scale_embeddings = False
        stack_spec.layer_norm.gamma = tensors[f"{prefix}.final_layer_norm.weight"]
        first = stack_spec.layer[0].self_attention
        for i, layer_spec in enumerate(stack_spec.layer):
            block = f"{prefix}.block.{i}.layer"
            attention = layer_spec.self_attention
            attention.queries_scale = 1.0  # T5 folds 1/sqrt(d_kv) into its q weights.
            fused(attention.linear[0], [f"{block}.0.SelfAttention.{n}" for n in "qkv"])
            linear(attention.linear[1], f"{block}.0.SelfAttention.o")
            attention.layer_norm.gamma = tensors[f"{block}.0.layer_norm.weight"]
            if i == 0:
                attention.relative_attention_bias = tensors[
                    f"{block}.0.SelfAttention.relative_attention_bias.weight"]
                attention.relative_attention_max_distance = max_distance
            else:  # T5 computes the bias in the first layer and shares it.
                attention.relative_attention_bias = first.relative_attention_bias
                attention.relative_attention_max_distance = max_distance
            if is_decoder:
                cross = layer_spec.attention
                cross.queries_scale = 1.0
                fused(cross.linear[0], [f"{block}.1.EncDecAttention.q"])
                fused(cross.linear[1], [f"{block}.1.EncDecAttention.{n}" for n in "kv"])
                linear(cross.linear[2], f"{block}.1.EncDecAttention.o")
                cross.layer_norm.gamma = tensors[f"{block}.1.layer_norm.weight"]
            ffn_prefix = f"{block}.{2 if is_decoder else 1}"
            dense = f"{ffn_prefix}.DenseReluDense"
            if config.is_gated_act:
                linear(layer_spec.ffn.linear_0, f"{dense}.wi_0")
                linear(layer_spec.ffn.linear_0_noact, f"{dense}.wi_1")
            else:
                linear(layer_spec.ffn.linear_0, f"{dense}.wi")
            linear(layer_spec.ffn.linear_1, f"{dense}.wo")
            layer_spec.ffn.layer_norm.gamma = tensors[f"{ffn_prefix}.layer_norm.weight"]

    stack(spec.encoder, "encoder", is_decoder=False)
    stack(spec.decoder, "decoder", is_decoder=True)
    head = shared if config.tie_word_embeddings else tensors["lm_head.weight"]
    spec.decoder.projection.weight = head
    if config.rescales_decoder_output:
        spec.decoder.scale_outputs = config.d_model ** -0.5

    tokens = [str(i) for i in range(config.vocab_size)]
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    spec.config.bos_token = tokens[config.pad_token_id]
    spec.config.eos_token = tokens[config.eos_token_id]
    spec.config.unk_token = tokens[2]  # T5's SentencePiece <unk>; never produced specially.
    spec.config.decoder_start_token = tokens[config.decoder_start_token_id]
    spec.config.layer_norm_epsilon = config.layer_norm_epsilon
    return spec


def convert(export_dir: str, output_dir: str) -> str:
    """Converts a common-layout T5 checkpoint (float32 safetensors) to a CTranslate2 model.

    Args:
      export_dir: a directory written by `tfspec.save_model(model, dir, dtype="float32")`.
      output_dir: where the CTranslate2 model goes (created; must not hold another model).

    Returns:
      `output_dir`.
    """
    from tfspec.models.t5_config import T5Config

    with open(os.path.join(export_dir, "config.json"), encoding="utf-8") as f:
        config = T5Config.from_dict(json.load(f))
    spec = build_spec(config, _read_tensors(export_dir))
    spec.validate()
    spec.optimize(quantization="float32")
    os.makedirs(output_dir, exist_ok=True)
    spec.save(output_dir)
    return output_dir


class Ct2Decoder:
    """Greedy decoding of token-id prompts with a CTranslate2 `Translator` on CPU.

    `compute_type` "float32" or "int8" (weights quantized at load); at most `max_new_tokens`
    tokens per prompt. Threads: CTranslate2's default (`intra_threads=0`: one per core, at
    most 4), one translator thread.
    """

    def __init__(self, model_dir: str, compute_type: str, max_new_tokens: int):
        import ctranslate2

        if compute_type not in COMPUTE_TYPES:
            raise ValueError(f"compute_type must be one of {COMPUTE_TYPES}, got "
                             f"{compute_type!r}")
        self.compute_type = compute_type
        self.max_new_tokens = int(max_new_tokens)
        self._translator = ctranslate2.Translator(model_dir, device="cpu",
                                                  compute_type=compute_type, inter_threads=1)

    def greedy(self, prompts: Sequence[Sequence[int]]) -> List[List[int]]:
        """Greedy continuations, one list of ids per prompt (EOS included when emitted).

        Decodes `prompts` one at a time (batch 1, as the benchmark times every peer).
        """
        out = []
        for prompt in prompts:
            result = self._translator.translate_batch(
                [[str(int(t)) for t in prompt]], beam_size=1,
                max_decoding_length=self.max_new_tokens, min_decoding_length=0,
                return_end_token=True, max_input_length=0)
            out.append([int(t) for t in result[0].hypotheses[0]])
        return out

    def token_log_probs(self, prompt: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        """float32 [len(tokens)]: log p(tokens[i] | prompt, tokens[:i]) under this model
        (teacher forcing; a numerical check of the conversion beyond greedy argmaxes)."""
        result = self._translator.score_batch([[str(int(t)) for t in prompt]],
                                              [[str(int(t)) for t in tokens]],
                                              max_input_length=0)
        return np.asarray(result[0].log_probs[:len(tokens)], np.float32)
