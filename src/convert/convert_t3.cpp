// T3 checkpoint (t3_turbo_v1 / t3_nano_v1 / t3_mtl23ls_v2|v3 .safetensors): hyper-parameters
// from tensor shapes, GGUF naming (prefix "t3."), dropped and transposed tensors.
#include <regex>

#include "convert/convert_internal.h"
#include "core/error.h"

namespace cbx {

namespace {
// Upstream fixes the head size at 64 for both backbones (GPT2_medium/small, Llama_520M):
// head counts are not stored in the checkpoint, so they follow from the widths.
constexpr int kT3HeadDim = 64;
}  // namespace

void infer_t3(const SourceFile& f, Variant v, T3Config& t) {
  const char* fn = f.file().c_str();
  if (f.has("tfmr.wpe.weight") || f.has("tfmr.h.0.ln_1.weight")) {
    CBX_CHECK(v != Variant::Mtl, "%s: a GPT-2 T3 checkpoint, but the directory holds multilingual files", fn);
    t.arch = "gpt2";
    t.n_layer = count_indexed(f, "tfmr.h.", ".ln_1.weight");
    t.n_embd = int32_t(f.dim("tfmr.wpe.weight", 1));
    t.n_ctx = int32_t(f.dim("tfmr.wpe.weight", 0));
    t.n_ff = int32_t(f.dim("tfmr.h.0.mlp.c_fc.weight", 1));  // Conv1D [in, out]
    t.speech_head_bias = f.has("speech_head.bias");
  } else if (f.has("tfmr.layers.0.input_layernorm.weight")) {
    CBX_CHECK(v == Variant::Mtl, "%s: a Llama T3 checkpoint, but the directory holds Turbo files", fn);
    t.arch = "llama";
    t.n_layer = count_indexed(f, "tfmr.layers.", ".input_layernorm.weight");
    t.n_embd = int32_t(f.dim("tfmr.norm.weight", 0));
    t.n_ff = int32_t(f.dim("tfmr.layers.0.mlp.gate_proj.weight", 0));
    t.speech_head_bias = f.has("speech_head.bias");
    t.learned_pos_emb = f.has("text_pos_emb.emb.weight");
    if (t.learned_pos_emb) {
      t.max_text_tokens = int32_t(f.dim("text_pos_emb.emb.weight", 0)) - 2;
      t.max_speech_tokens = int32_t(f.dim("speech_pos_emb.emb.weight", 0)) - 4;
    }
    t.perceiver = f.has("cond_enc.perceiver.pre_attention_query");
    if (t.perceiver) t.perceiver_n_query = int32_t(f.dim("cond_enc.perceiver.pre_attention_query", 1));
    t.emotion_adv = f.has("cond_enc.emotion_adv_fc.weight");
  } else {
    fail("%s: not a T3 checkpoint (neither tfmr.h.0.* (GPT-2) nor tfmr.layers.0.* (Llama) found)", fn);
  }
  CBX_CHECK(t.n_layer > 0, "%s: no transformer layers found", fn);
  CBX_CHECK(t.n_embd % kT3HeadDim == 0, "%s: width %d is not a multiple of the head size %d", fn, t.n_embd, kT3HeadDim);
  t.head_dim = kT3HeadDim;
  t.n_head = t.n_embd / kT3HeadDim;
  t.n_kv_head = t.arch == "llama" ? int32_t(f.dim("tfmr.layers.0.self_attn.k_proj.weight", 0)) / kT3HeadDim : t.n_head;
  t.text_vocab = int32_t(f.dim("text_emb.weight", 0));
  t.speech_vocab = int32_t(f.dim("speech_emb.weight", 0));
  t.speaker_embed_size = int32_t(f.dim("cond_enc.spkr_enc.weight", 1));
  CBX_CHECK(t.stop_speech_token < t.speech_vocab,
            "%s: speech vocabulary %d too small for the start/stop speech tokens %d/%d", fn, t.speech_vocab,
            t.start_speech_token, t.stop_speech_token);
  if (t.arch == "llama")
    CBX_CHECK(t.start_text_token < t.text_vocab, "%s: text vocabulary %d too small for SOT %d", fn, t.text_vocab,
              t.start_text_token);
  if (t.perceiver) {
    // The perceiver's AttentionBlock2 uses 4 heads at every width (perceiver.py).
    t.perceiver_n_head = 4;
    CBX_CHECK(t.n_embd % t.perceiver_n_head == 0, "%s: width %d not divisible by 4 perceiver heads", fn, t.n_embd);
  }
}

const PrefixMap& t3_prefixes() {
  static const PrefixMap m{{"", "t3."}};
  return m;
}

// Unused at inference: GPT-2 wte / Llama embed_tokens (inputs_embeds are fed) and text_head
// (only speech logits are sampled). Dropping them saves 2 x 50276 x d for Turbo.
const std::set<std::string>& t3_dropped() {
  static const std::set<std::string> s{"tfmr.wte.weight", "tfmr.embed_tokens.weight", "text_head.weight"};
  return s;
}

// HF GPT-2 Conv1D stores [in, out]; we store every Linear as [out, in].
bool t3_needs_transpose(const std::string& n) {
  static const std::regex re(R"(tfmr\.h\.\d+\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight)");
  return std::regex_match(n, re);
}

}  // namespace cbx
