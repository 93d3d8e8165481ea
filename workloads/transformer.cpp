// `transformer`: a small causal language model (attention and embeddings).
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/transformercoder.h>
#include <torch/nn/modules/transformerlayer.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <limits>

#include "optim/optimizers.h"
#include "workloads/workload.h"

namespace ddpbench {
namespace {

constexpr std::int64_t kVocab = 1000;
constexpr std::int64_t kEmbed = 128;
constexpr std::int64_t kLayers = 2;
constexpr std::int64_t kHeads = 4;
constexpr std::int64_t kFeedForward = 512;
constexpr std::int64_t kSequence = 64;

class TransformerModel final : public DefaultConstructedModel<TransformerModel> {
 public:
  TransformerModel() {
    tokens = register_module("tokens", torch::nn::Embedding(kVocab, kEmbed));
    positions = register_module("positions", torch::nn::Embedding(kSequence, kEmbed));
    // Dropout off: every strategy must compute the same function for parity against `single`.
    auto layer = torch::nn::TransformerEncoderLayer(
        torch::nn::TransformerEncoderLayerOptions(kEmbed, kHeads).dim_feedforward(kFeedForward).dropout(0.0));
    encoder = register_module("encoder", torch::nn::TransformerEncoder(
                                             torch::nn::TransformerEncoderOptions(layer, kLayers)));
    head = register_module("head", torch::nn::Linear(kEmbed, kVocab));
  }
  // input: [batch, sequence] token ids; output: [batch, sequence, vocab] logits.
  torch::Tensor forward(const torch::Tensor& input) override { return forward_range(input, 0, kLayers); }
  // A chain of its encoder layers, run one by one as the encoder's own forward runs them (it has no
  // final norm); the embeddings before, the head after. Between layers the hidden state is
  // sequence-first, as LibTorch's encoder takes it.
  std::size_t chain_length() const override { return kLayers; }
  std::vector<torch::Tensor> chain_head_parameters() override {
    auto p = tokens->parameters();
    for (const auto& t : positions->parameters()) p.push_back(t);
    return p;
  }
  std::vector<torch::Tensor> chain_tail_parameters() override { return head->parameters(); }
  // Megatron's plan: the token embedding and the head split by vocabulary (the loss on each rank's
  // share of the logits); each encoder layer's attention by heads (the fused Q, K, V projection by
  // columns, whole heads a rank; the output projection by rows), its feed-forward by columns then
  // rows; the position table and the LayerNorms whole.
  std::vector<TensorParallelLayer> tensor_parallel_plan() override {
    using S = TensorParallelSplit;
    std::vector<TensorParallelLayer> plan;
    plan.push_back({"tokens", tokens->weight, torch::Tensor(), S::Vocabulary});
    plan.push_back(planned_linear("head", *head, S::Vocabulary));
    for (std::size_t i = 0; i < encoder->layers->size(); ++i) {
      auto& layer = encoder->layers->at<torch::nn::TransformerEncoderLayerImpl>(i);
      const std::string name = "layer" + std::to_string(i);
      plan.push_back({name + ".self_attn.in_proj", layer.self_attn->in_proj_weight, layer.self_attn->in_proj_bias,
                      S::Column, /*packed=*/3, /*granule=*/kEmbed / kHeads});
      plan.push_back(planned_linear(name + ".self_attn.out_proj", *layer.self_attn->out_proj, S::Row, 1, kEmbed / kHeads));
      plan.push_back(planned_linear(name + ".linear1", *layer.linear1, S::Column));
      plan.push_back(planned_linear(name + ".linear2", *layer.linear2, S::Row));
    }
    return plan;
  }
  // The head and the loss in one, on what the last layer gives: the loss of forward's logits, or
  // under tp each rank's share of them (call_output_loss), the hidden state sequence-first as the
  // layers run (the targets transposed alike).
  torch::Tensor loss(const torch::Tensor& input, const torch::Tensor& target) {
    const auto hidden = forward_before_tail(input);
    return call_output_loss(head->weight, head->bias, hidden, target.t(),
                            [&] { return cross_entropy(head->forward(hidden.transpose(0, 1)), target); });
  }
  // Under sequence parallelism each layer's two LayerNorms run on the rank's share of the sequence.
  std::vector<torch::Tensor> sequence_parallel_parameters() override {
    std::vector<torch::Tensor> p;
    for (std::size_t i = 0; i < encoder->layers->size(); ++i) {
      auto& layer = encoder->layers->at<torch::nn::TransformerEncoderLayerImpl>(i);
      for (const auto& t : layer.norm1->parameters()) p.push_back(t);
      for (const auto& t : layer.norm2->parameters()) p.push_back(t);
    }
    return p;
  }
  // Each encoder layer a unit; the embeddings and the head are the root's.
  std::vector<WrapUnit> wrap_units() override {
    std::vector<WrapUnit> units;
    for (std::size_t i = 0; i < encoder->layers->size(); ++i)
      units.push_back({"layer" + std::to_string(i), encoder->layers[i]->parameters()});
    return units;
  }

 protected:
  torch::Tensor chain_head(const torch::Tensor& input) override {
    auto pos = torch::arange(input.size(1), input.options());
    return call_sequence_region((call_embedding(*tokens, input) + positions->forward(pos).unsqueeze(0)).transpose(0, 1), 0);
  }
  // LibTorch's TransformerEncoderLayer::forward written out as the same function (post-norm, ReLU,
  // MultiheadAttention as F::multi_head_attention_forward computes it on one tensor for query, key
  // and value: one fused projection chunked in three, queries scaled by 1/sqrt(head width), scores
  // plus the mask, softmax, the weighted sum, the output projection), on the layer's own
  // parameters, so that its four projections go through call_linear and tp can split them (by
  // heads, then by columns and rows). Dropout is off, so it has no place here. A test holds it to
  // the layer's own forward.
  torch::Tensor chain_unit(std::size_t i, const torch::Tensor& h) override {
    auto& layer = encoder->layers->at<torch::nn::TransformerEncoderLayerImpl>(i);
    auto& attention = *layer.self_attn;
    auto qkv = call_linear(attention.in_proj_weight, attention.in_proj_bias, h).chunk(3, -1);
    // The sizes from the projection's output: under tp it holds this rank's heads, and under
    // sequence parallelism every token where `h` holds the rank's share. The causal mask from the
    // sequence length: a stage of a pipeline gets the hidden state alone.
    const auto seq = qkv[0].size(0), batch = qkv[0].size(1), head_width = kEmbed / kHeads;
    const auto width = qkv[0].size(2);  // kEmbed, or this rank's heads' under tp
    auto mask = torch::full({seq, seq}, -std::numeric_limits<float>::infinity(), h.options()).triu(1);
    const auto heads = [&](const torch::Tensor& t) {
      return t.contiguous().view({seq, batch * (width / head_width), head_width}).transpose(0, 1);
    };
    auto q = heads(qkv[0] * (1 / std::sqrt(static_cast<double>(head_width)))), k = heads(qkv[1]), v = heads(qkv[2]);
    auto weights = torch::softmax(torch::bmm(q, k.transpose(1, 2)) + mask.unsqueeze(0), -1);
    auto attended = torch::bmm(weights, v).transpose(0, 1).contiguous().view({seq, batch, width});
    auto x = layer.norm1(h + call_linear(*attention.out_proj, attended));
    return layer.norm2(x + call_linear(*layer.linear2, torch::relu(call_linear(*layer.linear1, x))));
  }
  torch::Tensor chain_tail(const torch::Tensor& h) override { return head->forward(h.transpose(0, 1)); }

 private:
  torch::nn::Embedding tokens{nullptr}, positions{nullptr};
  torch::nn::TransformerEncoder encoder{nullptr};
  torch::nn::Linear head{nullptr};
};

class TransformerWorkload final : public Workload {
 public:
  std::string name() const override { return "transformer"; }
  std::string description() const override {
    return "causal LM: vocab 1000, embed 128, 2 layers, 4 heads, ff 512, seq 64; AdamW lr 1e-3 (batch 32)";
  }
  std::int64_t default_global_batch() const override { return 32; }
  ModelPtr make_model() const override { return std::make_shared<TransformerModel>(); }
  std::unique_ptr<torch::optim::Optimizer> make_optimizer(std::vector<torch::Tensor> parameters) const override {
    return make_adamw(std::move(parameters), torch::optim::AdamWOptions(1e-3));
  }
  // AdamW's first steps are about lr * g / (|g| + eps): where the true gradient is zero and the
  // computed one is rounding noise of order eps (the attention key bias: softmax ignores a shift
  // of all scores), the step is up to lr and depends on the summation order. Any change of order,
  // a split batch or another thread count, then moves those parameters by up to 1e-3, which says
  // nothing about the strategy. Parity uses SGD with momentum, which keeps that noise at its size.
  std::unique_ptr<torch::optim::Optimizer> make_parity_optimizer(std::vector<torch::Tensor> parameters) const override {
    return Workload::make_optimizer(std::move(parameters));
  }
  Dataset make_dataset(std::int64_t size, std::uint64_t seed) const override {
    return next_token_dataset(size, seed, kVocab, kSequence);
  }
  std::int64_t sequence_parallel_length() const override { return kSequence; }
  torch::Tensor forward_loss(WorkloadModel& model, const torch::Tensor& input, const torch::Tensor& target) const override {
    auto* transformer = dynamic_cast<TransformerModel*>(&model);
    return transformer == nullptr ? Workload::forward_loss(model, input, target) : transformer->loss(input, target);
  }
  // Its attention is written out (chain_unit): each layer keeps its softmax output, heads x tokens x
  // tokens a sample, for backward. Its position table is its sequence: it runs at 64 tokens only.
  SequenceFacts sequence_facts() const override {
    SequenceFacts f;
    f.tokens = f.max_tokens = kSequence;
    f.attention_flops = 3.0 * 2.0 * kLayers * (2.0 * kSequence * kEmbed) * kSequence;
    f.saved_score_elements = kLayers * kHeads * kSequence * kSequence;
    return f;
  }
  double flops_per_sample() const override {
    const double per_layer = 4.0 * kEmbed * kEmbed            // q, k, v and output projections
                             + 2.0 * kEmbed * kFeedForward     // feed-forward
                             + 2.0 * kSequence * kEmbed;       // scores and weighted sum
    const double per_token = kLayers * per_layer + static_cast<double>(kEmbed) * kVocab;
    return 3.0 * 2.0 * per_token * kSequence;
  }
};

}  // namespace
DDPBENCH_REGISTER_WORKLOAD(TransformerWorkload);
}  // namespace ddpbench
