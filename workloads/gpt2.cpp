// `gpt2`: GPT-2 small exactly (124,439,808 parameters), the GPU-sized workload. Vocabulary 50257,
// context 1024, 12 layers, 12 heads, width 768, GELU (tanh), pre-LayerNorm, the output projection
// tied to the token embedding; causal LM loss, AdamW as nanoGPT trains it. docs/workloads.md.
// `--gpt2-size` picks another geometry of the same model (medium, large, xl, or one written out).
//
// Tokens per sample: 1024 on CUDA, 32 on a CPU (so that `--strategy all` takes minutes there),
// `--seq-len` to choose; the model is the same at any length up to its context.
#include <torch/nn/init.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <string>

#include "compat/torch_compat.h"
#include "optim/optimizers.h"
#include "workloads/chunked_cross_entropy.h"
#include "workloads/gpt2_size.h"
#include "workloads/workload.h"

namespace ddpbench {
namespace {

constexpr std::int64_t kCpuSequence = 32;
// One chunk's fp32 logits in the fused output projection and loss: 256 MiB, 1335 tokens of 50257,
// large enough that each chunk's products keep a GPU busy, small against the whole batch's 3.3 GB.
constexpr std::int64_t kLogitsChunkBytes = std::int64_t{256} << 20;

// The run's geometry: --gpt2-size, checked by the command line before any model is built.
Gpt2Size run_size() {
  const auto& s = workload_settings().gpt2_size;
  return s.empty() ? Gpt2Size{} : parse_gpt2_size(s);
}

std::int64_t sequence_length() {
  const auto& s = workload_settings();
  return s.sequence_length.value_or(s.cuda ? run_size().context : kCpuSequence);
}

// GPT-2's initialisation: N(0, 0.02) for weights and embeddings, zero biases, and the projections
// that end a residual branch scaled by 1/sqrt(2 * layers) (two branches a layer add to the stream).
void init_linear(torch::nn::Linear& linear, double std) {
  torch::NoGradGuard no_grad;
  torch::nn::init::normal_(linear->weight, 0.0, std);
  torch::nn::init::zeros_(linear->bias);
}

class Block final : public torch::nn::Module {
 public:
  explicit Block(const Gpt2Size& size) : width_(size.width), heads_(size.heads) {
    const double residual_std = 0.02 / std::sqrt(2.0 * size.layers);
    ln_1 = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width_})));
    c_attn = register_module("c_attn", torch::nn::Linear(width_, 3 * width_));
    attn_proj = register_module("attn_proj", torch::nn::Linear(width_, width_));
    ln_2 = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width_})));
    c_fc = register_module("c_fc", torch::nn::Linear(width_, 4 * width_));
    mlp_proj = register_module("mlp_proj", torch::nn::Linear(4 * width_, width_));
    init_linear(c_attn, 0.02);
    init_linear(attn_proj, residual_std);
    init_linear(c_fc, 0.02);
    init_linear(mlp_proj, residual_std);
  }

  // Each linear layer through `model`'s call_linear, so that tp can run it on its share. Under tp
  // c_attn gives this rank's heads of Q, K and V (its plan below), and under sequence parallelism
  // `x` is the rank's share of the tokens and c_attn's output all of them, so the sizes are read
  // from c_attn's output.
  torch::Tensor forward(const torch::Tensor& x, WorkloadModel& model) {
    const auto head_width = width_ / heads_;
    auto packed = model.call_linear(*c_attn, ln_1->forward(x));
    const auto batch = packed.size(0), tokens = packed.size(1);
    const auto width = packed.size(2) / 3;  // width_, or this rank's heads' under tp
    auto qkv = packed.split(width, /*dim=*/2);
    auto heads = [&](const torch::Tensor& t) { return t.view({batch, tokens, width / head_width, head_width}).transpose(1, 2); };
    auto attended = compat::causal_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]));
    auto h = x + model.call_linear(*attn_proj, attended.transpose(1, 2).contiguous().view({batch, tokens, width}));
    return h + model.call_linear(*mlp_proj, torch::gelu(model.call_linear(*c_fc, ln_2->forward(h)), "tanh"));
  }

  // Megatron's plan for a block: attention by heads (c_attn's Q, K and V by columns, whole heads a
  // rank; the output projection by rows), the MLP's first layer by columns and its second by rows;
  // the LayerNorms whole.
  std::vector<torch::Tensor> layer_norm_parameters() {
    auto p = ln_1->parameters();
    for (const auto& t : ln_2->parameters()) p.push_back(t);
    return p;
  }
  void add_tensor_parallel_plan(const std::string& block, std::vector<TensorParallelLayer>& plan) {
    using S = TensorParallelSplit;
    plan.push_back(planned_linear(block + ".c_attn", *c_attn, S::Column, /*packed=*/3, /*granule=*/width_ / heads_));
    plan.push_back(planned_linear(block + ".attn_proj", *attn_proj, S::Row, 1, width_ / heads_));
    plan.push_back(planned_linear(block + ".c_fc", *c_fc, S::Column));
    plan.push_back(planned_linear(block + ".mlp_proj", *mlp_proj, S::Row));
  }

 private:
  std::int64_t width_, heads_;
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  torch::nn::Linear c_attn{nullptr}, attn_proj{nullptr}, c_fc{nullptr}, mlp_proj{nullptr};
};

class Gpt2Model final : public WorkloadModel {
 public:
  explicit Gpt2Model(const Gpt2Size& size) : size_(size) {
    wte = register_module("wte", torch::nn::Embedding(size.vocab, size.width));
    wpe = register_module("wpe", torch::nn::Embedding(size.context, size.width));
    {
      torch::NoGradGuard no_grad;
      torch::nn::init::normal_(wte->weight, 0.0, 0.02);
      torch::nn::init::normal_(wpe->weight, 0.0, 0.02);
    }
    for (std::int64_t i = 0; i < size.layers; ++i) {
      blocks.push_back(register_module("h" + std::to_string(i), std::make_shared<Block>(size)));
    }
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({size.width})));
  }
  ModelPtr fresh_instance() const override { return std::make_shared<Gpt2Model>(size_); }
  // input: [batch, tokens] token ids; output: [batch, tokens, vocab] logits.
  torch::Tensor forward(const torch::Tensor& input) override { return forward_range(input, 0, blocks.size()); }
  // The last LayerNorm's output, [batch, tokens, width]: what the output projection reads.
  torch::Tensor features(const torch::Tensor& input) { return ln_f->forward(forward_before_tail(input)); }
  // A chain of its blocks: the embeddings before, the last LayerNorm and the tied output projection
  // after, so the token embedding's weight is used at both ends.
  std::size_t chain_length() const override { return blocks.size(); }
  std::vector<torch::Tensor> chain_head_parameters() override { return {wte->weight, wpe->weight}; }
  std::vector<torch::Tensor> chain_tail_parameters() override {
    auto p = ln_f->parameters();
    p.push_back(wte->weight);
    return p;
  }
  // Each block a unit, as nanoGPT's and torchtitan's FSDP wrap it; the embeddings, the last
  // LayerNorm and the tied output projection are the root's.
  std::vector<WrapUnit> wrap_units() override {
    std::vector<WrapUnit> units;
    for (std::size_t i = 0; i < blocks.size(); ++i) units.push_back({"h" + std::to_string(i), blocks[i]->parameters()});
    return units;
  }
  // Megatron's plan: the token embedding, and with it the tied output projection, split by
  // vocabulary (the loss on each rank's share of the logits); each block's attention and MLP split
  // as above; the position table and the LayerNorms whole on every rank.
  std::vector<TensorParallelLayer> tensor_parallel_plan() override {
    std::vector<TensorParallelLayer> plan;
    plan.push_back({"wte", wte->weight, torch::Tensor(), TensorParallelSplit::Vocabulary});
    for (std::size_t i = 0; i < blocks.size(); ++i) blocks[i]->add_tensor_parallel_plan("h" + std::to_string(i), plan);
    return plan;
  }
  // Under sequence parallelism each block's LayerNorms and ln_f run on the rank's share of the tokens.
  std::vector<torch::Tensor> sequence_parallel_parameters() override {
    auto p = ln_f->parameters();
    for (const auto& block : blocks) {
      for (const auto& t : block->layer_norm_parameters()) p.push_back(t);
    }
    return p;
  }
  const torch::Tensor& output_weight() const { return wte->weight; }
  const Gpt2Size& size() const { return size_; }

 protected:
  torch::Tensor chain_head(const torch::Tensor& input) override {
    // Both embeddings whole, then (under sequence parallelism) the rank's share of the tokens, as
    // Megatron does where positions are learned.
    return call_sequence_region(
        call_embedding(*wte, input) + wpe->forward(torch::arange(input.size(1), input.options())).unsqueeze(0), 1);
  }
  torch::Tensor chain_unit(std::size_t i, const torch::Tensor& h) override { return blocks[i]->forward(h, *this); }
  // Tied output projection: the token embedding's own weight, so one parameter gets both gradients.
  torch::Tensor chain_tail(const torch::Tensor& h) override { return torch::matmul(ln_f->forward(h), wte->weight.t()); }

 private:
  Gpt2Size size_;
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  std::vector<std::shared_ptr<Block>> blocks;
  torch::nn::LayerNorm ln_f{nullptr};
};

class Gpt2Workload final : public Workload {
 public:
  std::string name() const override { return "gpt2"; }
  std::string description() const override {
    const Gpt2Size size = run_size();
    const auto millions = std::to_string((size.parameters() + 500000) / 1000000);
    return "GPT-2 " + size.name + " (" + (millions == "0" ? "<1" : millions) + "M): vocab " + std::to_string(size.vocab) +
           ", " + std::to_string(size.layers) + " layers, " + std::to_string(size.heads) + " heads, width " +
           std::to_string(size.width) + ", " + std::to_string(sequence_length()) +
           " tokens a sample (--seq-len), " + compat::causal_attention_kernel() +
           " attention, " +
           (workload_settings().gpt2_plain_loss
                ? std::string("loss on the whole logits (--gpt2-loss plain)")
                : "output projection and loss fused over chunks of " +
                      std::to_string(chunk_rows_for(size.vocab, kLogitsChunkBytes)) + " tokens") +
           "; AdamW lr 6e-4 betas 0.9/0.95 wd 0.1 (batch " + std::to_string(default_global_batch()) + ")";
  }
  // 16 x 1024 tokens on one 80 GB GPU (the batch of the peers in the GPU truth issue); 2 x 32 on a
  // CPU, a sample for each of its two default virtual devices.
  std::int64_t default_global_batch() const override { return workload_settings().cuda ? 16 : 2; }
  ModelPtr make_model() const override { return std::make_shared<Gpt2Model>(run_size()); }
  std::unique_ptr<torch::optim::Optimizer> make_optimizer(std::vector<torch::Tensor> parameters) const override {
    return make_adamw(std::move(parameters), torch::optim::AdamWOptions(6e-4).betas({0.9, 0.95}).weight_decay(0.1));
  }
  // As for `transformer`: AdamW turns rounding noise in near-zero gradients into steps of size lr,
  // so parity against `single` uses SGD with momentum.
  std::unique_ptr<torch::optim::Optimizer> make_parity_optimizer(std::vector<torch::Tensor> parameters) const override {
    return Workload::make_optimizer(std::move(parameters));
  }
  Dataset make_dataset(std::int64_t size, std::uint64_t seed) const override {
    return next_token_dataset(size, seed, run_size().vocab, sequence_length());  // transformer's rule, GPT-2's vocabulary
  }
  // nanoGPT's count, so that fraction_of_peak is MFU as it reports it: 6 N per token for the
  // matrix products of forward and backward (N without the position table, which does no
  // products; with the tied output projection, which does), plus 12 L C T for attention's scores
  // and weighted sums.
  double flops_per_sample() const override {
    const Gpt2Size size = run_size();
    const double tokens = static_cast<double>(sequence_length());
    const double n = static_cast<double>(size.parameters() - size.context * size.width);
    return tokens * (6.0 * n + 12.0 * static_cast<double>(size.layers * size.width) * tokens);
  }
  std::int64_t max_sequence_length() const override { return Gpt2Size{}.context; }
  // Plain attention (LibTorch 1.x) keeps each layer's softmax output, heads x tokens x tokens, for
  // its two backward products; sdpa's fused kernels keep a log-sum-exp a row instead.
  SequenceFacts sequence_facts() const override {
    const Gpt2Size size = run_size();
    const std::int64_t tokens = sequence_length();
    SequenceFacts f;
    f.tokens = tokens;
    f.max_tokens = max_sequence_length();
    f.attention_flops = static_cast<double>(tokens) * 12.0 * static_cast<double>(size.layers * size.width) * tokens;
    const bool plain = std::string(compat::causal_attention_kernel()) == "plain";
    f.saved_score_elements = plain ? size.layers * size.heads * tokens * tokens : 0;
    return f;
  }
  // The fused loss takes the output weight's gradient in forward and keeps it, in fp32, until
  // backward (chunked_cross_entropy.h): vocabulary x width x 4 bytes whatever the batch.
  std::int64_t fixed_activation_bytes() const override {
    if (workload_settings().gpt2_plain_loss) return 0;
    const Gpt2Size size = run_size();
    return size.vocab * size.width * 4;
  }
  std::int64_t sequence_parallel_length() const override { return sequence_length(); }
  // The output projection and the loss fused, in chunks of tokens: the [tokens, 50257] fp32 logits
  // (3.3 GB at 16 x 1024 tokens, and as much again for their gradient) are never whole; one chunk
  // of at most kLogitsChunkBytes is. dp, which gathers outputs, still gets the logits from forward.
  // --gpt2-loss plain takes the whole logits instead, as PyTorch's eager loop does: the same
  // arithmetic to within rounding, so the two paths' time and memory can be told apart. Under tp
  // the output projection is split by vocabulary and the loss taken on each rank's share.
  torch::Tensor forward_loss(WorkloadModel& model, const torch::Tensor& input, const torch::Tensor& target) const override {
    auto* gpt2 = dynamic_cast<Gpt2Model*>(&model);
    if (gpt2 == nullptr) return Workload::forward_loss(model, input, target);
    const auto hidden = gpt2->features(input);
    const Gpt2Size& size = gpt2->size();
    const auto& weight = gpt2->output_weight();
    return model.call_output_loss(weight, torch::Tensor(), hidden, target, [&] {
      if (workload_settings().gpt2_plain_loss) return loss(torch::matmul(hidden, weight.t()), target);
      return chunked_linear_cross_entropy(hidden.reshape({-1, size.width}), weight, target.reshape({-1}),
                                          chunk_rows_for(size.vocab, kLogitsChunkBytes));
    });
  }
};

}  // namespace
DDPBENCH_REGISTER_WORKLOAD(Gpt2Workload);
}  // namespace ddpbench
